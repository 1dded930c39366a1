"""The dense KKT solve of constrained forward dynamics, with its rank-revealing row selection.

One state: ``M a - C^T lambda = b`` (``b = tau - h``), ``C a + gamma = 0``, with ``C`` (s, nv) the
closure rows (masked-out rows zeroed) and ``M`` (nv, nv) the mass matrix. The solve runs on ``k =
min(s, nv)`` rows chosen by :class:`Rows` (a pivoted QR of ``C^T`` gives independent rows and the
rank), then :func:`kkt_dense` (Cholesky of ``M``, one forward substitution, Cholesky of the Schur
complement, one correction step; :mod:`jaxmech.constrained` gives the equations).

**Skipping the selection where a certificate shows it chooses every row** (:func:`solve`). The
pivoted QR costs 5 us of a batched Stewart forward dynamics (about a third, ``benchmarks/PROFILE.md``,
sessions 35 and 48), and on a regular state it selects every active row, so its only effect is the
order of the rows. With ``s <= nv`` the solve first runs on the rows in their natural order (masked
rows padded with the identity). Its own factors bound the condition of the active rows: ``C^T = L
Z`` with ``M = L L^T`` and ``Z^T Z = L_k L_k^T``, so ``sigma_min(C) >= sigma_min(L)
sigma_min(L_k)``; for a triangular ``T`` with positive diagonal, ``|T^-1| <= M(T)^-1`` entrywise
(``M(T)``, the comparison matrix: ``|T_ii|`` on the diagonal, ``-|T_ij|`` off it), so one solve
``M(T) y = 1`` gives ``sigma_min(T) >= 1 / (sqrt(n) max y)``; and ``sigma_max(C) <= ||C||_F``.
The QR's rank counts pivots ``|R_ii| > rtol |R_00|``, and every ``|R_ii| >= sigma_min(C)``,
``|R_00| <= sigma_max(C)``: a bound below ``1 / rtol`` certifies that the QR keeps every active
row, so the natural-order solution is the selected one (the same ``a`` and ``lambda`` up to
round-off; the rows' order does not change the solution). States that are not certified (redundant
rows, e.g. a planar loop closed by a revolute cut; singular states; masks that leave more rows than
speeds) run the QR path in a ``while_loop`` of at most one pass (:func:`jaxmech._once.where_needed`),
so a vmapped batch pays for it only when one of its states needs it.

Derivatives are those of the QR path as written (a ``custom_jvp``: the one-pass loop has no
reverse mode), i.e. unchanged: the selection is a discrete choice on ``stop_gradient(C)``.

**On the CPU the natural-order solve is one native call per batch** (:func:`_natural_native`,
:mod:`jaxmech.native`): the Cholesky factors, the Schur complement, the correction where needed and
the certificate of :func:`_natural_lapack`, eight float64 states per SIMD group. The LAPACK calls it
replaces cost 1-3 us each on the Stewart's 24 x 24 and 18 x 18 matrices, several times their
arithmetic (forward dynamics 15.0 -> 7.0 us per state at 4,096 states, one core). Given the model's
:class:`Sparsity` (its mass matrix's tree blocks and each closure row's path dofs), the kernel skips
the structural zeros: the Stewart's 24 x 24 ``M`` is six 3 x 3 leg blocks and a 6 x 6 platform block,
about 3,500 multiply-adds per state instead of 12,500 (7.0 -> 6.4 us, 0.46x Pinocchio's
``constraintDynamics``, session 50). Elsewhere, or without a C++ compiler, :func:`_natural_lapack`
runs; the two agree to round-off.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from . import lapack, native
from ._as_written import jvp_rule
from ._once import where_needed
from .rank import select_rows_ranked

Array = jnp.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Sparsity:
    """The static sparsity of a model's KKT problems, the same for every state: the entries that can
    be non-zero in the lower Cholesky factor ``L`` of ``M`` (fill-in included) and in the rows of
    ``Z = (L^-1 C^T)^T``. The native kernels skip the others, which are zero in every state
    (:mod:`jaxmech.native`); the LAPACK path does not read it. The Stewart's ``M`` is six 3 x 3 leg
    blocks and the platform's 6 x 6 (90 of 576 entries) and each closure row touches one leg and the
    platform (9 of 24 speeds), so its forward dynamics' Cholesky factor, triangular solves and Gram
    product do a fraction of their dense work. Build it with :func:`sparsity`.

    ``lower`` (n, n) bool: ``L[i, k]``, ``k < i``; ``rows`` (s, n) bool: ``Z[j, i]`` (``C``'s own
    pattern included); ``c`` (s, n) bool: ``C``'s pattern."""

    lower: np.ndarray
    rows: np.ndarray
    c: np.ndarray


def sparsity(m_pattern, c_pattern) -> Sparsity:
    """:class:`Sparsity` from the patterns of ``M`` (n, n) and ``C`` (s, n) (bool; True where an
    entry can be non-zero in some state). Symbolic Cholesky: eliminating column ``j`` fills every
    pair of its non-zero rows; a row of ``Z`` is non-zero where its row of ``C`` is, and then
    wherever ``L`` reaches from there (forward substitution)."""
    P = np.asarray(m_pattern, bool)
    n = P.shape[0]
    low = np.tril(P | P.T, -1)
    for j in range(n):
        r = j + 1 + np.nonzero(low[j + 1 :, j])[0]
        low[np.ix_(r, r)] = True
    low = np.tril(low, -1)
    z = np.array(c_pattern, bool).reshape(-1, n)
    for i in range(n):
        z[:, i] |= (z[:, :i] & low[i, :i]).any(1)
    return Sparsity(low, z, np.array(c_pattern, bool).reshape(-1, n))


class Rows:
    """Rank-revealing selection of the active closure rows (fixed shapes, masks): ``C`` (s, nv) and
    ``gamma`` (s,) with the ``row_mask`` (s,) applied; ``idx`` (k,) the selected rows, ``k = min(s,
    nv)``, the first ``rank`` of them used (``mask`` (k,)); ``Cs`` (k, nv), ``gs`` (k,) the selected
    rows with the unused ones zeroed and ``pad`` (k, k) the identity on them."""

    def __init__(self, C, gamma, row_mask, rtol, natural: bool = False):
        s, nv = C.shape
        self.C = C * row_mask[:, None]
        self.gamma = gamma * row_mask
        self.s, self.k = s, min(s, nv)
        if natural:  # every row, in order (s <= nv); masked rows padded
            if s > nv:
                raise ValueError(f"Rows(natural=True) needs s <= nv, got s={s}, nv={nv}")
            self.idx = jnp.arange(s, dtype=jnp.int32)
            self.rank = jnp.sum(row_mask > 0).astype(jnp.int32)
            self.mask = (row_mask > 0).astype(C.dtype)
            self.Cs, self.gs = self.C, self.gamma
            self.pad = jnp.diag(1.0 - self.mask)
            return
        if self.k:
            self.idx, self.rank = select_rows_ranked(jax.lax.stop_gradient(self.C), self.k, rtol)
        else:
            self.idx, self.rank = jnp.zeros(0, jnp.int32), jnp.zeros((), jnp.int32)
        self.mask = (jnp.arange(self.k) < self.rank).astype(C.dtype)
        self.Cs = self.C[self.idx] * self.mask[:, None]  # (k, nv)
        self.gs = self.gamma[self.idx] * self.mask
        self.pad = jnp.diag(1.0 - self.mask)

    def scatter(self, lam_s):
        """Multipliers (s,) from those of the selected rows (k,) (0 on dropped rows)."""
        return jnp.zeros(self.s, lam_s.dtype).at[self.idx].add(lam_s * self.mask)


def kkt_dense(M, rows: Rows, b, L=None):
    """``(a, lambda_s, L_k)`` on the selected rows with LAPACK: Cholesky ``M = L L^T`` (``L`` if
    given), one forward substitution ``Z = L^-1 [b, C_s^T]``, ``K = Z_C^T Z_C = L_k L_k^T``,
    ``lambda_s = K^-1 (-gamma_s - Z_C^T z_b)``, ``a = L^-T (z_b + Z_C lambda_s)``; then one
    correction of the constraint violation with the same factors (:mod:`jaxmech.constrained`).
    ``L_k`` (k, k) is None when no row is selected."""
    L = lapack.cholesky(M) if L is None else L
    if rows.k == 0:
        return lapack.cho_solve(L, b), jnp.zeros(0, M.dtype), None
    a, lam_s, Lk, ZC = _schur(L, rows, b)
    a, lam_s = _refine(L, Lk, ZC, rows.Cs, rows.gs, a, lam_s)
    return a, lam_s, Lk


def _schur(L, rows: Rows, b):
    """The Schur-complement solve of :func:`kkt_dense` without its correction: ``(a, lambda_s, L_k,
    Z_C)``."""
    Z = lapack.solve_triangular(L, jnp.concatenate([b[:, None], rows.Cs.T], 1), True, False)
    zb, ZC = Z[:, 0], Z[:, 1:]
    Lk = lapack.cholesky(ZC.T @ ZC + rows.pad)
    lam_s = lapack.cho_solve(Lk, -rows.gs - ZC.T @ zb)
    return lapack.solve_triangular(L, zb + ZC @ lam_s, True, True), lam_s, Lk, ZC


def _refine(L, Lk, ZC, Cs, gs, a, lam_s):
    """One correction of the rows' violation ``C_s a + gamma_s`` with the same factors: the Newton
    step of the constraint rows in the metric of ``M``."""
    dlam = lapack.cho_solve(Lk, -gs - Cs @ a)
    return a + lapack.solve_triangular(L, ZC @ dlam, True, True), lam_s + dlam


def at_roundoff(Cs, gs, a) -> Array:
    """True where ``max |C_s a + gamma_s| <= 16 eps (1 + max |gamma_s| + max |C_s| max |a|)``: the
    rows hold to round-off, so the correction of :func:`_refine` would change nothing that the
    status check (``sqrt(eps)`` on the same scale) or the accuracy tests can see. Bool scalar."""
    eps = jnp.finfo(a.dtype).eps
    scale = 1.0 + jnp.max(jnp.abs(gs)) + jnp.max(jnp.abs(Cs)) * jnp.max(jnp.abs(a))
    return jnp.max(jnp.abs(Cs @ a + gs)) <= 16 * eps * scale


def sigma_min_lower(T: Array) -> Array:
    """A lower bound of the smallest singular value of lower-triangular ``T`` (n, n) with a positive
    diagonal: ``1 / (sqrt(n) max y)``, ``M(T) y = 1`` with ``M(T)`` the comparison matrix (module
    docstring). 0 where the bound is not finite (e.g. a NaN factor). Scalar; not differentiated."""
    T = jax.lax.stop_gradient(T)
    n = T.shape[-1]
    d = jnp.abs(jnp.diagonal(T))
    comparison = jnp.diag(d) - jnp.tril(jnp.abs(T), -1)
    y = lapack.solve_triangular(comparison, jnp.ones(n, T.dtype), True, False)
    ymax = jnp.max(y)
    ok = jnp.isfinite(ymax) & (ymax > 0) & jnp.all(d > 0)
    return jnp.where(ok, 1.0 / (math.sqrt(n) * jnp.where(ok, ymax, 1.0)), 0.0)


def certified(L: Array, Lk: Array, C: Array, rtol: float) -> Array:
    """True where ``||C||_F / (sigma_min_lower(L) sigma_min_lower(L_k)) < 1 / rtol``: the
    column-pivoted QR of ``C^T`` (s, nv; masked rows zero, ``L_k`` padded on them) counts every
    active row as independent (module docstring). Bool scalar."""
    C = jax.lax.stop_gradient(C)
    lo = sigma_min_lower(L) * sigma_min_lower(Lk)
    tiny = jnp.finfo(C.dtype).tiny
    return (lo > tiny) & (jnp.sqrt(jnp.sum(C * C)) * rtol < lo)


def _selected(M, C, gamma, mask, b, L, rtol):
    """``(a, lambda, rank)`` on the rows the pivoted QR selects (the path as written)."""
    rows = Rows(C, gamma, mask, rtol)
    a, lam_s, _ = kkt_dense(M, rows, b, L)
    lam = rows.scatter(lam_s) if rows.k else jnp.zeros(rows.s, M.dtype)
    return a, lam, rows.rank


def _natural_lapack(M, C, gamma, mask, b, rtol):
    """``(a, lambda, L, ok)`` of the natural-order solve with LAPACK: the factor of ``M`` and the
    certificate of :func:`certified` (correction only where :func:`at_roundoff` fails)."""
    L = lapack.cholesky(M)
    rows = Rows(C, gamma, mask, rtol, natural=True)
    a, lam, Lk, ZC = _schur(L, rows, b)
    fix = ~at_roundoff(rows.Cs, rows.gs, a)  # the correction only where it corrects something
    a, lam = where_needed(fix, _refine, (a, lam), L, Lk, ZC, rows.Cs, rows.gs, a, lam)
    return a, lam, L, certified(L, Lk, rows.C, rtol)


def _natural_native(M, C, gamma, mask, b, rtol, pattern=None):
    """:func:`_natural_lapack` in one native call per batch (:func:`jaxmech.native.kkt_natural`),
    on the :class:`Sparsity` ``pattern`` if given."""
    rows = Rows(C, gamma, mask, rtol, natural=True)
    L, a, lam, ok = native.kkt_natural(M, rows.Cs, rows.gs, rows.mask, b, rtol, pattern)
    return a, lam, L, ok


def solve(
    M,
    C,
    gamma,
    mask,
    b,
    rtol: float,
    independent_rows: bool = True,
    factor: bool = False,
    pattern: Sparsity | None = None,
):
    """``(a, lambda, rank)``: accelerations (nv,), multipliers (s,) and the rank of the active rows
    for ``M`` (nv, nv), ``C`` (s, nv), ``gamma`` (s,), ``mask`` (s,) the active rows (1 / 0), ``b``
    (nv,); with ``factor=True`` also the lower Cholesky factor ``L`` (nv, nv) of ``M`` (the
    rollout's velocity projection reuses it). The natural-order solve where certified (on the CPU
    in one native kernel call, :mod:`jaxmech.native`, where it is built), the pivoted-QR selection
    elsewhere (module docstring); derivatives of the latter. ``independent_rows=False`` (static:
    the model's rows are dependent at its reference pose, e.g. planar loops closed by revolute
    cuts) goes straight to the selection, which such states need. ``pattern``: the static
    :class:`Sparsity` of ``M`` and ``C`` (every state's zeros outside it must be exact), which the
    native kernel exploits; None for dense."""
    s, nv = C.shape
    keep = 4 if factor else 3

    def ref(M, C, gamma, mask, b):
        L = lapack.cholesky(M)
        return (_selected(M, C, gamma, mask, b, L, rtol) + (L,))[:keep]

    if s == 0 or s > nv or not independent_rows:
        return ref(M, C, gamma, mask, b)

    @jax.custom_jvp
    def fast(M, C, gamma, mask, b):
        args = (M, C, gamma, mask, b)
        a, lam, L, ok = native.on_cpu(
            partial(_natural_native, rtol=rtol, pattern=pattern), partial(_natural_lapack, rtol=rtol), *args
        )
        rank = jnp.sum(mask > 0).astype(jnp.int32)
        return where_needed(~ok, ref, (a, lam, rank, L)[:keep], *args)

    fast.defjvp(jvp_rule(ref), symbolic_zeros=True)
    return fast(M, C, gamma, mask, b)
