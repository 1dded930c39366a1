"""MJCF export of every model that loads (issue 10, part 4): export -> MuJoCo -> ``jm.load``.

MuJoCo is the independent reference: it must accept the file (no massless moving body), its own
kinematics must reproduce our body poses, its equality constraints must hold at our closed
configuration with their Jacobian annihilating our tangent map, and the re-imported model must keep
the mass, nq, nv and the closure (rank and null space)."""

from __future__ import annotations

import re
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest
import scipy.linalg as sl
from _shared import random_configurations

import jaxmech as jm

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DATA = Path(__file__).resolve().parent / "data"
_fk = jm.jit(jm.forward_kinematics)
_C = jm.jit(jm.closure_jacobian)
_res = jm.jit(jm.closure_residual)
_assemble = jm.jit(jm.assemble)


def _export(mech, q, tmp_path, warns=()):
    """Export at ``q``; ``warns``: regexes of the only warnings expected (each exactly once)."""
    out = tmp_path / f"{mech.name}.xml"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")  # nothing is dropped or approximated ...
        for pat in warns:  # ... but what the test expects
            warnings.filterwarnings("always", message=pat)
        jm.export_mjcf(mech, out, q=q)
    m = mujoco.MjModel.from_xml_path(str(out))
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == len(warns) and all(any(re.match(p, w) for w in msgs) for p in warns), msgs
    return out, m


def _null(C):
    return sl.null_space(C, rcond=1e-9)


def _check_round_trip(mech, q, tmp_path, added_mass=0.0, warns=()):
    """``added_mass`` (kg): what export gave massless moving bodies (announced by ``warns``)."""
    q = np.asarray(q, dtype=float)
    out, m = _export(mech, q, tmp_path, warns)
    # MuJoCo accepted it: every body with a joint has mass; mass, nq, nv kept
    for b in range(1, m.nbody):
        if m.body_jntnum[b]:
            assert m.body_mass[b] > 0, mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b)
    assert float(np.sum(m.body_mass)) == pytest.approx(float(np.sum(mech.mass)) + added_mass, rel=1e-12)
    assert (m.nq, m.nv) == (mech.nq, mech.nv)
    # MuJoCo's kinematics at our q (qpos has our meaning; spherical tree joints are measured from
    # the XML pose, which export writes at identity) reproduce our body poses
    m.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE  # efc_J dense (nefc, nv)
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_forward(m, d)
    T = np.asarray(_fk(mech, q))
    for b in range(1, m.nbody):
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b)
        i = mech.body_names.index(name)
        np.testing.assert_allclose(d.xpos[b], T[i][:3, 3], atol=1e-10)
    # MuJoCo's equality constraints: satisfied at q, and their Jacobian annihilates our tangent map
    eq = d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
    assert np.max(np.abs(d.efc_pos[eq]), initial=0.0) <= 1e-10
    C = np.asarray(_C(mech, q))
    N = _null(C)
    qvel = np.stack([np.asarray(jm.v_to_mujoco_qvel(mech, q, N[:, k])) for k in range(N.shape[1])], 1)
    J = np.asarray(d.efc_J).reshape(d.nefc, m.nv)[eq]
    assert np.max(np.abs(J @ qvel), initial=0.0) <= 1e-10
    assert np.linalg.matrix_rank(J, tol=1e-9 * max(1.0, np.abs(J).max(initial=0.0))) == np.linalg.matrix_rank(
        C, tol=1e-9
    )
    return out, m


def _check_reimport(mech, q, out, added_mass=0.0):
    back = jm.load(out)
    assert (back.nq, back.nv) == (mech.nq, mech.nv)
    assert float(np.sum(back.mass)) == pytest.approx(float(np.sum(mech.mass)) + added_mass, rel=1e-12)
    assert set(mech.frame_names) <= set(back.frame_names)
    assert np.max(np.abs(np.asarray(_res(back, q))), initial=0.0) <= 1e-10
    C, Cb = np.asarray(_C(mech, q)), np.asarray(_C(back, q))
    N, Nb = _null(C), _null(Cb)
    assert N.shape == Nb.shape
    if N.size:
        assert np.max(sl.subspace_angles(N, Nb)) <= 1e-9
    return back


def test_two_hinge_stewart(tmp_path):
    """Universal joints written as two revolutes through a massless body (the MuJoCo/Pinocchio
    way): export used to fail in MuJoCo ('mass and inertia of moving bodies ...')."""
    mech = jm.load(CONFIGS / "stewart_two_hinge.toml")
    yokes = [i for i, n in enumerate(mech.body_names) if n.endswith("_yoke")]
    assert len(yokes) == 6 and np.all(np.asarray(mech.mass)[yokes] == 0)
    q = np.asarray(mech.q0)
    assert np.max(np.abs(np.asarray(_res(mech, q)))) <= 1e-12
    out, m = _check_round_trip(mech, q, tmp_path)
    assert m.nbody - 1 == len(mech.body_names) - 6  # each yoke merged into its barrel
    barrel = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "leg_0_barrel")
    assert m.body_jntnum[barrel] == 2  # u_x and u_y: two hinges in one body
    # the same kinematics at a configuration off the closure (MuJoCo composes the two hinges in order)
    qr = np.asarray(random_configurations(mech, 1, 3, scale=0.4)[0])
    _check_body_poses(mech, m, mujoco.MjData(m), qr)
    _check_reimport(mech, q, out)


def _check_body_poses(mech, m, d, qr):
    """MuJoCo's body poses at ``qr`` (after ``mj_kinematics`` on ``d``) equal ours to 1e-12."""
    d.qpos[:] = qr
    mujoco.mj_kinematics(m, d)
    T = np.asarray(_fk(mech, qr))
    for b in range(1, m.nbody):
        i = mech.body_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b))
        np.testing.assert_allclose(d.xpos[b], T[i][:3, 3], atol=1e-12)
        np.testing.assert_allclose(d.xmat[b].reshape(3, 3), T[i][:3, :3], atol=1e-12)


def test_massless_moving_leaf(tmp_path):
    """frames17.sdf: the universal joint's child 'hand' has no mass and no child, so its joints
    can go neither into a child nor (they move) into its parent: MuJoCo used to reject the export
    ('mass and inertia of moving bodies must be larger than mjMINVAL'). Export gives it a tiny
    mass and inertia (last resort) with a warning naming the body and the values; its two hinges
    stay in one body, and MuJoCo's bodies and sites (the named frames) keep our kinematics."""
    mech = jm.load(DATA / "frames17.sdf")
    hand = mech.body_names.index("hand")
    assert mech.topo.joint_types[hand] == "universal" and float(mech.mass[hand]) == 0
    assert hand not in mech.topo.parent  # a leaf
    q = np.asarray(mech.q0)
    warn = r"frames17: body 'hand' moves .* 1e-09 kg added to its mass and 1e-07 kg m\^2"
    out, m = _check_round_trip(mech, q, tmp_path, added_mass=1e-9, warns=(warn,))
    b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "hand")
    assert m.body_jntnum[b] == 2 and m.body_mass[b] == 1e-9
    np.testing.assert_allclose(m.body_inertia[b], 1e-7, rtol=1e-12)
    d = mujoco.MjData(m)
    for qr in np.asarray(random_configurations(mech, 3, 0, scale=0.8)):
        _check_body_poses(mech, m, d, qr)
        for f in mech.frame_names:
            s, F = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, f), np.asarray(jm.frame_pose(mech, qr, f))
            np.testing.assert_allclose(d.site_xpos[s], F[:3, 3], atol=1e-12)
            np.testing.assert_allclose(d.site_xmat[s].reshape(3, 3), F[:3, :3], atol=1e-12)
    _check_reimport(mech, q, out, added_mass=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("robot", ["excavator", "go2", "kangaroo", "panda", "stewart"])
def test_paper_robot_round_trip(robot, tmp_path):
    """The five paper robots, from the authors' files, assembled with default options."""
    mech = jm.load(CONFIGS / f"{robot}_physical_graph.json")
    jm.mobility(mech)  # static default independent set for the jitted assembly
    res = _assemble(mech, mech.q0) if mech.n_rows else None
    q = np.asarray(mech.q0 if res is None else res.q)
    if res is not None:
        assert float(res.residual) <= 1e-12, (robot, res.message())
    out, _ = _check_round_trip(mech, q, tmp_path)
    _check_reimport(mech, q, out)


@pytest.mark.parametrize("name", ["four_bar", "stewart"])
def test_mjcf_loaded_closures_round_trip(name, tmp_path):
    """A model loaded from MJCF keeps its closures' sites (``<loop>__a`` / ``__b``) as named
    frames; export used to write them again for the closures, and MuJoCo rejected the repeated
    site names. Every exported name is unique per kind, the frames keep their names, and the
    round trip keeps the mass, nq, nv and the closure rows (q0 of these files is closed)."""
    mech = jm.load(CONFIGS / f"{name}.xml")
    assert mech.n_rows and {f"{n}__a" for n in mech.topo.loop_names} <= set(mech.frame_names)
    q = np.asarray(mech.q0)
    assert np.max(np.abs(np.asarray(_res(mech, q)))) <= 1e-10
    out, m = _check_round_trip(mech, q, tmp_path)
    for obj, n in [("SITE", m.nsite), ("TENDON", m.ntendon), ("EQUALITY", m.neq), ("ACTUATOR", m.nu)]:
        names = [mujoco.mj_id2name(m, getattr(mujoco.mjtObj, f"mjOBJ_{obj}"), k) for k in range(n)]
        assert len(set(names)) == len(names), (obj, names)
    for f in mech.frame_names:  # the named frames are still the sites of the same names
        assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, f) >= 0, f
    back = _check_reimport(mech, q, out)
    assert back.n_rows == mech.n_rows
    assert back.topo.loop_types == mech.topo.loop_types
    assert np.max(np.abs(np.asarray(_res(back, back.q0)))) <= 1e-10  # MuJoCo's qpos0 is closed


def _xml_names(path) -> list[tuple]:
    """Each element's tag, name and the names it refers to (sites, joints, tendons), in file order."""
    refs = ("name", "model", "site", "site1", "site2", "joint", "joint1", "joint2", "tendon", "tendon1")
    return [(el.tag, *(el.get(k) for k in refs)) for el in ET.parse(path).getroot().iter()]


@pytest.mark.parametrize("path", ["four_bar.toml", "stewart.xml", "cmg_variants.json"])
def test_reexport_keeps_names(path, tmp_path):
    """Exporting a model loaded from an exported MJCF writes the same names: the closures' sites came
    back as named frames, and export used to write them again beside the frames with a suffix
    (``cut_0__a_1``, one more per round trip; a revolute cut's ``<loop>__0__a`` beside
    ``<loop>__a0``, a universal cut's ``<loop>__twist__a`` beside ``<loop>__ax``). Covers point,
    revolute (two connects), universal (connect + twist tendon) closures, ports and a coupling."""
    src = CONFIGS / path if (CONFIGS / path).exists() else DATA / path
    mech = jm.load(src)
    first = tmp_path / "a" / f"{mech.name}.xml"
    first.parent.mkdir()
    jm.export_mjcf(mech, first)
    again = tmp_path / f"{mech.name}.xml"
    jm.export_mjcf(jm.load(first), again)
    mujoco.MjModel.from_xml_path(str(again))
    assert _xml_names(again) == _xml_names(first)
