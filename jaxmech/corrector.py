"""The corrector: defect homotopy and the damped Gauss-Newton continuation loop (paper 001 §3).

:func:`jaxmech.assemble` (``assembly.py``) sets a run up (defect, row selection, pre-checks) and
checks its result; this module holds what runs in between, on the passive coordinates of one
state, with the selector ``sel`` held fixed:

1. **Defected closure** (paper 001 eqs. (29)-(37)). For every closure element the initial
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
2. **Corrector** at fixed ``lam``: damped Gauss-Newton (Levenberg-Marquardt damping update,
   eq. (46)) on the selected rows, passive coordinates only, steps in velocity coordinates applied
   with :func:`jaxmech.integrate` (quaternions stay unit), passive bounds ``mech.lower/upper``
   enforced by clipping, step length capped. Each iteration's damped Newton step is followed by
   one *chord* step (option ``chord``): the residual alone at the Newton point, solved with the
   same factorization, taken when the Newton step cut ``|f|^2`` below a tenth. The chord's
   residual evaluation also tells whether the Newton point already meets the tolerances, and the
   run then finishes there. A Newton-chord pair converges with order three; from 5 cm guesses
   the Stewart needs 3 iterations instead of 5 (``benchmarks/PROFILE.md``, session 25).
3. **Continuation**: adaptive ``lam`` increments, the first trial at ``lam = dlam0 = 1`` (the
   physical closure itself: from guesses near a closed state, and from most rough ones, the
   damped corrector converges there directly, in about 40 % fewer iterations and with more
   successes than starting at ``lam = 0.5``; ``benchmarks/PROFILE.md``, session 21); a trial
   point is accepted when the corrector converged, the *complete* raw defected residual is
   small and, at an intermediate ``lam < 1``, the selected passive block's reciprocal condition
   (1-norm, :func:`rcond_1`) is above ``rcond_min`` (at ``lam = 1`` the final checks judge the
   solution's own block; :func:`_rcond_where`); otherwise the increment is halved; below
   ``dlam_min`` the run stops with ``STEP_TOO_SMALL``.

Every evaluation is the closure's own world-frame tree pass (``closure._evaluate``) with the
defect applied to each mismatch; under ``vmap`` the same rows run as the batch-last kernels of
:mod:`jaxmech.batchlast` (the defect as a constant offset of each cut frame B): Stewart, batch
1,024, one core, residual + Jacobian 7.0 -> 3.0 us per state, residual 3.4 -> 1.6, assembly from
5 cm guesses 109 -> 87 us (``benchmarks/PROFILE.md``, session 44). Everything is one flattened
``lax.while_loop`` (one residual+Jacobian evaluation and one residual evaluation per iteration),
so ``jax.jit(jax.vmap(...))`` over many guesses costs the slowest state's iteration count and a
failed state never poisons the others. :func:`_loop` gives the loop's ``(cond, body)`` over
:class:`_State` (``jaxmech.straggler`` steps it itself), :func:`_homotopy` runs it (tracking's
direct corrector and fallback). The static options of the whole solver, :class:`AssemblyOptions`,
live here (the corrector reads most of them; ``assembly`` re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import lapack, lie, native
from ._once import where_needed
from .active_set import Partition
from .closure import _all_rows, group_mismatches
from .kinpass import integrate
from .mechanism import Mechanism

# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class AssemblyOptions:
    """Static solver options (hashable; pass as keyword arguments to :func:`jaxmech.assemble`).

    ``tol``: max-abs selected residual at ``lam = 1`` (residual units: m, rad);
    ``tol_mid``: the same at intermediate ``lam``; ``raw_tol`` / ``raw_tol_mid``: acceptance on the
    complete raw (defected) residual; ``rcond_min``: acceptance on the selected passive block (its
    1-norm reciprocal condition :func:`rcond_1`, inside the loop at intermediate ``lam`` and at
    the solution) and the
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
    ``rcond_fail``: a failed run whose passive block at its final point (on the rows selected
    there) or at its last intermediate ``lam`` trial had a reciprocal condition below this is
    reported ``SINGULAR`` (the continuation ran into a fold: dead centre, workspace boundary)
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


def defected_residual_and_jacobian(mech: Mechanism, q: jnp.ndarray, lam, defect: Defect | None):
    """Raw defected residual (s,) and Jacobian (s, nv) (paper 001 eqs. (34)-(39)):
    rows of ``Delta(q) Exp((1 - lam) rho0)^-1``; ``lam = 1`` or ``defect=None`` gives the physical
    closure (``None``: the plain rows, no defect factors at all). The
    closure's own world-frame pass with the defect applied to each ``Delta`` (the Jacobian rows
    are the physical ones: ``D`` is constant in q)."""
    if defect is None:  # the physical closure itself (tracking's direct corrector)
        return _all_rows(True)(mech, q)
    Dinv = tuple(lie.se3_exp(-(1.0 - lam) * rho0) for rho0 in defect.rho0)
    r, J = _all_rows(True)(mech, q, *Dinv)
    if mech.topo.coupling_names:
        r = r.at[mech.topo.coupling_rows :].add(-(1.0 - lam) * defect.c0)
    return r, J


def defected_residual(mech: Mechanism, q: jnp.ndarray, lam, defect: Defect | None) -> jnp.ndarray:
    """The raw defected residual (s,) of :func:`defected_residual_and_jacobian`, without the Jacobian."""
    if defect is None:
        return _all_rows(False)(mech, q)[0]
    Dinv = tuple(lie.se3_exp(-(1.0 - lam) * rho0) for rho0 in defect.rho0)
    r, _ = _all_rows(False)(mech, q, *Dinv)
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
    Ji = lapack.inv(J)
    nrm = jnp.max(jnp.sum(jnp.abs(J), 0)) * jnp.max(jnp.sum(jnp.abs(Ji), 0))
    ok = jnp.isfinite(nrm) & (nrm > 0)
    return Ji, jnp.where(ok, 1.0 / jnp.where(ok, nrm, 1.0), 0.0)


def _rcond_where(J, need, rc):
    """:func:`rcond_1` of the selected passive block ``J`` where ``need``, else ``rc`` unchanged.

    The corrector reads a block's reciprocal condition only where it decides something: whether
    an intermediate homotopy point (``lam < 1``) that converged is accepted, and, for a run that
    ends there, whether the failure is reported ``SINGULAR`` (``rcond_fail``). At ``lam = 1`` it
    reads none: the solution's own block, on the rows selected there, is judged by the final
    checks (``assembly._checks``: ``SINGULAR`` below ``rcond_min``). :func:`_verdict` says where.
    The inverse runs through :func:`jaxmech._once.where_needed`, so a vmapped batch computes it
    only at iterations where some state needs it: assembly from near-closed guesses and tracking's
    direct corrector skip one LAPACK inverse per iteration (7 us per state of an iteration's 19,
    Stewart, batch 1,024; ``benchmarks/PROFILE.md``, session 45)."""
    if J.shape[0] == 0:
        return jnp.ones((), J.dtype)
    return where_needed(need, rcond_1, rc, J)


def _lm_factor(J, mu):
    """Cholesky factor of the Levenberg-Marquardt matrix ``J^T J + mu s I`` (s = max diag of
    J^T J; symmetric positive definite for ``mu > 0``: Stewart, 18 x 18, batch 1,024, 2.1 us per
    state against 3.0 for the LU it replaced; ``benchmarks/PROFILE.md``, session 44). On the CPU
    one native kernel call per batch (:func:`jaxmech.native.lm_factor`), else
    :func:`_lm_factor_lapack`."""
    return native.cpu_or(native.lm_factor, _lm_factor_lapack)(J, mu)


def _lm_factor_lapack(J, mu):
    A = J.T @ J
    s = jnp.maximum(jnp.max(jnp.diag(A)), jnp.finfo(J.dtype).tiny)
    return lapack.cholesky(jax.lax.stop_gradient(A + mu * s * jnp.eye(A.shape[0], dtype=A.dtype)))


def _lm_solve(L, J, f):
    """The step ``d = -(J^T J + mu s I)^-1 J^T f`` from :func:`_lm_factor`'s factor (0 if not
    finite); on the CPU :func:`jaxmech.native.lm_solve`."""
    return native.cpu_or(native.lm_solve, _lm_solve_lapack)(L, J, f)


def _lm_solve_lapack(L, J, f):
    d = lapack.cho_solve(L, jax.lax.stop_gradient(-J.T @ f))
    return jnp.where(jnp.all(jnp.isfinite(d)), d, 0.0)


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


class _Problem(NamedTuple):
    """What one corrector loop solves (fixed for the whole loop): the mechanism, the partition,
    the defect, the selected rows ``sel`` (n_p,), the options and ``check_chord`` (see :func:`_loop`)."""

    mech: Mechanism
    part: Partition
    defect: Defect | None  # None: the physical closure (no defect)
    sel: jnp.ndarray
    opts: AssemblyOptions
    check_chord: bool


class _Best(NamedTuple):
    """The best corrector iterate at the current ``lam`` trial (the ``*_good`` fields of :class:`_State`)."""

    q: jnp.ndarray
    f: jnp.ndarray  # selected residual (n_p,)
    J: jnp.ndarray  # selected passive block (n_p, n_p)
    fn: jnp.ndarray  # |f|^2
    rc: jnp.ndarray  # rcond_1(J) where the verdict reads it, else 1 (see _rcond_where)
    raw: jnp.ndarray  # max-abs raw residual


class _Verdict(NamedTuple):
    """The corrector's verdict at a trial ``lam`` (see :func:`_verdict`)."""

    is_one: jnp.ndarray  # the trial is the physical closure
    accept: jnp.ndarray
    reject: jnp.ndarray
    mu: jnp.ndarray  # damping for the next step


def _trial(pb: _Problem, s: _State, lam) -> tuple:
    """Evaluate the defected closure at ``s.q`` and keep the better of it and the best iterate so
    far: ``(f, finite, improved, best)`` (``f`` the selected residual at ``s.q``)."""
    p = np.asarray(pb.part.passive, int)
    r, J = defected_residual_and_jacobian(pb.mech, s.q, lam, pb.defect)
    Jp = J[pb.sel][:, p]
    f = r[pb.sel]
    fn = jnp.sum(f * f)
    finite = jnp.all(jnp.isfinite(r)) & jnp.all(jnp.isfinite(Jp))
    improved = finite & (s.fresh | (fn < s.fn_good))
    rc = jnp.ones((), r.dtype)  # computed by the verdict where it decides something
    raw = jnp.max(jnp.abs(r))
    new = (s.q, f, Jp, fn, rc, raw)
    old = (s.q_good, s.f_good, s.J_good, s.fn_good, s.rc_good, s.raw_good)
    return f, finite, improved, _Best(*(jnp.where(improved, a, b) for a, b in zip(new, old, strict=True)))


def _verdict(pb: _Problem, s: _State, lam, f, finite, improved, best: _Best) -> tuple[_Verdict, _Best]:
    """Converged, accepted or rejected at the trial ``lam``, and the Levenberg-Marquardt damping
    update (eq. (46)): a point is accepted when the corrector converged, the complete raw residual
    is small and, at an intermediate ``lam``, the selected block is well-conditioned; rejected
    when it converged otherwise, or ran out of inner iterations or damping. Returns the verdict
    and ``best`` with its reciprocal condition where this iteration reads it (:func:`_rcond_where`:
    at ``lam < 1``, where the run converged, gave up on the point or ends)."""
    opts = pb.opts
    tol, tol_mid, raw_tol, raw_tol_mid = _tols(opts, s.q.dtype)
    is_one = lam >= 1.0
    tl = jnp.where(is_one, tol, tol_mid)
    fmax_good = jnp.sqrt(best.fn)  # 2-norm >= max-abs
    conv = (improved & (jnp.max(jnp.abs(f)) <= tl)) | (~improved & is_one & (fmax_good <= 100 * tl) & (s.mu > 1.0))
    if len(pb.part.passive) == 0:
        conv = finite
    raw_ok = best.raw <= jnp.where(is_one, raw_tol, raw_tol_mid)
    mu = jnp.where(improved, jnp.where(s.fresh, s.mu, jnp.maximum(s.mu * 0.1, 1e-15)), s.mu * 10.0)
    fail_inner = ~conv & ((s.inner + 1 >= opts.max_inner) | (mu > opts.mu_max))
    # rc decides acceptance of a converged intermediate point, and the failure status of a run
    # that ends here (a rejection may make the increment too small; or the iteration cap)
    need = ~is_one & (conv | fail_inner | (s.it + 1 >= opts.max_iter))
    best = best._replace(rc=_rcond_where(best.J, need, best.rc))
    accept = conv & raw_ok & (best.rc >= opts.rcond_min)
    reject = (conv & ~accept) | fail_inner
    return _Verdict(is_one, accept, reject, mu), best


def _closed(pb: _Problem, r, tol, raw_tol):
    """``(closed, |f|^2)``: whether the raw residual ``r`` meets the physical closure's tolerances
    (selected and raw rows), and the selected residual's squared norm."""
    fs = r[pb.sel]
    return (jnp.max(jnp.abs(fs)) <= tol) & (jnp.max(jnp.abs(r)) <= raw_tol), jnp.sum(fs * fs)


def _newton(pb: _Problem, q, f, J, mu):
    """The damped Newton (LM) step from ``q``: ``(L, q1)``, the factors for the chord step too."""
    L = _lm_factor(J, mu)
    return L, _step(pb.mech, pb.part, q, _lm_solve(L, J, f), pb.opts)


def _chord(pb: _Problem, L, J, q1, fn, lam, tol, raw_tol):
    """One chord step from the Newton point ``q1`` with the Newton step's factors, taken where the
    Newton step cut ``|f|^2`` below ``fn / 10``: ``(q2, q_done, done)`` as in :func:`_newton_chord`."""
    r1 = defected_residual(pb.mech, q1, lam, pb.defect)
    done1, fn1 = _closed(pb, r1, tol, raw_tol)
    contracting = fn1 < 0.1 * fn  # False for non-finite residuals
    q2 = jnp.where(contracting, _step(pb.mech, pb.part, q1, _lm_solve(L, J, r1[pb.sel]), pb.opts), q1)
    if not pb.check_chord:
        return q2, q1, done1
    done2, _ = _closed(pb, defected_residual(pb.mech, q2, lam, pb.defect), tol, raw_tol)
    return q2, jnp.where(done1, q1, q2), done1 | (contracting & done2)


def _newton_chord(pb: _Problem, q, f, J, fn, mu, lam):
    """``(q_next, q_done, done)``: a damped Newton step from ``q`` to ``q1``, then (with
    ``opts.chord``) one chord step with the same factors to ``q2`` where the Newton step cut
    ``|f|^2`` below ``fn / 10``. ``done``: ``q1`` (or, with ``check_chord``, else ``q2``), returned
    as ``q_done``, already meets the physical closure's tolerances (selected and raw rows; seen
    by the chord's residual evaluations, so no further iteration is needed)."""
    if len(pb.part.passive) == 0:
        return q, q, jnp.asarray(False)
    L, q1 = _newton(pb, q, f, J, mu)
    if not pb.opts.chord:
        return q1, q1, jnp.asarray(False)
    tol, _, raw_tol, _ = _tols(pb.opts, q.dtype)
    return _chord(pb, L, J, q1, fn, lam, tol, raw_tol)


def _advance(pb: _Problem, s: _State, lam, best: _Best, v: _Verdict, nc: tuple) -> _State:
    """The continuation decision and the next state: finish at ``lam = 1`` on acceptance or where
    the Newton/chord point ``nc`` already meets the tolerances; on acceptance advance ``lam`` (the
    increment doubled after a quick convergence, capped at ``1 - lam``), on rejection halve the increment (below
    ``dlam_min``: too small); otherwise continue the corrector from the Newton/chord point."""
    opts = pb.opts
    q_try, q_done, done = nc
    # the Newton or chord point already meets the tolerances: finish there
    early = v.is_one & ~(v.accept | v.reject) & done & (best.rc >= opts.rcond_min)
    finished = (v.accept & v.is_one) | early
    lam_acc = jnp.where(v.accept | early, lam, s.lam_acc)
    q_acc = jnp.where(v.accept, best.q, jnp.where(early, q_done, s.q_acc))
    grow = jnp.where(s.inner <= 4, 2.0, 1.0)
    dlam = jnp.where(v.accept, jnp.minimum(s.dlam * grow, 1.0 - lam_acc), jnp.where(v.reject, 0.5 * s.dlam, s.dlam))
    too_small = v.reject & (dlam < opts.dlam_min)
    new = v.accept | v.reject | early
    return _State(
        jnp.where(new, q_acc, q_try),
        q_acc,
        lam_acc,
        dlam,
        jnp.where(new, opts.mu0, v.mu),
        best.q,
        best.f,
        best.J,
        jnp.where(new, jnp.inf, best.fn),
        best.rc,
        best.raw,
        new,
        jnp.where(new, 0, s.inner + 1),
        s.it + 1,
        s.finished | finished,
        too_small,
    )


def _loop(mech, part: Partition, defect: Defect, sel, opts: AssemblyOptions, check_chord: bool = False):
    """``(cond, body)`` of the corrector loop over :class:`_State` (one state, unbatched).
    ``check_chord`` (static): also evaluate the residual at the chord step's end, so that an
    iteration can finish there (tracking's corrector: one iteration per step instead of two
    where the Newton point just misses the tolerance; assembly's first iterations are far from
    closure, where the extra evaluation would only cost). One iteration: evaluate at the trial
    ``lam`` (:func:`_trial`), judge (:func:`_verdict`), step (:func:`_newton_chord`), decide the
    continuation (:func:`_advance`)."""
    pb = _Problem(mech, part, defect, sel, opts, check_chord)

    def body(s: _State) -> _State:
        lam = jnp.minimum(s.lam_acc + s.dlam, 1.0)
        f, finite, improved, best = _trial(pb, s, lam)
        v, best = _verdict(pb, s, lam, f, finite, improved, best)
        nc = _newton_chord(pb, best.q, best.f, best.J, best.fn, v.mu, lam)
        return _advance(pb, s, lam, best, v, nc)

    def cond(s: _State):
        return running(s, opts)

    return cond, body


def running(s: _State, opts: AssemblyOptions):
    """Whether the corrector loop would run another iteration on ``s`` (bool, batched like ``s``)."""
    return ~(s.finished | s.too_small) & (s.it < opts.max_iter)


def _homotopy(
    mech, part: Partition, q_init, defect: Defect, sel, lam0, dlam0, done0, opts: AssemblyOptions, check_chord=False
):
    """The flattened continuation + corrector loop; returns the final :class:`_State`."""
    cond, body = _loop(mech, part, defect, sel, opts, check_chord)
    return jax.lax.while_loop(cond, body, _initial_state(part, q_init, lam0, dlam0, done0, opts))
