"""Identification data sets from plain measured arrays (:class:`jaxmech.sysid.Dataset`).

* :func:`from_measurements` -- full measured state ``(q, v, a)`` and efforts (port efforts or
  generalized forces); builds the port lifts itself and checks shapes, closure and velocity
  consistency with one-line :class:`jaxmech.ModelError` s.
* :func:`from_encoders` -- only the actuated coordinates were measured (encoders): they are
  filtered and differentiated (:func:`savgol`), the passive coordinates rebuilt by
  :func:`jaxmech.track` and the velocities / accelerations by the lifts
  (:func:`jaxmech.tangent_map`, :func:`jaxmech.acceleration_lift`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import lapack
from ._jit import filter_jit, jit
from .closure import closure_jacobian, closure_residual
from .curvature import closure_bias
from .graph import ModelError
from .mechanism import Mechanism


@filter_jit
def _project(mech, Q, V, A):
    """Minimum-norm projections onto the closure: q by Gauss-Newton, then ``C v = 0`` and
    ``C a + gamma = 0`` (least squares; rank-deficient rows allowed)."""
    from .simulate import project_position

    def one(q, v, a):
        q = project_position(mech, q, 4)
        C = closure_jacobian(mech, q)
        v = v - lapack.lstsq(C, C @ v, 1e-10)
        a = a - lapack.lstsq(C, C @ a + closure_bias(mech, q, v), 1e-10)
        return q, v, a

    return jax.vmap(one)(Q, V, A)


@filter_jit
def _lifts(mech, Q, V, A):
    from .sysid import port_lift

    def one(q, v, a):
        r = closure_residual(mech, q)
        C = closure_jacobian(mech, q)
        g = closure_bias(mech, q, v)
        z = jnp.zeros((), q.dtype)
        mx = lambda x: jnp.max(jnp.abs(x)) if x.size else z  # noqa: E731
        return port_lift(mech, q), mx(r), mx(C @ v), mx(C @ a + g)

    return jax.vmap(one)(Q, V, A)


def _check(mech, what, x, shape):
    x = np.asarray(x, dtype=float)
    if x.ndim == 1 and len(shape) == 2 and shape[1] == 1:
        x = x[:, None]
    if x.shape != shape:
        raise ModelError(f"{mech.name}: sysid data '{what}' must have shape {shape}, got {x.shape}")
    if not np.all(np.isfinite(x)):
        i = int(np.argwhere(~np.isfinite(x))[0][0])
        raise ModelError(f"{mech.name}: sysid data '{what}' has a non-finite value at sample {i}")
    return x


def from_measurements(
    mech: Mechanism,
    q,
    v,
    a,
    effort,
    *,
    weights=None,
    effort_kind: str = "auto",
    closure_tol: float = 1e-6,
    velocity_tol: float = 1e-6,
    project: bool = False,
):
    """A :class:`~jaxmech.sysid.Dataset` from measured ``q`` (N, nq), ``v`` (N, nv) and ``a``
    (N, nv) and ``effort``: port efforts (N, np) (or (N,) with one port; N or N m) or generalized
    forces (N, nv) (``effort_kind="ports" | "generalized" | "auto"``: by shape, ports when
    np = nv). Generalized forces may contain constraint forces (``C^T lambda``): they are mapped to
    port efforts by ``f = E_p^T tau``, which removes them. ``weights`` (N,) weight the samples.

    Raises :class:`jaxmech.ModelError` when a shape is wrong, a value is not finite, a sample's
    closure residual exceeds ``closure_tol`` (m / rad) or its ``|C v|`` exceeds
    ``velocity_tol (1 + |v|_inf)`` (the velocities do not respect the loops). ``project=True``
    (data from a simulator with soft constraints, or noisy sensors) first projects each sample
    onto the closure (``q`` by Gauss-Newton, ``v`` and ``a`` by minimum-norm corrections); the
    tolerances then bound the size of those corrections instead."""
    from .sysid import Dataset

    t = mech.topo
    n_p = len(t.port_names)
    if n_p == 0:
        raise ModelError(
            f"{mech.name}: sysid needs actuator ports (the efforts' coordinates); add [[port]] tables "
            "or mark the driven 1-D joints 'actuated = true' in a file without [[port]]"
        )
    q = np.asarray(q, dtype=float)
    if q.ndim != 2:
        raise ModelError(f"{mech.name}: sysid data 'q' must have shape (N, {mech.nq}), got {q.shape}")
    N = q.shape[0]
    q = _check(mech, "q", q, (N, mech.nq))
    v = _check(mech, "v", v, (N, mech.nv))
    a = _check(mech, "a", a, (N, mech.nv))
    e = np.asarray(effort, dtype=float)
    e = e[:, None] if e.ndim == 1 else e
    kind = effort_kind
    if kind == "auto":
        kind = "ports" if e.ndim == 2 and e.shape[1] == n_p else "generalized"
    if kind not in ("ports", "generalized"):
        raise ModelError(f"{mech.name}: effort_kind must be 'auto', 'ports' or 'generalized', got {effort_kind!r}")
    want = (N, n_p) if kind == "ports" else (N, mech.nv)
    if e.shape != want:
        raise ModelError(
            f"{mech.name}: sysid 'effort' must have shape (N, {n_p}) (port efforts: {', '.join(t.port_names)}) "
            f"or (N, {mech.nv}) (generalized forces), got {np.asarray(effort).shape}"
        )
    e = _check(mech, "effort", e, want)
    dtype = mech.mass.dtype
    Q, V, A = (jnp.asarray(x, dtype) for x in (q, v, a))
    if project:
        _, rc0, cv0, _ = _lifts(mech, Q, V, A)
        Q, V, A = _project(mech, Q, V, A)
    Ep, rc, cv, _ = _lifts(mech, Q, V, A)
    rc, cv = (np.asarray(rc0), np.asarray(cv0)) if project else (np.asarray(rc), np.asarray(cv))
    if np.any(~(rc <= closure_tol)):
        i = int(np.argmax(np.where(np.isfinite(rc), rc, np.inf)))
        raise ModelError(
            f"{mech.name}: sysid sample {i}: closure residual {rc[i]:.3g} > closure_tol {closure_tol:g}: q does not "
            "close the loops (measured passive coordinates wrong? use from_encoders to rebuild them)"
        )
    vs = 1.0 + np.max(np.abs(v), 1)
    if np.any(~(cv <= velocity_tol * vs)):
        i = int(np.argmax(cv / vs))
        raise ModelError(
            f"{mech.name}: sysid sample {i}: |C v| = {cv[i]:.3g} > velocity_tol {velocity_tol:g} (1 + |v|): the "
            "velocities violate the loop closure (differentiate a consistent q, or lift with jm.tangent_map)"
        )
    F = jnp.asarray(e, dtype)
    if kind == "generalized":
        F = jnp.einsum("nvp,nv->np", Ep, F)
    w = None
    if weights is not None:
        w = jnp.asarray(_check(mech, "weights", weights, (N,)), dtype)
        if np.any(np.asarray(w) < 0):
            raise ModelError(f"{mech.name}: sysid weights must be non-negative")
    return Dataset(Q, V, A, Ep, F, w)


def savgol(x, dt: float, window: int = 11, order: int = 3):
    """Savitzky-Golay smoothing and differentiation of uniformly sampled ``x`` (N,) or (N, k):
    a least-squares polynomial of degree ``order`` over ``window`` samples (odd) around each
    sample (the first / last window at the ends). Returns ``(x, xdot, xddot)`` (units / s, / s^2)."""
    x = np.asarray(x, dtype=float)
    squeeze = x.ndim == 1
    x = x[:, None] if squeeze else x
    N = x.shape[0]
    if window % 2 == 0 or window <= order or window > N:
        raise ValueError(f"savgol: window must be odd, > order ({order}) and <= N ({N}), got {window}")
    h = window // 2
    tau = (np.arange(window) - h) * dt
    P = np.linalg.pinv(np.vander(tau, order + 1, increasing=True))  # (order+1, window)
    start = np.clip(np.arange(N) - h, 0, N - window)
    win = x[start[:, None] + np.arange(window)[None]]  # (N, window, k)
    c = np.einsum("ow,nwk->nok", P, win)
    t = ((np.arange(N) - start) - h) * dt  # evaluation point in the window's frame
    pw = np.arange(order + 1)
    T0 = t[:, None] ** pw
    T1 = np.where(pw >= 1, pw * t[:, None] ** np.maximum(pw - 1, 0), 0.0)
    T2 = np.where(pw >= 2, pw * (pw - 1) * t[:, None] ** np.maximum(pw - 2, 0), 0.0)
    out = [np.einsum("no,nok->nk", T, c) for T in (T0, T1, T2)]
    return tuple(o[:, 0] for o in out) if squeeze else tuple(out)


def from_encoders(mech: Mechanism, t, q_actuated, effort, *, q_start=None, window: int = 11, order: int = 3, **kw):
    """A :class:`~jaxmech.sysid.Dataset` from encoder-only data: ``q_actuated`` (N, na) (or (N,))
    the measured actuated joint coordinates at uniformly spaced times ``t`` (N,) (or the step ``dt``
    as a float), ``effort`` as in :func:`from_measurements`. The encoders are smoothed and
    differentiated (:func:`savgol`); the passive coordinates are tracked from ``q_start``
    (default q0) with :func:`jaxmech.track`; ``v = E u``, ``a = E udot + a_gamma`` with the
    actuated joints as independent coordinates. Keywords go to :func:`from_measurements`."""
    from .reduction import acceleration_lift, tangent_map
    from .tracking import track

    dt = float(t) if np.ndim(t) == 0 else float(np.mean(np.diff(np.asarray(t, dtype=float))))
    qa = np.asarray(q_actuated, dtype=float)
    qa = qa[:, None] if qa.ndim == 1 else qa
    act = list(mech.topo.actuated)
    if qa.shape[1] != len(act):
        raise ModelError(
            f"{mech.name}: q_actuated must have one column per actuated joint ({', '.join(act)}), got {qa.shape}"
        )
    qs, qd, qdd = savgol(qa, dt, window, order)
    dtype = mech.mass.dtype
    q0 = mech.q0 if q_start is None else jnp.asarray(q_start, dtype)
    res = jit(lambda m, q0, p: track(m, q0, p))(mech, q0, jnp.asarray(qs, dtype))
    Q = res.q

    @filter_jit
    def lift(mech, Q, U, Ud):
        def one(q, u, ud):
            v = tangent_map(mech, q, independent=act) @ u
            return v, acceleration_lift(mech, q, v, ud, independent=act)[0]

        return jax.vmap(one)(Q, U, Ud)

    V, A = lift(mech, Q, jnp.asarray(qd, dtype), jnp.asarray(qdd, dtype))
    return from_measurements(mech, np.asarray(Q), np.asarray(V), np.asarray(A), effort, **kw)
