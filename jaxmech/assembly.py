"""Assembly: closure-consistent configurations from rough guesses (paper 001 §2.3-§3).

``assemble(mech, q_guess, active=None)`` holds the *active* coordinates (default: the actuated
joints) and coordinates that no closure row involves at their given values and solves the
closure for the *passive* ones:

1. **Defect homotopy** (paper 001 eqs. (29)-(37)): the closure is deformed by the defect
   ``D(lam) = Exp((1 - lam) rho0)`` of its mismatches at the guess, so that the guess closes it
   at ``lam = 0`` and ``lam = 1`` is the physical closure (:mod:`jaxmech.corrector`).
2. **Row selection**: the acquisition selector ``S0`` (pivoted QR of the defected passive block
   transposed, :func:`jaxmech.rank.select_rows`) is computed at the guess and held fixed for the
   whole run (eq. (40)).
3. **Corrector and continuation** (:mod:`jaxmech.corrector`): damped Gauss-Newton with a chord
   step on the selected rows at fixed ``lam``, adaptive ``lam`` increments starting at the
   physical closure itself (``dlam0 = 1``) and halved on failure, all in one flattened
   ``lax.while_loop``.
4. At the physical solution the rank and the physical selector are recomputed (§2.3): the
   result carries the rank, the selected rows and their reciprocal condition (in the 1-norm, from
   the block's inverse, which also gives the last Newton correction). Ranks come from the diagonal
   of a column-pivoted QR (the factorization the row selection uses anyway), not an SVD.

This module holds the statuses, the result, the set-up before the loop (defect, pre-checks, row
selection), the checks after it and the public entry; the loop is :mod:`jaxmech.corrector`'s.
Gradients of the returned ``q`` with respect to the active coordinates in ``q_guess`` and to the
model parameters come from the implicit function theorem (``jax.custom_jvp``), not from the loop.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._entry import entry
from ._once import where_needed
from .active_set import Partition, default_active, involved_coordinates, partition  # noqa: F401  (jm.assembly.*)
from .chunking import chunked
from .closure import closure_residual_and_jacobian
from .corrector import (
    AssemblyOptions,
    Defect,
    _initial_state,
    _inverse_rcond_1,
    _loop,
    _State,
    defect_at,
    defected_residual_and_jacobian,
    make_options,
)

# re-exported: jm.assembly.running, rcond_1, defected_residual (the loop's names before it moved)
from .corrector import defected_residual as defected_residual
from .corrector import rcond_1 as rcond_1
from .corrector import running as running
from .implicit import _attach
from .mechanism import Mechanism
from .rank import numerical_rank, rcond, select_rows, select_rows_ranked  # noqa: F401  (jm.assembly.numerical_rank)
from .status import Status, messages

# ----------------------------------------------------------------------------- statuses

# The codes of jaxmech.status (one numbering for every result); the messages in assembly's terms.
CONVERGED = Status.OK
MAX_ITERATIONS = Status.MAX_ITERATIONS
SINGULAR = Status.SINGULAR
OUT_OF_BOUNDS = Status.OUT_OF_BOUNDS
STEP_TOO_SMALL = Status.STEP_TOO_SMALL
NONFINITE_INPUT = Status.NONFINITE_INPUT
OVERDETERMINED = Status.OVERDETERMINED
UNDERDETERMINED = Status.UNDERDETERMINED

STATUS_MESSAGES = messages(
    {
        CONVERGED: "converged",
        SINGULAR: "singular: the selected passive block is rank deficient or ill-conditioned (rcond < rcond_min)",
        OUT_OF_BOUNDS: "out of bounds: the solution is blocked by a joint limit (or an active coordinate is outside "
        "its limits)",
        STEP_TOO_SMALL: "homotopy step too small: continuation could not advance (target unreachable from this guess?)",
        NONFINITE_INPUT: "non-finite input: the guess (or active values) contains NaN/inf; returned q0",
        OVERDETERMINED: "over-determined active set: the closure restricts the active coordinates (rank > passive "
        "count)",
        UNDERDETERMINED: "under-determined active set: too few active coordinates to fix the passive ones (rank < "
        "passive count)",
    }
)
"""Status code -> message (all codes of :class:`jaxmech.status.Status`; assembly returns 0-7)."""


class AssemblyError(RuntimeError):
    """Raised by ``assemble(..., throw=True)`` when a state did not converge."""


class AssemblyResult(eqx.Module):
    """Result of :func:`assemble` (leading batch axes when vmapped).

    ``q`` (nq,) assembled configuration (never NaN: on failure the last accepted finite iterate,
    ``mech.q0`` for non-finite input); ``status`` int (see :data:`STATUS_MESSAGES`);
    ``residual`` max-abs complete raw closure residual at ``q``; ``iterations`` corrector
    iterations; ``rank`` numerical rank of the closure Jacobian at ``q``; ``rcond`` 1-norm reciprocal
    condition ``1 / (|R_p|_1 |R_p^-1|_1)`` of the selected passive block ``R_p`` at ``q`` (within a
    factor n_p of the 2-norm ``jaxmech.rank.rcond``; 0 when singular); ``rows`` (n_p,) physically selected rows
    (in pivot order; a square block whose ``rcond`` certifies full rank keeps the rows in order);
    ``lam`` the homotopy parameter reached; ``active`` (na,) the velocity indices held at their
    given values (the default chooses a valid set when the actuated one is not, see
    :func:`default_active`)."""

    q: jnp.ndarray
    status: jnp.ndarray
    residual: jnp.ndarray
    iterations: jnp.ndarray
    rank: jnp.ndarray
    rcond: jnp.ndarray
    rows: jnp.ndarray
    lam: jnp.ndarray
    active: jnp.ndarray

    @property
    def success(self) -> jnp.ndarray:
        return self.status == CONVERGED

    def message(self):
        """The status message (a list of messages for a batch)."""
        s = np.asarray(self.status)
        if s.ndim == 0:
            return STATUS_MESSAGES[int(s)]
        return [STATUS_MESSAGES[int(k)] for k in s.ravel()]


# ----------------------------------------------------------------------------- public entry


def _finish(mech, part, q_out, opts, pre_status, finished, too_small, rc_last, dtype):
    """Physical checks at the returned q (§2.3 at the solution): ``(status, residual, rank, rc, rows)``."""
    return _checks(mech, part, q_out, opts, pre_status, finished, too_small, rc_last, dtype)[:5]


def _checks(mech, part, q_out, opts, pre_status, finished, too_small, rc_last, dtype):
    """:func:`_finish`'s checks and status, plus the closure Jacobian ``C`` (s, nv) at ``q_out``
    they evaluated and the inverse ``Ji`` (n_p, n_p) of its selected passive block ``C[rows][:, p]``
    (zeros where there is none): tracking's next tangent predictor reuses both."""
    p = np.asarray(part.passive, int)
    n_p = p.size
    C = jnp.zeros((0, mech.nv), dtype)
    Ji = jnp.zeros((n_p, n_p), dtype)
    if mech.n_rows:
        r, C = closure_residual_and_jacobian(mech, q_out)
        residual = jnp.max(jnp.abs(r))
        if n_p <= mech.n_rows:
            rows, rank_p, Ji, rc = _selected_block(C[:, p], opts.rank_rtol)
            newton = Ji @ r[rows]  # the Newton correction's size: how far q still is from closure
            err = jnp.where(rc > 0, jnp.max(jnp.abs(newton)) if n_p else 0.0, jnp.inf)
            rank = _closure_rank(C, rank_p, opts.rank_rtol) if n_p == mech.n_rows else _qr_rank(C, opts.rank_rtol)
        else:
            rank_p = select_rows_ranked(C[:, p], mech.n_rows, opts.rank_rtol)[1]
            rank = _closure_rank(C, rank_p, opts.rank_rtol)
            rows, rc, err = jnp.zeros(n_p, jnp.int32), jnp.zeros((), dtype), jnp.asarray(jnp.inf, dtype)
    else:
        rank, rows, rc, residual = (
            jnp.zeros((), jnp.int32),
            jnp.zeros(n_p, jnp.int32),
            jnp.ones((), dtype),
            jnp.zeros((), dtype),
        )
        err = jnp.zeros((), dtype)
    if part.p_lin_q:
        iq = np.asarray(part.p_lin_q, int)
        span = 1e-9 * (1.0 + jnp.abs(q_out[iq]))
        at_bound = jnp.any((q_out[iq] <= mech.lower[iq] + span) | (q_out[iq] >= mech.upper[iq] - span))
    else:
        at_bound = jnp.asarray(False)
    xtol = max(opts.xtol, 1e4 * float(jnp.finfo(dtype).eps))
    regular = (rc >= opts.rcond_min) & (err <= xtol)
    ok_status = jnp.where(rank > n_p, OVERDETERMINED, jnp.where(regular, CONVERGED, SINGULAR))
    fail_status = jnp.where(
        jnp.minimum(rc_last, rc) < max(opts.rcond_fail, opts.rcond_min),
        SINGULAR,
        jnp.where(at_bound, OUT_OF_BOUNDS, jnp.where(too_small, STEP_TOO_SMALL, MAX_ITERATIONS)),
    )
    status = jnp.where(pre_status >= 0, pre_status, jnp.where(finished, ok_status, fail_status)).astype(jnp.int32)
    return status, residual, rank, rc, rows, C, Ji


def _selected_block(Cp, rtol):
    """``(rows, rank_p, Ji, rc)`` for a passive block ``Cp`` (s, n) with ``n <= s``: the ``n``
    selected rows (:func:`jaxmech.rank.select_rows_ranked`), the passive block's rank, the inverse
    of ``Cp[rows]`` and its :func:`rcond_1` (0 where not finite)."""
    s, n = Cp.shape
    if n == 0:
        return jnp.zeros(0, jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((0, 0), Cp.dtype), jnp.ones((), Cp.dtype)
    if s == n:
        return _square_selection(Cp, rtol)
    rows, rank_p = select_rows_ranked(Cp, n, rtol)
    Rp = Cp[rows]
    finite = jnp.all(jnp.isfinite(Rp))
    Ji, rc = _inverse_rcond_1(jnp.where(finite, Rp, jnp.eye(n, dtype=Cp.dtype)))
    return rows, rank_p, Ji, jnp.where(finite, rc, 0.0)


def _square_selection(Cp, rtol):
    """Row selection, rank, inverse and :func:`rcond_1` of a square passive block ``Cp`` (n, n)
    (as many closure rows as passive coordinates): ``(rows, rank_p, Ji, rc)`` with ``Ji`` the
    inverse of ``Cp[rows]``.

    One LU inverse of ``Cp`` gives ``rc``; a row order changes neither ``rc`` nor the inverse but
    for a column permutation. Where ``rc >= 10 n rtol`` the rank is certainly ``n`` and the rows
    stay in their order: every diagonal entry of a QR factor ``R`` of ``Cp^T`` is at least
    ``sigma_min``, its first at most ``sigma_max``, and ``sigma_max / sigma_min <= n / rc``, so
    the pivoted QR of :func:`jaxmech.rank.select_rows_ranked` would count all ``n`` pivots. Only
    states short of that run the pivoted QR (pivot order, and its rank), through
    :func:`jaxmech._once.where_needed`, so a vmapped batch pays for it only where some state needs it
    (Stewart, batch 1,024: 5.2 us per state saved in assembly's final checks and at every tracking
    step)."""
    n = Cp.shape[0]
    finite = jnp.all(jnp.isfinite(Cp))
    Ji, rc = _inverse_rcond_1(jnp.where(finite, Cp, jnp.eye(n, dtype=Cp.dtype)))
    rc = jnp.where(finite, rc, 0.0)
    certain = rc >= 10.0 * n * rtol
    full = (jnp.arange(n, dtype=jnp.int32), jnp.asarray(n, jnp.int32))
    rows, rank_p = where_needed(~certain, lambda A: select_rows_ranked(A, n, rtol), full, Cp)
    return rows, rank_p, Ji[:, rows], rc


def _closure_rank(C, rank_p, rtol):
    """Numerical rank of ``C`` (s, nv) when ``s <= n_p``, given the rank ``rank_p`` of its passive
    columns: ``s`` where those already have full row rank, else from a pivoted QR of all of ``C``.
    The QR runs through :func:`jaxmech._once.where_needed`, so a vmapped batch computes it only
    when some state needs it (a ``lax.cond`` would run it for every state)."""
    s = C.shape[0]
    full = jnp.asarray(rank_p, jnp.int32) >= s
    return where_needed(~full, lambda A: _qr_rank(A, rtol), jnp.asarray(s, jnp.int32), C)


def _qr_rank(A, rtol):
    """Numerical rank of ``A`` (s, n) from the diagonal of its column-pivoted QR (no SVD)."""
    return select_rows_ranked(A, min(A.shape), rtol)[1] if min(A.shape) else jnp.zeros((), jnp.int32)


def _prechecks(mech, part, q_in, finite_in, J0, opts):
    """Status before any iteration (-1: none) and the starting row selection (paper 001 eq. (40)):
    non-finite input, active out of bounds, over-/under-determined active set, singular start
    (eq. (39)). Ranks from pivoted QR (:func:`jaxmech.rank.select_rows_ranked`): the selection's
    own factorization gives the passive block's rank, a second one the full Jacobian's, only where
    the first cannot (:func:`_closure_rank`)."""
    p = np.asarray(part.passive, int)
    n_p = p.size
    pre = jnp.asarray(-1, jnp.int32)
    sel0 = jnp.zeros(n_p, jnp.int32)
    if mech.n_rows:
        sel0, rp0 = select_rows_ranked(J0[:, p], n_p, opts.rank_rtol) if n_p else (sel0, jnp.zeros((), jnp.int32))
        r0 = _closure_rank(J0, rp0, opts.rank_rtol) if n_p >= mech.n_rows else _qr_rank(J0, opts.rank_rtol)
        pre = jnp.where(rp0 < n_p, jnp.where(r0 < n_p, UNDERDETERMINED, SINGULAR), pre)
        pre = jnp.where(r0 > n_p, OVERDETERMINED, pre)
    if part.a_lin_q:
        ia = np.asarray(part.a_lin_q, int)
        oob = jnp.any((q_in[ia] < mech.lower[ia]) | (q_in[ia] > mech.upper[ia]))
        pre = jnp.where(oob, OUT_OF_BOUNDS, pre)
    return jnp.where(finite_in, pre, NONFINITE_INPUT).astype(jnp.int32), sel0


def _start(m: Mechanism, q_guess):
    """``(q_in, finite_in)``: the guess in the working dtype, normalized; ``q0`` if not finite."""
    from .kinpass import normalize

    dt = jnp.result_type(q_guess.dtype, m.q0.dtype)
    q_g = jax.lax.stop_gradient(q_guess).astype(dt)
    finite_in = jnp.all(jnp.isfinite(q_g))
    return normalize(m, jnp.where(finite_in, q_g, m.q0.astype(dt))), finite_in


def _trivial(mech: Mechanism, part: Partition) -> bool:
    """Statically nothing to iterate: under-determined (more passive coordinates than rows) or a tree."""
    return len(part.passive) > mech.n_rows or not mech.n_rows


def _assemble_impl(mech: Mechanism, q_guess, part: Partition, opts: AssemblyOptions) -> AssemblyResult:
    m = jax.lax.stop_gradient(mech)
    q_in, finite_in = _start(m, q_guess)
    dt = q_in.dtype
    p = np.asarray(part.passive, int)
    n_p = p.size
    if _trivial(mech, part):
        st0 = UNDERDETERMINED if n_p > mech.n_rows else CONVERGED
        status = jnp.where(finite_in, st0, NONFINITE_INPUT).astype(jnp.int32)
        status, residual, rank, rc, rows = _finish(m, part, q_in, opts, status, False, False, jnp.ones((), dt), dt)
        act = jnp.asarray(part.active, jnp.int32)
        return AssemblyResult(q_in, status, residual, jnp.zeros((), jnp.int32), rank, rc, rows, jnp.zeros((), dt), act)
    setup = _setup(m, part, q_in, finite_in, opts)
    cond, body = _loop(m, part, setup.defect, setup.sel, opts)
    st = jax.lax.while_loop(cond, body, setup.state)
    return _complete(mech, part, q_guess, setup, st, opts)


class _Setup(NamedTuple):
    """Per-state data of the corrector loop fixed before it starts (see :func:`_setup`)."""

    defect: Defect
    sel: jnp.ndarray  # (n_p,) selected rows of the starting Jacobian
    pre: jnp.ndarray  # status before any iteration, -1 for none
    state: _State  # the loop's initial state


def _setup(m: Mechanism, part: Partition, q_in, finite_in, opts: AssemblyOptions) -> _Setup:
    """Defect at the (normalized, finite) start ``q_in``, pre-checks, row selection, initial state."""
    defect = defect_at(m, q_in)
    _, J0 = defected_residual_and_jacobian(m, q_in, 0.0, defect)
    pre, sel0 = _prechecks(m, part, q_in, finite_in, J0, opts)
    return _Setup(defect, sel0, pre, _initial_state(part, q_in, 0.0, opts.dlam0, pre >= 0, opts))


def _complete(mech: Mechanism, part: Partition, q_guess, setup: _Setup, st: _State, opts) -> AssemblyResult:
    """The result from the loop's final state: checks at the solution, status, implicit gradient."""
    m = jax.lax.stop_gradient(mech)
    dt = st.q.dtype
    q_out = jnp.where(st.finished, st.q_acc, st.q_good)
    status, residual, rank, rc, rows = _finish(
        m, part, q_out, opts, setup.pre, st.finished, st.too_small, st.rc_good, dt
    )
    q = _attach(part, mech, q_guess.astype(dt), jax.lax.stop_gradient(q_out), rows, status == CONVERGED)
    lam = jnp.where(st.finished, 1.0, st.lam_acc)
    return AssemblyResult(q, status, residual, st.it, rank, rc, rows, lam, jnp.asarray(part.active, jnp.int32))


def _raise_if_failed(res: AssemblyResult, what: str) -> AssemblyResult:
    if isinstance(res.status, jax.core.Tracer):
        return eqx.error_if(res, res.status != CONVERGED, f"{what} failed (see result.status / STATUS_MESSAGES)")
    s = np.asarray(res.status).ravel()
    bad = np.nonzero(s != CONVERGED)[0]
    if bad.size:
        msgs = sorted({STATUS_MESSAGES[int(s[i])] for i in bad})
        raise AssemblyError(f"{what}: {bad.size} of {s.size} states failed: " + "; ".join(msgs))
    return res


def assemble(mech: Mechanism, q_guess, active=None, *, throw: bool = False, **options) -> AssemblyResult:
    """Assemble one configuration: hold the active coordinates at their values in ``q_guess``,
    solve the closure for the passive ones by defect homotopy (paper 001 §3).

    Args:
      mech: compiled mechanism.
      q_guess: (nq,) rough guess; its active entries are the prescribed active values.
      active: None (the actuated joints, or a valid best-conditioned set when they over- or
        under-determine the closure, :func:`default_active`; see ``result.active``), joint names (``'joint:k'`` for
        one coordinate of a multi-dof joint) or integer velocity indices. Static.
      throw: raise :class:`AssemblyError` if the state did not converge.
      **options: static :class:`AssemblyOptions` fields (``tol``, ``max_iter``, ``rcond_min``, ...).

    Returns:
      :class:`AssemblyResult` with ``q`` (nq,), ``status``, ``residual``, ``iterations``,
      ``rank``, ``rcond``, ``rows``, ``lam``. Batch with
      ``jax.jit(jax.vmap(lambda q: assemble(mech, q)))``. ``q`` is differentiable with respect
      to ``q_guess``'s active entries and to ``mech``'s array leaves (implicit function theorem).
    """
    make_options(**options)  # bad option names / values raise here, before any compilation
    res = _assemble_one(mech, q_guess, active, tuple(sorted(options.items())))
    return _raise_if_failed(res, f"{mech.name}: assembly") if throw else res


@entry(static_argnames=("active", "options"), prime_mobility=True)
@chunked
def _assemble_one(mech: Mechanism, q_guess, active, options: tuple) -> AssemblyResult:
    """:func:`assemble` without ``throw``; ``options`` as sorted ``(name, value)`` pairs."""
    opts = make_options(**dict(options))
    part = partition(mech, active)
    q_guess = jnp.asarray(q_guess)
    if q_guess.shape != (mech.nq,):
        raise ValueError(f"{mech.name}: q_guess must have shape ({mech.nq},), got {q_guess.shape} (vmap for batches)")
    if not jnp.issubdtype(q_guess.dtype, jnp.floating):
        q_guess = q_guess.astype(mech.q0.dtype)
    return _assemble_impl(mech, q_guess, part, opts)
