"""Rollouts keep the closure and (passive, undamped) conserve energy; batching is exact."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import simulate as sim

N_STEPS = 150
DT = 1e-3


@pytest.fixture(scope="module")
def stewart(configs_dir):
    return jm.load(configs_dir / "stewart.toml")


@pytest.fixture(scope="module")
def passive_rollout(stewart):
    """Two passive Stewart rollouts (no leg forces, no damping) from perturbed closed states."""
    mech = stewart
    Q = sim.random_closed_configurations(mech, jax.random.PRNGKey(0), 2, 0.05)
    E = jax.vmap(lambda q: jm.tangent_map(mech, q))(Q)
    u = 0.2 * jax.random.normal(jax.random.PRNGKey(1), (2, E.shape[-1]))
    V = jnp.einsum("bij,bj->bi", E, u)
    f = sim.make_rollout(mech, DT, N_STEPS, with_energy=True)
    U = jnp.zeros((2, N_STEPS, sim.control_size(mech)))
    traj, info = f(sim.SimState(Q, V), U)
    e0 = jax.vmap(lambda q, v: sim.energy(mech, q, v))(Q, V)
    return mech, Q, V, U, traj, info, e0, f


def test_closure_gap_stays_at_roundoff(passive_rollout):
    mech, Q, V, U, traj, info, e0, _ = passive_rollout
    gap = np.asarray(info.closure_gap)
    assert np.isfinite(gap).all()
    assert gap.max() <= 1e-9  # metres (spherical cut points)
    # independent re-evaluation of the residual on the final states
    r = jax.vmap(lambda q: jm.closure_residual(mech, q))(traj.q[:, -1])
    assert float(jnp.max(jnp.abs(r))) <= 1e-9
    assert float(jnp.max(info.velocity_gap)) <= 1e-9  # |C v| after the velocity projection


def test_passive_energy_is_conserved(passive_rollout):
    """Semi-implicit Euler: bounded O(dt) energy error; no systematic drift."""
    mech, Q, V, U, traj, info, e0, _ = passive_rollout
    E = np.asarray(info.energy)
    ke = jax.vmap(jax.vmap(lambda q, v: sim.kinetic_energy(mech, q, v)))(traj.q, traj.v)
    scale = float(np.max(np.asarray(ke))) + 1.0
    drift = np.max(np.abs(E - np.asarray(e0)[:, None])) / scale
    assert drift < 2e-2, drift
    # the system really moved (falls under gravity)
    assert float(jnp.max(jnp.abs(traj.q[:, -1] - Q))) > 1e-3


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
    v = jax.random.normal(jax.random.PRNGKey(0), (stewart.nv,))
    # virtual work: f . pdot == tau . v
    np.testing.assert_allclose(float(f @ (jm.port_jacobian(stewart, q) @ v)), float(tau @ v), rtol=1e-12)


@pytest.mark.slow
def test_rk4_energy_drift_smaller_than_euler(stewart):
    mech = stewart
    Q = sim.random_closed_configurations(mech, jax.random.PRNGKey(0), 2, 0.05)[1]
    s = sim.SimState(Q, jnp.zeros(mech.nv))
    u = jnp.zeros(sim.control_size(mech))
    out = {}
    for integ in ("euler", "rk4"):
        _, info = jax.jit(lambda s, i=integ: sim.rollout(mech, s, u, 2e-3, 100, integrator=i, with_energy=True))(s)
        e = np.asarray(info.energy)
        out[integ] = np.max(np.abs(e - float(sim.energy(mech, s.q, s.v))))
        assert np.asarray(info.closure_gap).max() < 1e-9
    assert out["rk4"] < 0.1 * out["euler"], out
