"""Generated variants of a CMG physical-graph document (test helper, no JAX).

:func:`variant` returns a copy with bodies / joints / sections shuffled, every body and joint
renamed, and (optionally) every other edge walked the other way (body_a <-> body_b, T_AJ <-> T_BJ,
axis negated: the same physical joint, README of the reference robots). All references follow
the renaming (seed, drive, actuators, transmissions, couplings, loop cuts, sites, tool, roots).
"""

from __future__ import annotations

import copy
import random

ROOT_KEYS = ("root_body", "ground", "root", "floating_root", "task_body")


def _rename_dict(d: dict, jmap: dict) -> dict:
    return {jmap.get(k, k): v for k, v in d.items()}


def variant(data: dict, seed: int, shuffle=True, rename=True, flip=True) -> tuple[dict, dict, dict]:
    """(new document, body name map, joint name map) of one generated variant."""
    rng = random.Random(seed)
    d = copy.deepcopy(data)
    bodies = [b["id"] for b in d.get("bodies", [])]
    for j in d["joints"]:
        bodies += [j["body_a"], j["body_b"]]
    bodies = list(dict.fromkeys(bodies))
    bmap = {b: (f"b{seed}_{k:03d}" if rename else b) for k, b in enumerate(rng.sample(bodies, len(bodies)))}
    jnames = [j["id"] for j in d["joints"]]
    jmap = {n: (f"j{seed}_{k:03d}" if rename else n) for k, n in enumerate(rng.sample(jnames, len(jnames)))}
    B = lambda n: bmap.get(n, n)  # noqa: E731
    J = lambda n: jmap.get(n, n)  # noqa: E731
    for k in ROOT_KEYS:
        if isinstance(d.get(k), str):
            d[k] = B(d[k])
    for b in d.get("bodies", []):
        b["id"] = B(b["id"])
    for j in d["joints"]:
        j["id"], j["body_a"], j["body_b"] = J(j["id"]), B(j["body_a"]), B(j["body_b"])
        if flip and rng.random() < 0.5:
            j["body_a"], j["body_b"] = j["body_b"], j["body_a"]
            j["T_AJ"], j["T_BJ"] = j.get("T_BJ"), j.get("T_AJ")
            if "axis" in j:
                j["axis"] = [-x for x in j["axis"]]
    for c in d.get("loop_cuts", []):
        c["body1"], c["body2"] = B(c["body1"]), B(c["body2"])
    for key in ("point_sites", "sole_sites"):
        for s in d.get(key, []):
            s["body"] = B(s["body"])
    if isinstance(d.get("tool"), dict):
        d["tool"]["body"] = B(d["tool"]["body"])
    for a in d.get("actuators", []):
        if "joint_id" in a:
            a["joint_id"] = J(a["joint_id"])
        if "transmission" in a:
            a["transmission"] = _rename_dict(a["transmission"], jmap)
    for c in d.get("affine_couplings", []):
        c["master"], c["slave"] = J(c["master"]), J(c["slave"])
    if isinstance(d.get("drive"), dict):
        d["drive"] = _rename_dict(d["drive"], jmap)
    seed_ = d.get("seed")
    if isinstance(seed_, dict):
        if isinstance(seed_.get("joints"), dict):
            seed_["joints"] = _rename_dict(seed_["joints"], jmap)
        else:
            d["seed"] = _rename_dict(seed_, jmap)
    if isinstance(d.get("partition_requests"), dict):
        d["partition_requests"] = {k: [J(n) for n in v] for k, v in d["partition_requests"].items()}
    if shuffle:
        for key in ("bodies", "joints", "loop_cuts", "actuators", "point_sites", "sole_sites", "affine_couplings"):
            if isinstance(d.get(key), list):
                rng.shuffle(d[key])
        for key in ("drive",):
            if isinstance(d.get(key), dict):
                items = list(d[key].items())
                rng.shuffle(items)
                d[key] = dict(items)
    return d, bmap, jmap
