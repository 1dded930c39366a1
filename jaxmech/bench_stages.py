"""The stages ``jaxmech bench`` times, their inputs and their accuracy checks.

Each :class:`Stage` is one public jaxmech call on one state (vmapped and jitted by
:mod:`jaxmech.bench`), the per-state inputs it takes from a bank of closed states, and an accuracy
check evaluated in float64 on the first rows of its output (outputs of a float32 run are cast up,
so the check measures the float32 computation's error, not the check's):

* ``fd`` -- ``jm.forward_dynamics``: max ‖C a + γ‖∞ (m/s², rad/s²).
* ``closure`` -- ``jm.closure_residual_and_jacobian``: max |C - ∂ρ/∂q N| against ``jax.jacfwd``
  of the residual in float64 (``jm.closure_jacobian_autodiff``).
* ``kinematics`` -- ``jm.forward_kinematics``: max |T - T_float64| over all body poses (m).
* ``assemble`` -- ``jm.assemble`` from perturbed guesses: gap after assembly, max |ρ|∞, and the
  fraction of states that converged.
* ``track`` -- ``jm.track`` along a short ramp of the active coordinates: max |ρ|∞ over all steps.
* ``rollout`` -- ``jm.rollout`` (explicit Euler with closure projection): max |ρ|∞ of every state
  of the trajectory.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import lapack
from ._jit import jit
from .assembly import assemble, partition
from .closure import closure_jacobian, closure_jacobian_autodiff, closure_residual, closure_residual_and_jacobian
from .constrained import forward_dynamics
from .curvature import closure_bias
from .kinpass import forward_kinematics, integrate
from .mechanism import Mechanism
from .simulate import SimState, control_size, project_position, rollout
from .tracking import active_q_indices, track

STAGES = ("fd", "closure", "kinematics", "assemble", "track", "rollout")


@dataclass(frozen=True)
class Stage:
    """``fn(mech, *inputs) -> output`` for one state; ``inputs`` names bank entries;
    ``accuracy(mech64, inputs64, output64) -> {name: scalar}`` on a (K, ...) head of the batch;
    ``steps`` > 1 makes the reported unit a state-step."""

    name: str
    fn: Callable
    inputs: tuple[str, ...]
    accuracy: Callable
    steps: int = 1


def _max_abs(x):
    return jnp.max(jnp.abs(x)) if x.size else jnp.zeros((), x.dtype)


def _fd_acc(m, ins, a):
    q, v, _ = ins
    err = jax.vmap(lambda q, v, a: closure_jacobian(m, q) @ a + closure_bias(m, q, v))(q, v, a)
    return {"max |C a + gamma|": _max_abs(err)}


def _closure_acc(m, ins, out):
    (q,) = ins
    r, C = out
    Cad = jax.vmap(lambda q: closure_jacobian_autodiff(m, q))(q)
    r64 = jax.vmap(lambda q: closure_residual(m, q))(q)
    return {"max |C - jacfwd|": _max_abs(C - Cad), "max |rho - rho_f64|": _max_abs(r - r64)}


def _kin_acc(m, ins, T):
    (q,) = ins
    T64 = jax.vmap(lambda q: forward_kinematics(m, q))(q)
    return {"max |T - T_f64|": _max_abs(T - T64)}


def _gap(m, qs):
    flat = qs.reshape(-1, qs.shape[-1])
    return _max_abs(jax.vmap(lambda q: closure_residual(m, q))(flat))


def _assemble_acc(m, ins, out):
    q, status = out
    return {"gap after assembly": _gap(m, q), "converged fraction": jnp.mean((status == 0).astype(q.dtype))}


def _track_acc(m, ins, out):
    q, status = out
    return {"max gap along path": _gap(m, q), "converged fraction": jnp.mean((status == 0).astype(q.dtype))}


def _rollout_acc(m, ins, out):
    return {"max gap along rollout": _gap(m, out)}


def stages(mech: Mechanism, track_steps: int = 8, rollout_steps: int = 10, dt: float = 1e-3) -> dict[str, Stage]:
    """The benchmark stages for ``mech`` (see the module docstring)."""
    nu = control_size(mech)

    def fd(m, q, v, tau):
        return forward_dynamics(m, q, v, tau).a

    def asm(m, q):
        r = assemble(m, q)
        return r.q, r.status

    def trk(m, q, path):
        r = track(m, q, path)
        return r.q, r.status

    def roll(m, q, v):
        u = jnp.zeros((nu,), q.dtype)
        traj, _ = rollout(m, SimState(q, v), u, dt, rollout_steps)
        return traj.q

    return {
        "fd": Stage("fd", fd, ("q", "v", "tau"), _fd_acc),
        "closure": Stage("closure", closure_residual_and_jacobian, ("q",), _closure_acc),
        "kinematics": Stage("kinematics", forward_kinematics, ("q",), _kin_acc),
        "assemble": Stage("assemble", asm, ("q_rough",), _assemble_acc),
        "track": Stage("track", trk, ("q_rough", "path"), _track_acc, steps=track_steps),
        "rollout": Stage("rollout", roll, ("q", "v"), _rollout_acc, steps=rollout_steps),
    }


def _bank_key(mech: Mechanism, k: int, seed: int, track_steps: int) -> str:
    h = hashlib.sha256(f"{mech.name} {mech.nq} {mech.nv} {k} {seed} {track_steps} {mech.topo.source}".encode())
    for x in jax.tree_util.tree_leaves(mech):
        if isinstance(x, (jax.Array, np.ndarray)):
            h.update(np.ascontiguousarray(np.asarray(x)).tobytes())
    return h.hexdigest()[:16]


def load_bank(mech: Mechanism, k: int, seed: int = 0, track_steps: int = 8, cache: Path | None = None) -> dict:
    """:func:`make_bank`, kept in ``cache`` (default ``~/.cache/jaxmech/bench``) keyed by a hash of
    the model's numbers and the arguments: the generator's compile is paid once per model."""
    cache = (
        Path(os.environ.get("JAXMECH_CACHE", Path.home() / ".cache" / "jaxmech")) / "bench" if cache is None else cache
    )
    path = cache / f"bank-{mech.name}-{_bank_key(mech, k, seed, track_steps)}.npz"
    try:
        with np.load(path) as z:
            return {n: z[n] for n in z.files}
    except (OSError, ValueError):
        pass
    bank = make_bank(mech, k, seed, track_steps)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **bank)
        tmp.replace(path)
    except OSError:  # read-only home: no cache
        pass
    return bank


def make_bank(mech: Mechanism, k: int, seed: int = 0, track_steps: int = 8) -> dict[str, np.ndarray]:
    """``k`` float64 states as host arrays: closed configurations ``q`` (k, nq) near q0, speeds
    ``v`` (k, nv) with C v = 0, generalized forces ``tau`` (k, nv), perturbed guesses ``q_rough``
    (k, nq) for assembly and ramps ``path`` (k, track_steps, na) of the active coordinates."""
    key = jax.random.PRNGKey(seed)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    try:
        aq = active_q_indices(mech, partition(mech))
    except Exception:  # no actuated joints: track is skipped (see bench)
        aq = np.zeros(0, int)

    @jit
    def gen(m):
        # closed states: random moves of q0 in every direction, then minimum-norm Gauss-Newton
        # steps back onto rho = 0 (jm.simulate.project_position); speeds projected onto C v = 0
        dq = 0.05 * jax.random.normal(k1, (k, m.nv), m.q0.dtype)
        q = jax.vmap(lambda d: project_position(m, integrate(m, m.q0, d), 10))(dq)

        def speed(q, u):
            C = closure_jacobian(m, q)
            if not C.shape[0]:
                return u
            G = C @ C.T
            return u - C.T @ lapack.solve(G + 1e-12 * jnp.eye(G.shape[0], dtype=G.dtype), C @ u)

        v = jax.vmap(speed)(q, 0.2 * jax.random.normal(k2, (k, m.nv), q.dtype))
        tau = jax.random.normal(k3, (k, m.nv), q.dtype)
        dv = 0.01 * jax.random.normal(k4, (k, m.nv), q.dtype)
        q_rough = jax.vmap(lambda q, d: integrate(m, q, d))(q, dv)
        ramp = jnp.linspace(0.0, 0.01, track_steps, dtype=q.dtype)
        path = q[:, aq][:, None, :] + ramp[None, :, None]
        return {"q": q, "v": v, "tau": tau, "q_rough": q_rough, "path": path}

    return jax.tree_util.tree_map(np.asarray, gen(mech))
