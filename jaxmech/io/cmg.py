"""Mechanism-graph JSON reader (RoboCompiler "CMG" physical joint graphs, ``*.json``).

The format family (RoboCompiler, paper 000; ``tests/data/stewart_physical_graph.json`` is one) shares one core:

* ``bodies[]``: ``id``, ``mass_kg``, ``com_m`` (3), ``inertia_kg_m2`` or ``inertia_com_kg_m2``
  (3x3 about the COM);
* ``joints[]``: ``id``, ``type`` (fixed, revolute, prismatic, spherical; also universal with
  ``axis2``, and free/floating), ``body_a``, ``body_b``, ``T_AJ``/``T_BJ`` (4x4 joint frame in A
  and in B: ``T_B = T_A T_AJ M(axis, q) T_BJ^-1``, i.e. our ``parent_pose``/``child_pose``),
  ``axis``, ``limits`` {lower, upper}, optional ``drive`` {armature, damping, frictionloss}
  and ``seed``/``q0``. For spherical joints only the translations of T_AJ/T_BJ are used.
  Edges are undirected and may form cycles: :func:`jaxmech.compile` picks the tree and the cuts.

and the variants add (all read here):

* the fixed ground named by ``root_body``, ``ground`` or ``root`` (may be absent from ``bodies``;
  it becomes our ``world``); ``floating_root`` (a body name, or ``true`` for ``root_body``): that
  body gets a free joint ``floating_root`` from the world instead of being the ground;
* ``loop_cuts[]``: ``point_coincidence`` -> point constraint (``point1_m`` on ``body1`` meets
  ``point2_m`` on ``body2``); ``universal`` -> universal constraint between the frames
  (``frame1_R``, ``point1_m``) and (``frame2_R``, ``point2_m``): first joint axis = frame 1's x,
  second = frame 2's y, which is our universal constraint (A's x stays orthogonal to B's y);
* ``affine_couplings[]`` {master, slave, multiplier, offset}: ``slave = multiplier master + offset``;
* ``point_sites[]`` / ``sole_sites[]``: named frames on bodies (``point_m``/``position_m``/``pos_m``
  or a 4x4 ``T``/``pose``, optional ``R``/``frame_R``); other site data (radius, corners) is ignored;
* ``seed``: {joint id: value(s)} -> that joint's ``q0`` (a rough guess, not necessarily closed);
* ``actuators[]`` {joint_id, gear}: actuated joints and joint ports (named after the joint);
* ``gravity_m_s2`` (3).

A graph that already carries a spanning tree (``tree``, ``parent``, ``parents``, ``spanning_tree``
fields) is not a physical joint graph: it raises :class:`ModelError`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..graph import WORLD, Graph, ModelError, pose

_JT = {
    "revolute": "revolute",
    "hinge": "revolute",
    "prismatic": "prismatic",
    "slide": "prismatic",
    "spherical": "spherical",
    "ball": "spherical",
    "fixed": "fixed",
    "universal": "universal",
    "free": "free",
    "floating": "free",
    "cylindrical": "cylindrical",
}
_TREE_KEYS = ("tree", "spanning_tree", "parent", "parents", "parent_of")


def _mat(g, el, what, x, shape):
    try:
        a = np.asarray(x, dtype=float).reshape(shape)
    except (TypeError, ValueError):
        raise g.error(el, f"{what} must be {shape} numbers, got {x!r}") from None
    return a


def _site_pose(g: Graph, el: str, s: dict) -> np.ndarray:
    for k in ("T", "pose", "T_BS"):
        if k in s:
            return _mat(g, el, k, s[k], (4, 4))
    p = next((s[k] for k in ("point_m", "position_m", "pos_m", "center_m", "origin_m", "p_m") if k in s), None)
    if p is None:
        raise g.error(el, f"no position (expected one of point_m, position_m, pos_m, T); keys: {sorted(s)}")
    R = next((s[k] for k in ("R", "frame_R", "rotation") if k in s), None)
    return pose(_mat(g, el, "position", p, 3), R=None if R is None else _mat(g, el, "R", R, (3, 3)))


def read_cmg(path) -> Graph:
    """Parse a CMG mechanism-graph JSON file into a :class:`Graph` (see the module doc)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: file not found")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ModelError(f"{path}: malformed JSON: {e}") from None
    return graph_from_cmg(data, str(path))


def graph_from_cmg(data: dict, source: str | None = None) -> Graph:
    """Build a :class:`Graph` from a parsed CMG document."""
    g = Graph(name=str(data.get("id", Path(source).stem if source else "cmg")), source=source)
    if not isinstance(data, dict) or "joints" not in data:
        raise g.error("top level", "not a mechanism graph (no 'joints' list)")
    for k in _TREE_KEYS:
        if k in data:
            raise g.error(
                "top level",
                f"field '{k}' holds a pre-computed tree; jaxmech reads physical joint "
                "graphs (undirected joints, no tree or cuts) and chooses the tree itself",
            )
    ground = next((data[k] for k in ("root_body", "ground", "root") if isinstance(data.get(k), str)), WORLD)
    fr = data.get("floating_root")
    floating = None
    if isinstance(fr, str):
        floating = fr
    elif isinstance(fr, dict):
        floating = fr.get("body") or fr.get("id") or ground
    elif fr:
        floating = ground
    if floating == ground:
        ground = WORLD if ground != WORLD else "__none__"
    alias = {ground: WORLD} if ground != WORLD else {}

    def body(el, name):
        name = alias.get(name, name)
        if name not in g.bodies:
            raise g.error(el, f"unknown body '{name}'")
        return name

    if "gravity_m_s2" in data:
        g.gravity = g._vec("top level", "gravity_m_s2", data["gravity_m_s2"], 3)
    for k, b in enumerate(data.get("bodies", [])):
        el = f"body #{k + 1} '{b.get('id', '?')}'"
        if "id" not in b:
            raise g.error(el, "missing 'id'")
        if b["id"] in (ground, WORLD):
            continue
        I = b.get("inertia_kg_m2", b.get("inertia_com_kg_m2"))
        g.add_body(
            b["id"],
            b.get("mass_kg", 0.0),
            b.get("com_m", (0, 0, 0)),
            None if I is None else _mat(g, el, "inertia", I, (3, 3)),
        )
    if floating is not None:
        if floating not in g.bodies:
            raise g.error("floating_root", f"unknown body '{floating}'")
        g.add_joint("floating_root", "free", WORLD, floating)
    seed = data.get("seed") or {}
    if isinstance(seed, dict):
        seed = seed.get("joints", seed.get("q", seed))
    if not isinstance(seed, dict):
        raise g.error("seed", f"expected {{joint id: value}}, got {type(seed).__name__}")
    act = {}
    for k, a in enumerate(data.get("actuators", [])):
        if "joint_id" not in a:
            raise g.error(f"actuator #{k + 1}", "missing 'joint_id'")
        act[a["joint_id"]] = float(a.get("gear", 1.0))
    for k, j in enumerate(data["joints"]):
        el = f"joint #{k + 1} '{j.get('id', '?')}'"
        for req in ("id", "type", "body_a", "body_b"):
            if req not in j:
                raise g.error(
                    el,
                    f"missing '{req}'"
                    + (
                        " (joints name body_a/body_b, not parent/child: a pre-computed tree is not a physical graph)"
                        if "parent" in j
                        else ""
                    ),
                )
        t = _JT.get(str(j["type"]).lower())
        if t is None:
            raise g.error(el, f"unknown joint type '{j['type']}' (expected one of {', '.join(sorted(_JT))})")
        A = _mat(g, el, "T_AJ", j.get("T_AJ", np.eye(4)), (4, 4))
        B = _mat(g, el, "T_BJ", j.get("T_BJ", np.eye(4)), (4, 4))
        if t == "spherical":
            A, B = pose(A[:3, 3]), pose(B[:3, 3])
        lim = j.get("limits") or {}
        lo, hi = lim.get("lower"), lim.get("upper")
        drive = j.get("drive") or {}
        q0 = seed.get(j["id"], j.get("seed", j.get("q0")))
        if q0 is not None and t in ("revolute", "prismatic"):
            q0 = np.atleast_1d(np.asarray(q0, dtype=float))
        g.add_joint(
            j["id"],
            t,
            body(el, j["body_a"]),
            body(el, j["body_b"]),
            parent_pose=A,
            child_pose=B,
            axis=j.get("axis", (0, 0, 1)),
            axis2=j.get("axis2", (0, 1, 0)),
            lower=lo,
            upper=hi,
            actuated=j["id"] in act,
            q0=q0,
            armature=float(drive.get("armature", 0.0)),
            damping=float(drive.get("damping", 0.0)),
        )
    for jid, gear in act.items():
        if jid not in g.joints:
            raise g.error(f"actuator '{jid}'", "names an unknown joint")
        g.add_port(jid, "joint", jid, 0, gear=gear)
    for k, c in enumerate(data.get("loop_cuts", [])):
        name = c.get("id", f"loop_cut{k}")
        el = f"loop_cut '{name}'"
        t = c.get("type")
        p1 = _mat(g, el, "point1_m", c.get("point1_m", (0, 0, 0)), 3)
        p2 = _mat(g, el, "point2_m", c.get("point2_m", (0, 0, 0)), 3)
        b1, b2 = body(el, c.get("body1")), body(el, c.get("body2"))
        if t == "point_coincidence":
            g.add_constraint(name, "point", b1, b2, pose(p1), pose(p2))
        elif t == "universal":
            R1 = _mat(g, el, "frame1_R", c.get("frame1_R", np.eye(3)), (3, 3))
            R2 = _mat(g, el, "frame2_R", c.get("frame2_R", np.eye(3)), (3, 3))
            g.add_constraint(name, "universal", b1, b2, pose(p1, R=R1), pose(p2, R=R2))
        else:
            raise g.error(el, f"unknown loop cut type '{t}' (expected point_coincidence or universal)")
    for k, c in enumerate(data.get("affine_couplings", [])):
        el = f"affine_coupling #{k + 1}"
        for req in ("master", "slave"):
            if req not in c:
                raise g.error(el, f"missing '{req}'")
        m, o = float(c.get("multiplier", 1.0)), float(c.get("offset", 0.0))
        g.add_coupling(c.get("id", f"{c['slave']}__mimic"), {c["slave"]: 1.0, c["master"]: -m}, -o)
    for key in ("point_sites", "sole_sites"):
        for k, s in enumerate(data.get(key, [])):
            name = s.get("id", s.get("name"))
            el = f"{key} #{k + 1} '{name}'"
            if not name or "body" not in s:
                raise g.error(el, "a site needs 'id' and 'body'")
            g.add_frame(body(el, s["body"]), name, _site_pose(g, el, s))
    return g
