"""Time stepping that keeps the closure: ``step`` / ``rollout`` (a ``lax.scan``).

One step of the semi-implicit (symplectic) Euler scheme on the constrained dynamics::

    a      = forward_dynamics(q, v, tau)            (projected or KKT, C a + gamma = 0)
    v'     = v + dt a
    q'     = q (+) v' dt                           (group exponential, ``jm.integrate``)
    q'     <- Gauss-Newton projection onto rho(q) = 0  (fixed count, minimum-norm chord steps)
    v'     <- M-orthogonal projection onto C(q') v = 0

The two projections remove the O(dt^2) drift of the closure (position) and of ``C v`` (velocity),
so the closure gap of long rollouts stays at round-off (``max |rho| ~ 1e-12 m`` in float64)
instead of growing like ``t dt``. ``integrator="rk4"`` uses the classical Runge-Kutta stages in
the exponential chart at q, Runge-Kutta-Munthe-Kaas style: on spherical and free joints the chart
coordinates move at ``dexp^-1`` of the body velocity (to the terms that keep fourth order; without
them the rotation made it second order), followed by the same projections.

Controls are actuator efforts ``f`` (nu,), mapped to generalized forces ``tau = B(q)^T f``
(:func:`actuation_matrix`): port forces/torques through the port map P (virtual work
``f^T p_dot = tau^T v``) when the mechanism declares ports, otherwise torques/forces of the
actuated joint coordinates; ``actuation="generalized"`` passes tau (nv,) directly.

Joint and stroke limits (``lower``/``upper`` of the 1-D joint coordinates: revolute, prismatic and
the scalar coordinates of cylindrical/universal joints; hydraulic strokes are prismatic joints) are
enforced, when ``limit_stiffness`` > 0, by a stiff one-sided spring-damper on the coordinate
(:func:`limit_force`): ``tau_i = k_i (lower_i - q_i)_+ - k_i (q_i - upper_i)_+ - c_i v_i [violated]``.
It is zero inside the limits, so it changes nothing for motions that respect them; off by default.
Choose ``k_i = w^2 M_ii`` (``w`` well below ``1/dt``) for a stable explicit step.

Everything acts on ONE state; batch with ``jax.vmap`` (``rollout_batch`` does it for you).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import lapack, native
from ._entry import entry
from ._jit import jit
from .chunking import chunked
from .closure import closure_residual, closure_residual_and_jacobian
from .constrained import kkt_sparsity
from .kinpass import forward_kinematics, integrate
from .mechanism import Mechanism


class SimState(eqx.Module):
    """Simulation state: configuration ``q`` (nq,) and velocity ``v`` (nv,) (body-frame twists
    for free/spherical joints, see DESIGN.md). Batched states carry a leading batch axis."""

    q: jnp.ndarray
    v: jnp.ndarray


class StepInfo(eqx.Module):
    """Per-step diagnostics: ``closure_gap`` = max |rho(q')| after projection (m / rad),
    ``velocity_gap`` = max |C(q') v'| (m/s), ``energy`` = kinetic + potential (J; 0 when not
    requested)."""

    closure_gap: jnp.ndarray
    velocity_gap: jnp.ndarray
    energy: jnp.ndarray


# ----------------------------------------------------------------------------- actuation


def control_size(mech: Mechanism, actuation: str = "auto") -> int:
    """Number of actuator efforts ``nu`` a control vector has for this ``actuation`` mode."""
    t = mech.topo
    if actuation == "generalized":
        return mech.nv
    if actuation == "ports" or (actuation == "auto" and len(t.port_names)):
        return len(t.port_names)
    if actuation in ("joints", "auto"):
        return int(np.asarray(t.actuated_v).size)
    raise ValueError(f"actuation must be 'auto', 'ports', 'joints' or 'generalized', got {actuation!r}")


def actuation_matrix(mech: Mechanism, q: jnp.ndarray, actuation: str = "auto") -> jnp.ndarray:
    """``B(q)`` (nu, nv) with ``tau = B^T f``: the port map P (``jm.port_jacobian``) for
    ``"ports"`` (default when ports exist), a selection of the actuated velocity coordinates for
    ``"joints"``, the identity for ``"generalized"``."""
    t = mech.topo
    nu = control_size(mech, actuation)
    if actuation == "generalized":
        return jnp.eye(mech.nv, dtype=q.dtype)
    if actuation == "ports" or (actuation == "auto" and len(t.port_names)):
        from .reduction import port_jacobian

        return port_jacobian(mech, q)
    B = np.zeros((nu, mech.nv))
    B[np.arange(nu), np.asarray(t.actuated_v, dtype=int)] = 1.0
    return jnp.asarray(B, dtype=q.dtype)


def generalized_force(mech: Mechanism, q: jnp.ndarray, control: jnp.ndarray, actuation: str = "auto") -> jnp.ndarray:
    """``tau = B(q)^T f`` (nv,) from actuator efforts ``f`` (nu,) (N for distance/prismatic ports,
    N m for revolute ones)."""
    nu = control_size(mech, actuation)
    control = jnp.asarray(control, q.dtype)
    if control.shape != (nu,):
        raise ValueError(
            f"{mech.name}: control must have shape ({nu},) for actuation={actuation!r}, got {control.shape}"
        )
    if nu == 0:
        return jnp.zeros(mech.nv, q.dtype)
    return actuation_matrix(mech, q, actuation).T @ control


def limit_force(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray, stiffness, damping=0.0) -> jnp.ndarray:
    """Generalized limit force (nv,) on the 1-D joint coordinates (see the module docstring):
    ``k (lower - q)_+ - k (q - upper)_+ - c v`` while a limit is violated, zero inside.
    ``stiffness`` (N/m or N m/rad) and ``damping`` (N s/m or N m s/rad): scalars or (nv,)."""
    t = mech.topo
    lq, lv = np.asarray(t.lin_q, int), np.asarray(t.lin_v, int)
    out = jnp.zeros(mech.nv, q.dtype)
    if lq.size == 0:
        return out
    k = jnp.broadcast_to(jnp.asarray(stiffness, q.dtype), (mech.nv,))[lv]
    c = jnp.broadcast_to(jnp.asarray(damping, q.dtype), (mech.nv,))[lv]
    x = q[lq]
    over = jnp.maximum(x - mech.upper[lq], 0.0)
    under = jnp.maximum(mech.lower[lq] - x, 0.0)
    active = (over > 0) | (under > 0)
    f = k * (under - over) - jnp.where(active, c * v[lv], 0.0)
    return out.at[lv].add(f)


# ----------------------------------------------------------------------------- energy


def kinetic_energy(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
    """``0.5 v^T M(q) v`` (J), M from ``jm.crba`` (includes armature)."""
    from .dynamics import crba

    return 0.5 * v @ (crba(mech, q) @ v)


def potential_energy(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """Gravitational potential ``-sum_b m_b g . c_b`` (J), c_b the world COM of body b."""
    T = forward_kinematics(mech, q)
    c = jnp.einsum("bij,bj->bi", T[:, :3, :3], mech.com) + T[:, :3, 3]
    return -jnp.sum(mech.mass * (c @ mech.gravity))


def energy(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
    """Total mechanical energy (J): kinetic + gravitational potential."""
    return kinetic_energy(mech, q, v) + potential_energy(mech, q)


# ----------------------------------------------------------------------------- projections


def _damping(A: jnp.ndarray) -> jnp.ndarray:
    """Tiny Tikhonov term for the (possibly rank-deficient) row Gram matrices: 1e3 eps scale."""
    scale = jnp.maximum(jnp.max(jnp.abs(jnp.diagonal(A))), 1.0) if A.size else 1.0
    return 1e3 * jnp.finfo(A.dtype).eps * scale


def project_position(mech: Mechanism, q: jnp.ndarray, iters: int = 3, chord: bool = False) -> jnp.ndarray:
    """``iters`` minimum-norm Gauss-Newton steps ``q <- q (+) (-C^T (C C^T + mu I)^-1 rho)``
    towards the closure manifold rho(q) = 0 (fixed count: no data-dependent control flow, so it
    vmaps and differentiates). Quadratic convergence from the O(dt^2) drift of one time step.

    ``chord=True``: only the first step evaluates ``C`` and factorizes ``C C^T``; the later steps
    evaluate the residual alone and reuse both (chord Newton). Its rate is ``|C(q_k) - C(q_0)|``,
    i.e. the size of the first correction: from the ~1e-6 drift of a 1 ms step the second chord
    step lands at round-off, as the full step does, for about half its cost. Not for large moves
    (use the default there). On the CPU each step is one native kernel call per batch
    (:func:`jaxmech.native.min_norm_step`, :func:`jaxmech.native.chord_step`), else LAPACK."""
    if mech.n_rows == 0:
        return q
    sp = kkt_sparsity(mech)  # C here is the model's closure Jacobian: its pattern holds
    first = native.cpu_or(partial(native.min_norm_step, pattern=sp), _min_norm_step)
    if not chord or iters <= 1:

        def body(q, _):
            r, C = closure_residual_and_jacobian(mech, q)
            return integrate(mech, q, first(C, r)[1]), None

        q, _ = jax.lax.scan(body, q, None, length=iters)
        return q
    r, C = closure_residual_and_jacobian(mech, q)
    Lg, dq = first(C, r)
    later = native.cpu_or(partial(native.chord_step, pattern=sp), _chord_step)
    for k in range(iters):  # iters is small and static: unrolled
        if k:
            dq = later(Lg, C, closure_residual(mech, q))
        q = integrate(mech, q, dq)
    return q


def _min_norm_step(C, r):
    """``(L_g, dq)``: the Cholesky factor of ``C C^T + mu I`` and ``dq = -C^T (C C^T + mu I)^-1 r``
    (:func:`jaxmech.native.min_norm_step` computes the same in one native call)."""
    G = C @ C.T
    Lg = lapack.cholesky(G + _damping(G) * jnp.eye(G.shape[0], dtype=G.dtype))
    return Lg, _chord_step(Lg, C, r)


def _chord_step(Lg, C, r):
    return -C.T @ lapack.cho_solve(Lg, r)


def project_velocity(
    mech: Mechanism, C: jnp.ndarray, M: jnp.ndarray | None, v: jnp.ndarray, L=None, *, structured: bool = False
) -> jnp.ndarray:
    """M-orthogonal projection of v onto ``C v = 0`` (the plastic-impulse projection: it removes
    the constraint-violating velocity with the least kinetic-energy change),
    ``v - M^-1 C^T (C M^-1 C^T + mu I)^-1 C v``. ``C`` (s, nv), ``M`` (nv, nv), ``v`` (nv,);
    ``L``: the lower Cholesky factor of ``M`` if the caller has it (``M`` is then not read).

    With ``Z = L^-1 C^T``: ``G = Z^T Z + mu I`` (Cholesky), ``w = G^-1 C v`` and the correction
    ``L^-T Z w``: one triangular solve with ``s`` right-hand sides and one small Cholesky factor,
    on the CPU in one native kernel call per batch (:mod:`jaxmech.native`; Stewart rollout step
    21.2 -> 16.7 us per state with the position projection's kernels; 13.8 with the final kernels,
    12.6 on the model's sparsity), else
    with LAPACK. ``structured=True``: ``C`` is ``mech``'s closure Jacobian and ``M`` (or ``L``) its
    mass matrix, so the kernel may skip their structural zeros
    (:func:`jaxmech.constrained.kkt_sparsity`)."""
    if C.shape[0] == 0:
        return v
    L = lapack.cholesky(M) if L is None else L
    sp = kkt_sparsity(mech) if structured else None
    return native.cpu_or(partial(native.project_velocity, pattern=sp), _project_velocity)(L, C, v)


def _project_velocity(L, C, v):
    """:func:`project_velocity` from the factor ``L`` with LAPACK (the native kernel's reference)."""
    Z = lapack.solve_triangular(L, C.T, True, False)
    G = Z.T @ Z
    G = G + _damping(G) * jnp.eye(G.shape[0], dtype=G.dtype)
    w = lapack.cho_solve(lapack.cholesky(G), C @ v)
    return v - lapack.solve_triangular(L, Z @ w, True, True)


# ----------------------------------------------------------------------------- stepping


def _chart_rate(mech: Mechanism, u: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
    """Rate of the chart coordinates ``u`` (nv,) of ``q (+) u`` moving at body velocity ``v`` (nv,):
    ``(I + ad_u / 2 + ad_u^2 / 12) v``, the inverse right Jacobian of the exponential to the terms a
    fourth-order method needs, on spherical (``ad_w x = w x x``) and free joints; ``v`` elsewhere."""
    from .dynamics import _ad  # the spatial cross product of the tree passes

    t, out = mech.topo, v
    if t.sph_v.size:
        w, x = u[t.sph_v], v[t.sph_v]
        a1 = jnp.cross(w, x)
        out = out.at[t.sph_v].set(x + a1 / 2 + jnp.cross(w, a1) / 12)
    if t.free_v.size:
        w, x = u[t.free_v], v[t.free_v]
        a1 = _ad(w, x)
        out = out.at[t.free_v].set(x + a1 / 2 + _ad(w, a1) / 12)
    return out


def _accel(mech, q, v, tau, method):
    from .constrained import forward_dynamics

    return forward_dynamics(mech, q, v, tau, method=method).a


PROJECTION_ITERS = 2
"""Default Gauss-Newton steps of the position projection per time step. The drift of one step is
O(dt^2); two quadratically converging steps reach round-off for dt up to ~10 ms (Stewart, 1 ms,
100 steps: closure gap 4.1e-16 with 2 and 4.0e-16 with 3; one step leaves 8.9e-11). The third step
cost 11 % of a rollout step. The step takes them as chord steps (``project_position(chord=True)``:
the second reuses the first's Jacobian and factorization); Stewart, one core, batch 1,024: the
projection 17.0 -> 11.9 us and the whole step 44.0 -> 39.0 us per state, the same gaps (2.4e-16
after two steps from a 1 ms drift, either way)."""


def step_with_info(
    mech: Mechanism,
    state: SimState,
    control: jnp.ndarray,
    dt,
    *,
    method: str = "auto",
    integrator: str = "euler",
    projection_iters: int = PROJECTION_ITERS,
    actuation: str = "auto",
    with_energy: bool = False,
    limit_stiffness=0.0,
    limit_damping=0.0,
) -> tuple[SimState, StepInfo]:
    """One time step of length ``dt`` (s) with actuator efforts ``control`` (nu,), returning the
    new :class:`SimState` and the :class:`StepInfo` diagnostics. See the module docstring;
    ``limit_stiffness``/``limit_damping`` (scalars or (nv,)) switch on the joint-limit force (a
    plain ``0`` stiffness leaves it out of the program). An eager call runs as one compiled
    program per model, shapes and options."""
    limits = not (isinstance(limit_stiffness, float | int) and limit_stiffness == 0)
    return _step_with_info(
        mech, state, control, dt, method, integrator, projection_iters, actuation, with_energy, limits,
        limit_stiffness, limit_damping,
    )  # fmt: skip


@entry(
    static_argnames=("method", "integrator", "projection_iters", "actuation", "with_energy", "limits"),
    prime_mobility=True,
)
@chunked
def _step_with_info(
    mech: Mechanism,
    state: SimState,
    control,
    dt,
    method: str,
    integrator: str,
    projection_iters: int,
    actuation: str,
    with_energy: bool,
    limits: bool,
    limit_stiffness,
    limit_damping,
) -> tuple[SimState, StepInfo]:
    """:func:`step_with_info` with the limit switch ``limits`` static."""
    from .dynamics import crba

    q, v = state.q, state.v
    tau = generalized_force(mech, q, control, actuation)
    if limits:
        tau = tau + limit_force(mech, q, v, limit_stiffness, limit_damping)
    L = None  # Cholesky factor of M(q), the metric of the velocity projection
    if integrator == "euler":
        from .constrained import dynamics_and_mass

        res, L = dynamics_and_mass(mech, q, v, tau, method)
        v1 = v + dt * res.a
        q1 = integrate(mech, q, v1, dt)
    elif integrator == "rk4":
        # classical RK4 in the exponential chart at q (Runge-Kutta-Munthe-Kaas: the chart
        # coordinates move at dexp^-1 of the body velocity); tau held over the step
        def f(dq, vv):
            qq = integrate(mech, q, dq)
            return _chart_rate(mech, dq, vv), _accel(mech, qq, vv, tau, method)

        # the four stages as one scan (one copy of the dynamics in the program, a quarter of
        # the compile time): stage i evaluates f at c_i dt k_{i-1} and adds w_i k_i
        c = jnp.asarray([0.0, 0.5, 0.5, 1.0], v.dtype)
        w = jnp.asarray([1.0, 2.0, 2.0, 1.0], v.dtype) / 6.0

        def stage(carry, cw):
            (kq, kv), (sq, sv) = carry
            kq, kv = f(cw[0] * dt * kq, v + cw[0] * dt * kv)
            return ((kq, kv), (sq + cw[1] * kq, sv + cw[1] * kv)), None

        z = jnp.zeros_like(v)
        (_, (sq, sv)), _ = jax.lax.scan(stage, ((z, z), (z, z)), jnp.stack([c, w], 1))
        dq, v1 = dt * sq, v + dt * sv
        q1 = integrate(mech, q, dq)
    else:
        raise ValueError(f"integrator must be 'euler' or 'rk4', got {integrator!r}")
    q1 = project_position(mech, q1, projection_iters, chord=True)
    if mech.n_rows:
        if L is None:
            L = lapack.cholesky(crba(mech, q))  # metric of the velocity projection
        r, C = closure_residual_and_jacobian(mech, q1)
        v1 = project_velocity(mech, C, None, v1, L, structured=True)
        gap = jnp.max(jnp.abs(r))
        vgap = jnp.max(jnp.abs(C @ v1))
    else:
        gap = vgap = jnp.zeros((), q.dtype)
    e = energy(mech, q1, v1) if with_energy else jnp.zeros((), q.dtype)
    return SimState(q1, v1), StepInfo(gap, vgap, e)


def step(mech: Mechanism, state: SimState, control: jnp.ndarray, dt, **kwargs) -> SimState:
    """One time step; ``step_with_info`` without the diagnostics. Keyword options as there."""
    return step_with_info(mech, state, control, dt, **kwargs)[0]


def rollout(
    mech: Mechanism,
    state: SimState,
    controls,
    dt,
    n: int | None = None,
    **kwargs,
) -> tuple[SimState, StepInfo]:
    """Simulate ``n`` steps with ``lax.scan``. ``controls``: efforts per step (n, nu), one
    effort held constant (nu,), or a policy ``controls(state, k) -> (nu,)`` (pure, traceable).

    Returns the trajectory of states after each step (leaves with a leading axis n) and the
    per-step :class:`StepInfo`. Keyword options as :func:`step_with_info`. One state; batch
    with ``jax.vmap(rollout, in_axes=(None, 0, 0, None, None))`` or :func:`rollout_batch`."""
    if callable(controls):
        if n is None:
            raise ValueError("rollout: n is required with a policy")
        policy = controls
        xs = jnp.arange(n)
    else:
        controls = jnp.asarray(controls, state.q.dtype)
        if controls.ndim == 1:
            if n is None:
                raise ValueError("rollout: n is required with a constant control")
            controls = jnp.broadcast_to(controls, (n,) + controls.shape)
        if n is not None and controls.shape[0] != n:
            raise ValueError(f"rollout: controls have {controls.shape[0]} steps, n = {n}")
        n = controls.shape[0]
        policy = None
        xs = controls

    def body(s, x):
        u = policy(s, x) if policy is not None else x
        s1, info = step_with_info(mech, s, u, dt, **kwargs)
        return s1, (s1, info)

    _, (traj, infos) = jax.lax.scan(body, state, xs, length=n)
    return traj, infos


def rollout_batch(
    mech: Mechanism, states: SimState, controls, dt, n: int | None = None, *, chunk: int | None = None, **kwargs
):
    """:func:`rollout` over a batch of states (and of controls when they are an array with a
    leading batch axis; a policy is shared).

    ``chunk``: ``None`` or ``0`` runs one ``jax.vmap``; each step then runs large CPU batches in
    slices of 64 states itself (:mod:`jaxmech.chunking`; Stewart, 8,192 states, 10 steps, one
    core: 30.5 us per state-step, against 33.9 in the ``lax.map`` over slices of 256 states that
    this function ran before). A positive value runs a ``lax.map`` over slices of that many states
    (each slice's whole rollout, vmapped)."""
    if callable(controls):
        f, xs = (lambda s: rollout(mech, s, controls, dt, n, **kwargs)), states
    else:
        f, xs = (lambda a: rollout(mech, a[0], a[1], dt, n, **kwargs)), (states, controls)
    size = jax.tree.leaves(states)[0].shape[0]
    chunk = chunk or 0
    if chunk < 0:
        raise ValueError(f"rollout_batch: chunk must be >= 0, got {chunk}")
    if chunk == 0 or chunk >= size:
        return jax.vmap(f)(xs)
    return jax.lax.map(f, xs, batch_size=int(chunk))


def make_rollout(mech: Mechanism, dt: float, n: int, batched: bool = True, **kwargs) -> Callable:
    """A jitted ``f(states, controls) -> (trajectory, infos)`` with the options bound (the model
    is closed over as a constant: fastest when it is not being fitted)."""
    if batched:
        return jit(lambda s, u: rollout_batch(mech, s, u, dt, n, **kwargs))
    return jit(lambda s, u: rollout(mech, s, u, dt, n, **kwargs))


def random_closed_configurations(mech: Mechanism, key, n: int, spread: float = 0.05, iters: int = 6) -> jnp.ndarray:
    """``n`` closed configurations near the closed-up q0, (n, nq): random moves ``q0 (+) E u``
    along the mobility (``E`` = ``jm.tangent_map`` at q0, each speed ``u`` uniform in
    +-``spread``) followed by :func:`project_position`. Row 0 is the projected q0 itself. For
    environment targets, system-identification data and benchmarks (cheap: no homotopy)."""
    from .reduction import tangent_map_status

    q0 = project_position(mech, mech.q0, 8)
    # the default independent set is valid even under redundant actuation; the status variant
    # because the moves are projected onto the closure anyway (no raise inside a jitted sampler)
    E = tangent_map_status(mech, q0).E
    u = jax.random.uniform(key, (n - 1, E.shape[1]), q0.dtype, -spread, spread)
    moved = jax.vmap(lambda uu: project_position(mech, integrate(mech, q0, E @ uu), iters))(u)
    return jnp.concatenate([q0[None], moved], 0)
