"""RL-ready environments in the Brax / MJX style: pure, jittable, vmappable.

``env.reset(key) -> EnvState`` and ``env.step(state, action) -> EnvState``; an :class:`EnvState`
carries the simulator state, ``obs``, ``reward``, ``done`` (float 0/1 like Brax), ``metrics`` and
``info``. Batch with ``jax.vmap(env.reset)(keys)`` and ``jax.vmap(env.step)(states, actions)``;
:mod:`jaxmech.env_wrappers` adds episode statistics, auto-reset and domain randomization.

**Actions** (na,) are normalized: ``a_i`` in [-1, 1] is the effort ``f_i = a_i * action_scale_i``
of port ``i`` (N for cylinders / legs, N m for rotary drives); values in [-action_bound,
action_bound] are clipped to [-1, 1] (the actuator limit ``|f_i| <= action_scale_i``). The
efforts act through the port map ``tau = P^T f`` with zero-order hold over ``substeps`` steps of
:func:`jaxmech.simulate.step`, which keeps the closure; joint and stroke limits of the model are
enforced by the simulator's stiff limit force (:func:`jaxmech.simulate.limit_force`, natural
frequency ``limit_frequency``). ``action_scale_i = 2 max_bank |g_i| + Lambda_ii port_accel``:
twice the largest gravity load of the port over the configuration bank plus the effort that gives
the port an acceleration ``port_accel`` (m/s^2 or rad/s^2) through its apparent inertia
``Lambda = E_p^T M E_p`` at q0 (or ``effort_limit`` when given).

**Observation** (obs size ``2 k + 2 na``, ``k`` = 6 for ``task="pose"``, 3 for ``"position"``),
in this order, SI units, at the state after the step:

1. task error ``e`` (k,): pose: rotation error ``R* log(R*^T R)`` (rad, world axes) then position
   error ``x - x*`` (m); position: ``x - x*`` (m);
2. frame twist ``J v`` (k,), world-aligned at the frame: angular (rad/s) then linear (m/s); only
   linear for ``"position"``;
3. port errors ``p* - p`` (na,) (m or rad) towards the target's port values;
4. port speeds ``pdot`` (na,) (m/s or rad/s).

**Reward** per step: ``-(|e_pos| + rot_weight |e_rot|) - effort_weight |a|^2`` (``a`` the clipped
normalized action; ``e_rot`` = 0 for ``"position"``), so a step earns at least
``-step_bound = -(fail_error + rot_weight pi + effort_weight na)`` while it does not fail.

**Failure** (``done = 1``, ``info["truncation"] = 0``, reward ``failure_reward``): a non-finite or
out-of-bound action (any ``|a_i| > action_bound``), a non-finite simulated state, a closure gap
above ``fail_gap`` or a position error above ``fail_error``. The state and observation then stay
the last finite ones: NaN never enters the state. The default ``failure_reward`` is
``-step_bound (horizon - t)`` (the worst the remaining steps could have earned), so crashing early
never pays. **Truncation**: ``t = horizon`` gives ``done = 1`` and ``info["truncation"] = 1``.
A done state stepped again (without :class:`~jaxmech.env_wrappers.AutoResetWrapper`) stays frozen
with zero reward.

Tasks (targets are closed configurations generated at construction, so ``reset`` is a cheap
index lookup and never runs an iterative solver):

* :func:`stewart_pose_env` -- Stewart platform: track a 6-D platform pose with the six leg forces.
* :func:`excavator_tip_env` -- excavator: track the bucket-tip position with the cylinder forces
  (and the swing torque).

:func:`port_pd_policy` is a PD controller in port space with gravity compensation;
:func:`evolution_strategy` tunes a policy's parameters with antithetic ES and optax.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from . import lie
from ._jit import filter_jit, jit
from .dynamics import crba, gravity_torques
from .kinpass import frame_jacobian, frame_pose
from .mechanism import Mechanism
from .reduction import port_jacobian, port_tangent_map, port_values
from .simulate import SimState, project_position, random_closed_configurations, step_with_info


class EnvState(eqx.Module):
    """One environment state (leading batch axes when vmapped). ``done`` float (0 / 1)."""

    sim: SimState
    obs: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray
    metrics: dict
    info: dict


class TrackingEnv(eqx.Module):
    """Track a target pose (``task="pose"``) or position (``task="position"``) of ``frame`` with
    normalized efforts on the ports ``port_index``. Observation, reward, failure and truncation:
    see the module docstring. ``info``: ``target_pose`` (4, 4), ``target_ports`` (na,), ``t``
    (steps taken), ``truncation`` (float), ``failure`` (float)."""

    mech: Mechanism
    q_bank: jnp.ndarray  # (K, nq) closed configurations (starts and targets)
    pose_bank: jnp.ndarray  # (K, 4, 4) frame pose at each bank configuration
    port_bank: jnp.ndarray  # (K, na) actuated port values there
    action_scale: jnp.ndarray  # (na,) effort of a unit action (N or N m)
    limit_k: jnp.ndarray  # (nv,) joint-limit stiffness
    limit_c: jnp.ndarray  # (nv,) joint-limit damping
    frame: str = eqx.field(static=True)
    task: str = eqx.field(static=True)
    port_index: tuple = eqx.field(static=True)
    dt: float = eqx.field(static=True)
    substeps: int = eqx.field(static=True)
    horizon: int = eqx.field(static=True)
    rot_weight: float = eqx.field(static=True, default=0.2)
    effort_weight: float = eqx.field(static=True, default=1e-2)
    fail_error: float = eqx.field(static=True, default=0.5)
    fail_gap: float = eqx.field(static=True, default=1e-4)
    action_bound: float = eqx.field(static=True, default=10.0)
    failure_reward: float | None = eqx.field(static=True, default=None)
    port_accel: float = eqx.field(static=True, default=2.0)
    limit_frequency: float = eqx.field(static=True, default=30.0)
    fixed_scale: bool = eqx.field(static=True, default=False)

    @property
    def action_size(self) -> int:
        return len(self.port_index)

    @property
    def observation_size(self) -> int:
        return 2 * self._k + 2 * self.action_size

    @property
    def _k(self) -> int:
        return 6 if self.task == "pose" else 3

    @property
    def effort_scale(self) -> jnp.ndarray:
        """Alias of ``action_scale`` (N or N m per unit action)."""
        return self.action_scale

    @property
    def step_bound(self) -> float:
        """Largest per-step penalty a non-failing step can get (reward >= -step_bound)."""
        rot = self.rot_weight * math.pi if self.task == "pose" else 0.0
        return self.fail_error + rot + self.effort_weight * self.action_size

    # ------------------------------------------------------------------ pieces
    def efforts(self, action) -> jnp.ndarray:
        """Port efforts (na,) (N or N m) of a normalized action (clipped to [-1, 1])."""
        return jnp.clip(action, -1.0, 1.0) * self.action_scale

    def actuation(self, q, f) -> jnp.ndarray:
        """Generalized force ``tau = P_a^T f`` (nv,) of the actuated ports' efforts ``f`` (na,)."""
        P = port_jacobian(self.mech, q)[np.asarray(self.port_index)]
        return P.T @ f

    def task_error(self, q, target_pose) -> jnp.ndarray:
        """Task error (k,): see the module docstring (rad then m)."""
        T = frame_pose(self.mech, q, self.frame)
        dp = T[:3, 3] - target_pose[:3, 3]
        if self.task == "position":
            return dp
        dR = lie.so3_log(target_pose[:3, :3].T @ T[:3, :3])
        return jnp.concatenate([target_pose[:3, :3] @ dR, dp])

    def observe(self, sim: SimState, target_pose, target_ports) -> jnp.ndarray:
        """Observation (2 k + 2 na,) at ``sim``: see the module docstring."""
        e = self.task_error(sim.q, target_pose)
        J = frame_jacobian(self.mech, sim.q, self.frame, "world_aligned")
        tw = J @ sim.v
        tw = tw[3:] if self.task == "position" else tw
        idx = np.asarray(self.port_index)
        p = port_values(self.mech, sim.q)[idx]
        pd = (port_jacobian(self.mech, sim.q) @ sim.v)[idx]
        return jnp.concatenate([e, tw, target_ports - p, pd])

    def reward_of(self, obs, action) -> jnp.ndarray:
        """Per-step reward of an observation and the clipped normalized action."""
        e = obs[: self._k]
        e_pos = jnp.linalg.norm(e[-3:])
        e_rot = jnp.linalg.norm(e[:3]) if self.task == "pose" else 0.0
        a = jnp.clip(action, -1.0, 1.0)
        return -(e_pos + self.rot_weight * e_rot) - self.effort_weight * jnp.sum(a**2)

    # ------------------------------------------------------------------ API
    def reset(self, key) -> EnvState:
        """Start at a random bank configuration at rest with another one as the target."""
        K = self.q_bank.shape[0]
        k1, k2 = jax.random.split(key)
        i = jax.random.randint(k1, (), 0, K)
        j = (i + jax.random.randint(k2, (), 1, K)) % K
        dtype = self.q_bank.dtype
        sim = SimState(self.q_bank[i], jnp.zeros(self.mech.nv, dtype))
        z = jnp.zeros((), dtype)
        info = {
            "target_pose": self.pose_bank[j],
            "target_ports": self.port_bank[j],
            "t": jnp.zeros((), jnp.int32),
            "truncation": z,
            "failure": z,
        }
        obs = self.observe(sim, info["target_pose"], info["target_ports"])
        metrics = {"task_error": jnp.linalg.norm(obs[: self._k]), "closure_gap": z}
        return EnvState(sim, obs, z, z, metrics, info)

    def step(self, state: EnvState, action) -> EnvState:
        """Apply the normalized action (na,) for ``substeps`` simulator steps of ``dt``."""
        dtype = self.q_bank.dtype
        action = jnp.asarray(action, dtype)
        valid = jnp.all(jnp.isfinite(action) & (jnp.abs(action) <= self.action_bound))
        a = jnp.where(valid, jnp.clip(action, -1.0, 1.0), 0.0)  # garbage never reaches the simulator
        f = self.efforts(a)

        def sub(sim, _):
            s1, inf = step_with_info(
                self.mech,
                sim,
                self.actuation(sim.q, f),
                self.dt,
                actuation="generalized",
                limit_stiffness=self.limit_k,
                limit_damping=self.limit_c,
            )
            return s1, inf.closure_gap

        sim, gaps = jax.lax.scan(sub, state.sim, None, length=self.substeps)
        t = state.info["t"] + 1
        obs = self.observe(sim, state.info["target_pose"], state.info["target_ports"])
        e = obs[: self._k]
        gap = jnp.max(gaps)
        finite = jnp.all(jnp.isfinite(sim.q)) & jnp.all(jnp.isfinite(sim.v)) & jnp.all(jnp.isfinite(obs))
        failed = ~valid | ~finite | ~(gap <= self.fail_gap) | ~(jnp.linalg.norm(e[-3:]) <= self.fail_error)
        if self.failure_reward is None:
            r_fail = -self.step_bound * (self.horizon - state.info["t"]).astype(dtype)
        else:
            r_fail = jnp.asarray(self.failure_reward, dtype)
        trunc = (~failed) & (t >= self.horizon)
        one, zero = jnp.ones((), dtype), jnp.zeros((), dtype)
        new = EnvState(
            jax.tree_util.tree_map(lambda x, y: jnp.where(failed, x, y), state.sim, sim),
            jnp.where(failed, state.obs, obs),
            jnp.where(failed, r_fail, self.reward_of(obs, a)),
            jnp.where(failed | trunc, one, zero),
            dict(  # wrappers' extra keys pass through
                state.metrics,
                task_error=jnp.where(failed, state.metrics["task_error"], jnp.linalg.norm(e)),
                closure_gap=jnp.where(jnp.isfinite(gap), gap, jnp.inf),
            ),
            dict(state.info, t=t, truncation=jnp.where(trunc, one, zero), failure=jnp.where(failed, one, zero)),
        )
        # a finished episode stays frozen with zero reward (auto-reset wrappers clear ``done`` first)
        frozen = eqx.tree_at(lambda s: s.reward, state, jnp.zeros_like(new.reward))
        return jax.tree_util.tree_map(lambda x, y: jnp.where(state.done > 0, x, y), frozen, new)


# ----------------------------------------------------------------------------- construction


def _port_lift(mech: Mechanism, q, port_index):
    """``E_p = E (P_a E)^-1`` (nv, na): velocity lift from the actuated port speeds
    (:func:`jaxmech.port_tangent_map`: identity in place of a singular ``P_a E``, no NaN)."""
    return port_tangent_map(mech, q, ports=tuple(int(i) for i in port_index))


@filter_jit
def env_tables(mech: Mechanism, bank, frame: str, idx: tuple, port_accel, limit_frequency, project_iters: int = 0):
    """Construction-time tables of a model (pure; vmap it over randomized models): the bank
    projected onto the model's closure (``project_iters`` Gauss-Newton steps), the frame poses
    and port values there, the per-port action scale and the joint-limit stiffness / damping
    ``(w^2 M_ii, 2 w M_ii)`` at q0 with ``w = limit_frequency`` (rad/s)."""
    if project_iters:
        bank = jax.vmap(lambda q: project_position(mech, q, project_iters))(bank)
    ia = np.asarray(idx)
    poses = jax.vmap(lambda q: frame_pose(mech, q, frame))(bank)
    pv = jax.vmap(lambda q: port_values(mech, q))(bank)[:, ia]
    g = jax.vmap(lambda q: _port_lift(mech, q, idx).T @ gravity_torques(mech, q))(bank)
    M = crba(mech, bank[0])
    Ep = _port_lift(mech, bank[0], idx)
    lam = jnp.diagonal(Ep.T @ M @ Ep)
    scale = 2.0 * jnp.max(jnp.abs(g), 0) + lam * port_accel
    Md = jnp.diagonal(M)
    return bank, poses, pv, scale, limit_frequency**2 * Md, 2.0 * limit_frequency * Md


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
    port_accel: float = 2.0,
    effort_limit=None,
    limit_frequency: float = 30.0,
    **kw,
) -> TrackingEnv:
    """Build a :class:`TrackingEnv` (``n_targets`` closed configurations within ``spread`` of
    q0 along the mobility). ``effort_limit`` (na,) overrides the derived action scale (the
    actuators' force / torque limits); ``limit_frequency`` (rad/s, 0 = off) sets the joint-limit
    spring (keep it well below ``1/dt``). Other keywords are :class:`TrackingEnv` fields."""
    if task not in ("pose", "position"):
        raise ValueError(f"task must be 'pose' or 'position', got {task!r}")
    names = mech.topo.port_names
    missing = [p for p in ports if p not in names]
    if missing:
        raise ValueError(f"{mech.name}: unknown port(s) {missing} (ports: {', '.join(names)})")
    idx = tuple(names.index(p) for p in ports)
    bank = filter_jit(random_closed_configurations)(mech, jax.random.PRNGKey(seed), n_targets, spread)
    bank, poses, pv, scale, lk, lc = env_tables(mech, bank, frame, idx, port_accel, limit_frequency)
    if effort_limit is not None:
        scale = jnp.broadcast_to(jnp.asarray(effort_limit, scale.dtype), scale.shape)
    return TrackingEnv(
        mech,
        bank,
        poses,
        pv,
        scale,
        lk,
        lc,
        frame,
        task,
        idx,
        dt,
        substeps,
        horizon,
        **kw,
        port_accel=port_accel,
        limit_frequency=limit_frequency,
        fixed_scale=effort_limit is not None,
    )


def stewart_pose_env(mech: Mechanism, **kw) -> TrackingEnv:
    """Stewart platform pose tracking: frame ``platform_center``, actions = the six leg forces
    (ports ``leg_0 .. leg_5``, normalized)."""
    ports = [p for p in mech.topo.port_names if p.startswith("leg_")]
    return make_tracking_env(mech, "platform_center", "pose", ports, **kw)


def excavator_tip_env(mech: Mechanism, **kw) -> TrackingEnv:
    """Excavator bucket-tip tracking: frame ``bucket_teeth``, actions = boom (left), arm and
    bucket cylinder forces and the swing torque (normalized). The right boom cylinder is a
    passive follower."""
    ports = [p for p in ("boom_cylinder", "arm_cylinder", "bucket_cylinder", "swing") if p in mech.topo.port_names]
    kw.setdefault("spread", 0.03)
    kw.setdefault("fail_error", 2.0)
    return make_tracking_env(mech, "bucket_teeth", "position", ports, **kw)


# ----------------------------------------------------------------------------- controllers


def port_pd_policy(env: TrackingEnv, params: dict, state: EnvState) -> jnp.ndarray:
    """PD in port space with gravity compensation, as a normalized action (na,):
    ``f = E_p^T g(q) + Lambda_p (wn^2 (p* - p) - 2 zeta wn pdot)``, ``Lambda_p = E_p^T M E_p``,
    ``a = clip(f / action_scale, -1, 1)``; ``wn = exp(params["log_wn"])`` (rad/s),
    ``zeta = exp(params["log_zeta"])``."""
    mech, q, v = env.mech, state.sim.q, state.sim.v
    idx = np.asarray(env.port_index)
    Ep = _port_lift(mech, q, env.port_index)
    lam = Ep.T @ crba(mech, q) @ Ep
    p = port_values(mech, q)[idx]
    pd = (port_jacobian(mech, q) @ v)[idx]
    wn, zeta = jnp.exp(params["log_wn"]), jnp.exp(params["log_zeta"])
    acc = wn**2 * (state.info["target_ports"] - p) - 2.0 * zeta * wn * pd
    return jnp.clip((Ep.T @ gravity_torques(mech, q) + lam @ acc) / env.action_scale, -1.0, 1.0)  # saturates


def episode_return(env: TrackingEnv, policy: Callable, params, key, n_steps: int | None = None):
    """Total reward of one episode of ``n_steps`` (default ``env.horizon``) under
    ``policy(env, params, state)``, and ``{"final_error", "max_closure_gap", "length"}`` (steps
    before ``done``, the finishing step included). Pure: vmap over keys or params."""
    n = env.horizon if n_steps is None else n_steps

    def body(s, _):
        s1 = env.step(s, policy(env, params, s))
        return s1, (s1.reward, s1.metrics["task_error"], s1.metrics["closure_gap"], 1.0 - s.done)

    _, (r, err, gap, alive) = jax.lax.scan(body, env.reset(key), None, length=n)
    return jnp.sum(r), {"final_error": err[-1], "max_closure_gap": jnp.max(gap), "length": jnp.sum(alive)}


def evolution_strategy(
    env: TrackingEnv,
    policy: Callable,
    params,
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
    """Antithetic evolution strategy (Salimans et al. 2017) with Adam (optax) on a parameter
    pytree. Each iteration evaluates ``2 * pairs`` perturbations on ``n_episodes`` shared reset
    keys (common random numbers). Returns ``(params, history)``: per iteration the mean return of
    the unperturbed parameters on a fixed evaluation batch (``history["return"]``) and their mean
    episode length (``history["length"]``), arrays (iterations+1,).

    The (perturbation x episode) grid is evaluated by ONE flat vmap: a vmap nested in a vmap of
    the episode scan miscompiles on XLA CPU (jaxlib 0.10, hlo verifier shape error in the tree
    pass's batched dot) unless ``--xla_cpu_use_fusion_emitters=false`` is set."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    opt = optax.adam(learning_rate)
    ost = opt.init(flat)
    eval_keys = jax.random.split(jax.random.PRNGKey(12345), n_episodes)

    def returns(thetas, keyset):  # (P, k), (P, E, 2) -> (P,), (P,)
        P, E = keyset.shape[:2]
        th = jnp.repeat(thetas, E, axis=0)
        R, m = jax.vmap(lambda t, k: episode_return(env, policy, unravel(t), k, n_steps))(
            th, keyset.reshape((P * E,) + keyset.shape[2:])
        )
        return R.reshape(P, E).mean(1), m["length"].reshape(P, E).mean(1)

    @jit
    def iteration(theta, ost, key):
        """One ES update; also returns the evaluation return / length of the *incoming* theta."""
        k1, k2 = jax.random.split(key)
        eps = jax.random.normal(k1, (pairs, theta.size), theta.dtype)
        keys = jax.random.split(k2, n_episodes)
        thetas = jnp.concatenate([theta + sigma * eps, theta - sigma * eps, theta[None]])
        keyset = jnp.concatenate([jnp.broadcast_to(keys, (2 * pairs,) + keys.shape), eval_keys[None]])
        R, L = returns(thetas, keyset)
        Rp = R[: 2 * pairs]
        Rn = (Rp - jnp.mean(Rp)) / (jnp.std(Rp) + 1e-8)
        grad = -jnp.einsum("p,pk->k", Rn[:pairs] - Rn[pairs:], eps) / (2 * pairs * sigma)
        upd, ost = opt.update(grad, ost, theta)
        return optax.apply_updates(theta, upd), ost, R[-1], L[-1]

    ret, length = [], []
    for it in range(iterations + 1):
        key, sub = jax.random.split(key)
        new, new_ost, r_eval, l_eval = iteration(flat, ost, sub)
        ret.append(float(r_eval))
        length.append(float(l_eval))
        if callback is not None:
            callback(it, ret[-1], length[-1])
        if it < iterations:
            flat, ost = new, new_ost
    return unravel(flat), {"return": np.asarray(ret), "length": np.asarray(length)}


from .env_wrappers import (  # noqa: E402  (re-exported: jm.envs.<Wrapper>)
    AutoResetWrapper,
    DomainRandomizationWrapper,
    EpisodeWrapper,
    randomize,
)

__all__ = [
    "AutoResetWrapper",
    "DomainRandomizationWrapper",
    "EnvState",
    "EpisodeWrapper",
    "TrackingEnv",
    "env_tables",
    "episode_return",
    "evolution_strategy",
    "excavator_tip_env",
    "make_tracking_env",
    "port_pd_policy",
    "randomize",
    "stewart_pose_env",
]
