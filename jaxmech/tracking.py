"""Predictor-corrector tracking of a path of active coordinates (paper 001 §3, eqs. (56)-(59)).

At each step the passive coordinates are predicted to first order from the previous
closure-consistent configuration, ``dv_p = D psi dv_a = -R_p^-1 R_a dv_a`` on the rows selected
there, then corrected directly on the physical closure with the *previous* selector held fixed.
The step is accepted when the selected residual converged, the complete raw residual is within
``raw_tol`` and the selected passive block passes the ``rcond_min`` check; otherwise the passive
coordinates are re-acquired by defect homotopy from the prediction. After acceptance the rank and
selector are recomputed at the new configuration (§2.3) for the next step.

One ``lax.scan`` over steps; the fallback (its set-up and its homotopy loop) runs through
:func:`jaxmech._once.where_needed`: not at all where the direct correction succeeded, so a batch
of paths (``jax.vmap``) pays for it only at steps where some path needs it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import lapack
from ._entry import _traced, entry
from ._jit import jit
from ._once import where_needed
from .assembly import (
    CONVERGED,
    STATUS_MESSAGES,
    AssemblyOptions,
    AssemblyResult,
    Partition,
    _assemble_one,
    _checks,
    _raise_if_failed,
    make_options,
    partition,
)
from .chunking import chunked
from .closure import closure_jacobian
from .corrector import _homotopy, defect_at, defected_residual_and_jacobian
from .implicit import _attach
from .independent import coordinate_names
from .kinpass import difference, integrate
from .mechanism import Mechanism
from .rank import select_rows


class TrackResult(eqx.Module):
    """Result of :func:`track` for one path of ``n`` steps (leading batch axes when vmapped).

    ``q`` (n, nq) configurations; ``status`` (n,) int codes (:data:`STATUS_MESSAGES`);
    ``residual`` (n,) max-abs raw closure residual; ``iterations`` (n,) corrector iterations
    (direct + fallback); ``fallback`` (n,) bool, True where defect homotopy re-acquired the step;
    ``rank`` (n,) closure rank; ``rcond`` (n,) reciprocal condition of the selected passive block;
    ``active`` (na,) the velocity indices the path prescribes (the default is the actuated set, or
    a valid best-conditioned one when the actuators over-determine the closure:
    :func:`jaxmech.active_set.default_active`)."""

    q: jnp.ndarray
    status: jnp.ndarray
    residual: jnp.ndarray
    iterations: jnp.ndarray
    fallback: jnp.ndarray
    rank: jnp.ndarray
    rcond: jnp.ndarray
    active: jnp.ndarray

    @property
    def success(self) -> jnp.ndarray:
        return self.status == CONVERGED

    def message(self):
        return [STATUS_MESSAGES[int(k)] for k in np.asarray(self.status).ravel()]


def active_q_indices(mech: Mechanism, part: Partition) -> np.ndarray:
    """q indices that carry the active coordinates, in ``active`` order (one per 1-dof
    coordinate, all q entries of a whole active multi-dof joint): the columns of an
    ``active_path``."""
    t = mech.topo
    aset = set(part.active)
    out: list[int] = []
    for a in part.active:
        j = int(t.v_body[a])
        name = t.joint_names[j]
        vs, qs = mech.v_slice(name), mech.q_slice(name)
        if vs.stop - vs.start == 1:
            out.append(qs.start)
        elif all(i in aset for i in range(vs.start, vs.stop)):
            if qs.start not in out:
                out.extend(range(qs.start, qs.stop))
        else:
            raise ValueError(
                f"{mech.name}: track needs whole multi-dof joints as active; joint '{name}' is only partly active"
            )
    return np.asarray(out, dtype=int)


class _Carry(NamedTuple):
    q: jnp.ndarray
    rows: jnp.ndarray
    corr: jnp.ndarray  # (nv,) last step's corrector displacement (q_new minus the prediction)
    step2: jnp.ndarray  # squared size of the last step's active move (0 before the first)
    T: jnp.ndarray  # (n_p, nv) tangent predictor at q: -C_p^-1 C on the rows its final checks selected


def _track_step(mech, part: Partition, aq: np.ndarray, opts: AssemblyOptions, carry: _Carry, a_k):
    p = np.asarray(part.passive, int)
    dt = carry.q.dtype
    q_prev, rows, corr, step2, T = carry
    q_tgt = q_prev.at[aq].set(a_k.astype(dt))
    dv_a = difference(mech, q_prev, q_tgt)
    dv_a = dv_a.at[p].set(0.0)
    dv_p = T @ dv_a  # paper 001 eq. (58): D psi dv_a
    # second-order term: the tangent predictor's error is quadratic in the step, so the last
    # step's corrector displacement, scaled by the squared step ratio, predicts this one's
    s2 = jnp.sum(dv_a * dv_a)
    second = corr[p] * jnp.where(step2 > 0, s2 / jnp.where(step2 > 0, step2, 1.0), 0.0)
    second = jnp.where(jnp.all(jnp.isfinite(second)), second, 0.0)
    dv_p = dv_p + second
    dv_p = jnp.where(jnp.all(jnp.isfinite(dv_p)), dv_p, 0.0)
    q_pred = integrate(mech, q_prev, dv_a.at[p].set(dv_p)).at[aq].set(a_k.astype(dt))
    # direct correction on the physical closure (no defect) with the previous selector (eq. (59))
    d = _homotopy(mech, part, q_pred, None, rows, 1.0, 0.0, False, opts, check_chord=True)
    direct_ok = d.finished

    # fallback: defect homotopy from the prediction, where the direct correction failed. Under
    # vmap a lax.cond becomes a select that runs both branches, so the fallback's set-up (defect,
    # J0, a pivoted QR) ran at every step of every path; where_needed runs it only at steps where
    # some path of the batch needs it (Stewart, batch 1,024, one core: 63.3 -> 48.3 us per
    # state-step, identical results).
    def fallback(q_pred):
        defect = defect_at(mech, q_pred)
        _, J0 = defected_residual_and_jacobian(mech, q_pred, 0.0, defect)
        sel0, _ = select_rows(J0[:, p], p.size)
        # no chord steps in the (rare) fallback: one closure pass fewer to compile
        h = _homotopy(mech, part, q_pred, defect, sel0, 0.0, opts.dlam0, direct_ok, replace(opts, chord=False))
        return jnp.where(h.finished, h.q_acc, h.q_good), h.finished, h.too_small, h.rc_good, h.it

    def skip(q_pred):
        return q_pred, jnp.asarray(False), jnp.asarray(False), jnp.ones((), dt), jnp.zeros((), jnp.int32)

    q_h, h_finished, h_too_small, h_rc, h_it = where_needed(~direct_ok, fallback, skip(q_pred), q_pred)
    q_new = jnp.where(direct_ok, d.q_acc, q_h)
    finished = direct_ok | h_finished
    rc_last = jnp.where(direct_ok, d.rc_good, h_rc)
    pre = jnp.asarray(-1, jnp.int32)
    status, residual, rank, rc, new_rows, C_new, Ji = _checks(
        mech, part, q_new, opts, pre, finished, h_too_small, rc_last, dt
    )
    ok = status == CONVERGED
    rows_next = jnp.where(ok, new_rows, rows)
    out = (q_new, status, residual, d.it + jnp.where(direct_ok, 0, h_it), ~direct_ok, rank, rc, rows_next)
    # keep the second-order term only after a direct, converged step (a fallback's jump is no model)
    keep = ok & direct_ok
    # the whole deviation from the tangent predictor: the second-order term used plus the correction
    corr_next = jnp.where(keep, difference(mech, q_pred, q_new).at[p].add(second), 0.0)
    # the next tangent predictor from the checks' own factors: the inverse of the selected passive
    # block on the rows selected at q_new (the predictor's LU solve per step is gone)
    T_next = -Ji @ C_new[new_rows] if C_new.shape[0] else jnp.zeros((p.size, mech.nv), dt)
    return _Carry(q_new, rows_next, corr_next, jnp.where(keep, s2, 0.0), T_next), out


def track(mech: Mechanism, q_start, active_path, active=None, *, throw: bool = False, **options) -> TrackResult:
    """Track a path of active coordinates by predictor-corrector continuation.

    Args:
      mech: compiled mechanism.
      q_start: (nq,) guess for the first step (its passive part may be rough: the first step is
        acquired by defect homotopy).
      active_path: (n, na_q) active values per step: columns are the q entries of the active
        coordinates in ``active`` order (one per 1-dof joint; 7 for a whole free joint), see
        :func:`active_q_indices`.
      active: as in :func:`jaxmech.assemble` (default: actuated joints). Static.
      throw: raise :class:`jaxmech.AssemblyError` if any step failed.
      **options: :class:`jaxmech.assembly.AssemblyOptions` fields.

    Returns :class:`TrackResult` with ``q`` (n, nq). Differentiable in ``active_path`` and
    ``mech`` (implicit function theorem per step). Batch over paths with ``jax.vmap``. An eager
    call runs two cached compiled programs (``jaxmech._entry``): the first step's acquisition is
    :func:`jaxmech.assemble`'s own program, shared with every assembly of the model, and the
    continuation holds no second copy of it (four-bar, 200 steps, after an assembly: 6.4 -> 4.1 s
    to the first result).
    """
    make_options(**options)  # bad option names / values raise here, before any compilation
    res = _track_one(mech, q_start, active_path, active, tuple(sorted(options.items())))
    return _raise_if_failed(res, f"{mech.name}: tracking") if throw else res


def _stop(tree):
    """``stop_gradient`` under a trace; concrete values are returned as they are (an eager
    ``stop_gradient`` would run one small program per leaf)."""
    return jax.lax.stop_gradient(tree) if _traced(tree) else tree


@jit(static_argnames=("aq", "dtype"))
def _first_guess(q_start, path, aq: tuple, dtype):
    """The first step's assembly guess: ``q_start`` with the path's first active values."""
    return q_start.astype(dtype).at[np.asarray(aq, int)].set(path[0].astype(dtype))


def _track_one(mech: Mechanism, q_start, active_path, active, options: tuple) -> TrackResult:
    """:func:`track` without ``throw``; ``options`` as sorted ``(name, value)`` pairs.

    The first step is acquired by :func:`jaxmech.assemble`'s own program (called eagerly, it is
    the compiled assembly every ``jm.assemble`` of the model shares), the continuation by a
    second one: the continuation program holds no copy of the acquisition."""
    make_options(**dict(options))
    part = partition(mech, active)
    aq = active_q_indices(mech, part)
    path = jnp.asarray(active_path)
    if path.ndim != 2 or path.shape[1] != aq.size:
        raise ValueError(
            f"{mech.name}: active_path must have shape (n, {aq.size}) (columns: q entries {aq.tolist()}, "
            f"active coordinates {[coordinate_names(mech)[i] for i in part.active]}), got {path.shape}"
        )
    q_start = jnp.asarray(q_start)
    dt = jnp.result_type(q_start.dtype, path.dtype, mech.q0.dtype)
    guess = _first_guess(_stop(q_start), _stop(path), tuple(aq.tolist()), np.dtype(dt))
    first = _assemble_one(_stop(mech), guess, active, options)
    return _track_rest(mech, first, path, active, options)


@entry(static_argnames=("active", "options"), prime_mobility=True)
@chunked
def _track_rest(mech: Mechanism, first: AssemblyResult, active_path, active, options: tuple) -> TrackResult:
    """The continuation from the acquired first step ``first`` along ``active_path``."""
    opts = make_options(**dict(options))
    part = partition(mech, active)
    aq = active_q_indices(mech, part)
    path = jnp.asarray(active_path)
    first = jax.lax.stop_gradient(first)
    dt = first.q.dtype
    m = jax.lax.stop_gradient(mech)
    ps = jax.lax.stop_gradient(path).astype(dt)
    C0 = closure_jacobian(m, first.q)[first.rows]
    T0 = -lapack.solve(C0[:, part.passive], C0) if C0.shape[0] else jnp.zeros((len(part.passive), mech.nv), dt)
    carry0 = _Carry(first.q, first.rows, jnp.zeros(mech.nv, dt), jnp.zeros((), dt), T0)

    def step(c, a_k):
        return _track_step(m, part, aq, opts, c, a_k)

    _, (qs, status, residual, iters, fb, rank, rc, rows) = jax.lax.scan(step, carry0, ps[1:])
    cat = lambda a, b: jnp.concatenate([jnp.asarray(a)[None], b], 0)  # noqa: E731
    q_star = cat(first.q, qs)
    status = cat(first.status, status)
    rows = cat(first.rows, rows)
    # implicit-function-theorem derivatives per step (active values from the path)
    q_in = q_star.at[:, aq].set(path.astype(dt))
    q = jax.vmap(lambda qi, qs_, r, ok: _attach(part, mech, qi, qs_, r, ok))(
        q_in, jax.lax.stop_gradient(q_star), rows, status == CONVERGED
    )
    return TrackResult(
        q,
        status,
        cat(first.residual, residual),
        cat(first.iterations, iters),
        cat(jnp.asarray(True), fb),
        cat(first.rank, rank),
        cat(first.rcond, rc),
        jnp.asarray(part.active, jnp.int32),
    )
