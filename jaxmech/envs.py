"""RL-ready environments in the Brax / MJX style: pure, jittable, vmappable.

``env.reset(key) -> EnvState`` and ``env.step(state, action) -> EnvState``; an :class:`EnvState`
carries the simulator state, ``obs``, ``reward``, ``done``, ``metrics`` and ``info``. Batch with
``jax.vmap(env.reset)(keys)`` and ``jax.vmap(env.step)(states, actions)``. Actions are actuator
efforts of the chosen ports (N for cylinders / legs, N m for rotary drives), applied through the
port map ``tau = P^T f`` with zero-order hold over ``substeps`` simulator steps of
:func:`jaxmech.simulate.step`, which keeps the closure.

Tasks (targets are closed configurations generated once at construction, so ``reset`` is a cheap
index lookup and never runs an iterative solver):

* :func:`stewart_pose_env` -- Stewart platform: track a 6-D platform pose with the six leg forces.
* :func:`excavator_tip_env` -- excavator: track the bucket-tip position with the cylinder forces
  (and the swing torque).

A finished episode (``done``) is frozen: further steps return the same state with zero reward.
:func:`port_pd_policy` is a PD controller in port space with gravity compensation,
``f = E_p^T g + Lambda_p (wn^2 (p* - p) - 2 zeta wn pdot)`` with ``Lambda_p = E_p^T M E_p``;
:func:`evolution_strategy` tunes its two gains with antithetic ES and optax.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from . import lie
from .dynamics import crba, gravity_torques
from .kinpass import frame_jacobian, frame_pose
from .mechanism import Mechanism
from .reduction import port_jacobian, port_values, tangent_map
from .simulate import SimState, random_closed_configurations, step_with_info


class EnvState(eqx.Module):
    """One environment state (leading batch axes when vmapped)."""

    sim: SimState
    obs: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray
    metrics: dict
    info: dict


class TrackingEnv(eqx.Module):
    """Track a target pose (``task="pose"``, 6-D error: rotation log then position, rad / m) or
    position (``task="position"``, m) of ``frame`` with efforts on the ports ``ports``.

    Observation: task error, frame velocity (world-aligned, same rows), port errors ``p* - p``
    and port speeds ``pdot`` of the actuated ports. Reward per step:
    ``-(|e_pos| + rot_weight |e_rot|) - effort_weight |f / effort_scale|^2``."""

    mech: Mechanism
    q_bank: jnp.ndarray  # (K, nq) closed configurations (starts and targets)
    pose_bank: jnp.ndarray  # (K, 4, 4) frame pose at each bank configuration
    port_bank: jnp.ndarray  # (K, na) actuated port values there
    effort_scale: jnp.ndarray  # (na,) typical effort magnitude (gravity load), for the reward
    frame: str = eqx.field(static=True)
    task: str = eqx.field(static=True)
    port_index: tuple = eqx.field(static=True)
    dt: float = eqx.field(static=True)
    substeps: int = eqx.field(static=True)
    horizon: int = eqx.field(static=True)
    rot_weight: float = eqx.field(static=True, default=0.2)
    effort_weight: float = eqx.field(static=True, default=1e-3)
    fail_error: float = eqx.field(static=True, default=0.5)

    @property
    def action_size(self) -> int:
        return len(self.port_index)

    @property
    def observation_size(self) -> int:
        k = 6 if self.task == "pose" else 3
        return 2 * k + 2 * self.action_size

    # ------------------------------------------------------------------ pieces
    def actuation(self, q, action) -> jnp.ndarray:
        """Generalized force ``tau = P_a^T f`` (nv,) of the actuated ports' efforts."""
        P = port_jacobian(self.mech, q)[np.asarray(self.port_index)]
        return P.T @ action

    def task_error(self, q, target_pose) -> jnp.ndarray:
        T = frame_pose(self.mech, q, self.frame)
        dp = T[:3, 3] - target_pose[:3, 3]
        if self.task == "position":
            return dp
        dR = lie.so3_log(target_pose[:3, :3].T @ T[:3, :3])
        return jnp.concatenate([target_pose[:3, :3] @ dR, dp])

    def _obs(self, sim: SimState, target_pose, target_ports):
        e = self.task_error(sim.q, target_pose)
        J = frame_jacobian(self.mech, sim.q, self.frame, "world_aligned")
        tw = J @ sim.v
        tw = tw[3:] if self.task == "position" else tw
        idx = np.asarray(self.port_index)
        p = port_values(self.mech, sim.q)[idx]
        pd = (port_jacobian(self.mech, sim.q) @ sim.v)[idx]
        return jnp.concatenate([e, tw, target_ports - p, pd])

    # ------------------------------------------------------------------ API
    def reset(self, key) -> EnvState:
        """Start at a random bank configuration at rest with another one as the target."""
        K = self.q_bank.shape[0]
        k1, k2 = jax.random.split(key)
        i = jax.random.randint(k1, (), 0, K)
        j = (i + jax.random.randint(k2, (), 1, K)) % K
        sim = SimState(self.q_bank[i], jnp.zeros(self.mech.nv, self.q_bank.dtype))
        info = {"target_pose": self.pose_bank[j], "target_ports": self.port_bank[j], "t": jnp.zeros((), jnp.int32)}
        obs = self._obs(sim, info["target_pose"], info["target_ports"])
        z = jnp.zeros((), self.q_bank.dtype)
        metrics = {"task_error": jnp.linalg.norm(obs[: 6 if self.task == "pose" else 3]), "closure_gap": z}
        return EnvState(sim, obs, z, jnp.zeros((), bool), metrics, info)

    def step(self, state: EnvState, action) -> EnvState:
        """Apply efforts ``action`` (na,) for ``substeps`` simulator steps of ``dt``."""
        action = jnp.asarray(action, self.q_bank.dtype)
        tau_of = lambda q: self.actuation(q, action)

        def sub(sim, _):
            s1, inf = step_with_info(self.mech, sim, tau_of(sim.q), self.dt, actuation="generalized")
            return s1, inf.closure_gap

        sim, gaps = jax.lax.scan(sub, state.sim, None, length=self.substeps)
        info = dict(state.info, t=state.info["t"] + 1)
        obs = self._obs(sim, info["target_pose"], info["target_ports"])
        e = obs[: 6 if self.task == "pose" else 3]
        e_pos = jnp.linalg.norm(e[-3:])
        e_rot = jnp.linalg.norm(e[:3]) if self.task == "pose" else 0.0
        reward = -(e_pos + self.rot_weight * e_rot) - self.effort_weight * jnp.sum((action / self.effort_scale) ** 2)
        bad = ~jnp.all(jnp.isfinite(sim.q)) | ~jnp.all(jnp.isfinite(sim.v)) | (e_pos > self.fail_error)
        done = bad | (info["t"] >= self.horizon)
        metrics = {"task_error": jnp.linalg.norm(e), "closure_gap": jnp.max(gaps)}
        new = EnvState(sim, obs, reward, done, metrics, info)
        # a finished episode stays frozen (zero reward); non-finite states never leak out
        keep = state.done | bad
        frozen = eqx.tree_at(lambda s: s.reward, state, jnp.zeros_like(reward))
        return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), frozen, new)


# ----------------------------------------------------------------------------- construction


def _port_lift(mech: Mechanism, q, port_index):
    """``E_p = E (P_a E)^-1`` (nv, na): velocity lift from the actuated port speeds."""
    E = tangent_map(mech, q, d=len(port_index))
    P = port_jacobian(mech, q)[np.asarray(port_index)]
    return E @ jnp.linalg.inv(P @ E)


def make_tracking_env(
    mech: Mechanism,
    frame: str,
    task: str,
    ports,
    *,
    n_targets: int = 16,
    spread: float = 0.05,
    dt: float = 2e-3,
    substeps: int = 5,
    horizon: int = 100,
    seed: int = 0,
    **kw,
) -> TrackingEnv:
    """Build a :class:`TrackingEnv` (assembles ``n_targets`` closed configurations)."""
    if task not in ("pose", "position"):
        raise ValueError(f"task must be 'pose' or 'position', got {task!r}")
    names = mech.topo.port_names
    missing = [p for p in ports if p not in names]
    if missing:
        raise ValueError(f"{mech.name}: unknown port(s) {missing} (ports: {', '.join(names)})")
    idx = tuple(names.index(p) for p in ports)

    @jax.jit
    def tables(key):  # one compiled function for all construction-time tables
        bank = random_closed_configurations(mech, key, n_targets, spread)
        poses = jax.vmap(lambda q: frame_pose(mech, q, frame))(bank)
        pv = jax.vmap(lambda q: port_values(mech, q))(bank)[:, np.asarray(idx)]
        fg = jnp.abs(_port_lift(mech, bank[0], idx).T @ gravity_torques(mech, bank[0]))
        return bank, poses, pv, jnp.maximum(fg, 0.1 * jnp.max(fg) + 1e-9)

    bank, poses, pv, scale = tables(jax.random.PRNGKey(seed))
    return TrackingEnv(mech, bank, poses, pv, scale, frame, task, idx, dt, substeps, horizon, **kw)


def stewart_pose_env(mech: Mechanism, **kw) -> TrackingEnv:
    """Stewart platform pose tracking: frame ``platform_center``, actions = the six leg forces
    (ports ``leg_0 .. leg_5``, N)."""
    ports = [p for p in mech.topo.port_names if p.startswith("leg_")]
    return make_tracking_env(mech, "platform_center", "pose", ports, **kw)


def excavator_tip_env(mech: Mechanism, **kw) -> TrackingEnv:
    """Excavator bucket-tip tracking: frame ``bucket_teeth``, actions = boom (left), arm and
    bucket cylinder forces (N) and the swing torque (N m). The right boom cylinder is a passive
    follower."""
    ports = [p for p in ("boom_cylinder", "arm_cylinder", "bucket_cylinder", "swing") if p in mech.topo.port_names]
    kw.setdefault("spread", 0.03)
    kw.setdefault("fail_error", 2.0)
    return make_tracking_env(mech, "bucket_teeth", "position", ports, **kw)


# ----------------------------------------------------------------------------- controllers


def port_pd_policy(env: TrackingEnv, params: dict, state: EnvState) -> jnp.ndarray:
    """PD in port space with gravity compensation (efforts (na,)):
    ``f = E_p^T g(q) + Lambda_p (wn^2 (p* - p) - 2 zeta wn pdot)``, ``Lambda_p = E_p^T M E_p``,
    ``wn = exp(params["log_wn"])`` (rad/s), ``zeta = exp(params["log_zeta"])``."""
    mech, q, v = env.mech, state.sim.q, state.sim.v
    idx = np.asarray(env.port_index)
    Ep = _port_lift(mech, q, env.port_index)
    lam = Ep.T @ crba(mech, q) @ Ep
    p = port_values(mech, q)[idx]
    pd = (port_jacobian(mech, q) @ v)[idx]
    wn, zeta = jnp.exp(params["log_wn"]), jnp.exp(params["log_zeta"])
    acc = wn**2 * (state.info["target_ports"] - p) - 2.0 * zeta * wn * pd
    return Ep.T @ gravity_torques(mech, q) + lam @ acc


def episode_return(env: TrackingEnv, policy: Callable, params, key, n_steps: int | None = None):
    """Total reward of one episode of ``n_steps`` (default ``env.horizon``) under
    ``policy(env, params, state)``. Pure: vmap over keys or params."""
    n = env.horizon if n_steps is None else n_steps

    def body(s, _):
        s1 = env.step(s, policy(env, params, s))
        return s1, (s1.reward, s1.metrics["task_error"], s1.metrics["closure_gap"])

    _, (r, err, gap) = jax.lax.scan(body, env.reset(key), None, length=n)
    return jnp.sum(r), {"final_error": err[-1], "max_closure_gap": jnp.max(gap)}


def evolution_strategy(
    env: TrackingEnv,
    policy: Callable,
    params: dict,
    key,
    *,
    iterations: int = 30,
    pairs: int = 8,
    sigma: float = 0.1,
    learning_rate: float = 0.1,
    n_episodes: int = 4,
    n_steps: int | None = None,
    callback: Callable | None = None,
):
    """Antithetic evolution strategy (Salimans et al. 2017) with Adam (optax) on a small
    parameter pytree. Each iteration evaluates ``2 * pairs`` perturbations on ``n_episodes``
    shared reset keys (common random numbers). Returns ``(params, history)`` with the mean
    return of the unperturbed parameters on a fixed evaluation batch per iteration."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    opt = optax.adam(learning_rate)
    ost = opt.init(flat)
    eval_keys = jax.random.split(jax.random.PRNGKey(12345), n_episodes)

    def mean_return(theta, keys):
        R, _ = jax.vmap(lambda k: episode_return(env, policy, unravel(theta), k, n_steps))(keys)
        return jnp.mean(R)

    @jax.jit
    def iteration(theta, ost, key):
        """One ES update; also returns the evaluation return of the *incoming* theta (one
        compiled function for both)."""
        k1, k2 = jax.random.split(key)
        eps = jax.random.normal(k1, (pairs, theta.size), theta.dtype)
        keys = jax.random.split(k2, n_episodes)
        thetas = jnp.concatenate([theta + sigma * eps, theta - sigma * eps, theta[None]])
        keyset = jnp.concatenate([jnp.broadcast_to(keys, (2 * pairs,) + keys.shape), eval_keys[None]])
        R = jax.vmap(mean_return)(thetas, keyset)
        Rp = R[: 2 * pairs]
        Rn = (Rp - jnp.mean(Rp)) / (jnp.std(Rp) + 1e-8)
        grad = -jnp.einsum("p,pk->k", Rn[:pairs] - Rn[pairs:], eps) / (2 * pairs * sigma)
        upd, ost = opt.update(grad, ost, theta)
        return optax.apply_updates(theta, upd), ost, R[-1]

    history = []
    for it in range(iterations + 1):
        key, sub = jax.random.split(key)
        new, new_ost, r_eval = iteration(flat, ost, sub)
        history.append(float(r_eval))
        if callback is not None:
            callback(it, history[-1])
        if it < iterations:
            flat, ost = new, new_ost
    return unravel(flat), np.asarray(history)
