"""Assembly: closure-consistent configurations from rough guesses (paper 001 §2.3-§3).

``assemble(mech, q_guess, active=None)`` holds the *active* coordinates (default: the actuated
joints) and coordinates that no closure row involves at their given values and solves the
closure for the *passive* ones:

1. **Defect homotopy** (paper 001 eqs. (29)-(37)). For every closure element the initial
   mismatch ``Delta0 = inv(T+) T-`` at the guess gives ``rho0 = Log(Delta0)``; the defect
   ``D(lam) = Exp((1 - lam) rho0)`` is appended to the minus path, so the defected mismatch
   ``Delta~ = Delta(q) D(lam)^-1`` is the identity at the guess for ``lam = 0`` and the physical
   mismatch at ``lam = 1``. Every row type (point, revolute, weld, ...) is then evaluated on
   ``Delta~`` exactly as on ``Delta``; because ``D`` is constant in q the rate
   ``dDelta~ Delta~^-1 = dDelta Delta^-1`` is unchanged, so the Jacobian rows use the same
   path derivatives (eq. (38)). Linear couplings use the equivalent vector-space defect
   ``c(q) - (1 - lam) c(q_guess)``. We implement this group-level form (not the simpler
   residual-space defect ``r(q) - (1 - lam) r(q_guess)``) because at ``lam = 0`` its Jacobian
   is that of an exactly closed (artificial) mechanism, so rank and row selection at the start
   see the rank structure of closed configurations (redundant rows stay redundant), as in the
   paper.
2. **Row selection**: the acquisition selector ``S0`` (pivoted QR of the defected passive block
   transposed, :func:`jaxmech.rank.select_rows`) is computed at the guess and held fixed for the
   whole run (eq. (40)).
3. **Corrector** at fixed ``lam``: damped Gauss-Newton (Levenberg-Marquardt damping update,
   eq. (46)) on the selected rows, passive coordinates only, steps in velocity coordinates applied
   with :func:`jaxmech.integrate` (quaternions stay unit), passive bounds ``mech.lower/upper``
   enforced by clipping, step length capped. Each iteration's damped Newton step is followed by
   one *chord* step (option ``chord``): the residual alone at the Newton point, solved with the
   same factorization, taken when the Newton step cut ``|f|^2`` below a tenth. The chord's
   residual evaluation also tells whether the Newton point already meets the tolerances, and the
   run then finishes there. A Newton-chord pair converges with order three; from 5 cm guesses
   the Stewart needs 3 iterations instead of 5 (``benchmarks/PROFILE.md``, session 25).
4. **Continuation**: adaptive ``lam`` increments, the first trial at ``lam = dlam0 = 1`` (the
   physical closure itself: from guesses near a closed state, and from most rough ones, the
   damped corrector converges there directly, in about 40 % fewer iterations and with more
   successes than starting at ``lam = 0.5``; ``benchmarks/PROFILE.md``, session 21); a trial
   point is accepted when the corrector converged, the *complete* raw defected residual is
   small and the selected passive block's reciprocal condition is above ``rcond_min``;
   otherwise the increment is halved; below ``dlam_min`` the run stops with ``STEP_TOO_SMALL``.
5. At the physical solution the rank and the physical selector are recomputed (§2.3): the
   result carries the rank, the selected rows and their reciprocal condition (in the 1-norm, from
   the block's inverse, which also gives the last Newton correction). Ranks come from the diagonal
   of a column-pivoted QR (the factorization the row selection uses anyway), not an SVD.

Every evaluation is the closure's own world-frame tree pass (``closure._evaluate``) with the
defect applied to each mismatch. Everything is one flattened ``lax.while_loop`` (one
residual+Jacobian evaluation and one residual evaluation per iteration),
so ``jax.jit(jax.vmap(...))`` over many guesses costs the slowest state's iteration count and a
failed state never poisons the others. Gradients of the returned ``q`` with respect to the
active coordinates in ``q_guess`` and to the model parameters come from the implicit function
theorem (``jax.custom_jvp``), not from the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import lu_factor, lu_solve

from . import lie
from ._entry import entry
from .active_set import Partition, default_active, involved_coordinates, partition  # noqa: F401  (jm.assembly.*)
from .closure import _evaluate, closure_residual_and_jacobian, group_mismatches
from .implicit import _attach
from .kinpass import integrate
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


@dataclass(frozen=True)
class AssemblyOptions:
    """Static solver options (hashable; pass as keyword arguments to :func:`assemble`).

    ``tol``: max-abs selected residual at ``lam = 1`` (residual units: m, rad);
    ``tol_mid``: the same at intermediate ``lam``; ``raw_tol`` / ``raw_tol_mid``: acceptance on the
    complete raw (defected) residual; ``rcond_min``: acceptance on the selected passive block (its
    1-norm reciprocal condition :func:`rcond_1`, inside the loop and at the solution) and the
    ``singular`` threshold at the solution;
    ``rank_rtol``: relative rank tolerance (on the pivoted-QR diagonal);
    ``max_iter``: total corrector iterations; ``max_inner``: per homotopy point; ``dlam0`` /
    ``dlam_min``: initial / minimum homotopy increment (``dlam0 = 1``: try the physical closure
    first, halve on failure); ``max_step``: cap on the max-abs passive
    step (rad, m) per iteration; ``mu0`` / ``mu_max``: initial / give-up LM damping (relative to
    the largest diagonal entry of ``J^T J``); ``xtol``: a converged solution whose Newton
    correction ``|R_p^-1 rho_sel|`` (the passive-coordinate error estimate, rad / m) exceeds
    ``xtol`` is reported ``SINGULAR`` (at a singular root, e.g. a four-bar dead centre, the
    residual vanishes quadratically while the coordinates are resolved only to its square root);
    ``rcond_fail``: a failed run whose last passive block had a reciprocal condition below this
    is reported ``SINGULAR`` (the continuation ran into a fold: dead centre, workspace boundary)
    rather than ``STEP_TOO_SMALL`` / ``MAX_ITERATIONS``; ``chord``: after a damped Newton step that
    cut the selected residual's squared norm below a tenth, take one chord step in the same
    iteration (the residual alone at the new point, solved with the same factorization: about a
    third of a full iteration's cost, and a Newton-chord pair converges with order three).

    In float32 the tolerances are floored at ``4 eps`` (selected rows), ``1000 eps`` (raw rows)
    and ``1e4 eps`` (``xtol``); measured on the four-bar: residual 4e-7, angle error 2e-6 rad."""

    tol: float = 1e-13
    tol_mid: float = 1e-8
    raw_tol: float = 1e-9
    raw_tol_mid: float = 1e-5
    rcond_min: float = 1e-8
    rank_rtol: float = 1e-9
    max_iter: int = 150
    max_inner: int = 12
    dlam0: float = 1.0
    dlam_min: float = 1.0 / 256
    max_step: float = 0.5
    mu0: float = 1e-6
    mu_max: float = 1e8
    xtol: float = 1e-10
    rcond_fail: float = 1e-4
    chord: bool = True


def make_options(**kw) -> AssemblyOptions:
    names = {f.name for f in fields(AssemblyOptions)}
    bad = sorted(set(kw) - names)
    if bad:
        raise TypeError(f"unknown assembly options {bad} (known: {', '.join(sorted(names))})")
    return AssemblyOptions(**kw)


class AssemblyResult(eqx.Module):
    """Result of :func:`assemble` (leading batch axes when vmapped).

    ``q`` (nq,) assembled configuration (never NaN: on failure the last accepted finite iterate,
    ``mech.q0`` for non-finite input); ``status`` int (see :data:`STATUS_MESSAGES`);
    ``residual`` max-abs complete raw closure residual at ``q``; ``iterations`` corrector
    iterations; ``rank`` numerical rank of the closure Jacobian at ``q``; ``rcond`` 1-norm reciprocal
    condition ``1 / (|R_p|_1 |R_p^-1|_1)`` of the selected passive block ``R_p`` at ``q`` (within a
    factor n_p of the 2-norm ``jaxmech.rank.rcond``; 0 when singular); ``rows`` (n_p,) physically selected rows;
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


# ----------------------------------------------------------------------------- defected closure


class Defect(NamedTuple):
    """Per-group initial closure logs ``rho0`` ((n_g, 6) each) and coupling values at the guess."""

    rho0: tuple
    c0: jnp.ndarray


def defect_at(mech: Mechanism, q0: jnp.ndarray) -> Defect:
    """The defect data of paper 001 eq. (30): ``rho0 = Log(Delta0)`` per closure element."""
    rho0 = tuple(lie.se3_log(D) for D in group_mismatches(mech, q0))
    c0 = mech.coupling_q @ q0 + mech.coupling_offset
    return Defect(rho0, c0)


def defected_residual_and_jacobian(mech: Mechanism, q: jnp.ndarray, lam, defect: Defect):
    """Raw defected residual (s,) and Jacobian (s, nv) (paper 001 eqs. (34)-(39)):
    rows of ``Delta(q) Exp((1 - lam) rho0)^-1``; ``lam = 1`` gives the physical closure. The
    closure's own world-frame pass with the defect applied to each ``Delta`` (the Jacobian rows
    are the physical ones: ``D`` is constant in q)."""
    Dinv = tuple(lie.se3_exp(-(1.0 - lam) * rho0) for rho0 in defect.rho0)
    r, J = _evaluate(mech, q, None, True, Dinv)
    if mech.topo.coupling_names:
        r = r.at[mech.topo.coupling_rows :].add(-(1.0 - lam) * defect.c0)
    return r, J


def defected_residual(mech: Mechanism, q: jnp.ndarray, lam, defect: Defect) -> jnp.ndarray:
    """The raw defected residual (s,) of :func:`defected_residual_and_jacobian`, without the Jacobian."""
    Dinv = tuple(lie.se3_exp(-(1.0 - lam) * rho0) for rho0 in defect.rho0)
    r, _ = _evaluate(mech, q, None, False, Dinv)
    if mech.topo.coupling_names:
        r = r.at[mech.topo.coupling_rows :].add(-(1.0 - lam) * defect.c0)
    return r


# ----------------------------------------------------------------------------- corrector loop


class _State(NamedTuple):
    q: jnp.ndarray  # current trial iterate (at lam trial)
    q_acc: jnp.ndarray  # last accepted homotopy point
    lam_acc: jnp.ndarray
    dlam: jnp.ndarray
    mu: jnp.ndarray
    q_good: jnp.ndarray  # best corrector iterate at this lam
    f_good: jnp.ndarray
    J_good: jnp.ndarray
    fn_good: jnp.ndarray
    rc_good: jnp.ndarray
    raw_good: jnp.ndarray
    fresh: jnp.ndarray  # first evaluation at this lam trial
    inner: jnp.ndarray
    it: jnp.ndarray
    finished: jnp.ndarray
    too_small: jnp.ndarray


def _tols(opts: AssemblyOptions, dtype):
    eps = float(jnp.finfo(dtype).eps)
    return (
        max(opts.tol, 4 * eps),
        max(opts.tol_mid, 4 * eps),
        max(opts.raw_tol, 1000 * eps),
        max(opts.raw_tol_mid, 1000 * eps),
    )


def _step(mech, part: Partition, q, dvp, opts):
    """Apply a passive velocity-space step (capped) and clip passive 1-dof coordinates to bounds."""
    p = np.asarray(part.passive, int)
    m = jnp.max(jnp.abs(dvp)) if dvp.size else jnp.zeros((), q.dtype)
    dvp = dvp * jnp.minimum(1.0, opts.max_step / jnp.maximum(m, 1e-300))
    qn = integrate(mech, q, jnp.zeros(mech.nv, q.dtype).at[p].set(dvp))
    if part.p_lin_q:
        iq = np.asarray(part.p_lin_q, int)
        qn = qn.at[iq].set(jnp.clip(qn[iq], mech.lower[iq], mech.upper[iq]))
    return qn


def rcond_1(J):
    """Reciprocal condition of a square block in the 1-norm, ``1 / (|J|_1 |J^-1|_1)`` (exact, from
    the inverse; 0 when singular or non-finite). Cheaper than the 2-norm value, which needs an SVD
    (Stewart, 18 x 18, batch 1,024: 5.4 against 15.5 us per state), and within a factor ``n`` of
    it. The corrector's acceptance and the final check both use it."""
    return _inverse_rcond_1(J)[1]


def _inverse_rcond_1(J):
    """``(J^-1, rcond_1(J))`` of a square block ``J`` (n, n) from one inverse (LU)."""
    n = J.shape[0]
    if n == 0:
        return J, jnp.ones((), J.dtype)
    Ji = jnp.linalg.inv(J)
    nrm = jnp.max(jnp.sum(jnp.abs(J), 0)) * jnp.max(jnp.sum(jnp.abs(Ji), 0))
    ok = jnp.isfinite(nrm) & (nrm > 0)
    return Ji, jnp.where(ok, 1.0 / jnp.where(ok, nrm, 1.0), 0.0)


def _lm_factor(J, mu):
    """LU factors of the Levenberg-Marquardt matrix ``J^T J + mu s I`` (s = max diag of J^T J)."""
    A = J.T @ J
    s = jnp.maximum(jnp.max(jnp.diag(A)), jnp.finfo(J.dtype).tiny)
    return lu_factor(A + mu * s * jnp.eye(A.shape[0], dtype=A.dtype))


def _lm_solve(lu, J, f):
    """The step ``d = -(J^T J + mu s I)^-1 J^T f`` from :func:`_lm_factor`'s factors (0 if not finite)."""
    d = lu_solve(lu, -J.T @ f)
    return jnp.where(jnp.all(jnp.isfinite(d)), d, 0.0)


def _homotopy(
    mech, part: Partition, q_init, defect: Defect, sel, lam0, dlam0, done0, opts: AssemblyOptions, check_chord=False
):
    """The flattened continuation + corrector loop; returns the final :class:`_State`."""
    cond, body = _loop(mech, part, defect, sel, opts, check_chord)
    return jax.lax.while_loop(cond, body, _initial_state(part, q_init, lam0, dlam0, done0, opts))


def _initial_state(part: Partition, q_init, lam0, dlam0, done0, opts: AssemblyOptions) -> _State:
    """The loop state before the first corrector iteration (``done0``: skip the loop)."""
    n_p = len(part.passive)
    dt = q_init.dtype
    return _State(
        q_init,
        q_init,
        jnp.asarray(lam0, dt),
        jnp.asarray(dlam0, dt),
        jnp.asarray(opts.mu0, dt),
        q_init,
        jnp.zeros(n_p, dt),
        jnp.zeros((n_p, n_p), dt),
        jnp.asarray(jnp.inf, dt),
        jnp.ones((), dt),
        jnp.asarray(jnp.inf, dt),
        jnp.asarray(True),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
        jnp.asarray(False),
        jnp.asarray(done0),
    )


def _loop(mech, part: Partition, defect: Defect, sel, opts: AssemblyOptions, check_chord: bool = False):
    """``(cond, body)`` of the corrector loop over :class:`_State` (one state, unbatched).
    ``check_chord`` (static): also evaluate the residual at the chord step's end, so that an
    iteration can finish there (tracking's corrector: one iteration per step instead of two
    where the Newton point just misses the tolerance; assembly's first iterations are far from
    closure, where the extra evaluation would only cost)."""
    p = np.asarray(part.passive, int)
    n_p = p.size

    def evaluate(q, lam):
        r, J = defected_residual_and_jacobian(mech, q, lam, defect)
        return r, J[sel][:, p]

    def newton_chord(q, f, J, fn, mu, lam):
        """``(q_next, q_done, done)``: a damped Newton step from ``q`` to ``q1``, then (with
        ``opts.chord``) one chord step with the same factors to ``q2`` where the Newton step cut
        ``|f|^2`` below ``fn / 10``. ``done``: ``q1`` (or, with ``check_chord``, else ``q2``), returned
        as ``q_done``, already meets the physical closure's tolerances (selected and raw rows; seen
        by the chord's residual evaluations, so no further iteration is needed)."""
        if n_p == 0:
            return q, q, jnp.asarray(False)
        lu = _lm_factor(J, mu)
        q1 = _step(mech, part, q, _lm_solve(lu, J, f), opts)
        if not opts.chord:
            return q1, q1, jnp.asarray(False)
        tol, _, raw_tol, _ = _tols(opts, q.dtype)

        def closed(r):
            fs = r[sel]
            return (jnp.max(jnp.abs(fs)) <= tol) & (jnp.max(jnp.abs(r)) <= raw_tol), jnp.sum(fs * fs)

        r1 = defected_residual(mech, q1, lam, defect)
        done1, fn1 = closed(r1)
        contracting = fn1 < 0.1 * fn  # False for non-finite residuals
        q2 = jnp.where(contracting, _step(mech, part, q1, _lm_solve(lu, J, r1[sel]), opts), q1)
        if not check_chord:
            return q2, q1, done1
        done2, _ = closed(defected_residual(mech, q2, lam, defect))
        return q2, jnp.where(done1, q1, q2), done1 | (contracting & done2)

    def body(s: _State) -> _State:
        dt = s.q.dtype
        tol, tol_mid, raw_tol, raw_tol_mid = _tols(opts, dt)
        lam = jnp.minimum(s.lam_acc + s.dlam, 1.0)
        r, Jp = evaluate(s.q, lam)
        f = r[sel]
        fn = jnp.sum(f * f)
        finite = jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(Jp))
        improved = finite & (s.fresh | (fn < s.fn_good))
        rc = rcond_1(Jp)
        raw = jnp.max(jnp.abs(r))
        q_good = jnp.where(improved, s.q, s.q_good)
        f_good = jnp.where(improved, f, s.f_good)
        J_good = jnp.where(improved, Jp, s.J_good)
        fn_good = jnp.where(improved, fn, s.fn_good)
        rc_good = jnp.where(improved, rc, s.rc_good)
        raw_good = jnp.where(improved, raw, s.raw_good)
        is_one = lam >= 1.0
        tl = jnp.where(is_one, tol, tol_mid)
        fmax_good = jnp.sqrt(fn_good)  # 2-norm >= max-abs
        conv = (improved & (jnp.max(jnp.abs(f)) <= tl)) | (~improved & is_one & (fmax_good <= 100 * tl) & (s.mu > 1.0))
        if n_p == 0:
            conv = finite
        raw_ok = raw_good <= jnp.where(is_one, raw_tol, raw_tol_mid)
        accept = conv & raw_ok & (rc_good >= opts.rcond_min)
        mu = jnp.where(improved, jnp.where(s.fresh, s.mu, jnp.maximum(s.mu * 0.1, 1e-15)), s.mu * 10.0)
        fail_inner = ~conv & ((s.inner + 1 >= opts.max_inner) | (mu > opts.mu_max))
        reject = (conv & ~accept) | fail_inner
        q_try, q_done, done = newton_chord(q_good, f_good, J_good, fn_good, mu, lam)
        # the Newton or chord point already meets the tolerances: finish there
        early = is_one & ~(accept | reject) & done & (rc_good >= opts.rcond_min)
        finished = (accept & is_one) | early
        lam_acc = jnp.where(accept | early, lam, s.lam_acc)
        q_acc = jnp.where(accept, q_good, jnp.where(early, q_done, s.q_acc))
        grow = jnp.where(s.inner <= 4, 2.0, 1.0)
        dlam = jnp.where(accept, jnp.minimum(s.dlam * grow, 1.0 - lam_acc), jnp.where(reject, 0.5 * s.dlam, s.dlam))
        too_small = reject & (dlam < opts.dlam_min)
        new = accept | reject | early
        q_next = jnp.where(new, q_acc, q_try)
        return _State(
            q_next,
            q_acc,
            lam_acc,
            dlam,
            jnp.where(new, opts.mu0, mu),
            q_good,
            f_good,
            J_good,
            jnp.where(new, jnp.inf, fn_good),
            rc_good,
            raw_good,
            new,
            jnp.where(new, 0, s.inner + 1),
            s.it + 1,
            s.finished | finished,
            too_small,
        )

    def cond(s: _State):
        return running(s, opts)

    return cond, body


def running(s: _State, opts: AssemblyOptions):
    """Whether the corrector loop would run another iteration on ``s`` (bool, batched like ``s``)."""
    return ~(s.finished | s.too_small) & (s.it < opts.max_iter)


# ----------------------------------------------------------------------------- public entry


def _finish(mech, part, q_out, opts, pre_status, finished, too_small, rc_last, dtype):
    """Physical checks at the returned q (§2.3 at the solution): ``(status, residual, rank, rc, rows)``."""
    return _checks(mech, part, q_out, opts, pre_status, finished, too_small, rc_last, dtype)[:5]


def _checks(mech, part, q_out, opts, pre_status, finished, too_small, rc_last, dtype):
    """:func:`_finish`'s checks and status, plus the closure Jacobian ``C`` (s, nv) at ``q_out``
    they evaluated (tracking's next tangent predictor reuses it)."""
    p = np.asarray(part.passive, int)
    n_p = p.size
    C = jnp.zeros((0, mech.nv), dtype)
    if mech.n_rows:
        r, C = closure_residual_and_jacobian(mech, q_out)
        rank = _qr_rank(C, opts.rank_rtol)
        residual = jnp.max(jnp.abs(r))
        if n_p <= mech.n_rows:
            rows = select_rows_ranked(C[:, p], n_p)[0] if n_p else jnp.zeros(0, jnp.int32)
            Rp = C[rows][:, p]
            finite = jnp.all(jnp.isfinite(Rp))
            Ji, rc = _inverse_rcond_1(jnp.where(finite, Rp, jnp.eye(n_p, dtype=dtype)))
            rc = jnp.where(finite, rc, 0.0)
            newton = Ji @ r[rows]  # the Newton correction's size: how far q still is from closure
            err = jnp.where(rc > 0, jnp.max(jnp.abs(newton)) if n_p else 0.0, jnp.inf)
        else:
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
    return status, residual, rank, rc, rows, C


def _qr_rank(A, rtol):
    """Numerical rank of ``A`` (s, n) from the diagonal of its column-pivoted QR (no SVD)."""
    return select_rows_ranked(A, min(A.shape), rtol)[1] if min(A.shape) else jnp.zeros((), jnp.int32)


def _prechecks(mech, part, q_in, finite_in, J0, opts):
    """Status before any iteration (-1: none) and the starting row selection (paper 001 eq. (40)):
    non-finite input, active out of bounds, over-/under-determined active set, singular start
    (eq. (39)). Ranks from pivoted QR (:func:`jaxmech.rank.select_rows_ranked`): the selection's
    own factorization gives the passive block's rank, a second one the full Jacobian's."""
    p = np.asarray(part.passive, int)
    n_p = p.size
    pre = jnp.asarray(-1, jnp.int32)
    sel0 = jnp.zeros(n_p, jnp.int32)
    if mech.n_rows:
        r0 = _qr_rank(J0, opts.rank_rtol)
        sel0, rp0 = select_rows_ranked(J0[:, p], n_p, opts.rank_rtol) if n_p else (sel0, jnp.zeros((), jnp.int32))
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
