"""The five paper robots end to end (slow tier: each needs its own JAX compilation).

From the authors' own files (configs/*_physical_graph.json) with default options: assembly from the
file's own seed (residual <= 1e-12) and the independent speeds d of the README / paper (Stewart 6,
excavator 7, Go2 18, Kangaroo 18 with 80 rows of rank 64, Panda 8, 2 with a 6-D tool target);
the same for shuffled / renamed / edge-flipped variants, whose bodies land at the same world poses;
Kangaroo's sole welds as support modes, checked against a 30-digit mpmath KKT solve."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from cmg_mutate import variant

import jaxmech as jm
from jaxmech.io.cmg import graph_from_cmg
from jaxmech.reduction import add_support_points, add_tool_target

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
D = {"stewart": 6, "excavator": 7, "go2": 18, "kangaroo": 18, "panda": 8}  # README / paper 000
RANK = {"kangaroo": 64}
ROWS = {"kangaroo": 80}


def doc(robot):
    return json.loads((CONFIGS / f"{robot}_physical_graph.json").read_text())


def rank_of(mech, q) -> int:
    if not mech.n_rows:
        return 0
    sv = np.linalg.svd(np.array(jm.closure_jacobian(mech, q)), compute_uv=False)
    return int(np.sum(sv > 1e-9 * max(1.0, sv.max())))


def assemble_seed(robot, mech):
    """Default options (the excavator's eight actuators over-specify its mobility 7: the default
    active set is then a valid actuated-first independent set)."""
    res = jm.assemble(mech, mech.q0)
    assert int(res.status) == 0, jm.STATUS_MESSAGES[int(res.status)]
    assert float(res.residual) <= 1e-12
    return res.q


_MECH: dict = {}


def mech_of(robot):
    if robot not in _MECH:
        _MECH[robot] = jm.load(CONFIGS / f"{robot}_physical_graph.json")
    return _MECH[robot]


@pytest.mark.parametrize("robot", sorted(D))
def test_seed_assembles_and_d(robot):
    m = mech_of(robot)
    q = assemble_seed(robot, m)
    r = rank_of(m, q)
    assert m.nv - r == D[robot]
    if robot in RANK:
        assert r == RANK[robot] and m.n_rows == ROWS[robot]


def test_excavator_file_partition_assembles():
    """The file's own independent set (partition_requests.joint_space) assembles from the seed."""
    m = mech_of("excavator")
    res = jm.assemble(m, m.q0, active=tuple(doc("excavator")["partition_requests"]["joint_space"]))
    assert int(res.status) == 0 and float(res.residual) <= 1e-12
    assert m.nv - rank_of(m, res.q) == 7


def test_panda_tool_target_leaves_two():
    m = mech_of("panda")
    g = jm.read_graph(CONFIGS / "panda_physical_graph.json")
    add_tool_target(g, "tool", np.array(jm.frame_pose(m, m.q0, "tool")))
    mt = jm.compile(g)
    assert mt.nv - rank_of(mt, mt.q0) == 2
    # actuator 8 drives both fingers: P row = 0.5 finger1 + 0.5 finger2 (virtual work with the coupling)
    P = np.array(jm.port_jacobian(m, m.q0))
    k = m.topo.port_names.index("actuator8")
    assert P[k, m.v_slice("finger_joint1")][0] == 0.5 and P[k, m.v_slice("finger_joint2")][0] == 0.5
    q = m.q0.at[m.q_slice("finger_joint1")].set(0.01).at[m.q_slice("finger_joint2")].set(0.03)
    assert float(jm.port_values(m, q)[k]) == pytest.approx(0.02)


@pytest.mark.parametrize("robot", sorted(D))
def test_variant_assembles_to_the_same_pose(robot):
    data = doc(robot)
    d, bmap, jmap = variant(data, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m1 = jm.compile(graph_from_cmg(d, f"{robot}_variant.json"))
    m0 = mech_of(robot)
    q0 = assemble_seed(robot, m0)
    q1 = assemble_seed(robot, m1)
    assert m1.nv - rank_of(m1, q1) == D[robot]
    T0 = np.array(jm.forward_kinematics(m0, q0))
    T1 = np.array(jm.forward_kinematics(m1, q1))
    for i, b in enumerate(m0.body_names):
        j = m1.body_names.index(bmap.get(b, b))
        np.testing.assert_allclose(T1[j], T0[i], atol=1e-9, err_msg=b)


def _mp_kkt(M, h, C, gam, tau, dps=30):
    import mpmath as mp

    mp.mp.dps = dps
    nv, r = M.shape[0], C.shape[0]
    K = mp.matrix(nv + r, nv + r)
    for i in range(nv):
        for j in range(nv):
            K[i, j] = M[i, j]
    for i in range(r):
        for j in range(nv):
            K[nv + i, j] = C[i, j]
            K[j, nv + i] = -C[i, j]
    x = mp.lu_solve(K, mp.matrix([*(tau - h).tolist(), *(-gam).tolist()]))
    return np.array([float(x[i]) for i in range(nv)])


def test_kangaroo_sole_welds_vs_mpmath():
    m = mech_of("kangaroo")
    q = assemble_seed("kangaroo", m)
    g = jm.read_graph(CONFIGS / "kangaroo_physical_graph.json")
    add_support_points(g, m, q, ["left_sole", "right_sole"], kind="weld")
    ms = jm.compile(g)
    assert ms.n_rows == 80 + 12
    closure = [n for n in ms.loop_names if not n.startswith("support_")]
    rng = np.random.default_rng(0)
    for mode in (["support_left_sole"], ["support_left_sole", "support_right_sole"]):
        mask = jm.support_mask(ms, closure + mode)
        C = np.array(jm.closure_jacobian(ms, q))[mask]
        _, s, Vt = np.linalg.svd(C)
        r = int(np.sum(s > 1e-9 * s.max()))
        v = Vt[r:].T @ rng.normal(size=ms.nv - r)  # C v = 0
        tau = rng.normal(size=ms.nv)
        fd = jm.forward_dynamics(ms, q, v, tau, support=mask)
        gam = np.array(jm.closure_bias(ms, q, v))[mask]
        a = np.array(fd.a)
        # 16 redundant loop rows (rank-revealing solve) and cond(M) ~ 3e8 (light links): the
        # Schur solve alone left |C a + gamma| ~ 1e-8; the constraint correction brings it to ~1e-15
        assert np.abs(C @ a + gam).max() <= 1e-12 * (1.0 + np.abs(a).max()), (mode, np.abs(C @ a + gam).max())
        # mpmath KKT on an independent row subset (the redundant rows are consistent)
        Q, R, piv = _qr_rows(C)
        rows = piv[:r]
        a_ref = _mp_kkt(np.array(jm.crba(ms, q)), np.array(jm.nonlinear_effects(ms, q, v)), C[rows], gam[rows], tau)
        err = np.abs(np.array(fd.a) - a_ref).max() / max(1.0, np.abs(a_ref).max())
        assert err < 1e-11, (mode, err)  # issue 12's bound against mpmath (1e-10 before the correction)


def _qr_rows(C):
    import scipy.linalg

    return scipy.linalg.qr(C.T, pivoting=True)


def test_benchmark_small_runs(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "benchmarks/paper_robots.py", "--small", "--robots", "panda", "--out", str(tmp_path / "pr")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads((tmp_path / "pr.json").read_text())
    row = res["rows"][0]
    assert row["d"] == 8 and row["d_tool_target"] == 2 and row["modes"]["fixed"] < 1e-9
