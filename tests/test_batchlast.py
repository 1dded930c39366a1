"""jaxmech.batchlast: the batch-last kernels that ``vmap`` of the public closure and kinematics
functions runs, against the per-state code they replace (``closure._evaluate``,
``kinpass._fk_one``) run under a plain ``vmap``, on the zoo (every constraint and joint type,
couplings) and on shipped robots; and the paths that must not take them (a batched model, nested
``vmap``, derivatives)."""

from __future__ import annotations

import warnings

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import load, random_configurations
from test_closure import _zoo

import jaxmech as jm
from jaxmech import closure, corrector, kinpass, lie

LAM = 0.3  # homotopy parameter of the defected rows checked below


@jm.jit
def _public(mech, Q, defect):
    f = lambda q, d: (  # noqa: E731
        jm.closure_residual_and_jacobian(mech, q),
        jm.closure_residual(mech, q),
        jm.closure_jacobian(mech, q),
        jm.forward_kinematics(mech, q),
        corrector.defected_residual_and_jacobian(mech, q, LAM, d),
        corrector.defected_residual(mech, q, LAM, d),
    )
    return jax.vmap(f)(Q, defect)


@jm.jit
def _reference(mech, Q, defect):
    def f(q, d):
        # assembly's defected closure (paper 001 eq. (34)): Delta(q) Exp((1 - lam) rho0)^-1 per element
        dinv = tuple(lie.se3_exp(-(1.0 - LAM) * rho0) for rho0 in d.rho0)
        rd, Jd = closure._evaluate(mech, q, None, True, dinv)
        rd = rd.at[mech.topo.coupling_rows :].add(-(1.0 - LAM) * d.c0) if mech.topo.coupling_names else rd
        return closure._evaluate(mech, q, None, True), kinpass._fk_one(mech, q), (rd, Jd)

    return jax.vmap(f)(Q, defect)


def _defects(mech, n, seed=0):
    """Random defects (logs of 0.1-sized mismatches, coupling offsets) for ``n`` states."""
    rng = np.random.default_rng(seed)
    rho0 = tuple(jnp.asarray(0.1 * rng.normal(size=(n, len(g.names), 6))) for g in mech.topo.groups)
    return corrector.Defect(rho0, jnp.asarray(0.1 * rng.normal(size=(n, len(mech.topo.coupling_names)))))


def _states(mech, n=16, seed=0):
    return random_configurations(mech, n, seed, 0.5)


@pytest.fixture(scope="module")
def zoo():
    return _zoo()


def _check(mech, Q):
    D = _defects(mech, Q.shape[0])
    (r, J), r_only, J_only, T, (rd, Jd), rd_only = _public(mech, Q, D)
    (r_ref, J_ref), T_ref, (rd_ref, Jd_ref) = _reference(mech, Q, D)
    assert float(jnp.max(jnp.abs(rd_ref - r_ref))) > 1e-3  # the defect did reach the rows
    scale = 1.0 + float(jnp.max(jnp.abs(J_ref)))
    np.testing.assert_allclose(rd, rd_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(rd_only, rd_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Jd, Jd_ref, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(r, r_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(r_only, r_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(J, J_ref, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(J_only, J, rtol=0, atol=1e-15 * scale)
    np.testing.assert_allclose(T, T_ref, rtol=0, atol=1e-13 * (1.0 + float(jnp.max(jnp.abs(T_ref)))))


@pytest.mark.slow  # two ~5 s compiles; by default test_closure.py's test_batched_jit_vmap checks the zoo's
# batched (batch-last) residual and Jacobian against the single-state evaluation
def test_zoo_every_row_type_matches_the_per_state_code(zoo):
    types = {g.type for g in zoo.topo.groups}
    assert types >= {"weld", "pose", "point", "revolute", "cylindrical", "universal", "prismatic", "distance"}
    assert len(zoo.topo.coupling_names) > 0
    _check(zoo, _states(zoo))


@pytest.mark.parametrize(
    "name",
    ["stewart", pytest.param("four_bar", marks=pytest.mark.slow), pytest.param("cassie", marks=pytest.mark.slow)],
)
def test_shipped_robots_match_the_per_state_code(name):
    mech = load(name)
    _check(mech, _states(mech))


def test_single_state_nested_vmap_and_batched_model():
    """One state runs the per-state code itself; a nested vmap gives the flat batch's values; a
    model batched along with the states (here perturbed cut frames) takes the per-state code."""
    mech = load("four_bar")
    Q = _states(mech, 8, seed=1)
    (r_ref, J_ref), _, _ = _reference(mech, Q, _defects(mech, Q.shape[0]))
    r1, J1 = jm.jit(jm.closure_residual_and_jacobian)(mech, Q[3])
    chex.assert_trees_all_equal((r1, J1), (r_ref[3], J_ref[3]))  # bit for bit
    nested = jm.jit(jax.vmap(jax.vmap(jm.closure_residual_and_jacobian, (None, 0)), (None, 0)))
    r2, J2 = nested(mech, Q.reshape(2, 4, -1))
    np.testing.assert_allclose(r2.reshape(r_ref.shape), r_ref, atol=1e-13)
    np.testing.assert_allclose(J2.reshape(J_ref.shape), J_ref, atol=1e-12)
    models = jax.tree.map(lambda x: jnp.stack([x] * 8), mech)
    shift = 0.01 * jnp.arange(8.0)[:, None, None]
    models = eqx.tree_at(lambda m: m.cut_pose_b, models, models.cut_pose_b.at[:, :, :3, 3].add(shift))
    rb, Jb = jm.jit(jax.vmap(jm.closure_residual_and_jacobian))(models, Q)
    ref = jm.jit(jax.vmap(lambda m, q: closure._evaluate(m, q, None, True)))(models, Q)
    chex.assert_trees_all_equal((rb, Jb), tuple(ref))
    assert float(jnp.max(jnp.abs(rb - r_ref))) > 1e-3  # the batched frames did reach the rows


def test_derivatives_are_those_of_the_per_state_code():
    """Reverse mode (the per-state code's JVP, transposed) through the vmapped public functions,
    with respect to the states and to a model parameter, equals that of the per-state code
    (second order in the Jacobian)."""
    mech = load("four_bar")
    Q = _states(mech, 4, seed=2)

    def loss(fn, mech, Q):
        r, J = jax.vmap(lambda q: fn(mech, q))(Q)
        return jnp.sum(r**2) + jnp.sum(jnp.sin(J))

    fast = lambda m, q: jm.closure_residual_and_jacobian(m, q)  # noqa: E731
    ref = lambda m, q: closure._evaluate(m, q, None, True)  # noqa: E731
    g = jm.jit(jax.grad(lambda m, Q: loss(fast, m, Q), (0, 1)))(mech, Q)
    g_ref = jm.jit(jax.grad(lambda m, Q: loss(ref, m, Q), (0, 1)))(mech, Q)
    np.testing.assert_allclose(g[1], g_ref[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g[0].cut_pose_a, g_ref[0].cut_pose_a, rtol=1e-12, atol=1e-12)


def test_float32_model_computes_in_float32():
    """A float32 model's batch-last kernels stay in float32 (a float64 numpy constant once promoted
    the local poses, so the float32 path ran in float64 and warned at the Jacobian's scatter)."""
    from jaxmech import batchlast
    from jaxmech.bench import cast

    mech = cast(load("stewart"), jnp.float32)
    QT = jnp.tile(jnp.asarray(load("stewart").q0, jnp.float32)[:, None], (1, 4))  # the file's closed pose

    @jm.jit
    def kernels(m, QT):
        R, p = batchlast.local_poses(m, QT)
        Re, pe = batchlast.world_poses(m, R, p)
        return R, p, Re, pe, batchlast.world_columns(m, Re, pe, QT)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scatter's dtype warning fails the test
        out = kernels(mech, QT)
        r, J = jm.jit(jax.vmap(jm.closure_residual_and_jacobian, (None, 0)))(mech, QT.T)
    assert {x.dtype for x in out} == {jnp.dtype(jnp.float32)}
    assert r.dtype == J.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(r))) < 1e-3  # closed to float32 rounding
