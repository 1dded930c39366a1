"""Rollouts keep the closure and (passive, undamped) conserve energy; batching is exact."""

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import closed_states, load, normal

import jaxmech as jm
from jaxmech import simulate as sim

N_STEPS = 150
DT = 1e-3


@pytest.fixture(scope="module")
def stewart(configs_dir):
    return load("stewart")  # the session's shared model: its assembly is compiled once


@functools.partial(jm.jit, static_argnames="integrator")
def _rollouts(mech, states, controls, dt, integrator="euler"):
    """N_STEPS steps of a batch of rollouts; the model and the step size are arguments, so one
    compilation per integrator serves every test and both step sizes."""
    return sim.rollout_batch(mech, states, controls, dt, N_STEPS, integrator=integrator, with_energy=True)


@pytest.fixture(scope="module")
def passive_rollout(stewart):
    """Two passive Stewart rollouts (no leg forces, no damping) from perturbed closed states."""
    mech = stewart
    Q = jnp.asarray(closed_states(mech, 4, 0.05)[:2])  # the session's shared assembly
    E = jm.jit(jax.vmap(jm.tangent_map, (None, 0)))(mech, Q)
    u = 0.2 * normal(1, (2, E.shape[-1]))
    V = jnp.einsum("bij,bj->bi", E, u)
    U = jnp.zeros((2, N_STEPS, sim.control_size(mech)))
    traj, info = _rollouts(mech, sim.SimState(Q, V), U, DT, "euler")  # as _drift calls it: one compile
    e0 = _energies(mech, Q, V)
    return mech, Q, V, U, traj, info, e0, lambda s, u: _rollouts(mech, s, u, DT, "euler")


def test_closure_gap_stays_at_roundoff(passive_rollout):
    mech, Q, V, U, traj, info, e0, _ = passive_rollout
    gap = np.asarray(info.closure_gap)
    assert np.isfinite(gap).all()
    assert gap.max() <= 1e-9  # metres (spherical cut points)
    # independent re-evaluation of the residual on the final states
    r = jax.vmap(lambda q: jm.closure_residual(mech, q))(traj.q[:, -1])
    assert float(jnp.max(jnp.abs(r))) <= 1e-9
    assert float(jnp.max(info.velocity_gap)) <= 1e-9  # |C v| after the velocity projection


@jm.jit
def _energies(mech, Q, V):
    return jax.vmap(sim.energy, (None, 0, 0))(mech, Q, V)


@jm.jit
def _kinetic(mech, Q, V):
    """Kinetic energy along a batch of trajectories (b, n)."""
    return jax.vmap(jax.vmap(sim.kinetic_energy, (None, 0, 0)), (None, 0, 0))(mech, Q, V)


def _drift(mech, state, U, dt, integrator, halves):
    """Max energy error (J) over N_STEPS * dt seconds, stepping at dt / halves (the same compiled
    N_STEPS-step rollout called ``halves`` times in a row), and the max kinetic energy."""
    e0 = np.asarray(_energies(mech, state.q, state.v))
    err, ke, gap = 0.0, 0.0, 0.0
    for _ in range(halves):
        traj, info = _rollouts(mech, state, U, dt / halves, integrator)
        state = sim.SimState(traj.q[:, -1], traj.v[:, -1])
        err = max(err, float(np.max(np.abs(np.asarray(info.energy) - e0[:, None]))))
        k = _kinetic(mech, traj.q, traj.v)
        ke, gap = max(ke, float(jnp.max(k))), max(gap, float(np.max(info.closure_gap)))
    return err, ke, gap


@pytest.mark.parametrize("integrator,order,dt,bound", [("euler", 1, DT, 1e-2), ("rk4", 4, 2 * DT, 1e-9)])
def test_energy_error_follows_the_integrator_order(passive_rollout, integrator, order, dt, bound):
    """Passive, undamped rollouts conserve energy up to the integrator's error: halving the step
    divides the largest energy error over the same time span by 2**order (semi-implicit Euler:
    first order, bounded; RK4: fourth order, the free platform's rotation included through the
    chart's dexp^-1). The ratio must lie within [0.7, 1.5] * 2**order, and the error at dt below
    ``bound`` * (max KE + 1 J), about 2-4x what it measures (Euler 0.19 J at 1 ms with 31 J of
    kinetic energy, 5.9e-3, ratio 2.0; RK4 3.2e-8 J at 2 ms with 115 J, 2.8e-10, ratio 15.8; it was
    1.8e-7 J and ratio 4.2 before the chart's dexp^-1, i.e. second order)."""
    mech, Q, V, U, *_ = passive_rollout
    s = sim.SimState(Q, V)
    e1, ke, gap1 = _drift(mech, s, U, dt, integrator, 1)
    e2, _, gap2 = _drift(mech, s, U, dt, integrator, 2)
    assert max(gap1, gap2) <= 1e-9
    ratio = e1 / e2
    assert 0.7 * 2**order <= ratio <= 1.5 * 2**order, (integrator, e1, e2, ratio)
    assert e1 <= bound * (ke + 1.0), (integrator, e1, ke)
    if integrator == "rk4":  # and far below semi-implicit Euler at the same step
        e_euler, _, _ = _drift(mech, s, U, dt, "euler", 1)
        assert e1 < 0.1 * e_euler, (e1, e_euler)


def test_potential_energy_direct_sum(passive_rollout):
    """Potential energy against a direct numpy sum over bodies (world COMs from kinematics)."""
    mech, Q, *_ = passive_rollout
    q = Q[1]
    T = np.asarray(jm.forward_kinematics(mech, q))
    c = np.einsum("bij,bj->bi", T[:, :3, :3], np.asarray(mech.com)) + T[:, :3, 3]
    ref = -np.sum(np.asarray(mech.mass) * (c @ np.asarray(mech.gravity)))
    np.testing.assert_allclose(float(sim.potential_energy(mech, q)), ref, rtol=1e-12)


def test_batch_members_are_independent(passive_rollout):
    """Swapping the batch order swaps the trajectories exactly (vmap: no cross-talk)."""
    mech, Q, V, U, traj, info, e0, f = passive_rollout
    t2, _ = f(sim.SimState(Q[::-1], V[::-1]), U)
    np.testing.assert_allclose(np.asarray(t2.q[::-1]), np.asarray(traj.q), atol=1e-12)


def test_control_shape_error(stewart):
    q = stewart.q0
    with pytest.raises(ValueError, match="control must have shape"):
        sim.generalized_force(stewart, q, jnp.zeros(5))
    f = jnp.arange(6.0)
    tau = sim.generalized_force(stewart, q, f)
    v = normal(0, (stewart.nv,))
    # virtual work: f . pdot == tau . v
    np.testing.assert_allclose(float(f @ (jm.port_jacobian(stewart, q) @ v)), float(tau @ v), rtol=1e-12)


@pytest.mark.slow  # two rollout compiles, 15 s
def test_chunked_batch_layout_equals_one_vmap(configs_dir):
    """``rollout_batch(chunk=k)`` (``lax.map`` over slices, the CPU layout for large batches) gives
    the one-vmap trajectories; 5 states in slices of 2 also exercise the remainder slice."""
    mech = jm.load(configs_dir / "four_bar.toml")
    q = jm.assemble(mech, mech.q0).q
    states = sim.SimState(jnp.tile(q, (5, 1)), jnp.zeros((5, mech.nv)))
    U = 0.1 * jnp.arange(5.0)[:, None, None] * jnp.ones((5, 4, sim.control_size(mech)))
    one, _ = jm.jit(lambda s, u: sim.rollout_batch(mech, s, u, DT, 4, chunk=0))(states, U)
    sliced, _ = jm.jit(lambda s, u: sim.rollout_batch(mech, s, u, DT, 4, chunk=2))(states, U)
    np.testing.assert_allclose(np.asarray(sliced.q), np.asarray(one.q), rtol=0, atol=1e-14)
    assert float(jnp.max(jnp.abs(one.q[4, -1] - one.q[0, -1]))) > 1e-8  # the controls differ per state
    with pytest.raises(ValueError, match="chunk must be >= 0"):
        sim.rollout_batch(mech, states, U, DT, 4, chunk=-1)


def test_chord_projection_reaches_the_full_newton_gap(configs_dir):
    """The rollout's chord projection (the second step reuses the first's Jacobian and factor)
    lands where full Gauss-Newton does from a time step's drift: residual at round-off after two
    steps, the same configuration to 1e-12; one step leaves the O(dt^2)-squared error for both."""
    mech = jm.load(configs_dir / "four_bar.toml")
    proj = jm.jit(sim.project_position, static_argnames=("iters", "chord"))
    q = proj(mech, jnp.asarray(mech.q0), iters=8)  # q0 closed up by full Newton
    E = jm.tangent_map(mech, q)
    drifted = jm.integrate(mech, q, (E @ jnp.ones(E.shape[1])) * 3.0, 1e-3)  # one 1 ms step at 3 rad/s
    gap = lambda x: float(jnp.max(jnp.abs(jm.closure_residual(mech, x))))  # noqa: E731
    assert gap(drifted) > 1e-7  # the drift the projection removes
    full, chord = proj(mech, drifted, iters=2), proj(mech, drifted, iters=2, chord=True)
    assert gap(full) <= 1e-14 and gap(chord) <= 1e-14
    np.testing.assert_allclose(np.asarray(chord), np.asarray(full), atol=1e-12)
    one = gap(proj(mech, drifted, iters=1, chord=True))
    assert 1e-14 < one < 1e-9  # a single step is not enough: the second one matters


def _eager_step_case():
    mech = load("four_bar")
    q = jnp.asarray(closed_states(mech, 4, 0.2)[1])  # the session's shared assembly
    return mech, sim.SimState(q, jnp.zeros(mech.nv)), jnp.full(sim.control_size(mech), 0.3)


@pytest.mark.slow  # a compile-count regression check (3.6 s); rollouts check the step's values by default
def test_eager_step_runs_as_one_compiled_program(caplog):
    """An eager ``jm.step_with_info`` runs as one compiled program per model, shapes and options
    (it ran ~40 primitive programs, 3.2 s on the four-bar), and the step leaves the closure at
    round-off."""
    mech, state, u = _eager_step_case()
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        new, info = jm.step_with_info(mech, state, u, DT)
    compiled = [
        r.getMessage().split()[1]
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.getMessage().startswith("Compiling")
    ]
    assert compiled.count("jit(_step_with_info)") == 1 and len(compiled) <= 5, compiled  # + the mobility, once
    assert float(jnp.max(jnp.abs(jm.closure_residual(mech, new.q)))) <= 1e-12
    assert float(info.velocity_gap) <= 1e-12 and float(jnp.max(jnp.abs(new.v))) > 1e-4  # it moved


@pytest.mark.slow  # the step as written runs ~40 primitive programs, the limited step is another compile
def test_eager_step_values_are_the_step_as_written():
    """The compiled eager step gives the values of the function as written; an array limit
    stiffness is another program, and inside the limits (none on the four-bar) changes nothing."""
    mech, state, u = _eager_step_case()
    new, info = jm.step_with_info(mech, state, u, DT)
    options = ("auto", "euler", sim.PROJECTION_ITERS, "auto", False, False, 0.0, 0.0)
    ref, ref_info = sim._step_with_info.eager(mech, state, u, DT, *options)
    np.testing.assert_allclose(np.asarray(new.q), np.asarray(ref.q), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(new.v), np.asarray(ref.v), rtol=0, atol=1e-12)
    np.testing.assert_allclose(float(info.velocity_gap), float(ref_info.velocity_gap), rtol=0, atol=1e-14)
    limited = jm.step(mech, state, u, DT, limit_stiffness=np.full(mech.nv, 1e4), limit_damping=1.0)
    np.testing.assert_allclose(np.asarray(limited.q), np.asarray(new.q), rtol=0, atol=1e-14)


def test_rk4_chart_rate_is_the_derivative_of_the_exponential_chart():
    """RK4's stage rates on spherical and free joints: ``d/dt difference(q, (q (+) u) (+) xi t)`` at
    t = 0 (central differences) equals ``(I + ad_u / 2 + ad_u^2 / 12) xi``; the plain body velocity
    (the chart rate the integrator used before, which made it second order) is off by ~|u| |xi| / 2."""
    from test_closure import _zoo

    mech = _zoo()
    t = mech.topo
    assert t.sph_v.size and t.free_v.size
    rng = np.random.default_rng(3)
    q = jm.integrate(mech, mech.q0, jnp.asarray(rng.normal(size=mech.nv)))
    u, xi = (jnp.asarray(0.1 * rng.normal(size=mech.nv)) for _ in range(2))
    chart = jm.jit(lambda s: jm.difference(mech, q, jm.integrate(mech, jm.integrate(mech, q, u), xi, s)))
    h = 1e-4
    fd = (np.asarray(chart(h)) - np.asarray(chart(-h))) / (2 * h)
    rate = np.asarray(sim._chart_rate(mech, u, xi))
    idx = np.concatenate([t.sph_v.ravel(), t.free_v.ravel()])
    np.testing.assert_allclose(rate[idx], fd[idx], rtol=0, atol=1e-7)  # series terms past ad_u^2: ~|u|^4 / 720
    assert np.abs(np.asarray(xi)[idx] - fd[idx]).max() > 1e-3  # the correction matters at this |u|
    np.testing.assert_array_equal(np.delete(rate, idx), np.delete(np.asarray(xi), idx))  # 1-D joints: v itself
