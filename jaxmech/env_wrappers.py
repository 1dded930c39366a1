"""Brax-style wrappers for :mod:`jaxmech.envs`: episode statistics, auto-reset and vmapped domain
randomization (masses, joint friction and link lengths, with targets and scales recomputed).

Typical training stack (the order of Brax's ``wrap_for_training``)::

    env = envs.stewart_pose_env(mech)
    env = AutoResetWrapper(EpisodeWrapper(DomainRandomizationWrapper(env, key, batch=256)))
    state = jm.jit(env.reset)(jax.random.split(key, 256))     # batched
    state = jm.jit(env.step)(state, actions)                   # (256, na) in [-1, 1]

Without :class:`DomainRandomizationWrapper` the wrappers act on one environment; batch them with
``jax.vmap`` as usual. All wrappers are pure ``eqx.Module`` s.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._jit import filter_jit
from .mechanism import Mechanism


def _bcast(mask, x):
    return mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))


def _select(mask, a, b):
    return jax.tree_util.tree_map(lambda x, y: jnp.where(_bcast(mask, x) > 0, x, y), a, b)


def _split(keys):
    """Split a key or a batch of keys (..., 2) into (new, sub) of the same shape."""
    flat = keys.reshape(-1, keys.shape[-1])
    pair = jax.vmap(jax.random.split)(flat)
    return pair[:, 0].reshape(keys.shape), pair[:, 1].reshape(keys.shape)


class EpisodeWrapper(eqx.Module):
    """Adds the running ``episode_return`` (sum of rewards, the finishing step included) and
    ``episode_length`` (steps) to ``metrics`` and ``info``; both restart at reset."""

    env: eqx.Module

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "env"), name)

    def reset(self, key):
        s = self.env.reset(key)
        z = jnp.zeros_like(s.reward)
        info = dict(s.info, episode_return=z, episode_length=z)
        return eqx.tree_at(
            lambda t: (t.info, t.metrics), s, (info, dict(s.metrics, episode_return=z, episode_length=z))
        )

    def step(self, state, action):
        s = self.env.step(state, action)
        alive = 1.0 - state.done
        ret = state.info["episode_return"] + alive * s.reward
        n = state.info["episode_length"] + alive
        info = dict(s.info, episode_return=ret, episode_length=n)
        metrics = dict(s.metrics, episode_return=ret, episode_length=n)
        return eqx.tree_at(lambda t: (t.info, t.metrics), s, (info, metrics))


class AutoResetWrapper(eqx.Module):
    """Resets every environment whose step ended (``done = 1``) with a fresh random start and
    target (key carried in ``info["rng"]``). The returned state of such a step carries the new
    episode's simulator state, observation and ``info`` but the finished step's ``reward``,
    ``done = 1``, ``metrics`` and ``info["truncation"]`` / ``info["failure"]`` (as in Brax), so
    no step is ever frozen."""

    env: eqx.Module

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "env"), name)

    def reset(self, key):
        key, sub = _split(key)
        s = self.env.reset(sub)
        return eqx.tree_at(lambda t: t.info, s, dict(s.info, rng=key))

    def step(self, state, action):
        rng = state.info["rng"]
        inner = dict(state.info)
        del inner["rng"]
        st = eqx.tree_at(lambda t: (t.done, t.info), state, (jnp.zeros_like(state.done), inner))
        s1 = self.env.step(st, action)
        rng, sub = _split(rng)
        s0 = self.env.reset(sub)
        info = _select(s1.done, s0.info, s1.info)
        info = dict(info, truncation=s1.info["truncation"], failure=s1.info["failure"], rng=rng)
        return type(s1)(
            _select(s1.done, s0.sim, s1.sim),
            _select(s1.done, s0.obs, s1.obs),
            s1.reward,
            s1.done,
            s1.metrics,
            info,
        )


def _scale_translations(X, s):
    return X.at[..., :3, 3].multiply(s[..., None])


def randomize_mechanism(
    mech: Mechanism, key, mass=(0.8, 1.2), friction=(0.5, 2.0), length=(0.99, 1.01), viscous=(0.0, 0.0)
) -> Mechanism:
    """A randomized copy of ``mech`` (pure; vmap over keys): each body's mass and inertia scaled
    by one factor ``U(mass)``, each joint's viscous damping scaled by ``U(friction)`` plus
    ``U(viscous)`` (N s/m or N m s/rad; a model without damping needs this one), and each body's
    geometry (COM, joint placements in it, its frames and cut frames) by ``U(length)``. The
    closure of the bank configurations is restored by :func:`randomize`."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    nb, dt = mech.nb, mech.mass.dtype
    sm = jax.random.uniform(k1, (nb,), dt, *mass)
    sf = jax.random.uniform(k2, mech.damping.shape, dt, *friction)
    sl = jax.random.uniform(k3, (nb,), dt, *length)
    t = mech.topo
    sl_ext = jnp.concatenate([sl, jnp.ones(1, dt)])  # index -1 (world) -> 1
    par = np.asarray(t.parent)
    lb = np.asarray(t.loop_bodies, int).reshape(-1, 2) if len(t.loop_bodies) else np.zeros((0, 2), int)
    nl = mech.cut_pose_a.shape[0]
    return eqx.tree_at(
        lambda m: (
            m.mass,
            m.inertia,
            m.damping,
            m.com,
            m.X_parent,
            m.X_child_inv,
            m.frame_pose,
            m.cut_pose_a,
            m.cut_pose_b,
        ),
        mech,
        (
            mech.mass * sm,
            mech.inertia * sm[:, None, None],
            mech.damping * sf + jax.random.uniform(k4, mech.damping.shape, dt, *viscous),
            mech.com * sl[:, None],
            _scale_translations(mech.X_parent, sl_ext[par]),
            _scale_translations(mech.X_child_inv, sl),
            _scale_translations(mech.frame_pose, sl_ext[np.asarray(t.frame_body, int)]),
            _scale_translations(mech.cut_pose_a, sl_ext[lb[:nl, 0]]),
            _scale_translations(mech.cut_pose_b, sl_ext[lb[:nl, 1]]),
        ),
    )


def randomize(env, key, mass=(0.8, 1.2), friction=(0.5, 2.0), length=(0.99, 1.01), viscous=(0.0, 0.0)):
    """A randomized copy of a :class:`~jaxmech.envs.TrackingEnv` (pure; vmap over keys): the model
    from :func:`randomize_mechanism`, the bank re-closed on it (Gauss-Newton projection), and the
    targets (frame poses, port values), the action scale and the limit springs recomputed, so the
    randomized quantities flow into targets and scales (an ``effort_limit`` given at construction
    is kept)."""
    from .envs import env_tables

    mech = randomize_mechanism(env.mech, key, mass, friction, length, viscous)
    bank, poses, pv, scale, lk, lc = env_tables(
        mech, env.q_bank, env.frame, env.port_index, env.port_accel, env.limit_frequency, project_iters=6
    )
    scale = env.action_scale if env.fixed_scale else scale
    return eqx.tree_at(
        lambda e: (e.mech, e.q_bank, e.pose_bank, e.port_bank, e.action_scale, e.limit_k, e.limit_c),
        env,
        (mech, bank, poses, pv, scale, lk, lc),
    )


class DomainRandomizationWrapper(eqx.Module):
    """A batch of ``batch`` randomized copies of ``env`` (:func:`randomize`, built once), stepped
    in lock-step: ``reset(keys (batch, 2))`` and ``step(states, actions (batch, na))`` are vmapped
    over the copies (like Brax's ``DomainRandomizationVmapWrapper``). ``envs`` holds the batched
    copies (inspect ``envs.mech.mass`` etc.)."""

    envs: eqx.Module
    batch: int = eqx.field(static=True)

    def __init__(self, env, key, batch: int, **ranges):
        keys = jax.random.split(key, batch)
        self.envs = filter_jit(lambda e, k: jax.vmap(lambda kk: randomize(e, kk, **ranges))(k))(env, keys)
        self.batch = batch

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "envs"), name)

    def reset(self, keys):
        return jax.vmap(lambda e, k: e.reset(k))(self.envs, keys)

    def step(self, states, actions):
        return jax.vmap(lambda e, s, a: e.step(s, a))(self.envs, states, actions)
