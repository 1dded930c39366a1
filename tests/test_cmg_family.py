"""The five paper robots in the authors' CMG graph files (configs/*_physical_graph.json): structure
read through the schema tables, and the same structure for shuffled / renamed / edge-flipped
variants. Graph and compile step only (no JAX tracing): cheap enough for the default tier.

Expected counts are the README's (configs/paper_robots.md, copied from the authors' reference
robots), not this loader's output."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from cmg_mutate import variant

import jaxmech as jm
from jaxmech.io.cmg import graph_from_cmg

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ROBOTS = ("stewart", "excavator", "go2", "kangaroo", "panda")

# README table: bodies (with world where listed), joints, independent cycles of the joint graph,
# declared loop cuts (point, universal), couplings, frames, actuators.
README = {
    "stewart": dict(bodies=21, joints=25, cycles=5, point=0, universal=0, couplings=0, actuators=6),
    "excavator": dict(bodies=25, joints=34, cycles=9, point=0, universal=0, couplings=0, actuators=8),
    "go2": dict(bodies=13, joints=12, cycles=0, point=0, universal=0, couplings=0, actuators=12),
    "kangaroo": dict(bodies=78, joints=77, cycles=0, point=16, universal=8, couplings=0, actuators=12),
    "panda": dict(bodies=12, joints=11, cycles=0, point=0, universal=0, couplings=1, actuators=8),
}
FLOATING = {"go2", "kangaroo"}
ROWS = {"kangaroo": 80}  # README: 80 closure rows
FRAMES = {"go2": {"FL", "FR", "RL", "RR"}, "kangaroo": {"left_sole", "right_sole"}, "panda": {"tool"}}

_DOCS: dict = {}


def doc(robot: str) -> dict:
    if robot not in _DOCS:
        _DOCS[robot] = json.loads((CONFIGS / f"{robot}_physical_graph.json").read_text())
    return _DOCS[robot]


def build(data: dict, name: str = "variant.json"):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the shipped files and their variants load without warnings
        g = graph_from_cmg(data, name)
    return g, jm.compile(g)


def _type_counts(data):
    return Counter(j["type"] for j in data["joints"])


@pytest.mark.parametrize("robot", ROBOTS)
def test_readme_structure(robot):
    data = doc(robot)
    exp = README[robot]
    g, m = build(data, f"{robot}.json")
    # bodies: moving bodies (+ the world where the file lists one)
    listed_world = any(b["id"] in ("world",) for b in data["bodies"])
    assert len(data["bodies"]) == exp["bodies"]
    assert m.nb == exp["bodies"] - listed_world
    assert len(data["joints"]) == exp["joints"]
    assert len(m.topo.cut_names) == exp["cycles"]  # independent cycles of the joint graph
    types = Counter(m.topo.loop_types[len(m.topo.cut_names) :])
    assert types["point"] == exp["point"] and types["universal"] == exp["universal"]
    assert len(m.topo.coupling_names) == exp["couplings"]
    assert len(m.topo.port_names) == exp["actuators"]
    assert (m.topo.joint_types[0] == "free") == (robot in FLOATING)
    # velocity coordinates: 1 per revolute/prismatic tree joint, 3 per spherical, 6 for a floating base
    tc = _type_counts(data)
    n_sph_tree = tc["spherical"] - exp["cycles"] if robot == "stewart" else 0
    assert m.nv == tc["revolute"] + tc["prismatic"] + 3 * n_sph_tree + 6 * (robot in FLOATING) - (
        exp["cycles"] if robot == "excavator" else 0
    )
    if robot in ROWS:
        assert m.n_rows == ROWS[robot]
    assert FRAMES.get(robot, set()) <= set(m.frame_names)


def test_kangaroo_mass_and_drive():
    data = doc("kangaroo")
    _, m = build(data)
    assert float(np.sum(m.mass)) == pytest.approx(42.2149, abs=5e-5)  # README / paper
    for jn, dr in data["drive"].items():
        if jn in m.joint_names:
            sl = m.v_slice(jn)
            assert float(m.armature[sl][0]) == dr["armature"]
            assert float(m.damping[sl][0]) == dr["damping"]
            assert float(m.frictionloss[sl][0]) == dr["frictionloss"]
    # sole frames: the file's translation and rotation on the file's body
    for s in data["sole_sites"]:
        k = m.frame_names.index(s["id"])
        assert m.body_names[m.topo.frame_body[k]] == s["body"]
        np.testing.assert_allclose(np.array(m.frame_pose[k])[:3, 3], s["frame_translation_m"])
        np.testing.assert_allclose(np.array(m.frame_pose[k])[:3, :3], s["frame_rotation"], atol=1e-12)


def test_go2_per_joint_drive_and_base_seed():
    data = doc("go2")
    _, m = build(data)
    for j in data["joints"]:
        sl = m.v_slice(j["id"])
        assert float(m.frictionloss[sl][0]) == j["frictionloss"] and float(m.damping[sl][0]) == j["damping"]
        assert float(m.q0[m.q_slice(j["id"])][0]) == data["seed"]["joints"][j["id"]]
    q_base = np.array(m.q0[m.q_slice("floating_root")])
    np.testing.assert_allclose(q_base[:3], data["seed"]["base_pose"][:3])
    np.testing.assert_allclose(np.abs(q_base[3]), 1.0)  # zero angles -> identity quaternion


def test_panda_transmission_port_drives_both_fingers():
    data = doc("panda")
    _, m = build(data)
    t = m.topo
    k = t.port_names.index("actuator8")
    coef = dict(zip(m.joint_names, [0.0] * len(m.joint_names), strict=True))
    for jn in ("finger_joint1", "finger_joint2"):
        coef[jn] = float(t.port_coef[k, m.v_slice(jn)][0])
    assert coef["finger_joint1"] == 0.5 and coef["finger_joint2"] == 0.5
    assert np.count_nonzero(t.port_coef[k]) == 2
    # one actuator, one input coordinate: 7 arm joints + finger 1 (finger 2 follows the coupling)
    assert len(t.actuated_v) == 8 and "finger_joint2" not in t.actuated
    # seeds -> q0
    for jn, val in data["seed"].items():
        assert float(m.q0[m.q_slice(jn)][0]) == pytest.approx(val)


def test_excavator_unconnected_actuator_keeps_its_port():
    data = doc("excavator")
    _, m = build(data)
    assert "drive_p0" in m.topo.port_names and "p0" not in m.topo.actuated
    assert len(m.topo.actuated) == sum(a["input_status"] == "connected" for a in data["actuators"])


def test_stewart_seedless_legs_start_inside_their_limits():
    _, m = build(doc("stewart"))
    for i in range(6):
        sl = m.q_slice(f"leg_{i}_length")
        assert float(m.lower[sl][0]) <= float(m.q0[sl][0]) <= float(m.upper[sl][0])


def _signature(m, bmap_inv, jmap_inv):
    """Structure that must not depend on order, names or edge direction."""
    t = m.topo
    q0 = {}
    for jn in m.joint_names:
        if t.joint_types[m.joint_names.index(jn)] in ("revolute", "prismatic"):
            q0[jmap_inv.get(jn, jn)] = round(float(m.q0[m.q_slice(jn)][0]), 12)
    return dict(
        nq=m.nq,
        nv=m.nv,
        rows=m.n_rows,
        cuts=len(t.cut_names),
        loops=sorted(Counter(t.loop_types).items()),
        couplings=len(t.coupling_names),
        mass=round(float(np.sum(m.mass)), 9),
        frames=sorted(t.frame_names),
        ports=sorted(jmap_inv.get(n, n) for n in t.port_names),
        port_coef=sorted(tuple(sorted(np.round(r[r != 0], 12))) for r in t.port_coef),
        actuated=sorted(jmap_inv.get(n, n) for n in t.actuated),
        q0=q0,
        arm=round(float(np.sum(m.armature)), 9),
        damp=round(float(np.sum(m.damping)), 9),
        fric=round(float(np.sum(m.frictionloss)), 9),
    )


@pytest.mark.parametrize("robot", ROBOTS)
@pytest.mark.parametrize("kind", ["shuffled", "renamed", "flipped", "all"])
def test_variants_same_structure(robot, kind):
    data = doc(robot)
    _, m0 = build(data)
    opts = dict(
        shuffled=dict(shuffle=True, rename=False, flip=False),
        renamed=dict(shuffle=False, rename=True, flip=False),
        flipped=dict(shuffle=False, rename=False, flip=True),
        all=dict(shuffle=True, rename=True, flip=True),
    )[kind]
    d, bmap, jmap = variant(data, seed=11, **opts)
    _, m1 = build(d)
    jinv = {v: k for k, v in jmap.items()}
    binv = {v: k for k, v in bmap.items()}
    s1, s0 = _signature(m1, binv, jinv), _signature(m0, {}, {})
    q1, q0 = s1.pop("q0"), s0.pop("q0")
    assert s1 == s0
    common = set(q1) & set(q0)  # tree joints of both (the cut choice may follow the file order)
    assert len(common) >= len(q0) - len(m0.topo.cut_names) - 1
    assert {k: q1[k] for k in common} == {k: q0[k] for k in common}
