"""Numerical rank, reciprocal condition and rank-revealing row/column selection (paper 001 §2.3).

One implementation shared by assembly and the velocity reduction. All functions take one
matrix with a fixed shape, return fixed-shape outputs (indices are traced integer arrays), run
under ``jax.jit`` and batch with ``jax.vmap``:

* :func:`numerical_rank` -- number of singular values above ``rtol * sigma_max`` (SVD);
* :func:`select_rows` -- ``k`` independent rows of a passive block ``A_p`` (s, n_p) from the
  column-pivoted QR of ``A_p^T`` (paper 001 eq. (24): the selector ``S`` of the passive block),
  with the reciprocal condition of the selected rows;
* :func:`select_rows_ranked` -- the same selection plus the rank read off the diagonal of the
  same pivoted QR (no SVD; used by the constrained dynamics, where it is the costly step);
* :func:`select_columns` -- ``k`` independent columns of ``A`` (pivoted QR of ``A``), e.g. to
  choose independent coordinates;
* :func:`rcond` -- ``sigma_min / sigma_max`` of a matrix (0 for an all-zero matrix).

Tolerances are relative to the largest singular value, so they do not depend on the overall
scale of the Jacobian (they do depend on the relative scaling of rows, e.g. metres against
radians; paper 001 §3 notes the same).
"""

from __future__ import annotations

import jax.numpy as jnp

from . import lapack

Array = jnp.ndarray


def singular_values(A: Array) -> Array:
    """Singular values of ``A`` (m, n) in descending order, shape (min(m, n),); not differentiated
    (rank and condition decisions only: the input passes through ``stop_gradient``)."""
    if min(A.shape) == 0:
        return jnp.zeros(0, A.dtype)
    return lapack.singular_values(A)


def numerical_rank(A: Array, rtol: float = 1e-9) -> Array:
    """Numerical rank of ``A`` (m, n): count of singular values ``> rtol * sigma_max``.

    Returns a traced int32 scalar (0 for an all-zero or empty matrix)."""
    sv = singular_values(A)
    if sv.size == 0:
        return jnp.zeros((), jnp.int32)
    smax = sv[0]
    tiny = jnp.finfo(A.dtype).tiny
    return jnp.sum((sv > rtol * smax) & (sv > tiny)).astype(jnp.int32)


def rcond(A: Array) -> Array:
    """Reciprocal 2-norm condition ``sigma_min / sigma_max`` of ``A`` (m, n), using the
    ``min(m, n)``-th singular value; 0 for an all-zero matrix, 1 for an empty one. Scalar."""
    sv = singular_values(A)
    if sv.size == 0:
        return jnp.ones((), A.dtype)
    smax = sv[0]
    ok = smax > 0
    return jnp.where(ok, sv[-1] / jnp.where(ok, smax, 1.0), 0.0)


def _pivots(M: Array) -> Array:
    """Column permutation of the column-pivoted QR of ``M`` (LAPACK ``geqp3``, no ``Q``): the one
    rank-revealing factorization every selection here uses."""
    return lapack.pivoted_qr(M)[1]


def select_rows(A_p: Array, k: int) -> tuple[Array, Array]:
    """Choose ``k`` independent rows of ``A_p`` (s, n_p) by column-pivoted QR of ``A_p^T``.

    Returns ``(rows, rc)``: ``rows`` (k,) int row indices in pivot order, and ``rc`` the
    reciprocal condition :func:`rcond` of the selected block ``A_p[rows]`` (k, n_p). With
    ``k == n_p`` the selected passive block is square; paper 001 rejects it when ``rc`` is below
    a threshold. ``k`` must be static and ``<= s``."""
    s = A_p.shape[0]
    k = int(k)
    if k > s:
        raise ValueError(f"select_rows: cannot select k={k} rows from a matrix with {s} rows")
    if k == 0:
        return jnp.zeros(0, jnp.int32), jnp.ones((), A_p.dtype)
    if A_p.shape[1] == 0:
        return jnp.arange(k, dtype=jnp.int32), jnp.ones((), A_p.dtype)
    rows = _pivots(A_p.T)[:k].astype(jnp.int32)
    return rows, rcond(A_p[rows])


def select_rows_ranked(A: Array, k: int, rtol: float = 1e-9) -> tuple[Array, Array]:
    """:func:`select_rows` without the condition check, plus the numerical rank, from one pivoted QR.

    Returns ``(rows, rank)``: ``rows`` (k,) int32 row indices of ``A`` (s, n) in pivot order (the
    same rows as :func:`select_rows`) and ``rank`` int32, the number of pivots with
    ``|R_ii| > rtol * |R_00|``. The pivoted-QR diagonal brackets the singular values
    (``|R_00| <= sigma_max <= sqrt(s) |R_00|``), so for a clear gap it gives the SVD rank of
    :func:`numerical_rank`; it can differ only for values within a factor ``sqrt(s)`` of the
    cutoff (and on contrived Kahan-type matrices, where pivoted QR is known to hide a small
    singular value). ``k`` static, ``<= s``."""
    s, n = A.shape
    k = int(k)
    if k > s:
        raise ValueError(f"select_rows_ranked: cannot select k={k} rows from a matrix with {s} rows")
    if k == 0 or n == 0:
        return jnp.arange(k, dtype=jnp.int32), jnp.zeros((), jnp.int32)
    d, P = lapack.pivoted_qr(A.T)
    tiny = jnp.finfo(A.dtype).tiny
    rank = jnp.sum((d > rtol * d[0]) & (d > tiny)).astype(jnp.int32)
    return P[:k].astype(jnp.int32), jnp.minimum(rank, k)


def select_columns(A: Array, k: int) -> tuple[Array, Array]:
    """Choose ``k`` independent columns of ``A`` (m, n) by column-pivoted QR of ``A``.

    Returns ``(cols, rc)``: (k,) int column indices in pivot order and the reciprocal condition
    of ``A[:, cols]``. ``k`` must be static and ``<= n``."""
    n = A.shape[1]
    k = int(k)
    if k > n:
        raise ValueError(f"select_columns: cannot select k={k} columns from a matrix with {n} columns")
    if k == 0:
        return jnp.zeros(0, jnp.int32), jnp.ones((), A.dtype)
    if A.shape[0] == 0:
        return jnp.arange(k, dtype=jnp.int32), jnp.zeros((), A.dtype)
    cols = _pivots(A)[:k].astype(jnp.int32)
    return cols, rcond(A[:, cols])


def complement(indices, n: int):
    """Static helper: sorted indices in ``range(n)`` not in ``indices`` (numpy)."""
    import numpy as np

    mask = np.ones(n, bool)
    mask[np.asarray(indices, dtype=int)] = False
    return np.nonzero(mask)[0]
