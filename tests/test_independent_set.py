"""Valid independent sets by default, and redundant actuation (issue 10, part 3).

References are independent of the code under test: the SVD null space of C (numpy), and the
weighted least-norm effort distribution solved as a KKT system in numpy."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from _shared import assemble_each

import jaxmech as jm
from jaxmech import reduction as red

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _slider_crank(actuated: tuple[str, ...]):
    g = jm.read_graph(CONFIGS / "slider_crank.toml")
    for jn, j in g.joints.items():
        j.actuated = jn in actuated
    for pn in [pn for pn, p in g.ports.items() if p.joint not in actuated]:
        del g.ports[pn]  # joint ports also mark their coordinate as actuated
    return jm.compile(g)


@pytest.fixture(scope="module")
def crank_model():
    return jm.load(CONFIGS / "slider_crank.toml")


@pytest.fixture(scope="module")
def closed_states(crank_model):
    """Closed slider-crank states over crank angles, incl. both dead centres (0 and pi)."""
    th = np.array([0.0, 0.6, 1.7, np.pi, -2.2])
    ic = crank_model.q_indices(["crank"])[0]
    Q0 = np.tile(np.asarray(crank_model.q0), (th.size, 1))
    Q0[:, ic] = th
    res = assemble_each(crank_model, Q0)  # jm.assemble's own program, shared with tests/test_reduction.py
    # dead centres sit on the slider's limits (status out of bounds), but are closed
    assert np.max(np.asarray(res.residual)) < 1e-12
    return np.asarray(res.q), th


@jm.jit
def _tm_batch(mech, Q):
    return jax.vmap(lambda q: red.tangent_map_status(mech, q, d=1))(Q)


_C_batch = jm.jit(jax.vmap(jm.closure_jacobian, in_axes=(None, 0)))


def _null(C, d):
    return np.linalg.svd(C)[2][C.shape[1] - d :].T


def test_singular_actuated_choice_is_replaced_per_state(closed_states):
    """Slider actuated: at the dead centres the slider speed does not parametrize the motion; the
    default picks another coordinate there (per state, under vmap) and keeps the slider elsewhere."""
    mech = _slider_crank(("slider",))
    Q, th = closed_states
    tm = _tm_batch(mech, Q)
    C = np.asarray(_C_batch(mech, Q))
    islider = int(mech.v_indices(["slider"])[0])
    assert np.all(np.asarray(tm.status) == red.OK)
    for k in range(th.size):
        E = np.asarray(tm.E[k])
        assert np.max(np.abs(C[k] @ E)) <= 1e-12 * max(1.0, np.abs(E).max())
        N = _null(C[k], 1)  # E spans the SVD null space
        assert np.linalg.matrix_rank(np.hstack([E, N]), tol=1e-8) == 1
        dead = abs(np.sin(th[k])) < 1e-9
        assert (int(tm.independent[k][0]) == islider) != dead, (th[k], np.asarray(tm.independent[k]))
    # naming the slider at a dead centre is reported, and the plain function raises
    bad = red.tangent_map_status(mech, Q[0], ["slider"])
    assert int(bad.status) == red.SINGULAR
    with pytest.raises(red.ReductionError, match="singular"):
        red.tangent_map(mech, Q[0], ["slider"])
    with pytest.raises(Exception, match="invalid lift"):  # eqx.error_if under jit
        jax.block_until_ready(jm.jit(lambda q: red.tangent_map(mech, q, ["slider"]))(Q[0]))


@pytest.fixture(scope="module")
def redundant():
    """Slider-crank with both the crank and the slider actuated (2 actuators, mobility 1)."""
    return _slider_crank(("crank", "slider"))


@jm.jit
def _redundant_checks(mech, q, v, udot):
    """Default tangent map and acceleration lift, the old default (both actuated speeds), assembly."""
    tm = red.tangent_map_status(mech, q)
    a, tma = red.acceleration_lift_status(mech, q, v, udot)
    both = red.tangent_map_status(mech, q, ["crank", "slider"])
    return tm, a, tma, both, jm.closure_jacobian(mech, q), jm.closure_bias(mech, q, v), jm.assemble(mech, q)


def test_redundant_actuation_defaults(redundant, closed_states):
    mech = redundant
    Q, _ = closed_states
    q = Q[1]
    assert jm.mobility(mech) == 1  # concrete: also serves the jitted calls (mech as an argument)
    E_ref = _null(np.asarray(jm.closure_jacobian(mech, q)), 1)
    v = E_ref[:, 0] * 1.3
    tm, a, tma, both, C, gam, res = _redundant_checks(mech, q, v, np.array([0.4]))
    C = np.asarray(C)
    assert int(tm.status) == red.OK and tm.E.shape == (mech.nv, 1)
    assert np.max(np.abs(C @ np.asarray(tm.E))) <= 1e-12
    assert jm.independent_names(mech, tm)[0] in ("crank", "slider")
    # acceleration lift: consistent
    assert int(tma.status) == red.OK
    assert np.max(np.abs(C @ np.asarray(a) + np.asarray(gam))) <= 1e-11
    # the old default (both actuated speeds) is invalid and reported, not returned silently
    assert int(both.status) != red.OK
    with pytest.raises(red.ReductionError):
        red.tangent_map(mech, q, ["crank", "slider"])
    with pytest.raises(red.ReductionError):
        red.acceleration_lift(mech, q, v, np.array([0.4, 0.1]), ["crank", "slider"])
    # assembly: the default holds a valid set (one actuated coordinate), not both
    assert res.message() == "converged", res.message()
    assert np.asarray(res.active).size == 1
    assert float(res.residual) <= 1e-12


def test_redundant_effort_virtual_work_and_distribution(redundant, closed_states):
    mech = redundant
    q = closed_states[0][2]
    E = np.asarray(jm.tangent_map(mech, q))
    P = np.asarray(jm.port_jacobian(mech, q)) if mech.topo.port_names else None
    B = np.asarray(jm.independent.actuation_matrix(mech, q))
    if P is not None:
        np.testing.assert_allclose(B, P.T, atol=0)
    rng = np.random.default_rng(0)
    f = rng.normal(size=B.shape[1]) * 50.0
    u = rng.normal(size=E.shape[1])
    tau_u = np.asarray(jm.reduced_effort(mech, q, E, f))
    # virtual work: f . pdot = tau_u . u for pdot = B^T E u
    assert abs(f @ (B.T @ E @ u) - tau_u @ u) <= 1e-12 * max(1.0, abs(tau_u @ u))
    # least-norm and weighted distributions against a numpy KKT solve
    A = B.T @ E  # (na, d)
    for w in (None, np.array([1.0, 10.0])):
        fd = np.asarray(jm.distribute_effort(mech, q, E, tau_u, w))
        W = np.ones(A.shape[0]) if w is None else w
        na, d = A.shape
        K = np.block([[np.diag(1.0 / W), A], [A.T, np.zeros((d, d))]])
        ref = np.linalg.solve(K, np.concatenate([np.zeros(na), tau_u]))[:na]
        np.testing.assert_allclose(fd, ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(A.T @ fd, tau_u, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_excavator_default_tangent_map_and_efforts():
    """The authors' excavator: 8 actuators, mobility 7 (issue 10 'done when')."""
    mech = jm.load(CONFIGS / "excavator_physical_graph.json")
    assert len(mech.topo.port_names) == 8
    assert jm.mobility(mech) == 7
    res = jm.assemble(mech, mech.q0)
    assert res.message() == "converged" and float(res.residual) <= 1e-12
    q = res.q
    tm = red.tangent_map_status(mech, q)
    C = np.asarray(jm.closure_jacobian(mech, q))
    E = np.asarray(tm.E)
    assert int(tm.status) == red.OK and E.shape == (23, 7)
    assert np.max(np.abs(C @ E)) <= 1e-12
    assert np.linalg.matrix_rank(np.hstack([E, _null(C, 7)]), tol=1e-8) == 7
    names = jm.independent_names(mech, tm)
    assert len(names) == 7 and len(set(names)) == 7
    # the file is planar only to ~5e-13 (the 17th singular value of C), so the lift of a set is
    # only as exact as that times |E|: the six-cylinder set (|E| 4.7) misses 1e-12, and the
    # default falls back to the best-conditioned set and says so
    sv = np.linalg.svd(C, compute_uv=False)
    assert 1e-14 < sv[16] < 1e-12 and sv[15] > 1e-3
    ch = jm.independent_choice(mech)
    assert not ch.actuated_first and ch.ce_actuated_first > 1e-12 >= ch.ce_chosen
    ported = set(np.asarray(mech.topo.port_v).tolist())
    pref = np.asarray(jm.independent.reference_independent(mech))
    D = np.setdiff1d(np.arange(23), pref)
    Ep = np.zeros((23, 7))
    Ep[pref, np.arange(7)] = 1.0
    Ep[D] = -np.linalg.lstsq(C[:, D], C[:, pref], rcond=None)[0]  # best lift of that set (numpy)
    assert sum(int(i) in ported for i in pref) == 6 and np.max(np.abs(C @ Ep)) > 1e-12
    assert tuple(names) == ch.names  # at the seed, the reported set is the one chosen
    # six ported speeds span the drives (P E has rank 6); the seventh is a speed no drive moves
    assert np.linalg.matrix_rank(np.asarray(jm.port_jacobian(mech, q)) @ E, tol=1e-9) == 6
    P = np.asarray(jm.port_jacobian(mech, q))
    f = np.linspace(1.0, 2.0, P.shape[0]) * 1e3
    u = np.random.default_rng(1).normal(size=7)
    tau_u = np.asarray(jm.reduced_effort(mech, q, E, f))
    assert abs(f @ (P @ E @ u) - tau_u @ u) <= 1e-12 * max(1.0, abs(f @ (P @ E @ u)))
