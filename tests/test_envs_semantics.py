"""Environment semantics on the four-bar (cheap): observation and reward against hand-computed
values, failure (done = 1, failure reward, last finite state), truncation, auto-reset with no
frozen step, the reset distribution, joint-limit force and domain randomization."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import env_wrappers as W

K = 8
HORIZON = 20


@pytest.fixture(scope="module")
def fb(configs_dir):
    return jm.load(configs_dir / "four_bar.toml")


@pytest.fixture(scope="module")
def env(fb):
    return jm.envs.make_tracking_env(
        fb, "coupler_point", "position", ["crank"], n_targets=K, spread=0.5, horizon=HORIZON, substeps=2
    )


@pytest.fixture(scope="module")
def batched(env):
    return jm.jit(jax.vmap(env.reset)), jm.jit(jax.vmap(env.step))


def _coupler_point(q):
    """Hand geometry of configs/four_bar.toml: crank 0.1 m, coupler point (0.175, 0.05) m."""
    a, b = q[0], q[0] + q[1]
    return np.array(
        [
            0.1 * np.cos(a) + 0.175 * np.cos(b) - 0.05 * np.sin(b),
            0.1 * np.sin(a) + 0.175 * np.sin(b) + 0.05 * np.cos(b),
            0,
        ]
    )


def test_observation_and_reward_by_hand(env, batched):
    reset, step = batched
    s = reset(jax.random.split(jax.random.PRNGKey(0), 4))
    for b in range(4):
        q = np.asarray(s.sim.q[b])
        tgt = np.asarray(s.info["target_pose"][b])[:3, 3]
        obs = np.asarray(s.obs[b])
        np.testing.assert_allclose(obs[:3], _coupler_point(q) - tgt, atol=1e-12)
        np.testing.assert_allclose(obs[3:6], 0.0, atol=0)  # at rest
        # port = crank angle (a joint port)
        np.testing.assert_allclose(obs[6], float(s.info["target_ports"][b, 0]) - q[0], atol=1e-12)
        assert obs[7] == 0.0
    a = jnp.array([[0.3], [-0.7], [1.5], [-4.0]])  # the last two saturate at +-1
    s1 = step(s, a)
    for b in range(4):
        obs = np.asarray(s1.obs[b])
        q = np.asarray(s1.sim.q[b])
        np.testing.assert_allclose(obs[:3], _coupler_point(q) - np.asarray(s.info["target_pose"][b])[:3, 3], atol=1e-12)
        np.testing.assert_allclose(obs[7], np.asarray(s1.sim.v[b])[0], atol=1e-12)  # crank speed
        ac = np.clip(float(a[b, 0]), -1, 1)
        np.testing.assert_allclose(
            float(s1.reward[b]), -np.linalg.norm(obs[:3]) - env.effort_weight * ac**2, rtol=1e-12
        )
    assert np.all(np.asarray(s1.done) == 0.0)


def test_nan_inf_and_huge_actions_fail(env, batched):
    reset, step = batched
    s = reset(jax.random.split(jax.random.PRNGKey(1), 4))
    s = step(s, jnp.full((4, 1), 0.2, dtype=float))  # strongly typed, as above: no recompile
    bad = jnp.array([[jnp.nan], [jnp.inf], [-jnp.inf], [1e9]])
    s1 = step(s, bad)
    np.testing.assert_array_equal(np.asarray(s1.done), 1.0)
    np.testing.assert_array_equal(np.asarray(s1.info["failure"]), 1.0)
    np.testing.assert_array_equal(np.asarray(s1.info["truncation"]), 0.0)
    # default failure reward: the worst the HORIZON - 1 remaining steps could have earned
    bound = env.fail_error + env.effort_weight * 1
    np.testing.assert_allclose(np.asarray(s1.reward), -bound * (HORIZON - 1), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(s1.obs), np.asarray(s.obs))  # last finite observation
    np.testing.assert_array_equal(np.asarray(s1.sim.q), np.asarray(s.sim.q))
    # a done state stays frozen with zero reward
    s2 = step(s1, jnp.zeros((4, 1)))
    np.testing.assert_array_equal(np.asarray(s2.reward), 0.0)
    np.testing.assert_array_equal(np.asarray(s2.done), 1.0)


def test_batch_members_are_independent_and_the_step_keeps_the_closure(env, batched):
    """Reset and step are pure and vmap without cross-talk: the reversed batch gives the
    reversed results on the same compiled step; the state moves, and its closure, re-evaluated
    independently of the environment, is at round-off and equals the reported metric. (The
    Stewart pose environment's version of this test runs in the slow tier, tests/test_envs.py.)"""
    reset, step = batched
    s = reset(jax.random.split(jax.random.PRNGKey(7), 4))
    assert s.obs.shape == (4, env.observation_size)
    act = jnp.array([[0.3], [-0.7], [0.5], [0.1]])
    s1 = step(s, act)
    s1r = step(jax.tree.map(lambda x: x[::-1], s), act[::-1])
    np.testing.assert_allclose(np.asarray(s1r.obs)[::-1], np.asarray(s1.obs), rtol=0, atol=1e-12)
    s1p = step(s, act[::-1])  # the actions act per member: swapping them changes the results
    assert float(jnp.max(jnp.abs(s1p.sim.q - s1.sim.q))) > 1e-9
    assert s1.reward.shape == (4,) and s1.done.dtype == s1.reward.dtype  # float like Brax
    assert float(jnp.max(jnp.abs(s1.sim.q - s.sim.q))) > 0.0
    gap = np.stack([np.asarray(jm.closure_residual(env.mech, q)) for q in np.asarray(s1.sim.q)])
    assert np.abs(gap).max() < 1e-9
    np.testing.assert_allclose(np.asarray(s1.metrics["closure_gap"]), np.abs(gap).max(1), atol=1e-12)
    assert np.isfinite(np.asarray(s1.obs)).all()


def _rollout(env, n_env, n_steps, key):
    k1, k2, k3 = jax.random.split(key, 3)
    acts = jax.random.uniform(k1, (n_steps, n_env, 1), minval=-1.2, maxval=1.2)
    poison = jax.random.uniform(k2, (n_steps, n_env, 1)) < 0.02
    acts = jnp.where(poison, jnp.nan, acts)
    s0 = env.reset(jax.random.split(k3, n_env))

    def body(s, a):
        s1 = env.step(s, a)
        return s1, (s1.done, s1.info["t"], s1.info["failure"], s1.info["truncation"], s1.reward, s1.obs, s1.metrics)

    _, out = jax.lax.scan(body, s0, acts)
    return s0, poison[..., 0], out


@pytest.mark.slow
def test_auto_reset_200_steps_no_frozen_step(env):
    wrapped = W.AutoResetWrapper(W.EpisodeWrapper(VmapEnv(env)))
    s0, poison, (done, t, fail, trunc, rew, obs, met) = jm.jit(lambda k: _rollout(wrapped, 16, 200, k))(
        jax.random.PRNGKey(3)
    )
    done, t, fail, trunc = (np.asarray(x) for x in (done, t, fail, trunc))
    poison = np.asarray(poison)
    assert np.isfinite(np.asarray(obs)).all()
    np.testing.assert_array_equal(fail, poison.astype(float))  # every NaN action fails, nothing else
    assert fail.sum() > 10 and trunc.sum() > 10
    np.testing.assert_array_equal(done, np.maximum(fail, trunc))
    # no frozen step: the step counter advances by one, or restarts at 0 right after done
    prev = np.concatenate([np.zeros((1, 16), int), t[:-1]], 0)
    np.testing.assert_array_equal(t, np.where(done > 0, 0, prev + 1))
    # truncation exactly at the horizon; episode length reported at done
    ep_len = np.asarray(met["episode_length"])
    np.testing.assert_array_equal(trunc > 0, (done > 0) & (ep_len == HORIZON) & (fail == 0))
    # the failure reward: the worst the remaining steps could have earned
    bound = env.fail_error + env.effort_weight * 1
    np.testing.assert_allclose(np.asarray(rew)[fail > 0], -bound * (HORIZON - prev[fail > 0]), rtol=1e-12)


class VmapEnv(eqx.Module):
    """Batches a single environment (the counterpart of DomainRandomizationWrapper without
    randomization)."""

    env: eqx.Module

    def reset(self, keys):
        return jax.vmap(self.env.reset)(keys)

    def step(self, s, a):
        return jax.vmap(self.env.step)(s, a)


def test_reset_distribution(env):
    n = 4000
    s = jm.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(5), n))
    bank = np.asarray(env.q_bank)
    i = np.argmin(np.linalg.norm(np.asarray(s.sim.q)[:, None] - bank[None], axis=-1), 1)
    j = np.argmin(np.abs(np.asarray(s.info["target_ports"])[:, :1] - np.asarray(env.port_bank)[None, :, 0]), 1)
    np.testing.assert_allclose(np.asarray(s.sim.q), bank[i], atol=0)
    assert np.all(i != j)  # the target is never the start
    assert np.all(np.asarray(s.sim.v) == 0.0)
    counts = np.bincount(i, minlength=K)
    assert np.all(np.abs(counts - n / K) < 5 * np.sqrt(n / K)), counts
    pairs = np.bincount(i * K + j, minlength=K * K).reshape(K, K)
    off = pairs[~np.eye(K, dtype=bool)]
    e = n / (K * (K - 1))
    assert np.all(np.abs(off - e) < 5 * np.sqrt(e)), pairs


def test_limit_force_by_hand(fb):
    m = eqx.tree_at(lambda k: (k.lower, k.upper), fb, (fb.lower.at[0].set(-0.1), fb.upper.at[0].set(0.1)))
    q = m.q0.at[0].set(0.3)
    v = jnp.zeros(m.nv).at[0].set(2.0)
    f = np.asarray(jm.simulate.limit_force(m, q, v, 100.0, 5.0))
    np.testing.assert_allclose(f[0], -100.0 * 0.2 - 5.0 * 2.0, rtol=1e-12)
    np.testing.assert_array_equal(f[1:], 0.0)
    f_in = np.asarray(jm.simulate.limit_force(m, q.at[0].set(0.05), v, 100.0, 5.0))
    np.testing.assert_array_equal(f_in, 0.0)  # nothing inside the limits


@pytest.mark.slow
def test_domain_randomization_flows_into_targets_and_scales(env):
    dr = W.DomainRandomizationWrapper(env, jax.random.PRNGKey(0), 4, mass=(2.0, 2.0), friction=(1, 1), length=(1, 1))
    np.testing.assert_allclose(
        np.asarray(dr.envs.action_scale), np.broadcast_to(2.0 * np.asarray(env.action_scale), (4, 1)), rtol=1e-9
    )
    np.testing.assert_allclose(
        np.asarray(dr.envs.mech.mass), np.broadcast_to(2.0 * np.asarray(env.mech.mass), (4, 3)), rtol=1e-12
    )
    dr = W.DomainRandomizationWrapper(env, jax.random.PRNGKey(1), 4, mass=(0.8, 1.2), length=(0.98, 1.02))
    masses = np.asarray(dr.envs.mech.mass)
    assert np.ptp(masses, 0).min() > 0  # every copy differs
    for b in range(4):
        e = _pick(dr.envs, b)
        r = np.stack([np.asarray(jm.closure_residual(e.mech, q)) for q in e.q_bank])
        assert np.abs(r).max() < 1e-9  # re-closed on the randomized lengths
        pts = np.stack([_scaled_point(e.mech, q) for q in np.asarray(e.q_bank)])
        np.testing.assert_allclose(np.asarray(e.pose_bank)[:, :3, 3], pts, atol=1e-12)
    s = dr.reset(jax.random.split(jax.random.PRNGKey(2), 4))
    s1 = dr.step(s, jnp.full((4, 1), 0.1))
    assert np.isfinite(np.asarray(s1.obs)).all() and np.all(np.asarray(s1.done) == 0)


def _pick(tree, b):
    return jax.tree_util.tree_map(lambda x: x[b], tree)


def _scaled_point(mech, q):
    return np.asarray(jm.frame_pose(mech, jnp.asarray(q), "coupler_point"))[:3, 3]
