"""Dense factorizations and solves (LAPACK on CPU) that batch without blocking XLA's thread pool.

Why this module exists. jaxlib 0.10's batched LAPACK kernels (Cholesky ``potrf``, LU ``getrf``,
triangular solves ``trsm``, QR ``geqrf``/``geqp3``, SVD ``gesdd``) split a batch into chunks,
queue them on XLA's intra-op CPU thread pool and block until they finish (``ParallelBatchMap``
-> ``BlockingCounter::Wait``). XLA's thunk executor runs independent thunks on that same pool,
which is sized from the CPU affinity: on a 2-core machine it has 2 threads, and two LAPACK calls
started at once each hold one thread while waiting for chunks queued behind the other. The
process then sits at 0 % CPU forever. Observed with gdb on ``jit(vmap(assemble))`` for the
Stewart platform at batch 1,024 (one thread in ``SingularValueDecompositionKernel``, the other in
``TriMatrixEquationSolver``). jaxlib 0.11 compiles the parallel path out of open-source builds;
0.10.2 is the newest jaxlib that installs here.

The kernel sends work to the pool only when the pool has more than one thread and
``batch * cost_per_matrix >= 200,000`` (its FLOP estimate, e.g. ``n^3 / 3`` for Cholesky);
smaller calls, and any call with a batch of one, run inline on the calling thread and cannot
block. So every function here, when ``jax.vmap`` batches it on the CPU and the pool has 2 to 15
threads (:func:`pool_may_block`), runs its LAPACK kernel in a loop over chunks of at most
``200,000 // cost`` states (a ``jax.custom_batching.custom_vmap`` rule; nested ``vmap`` axes are
merged into the chunked one; each output is written over the input of its shape, so the loop
allocates no batch-sized buffer). The chunks are exactly the calls LAPACK makes one matrix at a
time anyway, so results are bit-identical. Other platforms (GPU) keep one batched call
(``lax.platform_dependent``). Importing jaxmech therefore needs no pool resizing or XLA flag,
and changes no environment variable (until session 26 it set ``NPROC=16`` and an XLA flag).

Measured (Stewart, batch 1,024, float64): the chunked calls cost what the plain ones do on one
core (Cholesky 1.39 against 1.30 us per state, pivoted QR 4.8 against 5.0). What chunking gives
up is jaxlib's own parallel split of one call across cores (unpinned on 2 cores, Cholesky 0.77
against 1.64 us per state).

Derivatives. ``custom_vmap`` has no reverse mode, so every differentiable function here carries a
``jax.custom_jvp`` whose tangent is a product of matrices formed from primal values only
(explicit inverses of the factors): transposable for reverse mode, and free of LAPACK calls on
tangents. ``lu_factor``/``lu_solve``, the pivoted QR and the singular values are not
differentiated (used for rank decisions and inside solver loops): their inputs pass through
``stop_gradient``.

Shapes: every function takes one problem (``A`` (n, n) or (m, n)); leading batch dimensions are
allowed and are chunked the same way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax
from jax.custom_batching import custom_vmap

Array = jnp.ndarray

MIN_WORK = 200_000
"""jaxlib 0.10's ``kMinWorkPerTask``: a batched LAPACK call whose ``batch * cost`` stays below it
(or whose batch is 1) runs inline, off the thread pool."""


SAFE_POOL = 16
"""A pool of at least this many threads is not chunked for: a deadlock would need that many LAPACK
calls in flight at once, far more than any jaxmech program has independent ones."""


def _pool_sizes() -> set[int]:
    """The sizes XLA's CPU intra-op pool may have: ``NPROC`` when set (XLA then uses it), else the
    CPUs this process may use now or, had it been pinned after JAX started, the machine's count.
    Read, never written."""
    try:
        return {max(1, int(os.environ["NPROC"]))}
    except (KeyError, ValueError):
        pass
    sizes = {os.cpu_count() or 1}
    try:
        sizes.add(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        pass
    return sizes


def pool_may_block() -> bool:
    """True when two concurrent batched LAPACK calls could deadlock the pool: 2 to 15 threads.

    With one thread jaxlib runs every batch inline; with many, a deadlock needs more concurrent
    calls than a program has. Checked when a program is traced."""
    return any(2 <= n < SAFE_POOL for n in _pool_sizes())


def chunk_size(cost: int) -> int:
    """Largest batch one LAPACK call of ``cost`` FLOPs per matrix may have and still run inline."""
    return max(1, MIN_WORK // max(int(cost), 1))


def _chunked(f: Callable, cost: int, xs):
    """``vmap(f)`` over the leading axis of every leaf of ``xs``, in inline-sized chunks on CPU."""
    n = jax.tree.leaves(xs)[0].shape[0]
    k = chunk_size(cost)
    if n <= k or not pool_may_block():
        return jax.vmap(f)(xs)
    leaves, tree = jax.tree.flatten(xs)

    def cpu(*ls):
        return _in_place_map(lambda c: jax.vmap(f)(jax.tree.unflatten(tree, c)), list(ls), n, k)

    def other(*ls):
        return jax.vmap(f)(jax.tree.unflatten(tree, ls))

    return lax.platform_dependent(*leaves, cpu=cpu, default=other)


def _in_place_map(g: Callable, xs: list, n: int, k: int):
    """``g`` (on a list of leaves with a leading axis) applied chunk by chunk of ``k`` rows.

    Each output leaf is written over the input leaf of the same shape and dtype where there is one
    (a Cholesky factor over its matrix, a solution over its right-hand side), so the loop needs no
    fresh output buffer: on CPU a fresh multi-megabyte buffer per call costs its page faults
    (``jaxmech.allocator``), more than the kernel itself at these sizes."""
    out_sd = jax.eval_shape(g, [jax.ShapeDtypeStruct((k,) + x.shape[1:], x.dtype) for x in xs])
    outs, out_tree = jax.tree.flatten(out_sd)
    alias, used = [], set()
    for o in outs:
        j = next(
            (j for j, x in enumerate(xs) if j not in used and x.shape[1:] == o.shape[1:] and x.dtype == o.dtype), None
        )
        alias.append(j)
        if j is not None:
            used.add(j)
    init = [xs[j] if j is not None else jnp.zeros((n,) + o.shape[1:], o.dtype) for o, j in zip(outs, alias)]  # noqa: B905
    carried = {j: i for i, j in enumerate(alias) if j is not None}

    def run(start, size, buf):
        chunk = [
            lax.dynamic_slice_in_dim(buf[carried[j]] if j in carried else x, start, size) for j, x in enumerate(xs)
        ]
        ys = jax.tree.leaves(g(chunk))
        return [lax.dynamic_update_slice_in_dim(b, y, start, 0) for b, y in zip(buf, ys, strict=False)]

    full = n // k
    buf = lax.fori_loop(0, full, lambda i, b: run(i * k, k, b), init)
    if n > full * k:
        buf = run(full * k, n - full * k, buf)
    return jax.tree.unflatten(out_tree, buf)


def _broadcast(n: int, batched, xs):
    return jax.tree.map(lambda b, x: x if b else jnp.broadcast_to(x, (n,) + x.shape), batched, xs)


def _batched_apply(f: Callable, cost: int, xs):
    """``vmap(f)(xs)`` (leading axis on every leaf), chunked; an enclosing ``vmap`` adds its axis
    to the chunked one instead of batching each chunk's LAPACK call."""

    @custom_vmap
    def g(xs):
        return _chunked(f, cost, xs)

    @g.def_vmap
    def _rule(m, in_batched, xs):
        xs = _broadcast(m, in_batched[0], xs)
        n = jax.tree.leaves(xs)[0].shape[1]
        flat = jax.tree.map(lambda x: x.reshape((m * n,) + x.shape[2:]), xs)
        out = _batched_apply(f, cost, flat)
        return jax.tree.map(lambda o: o.reshape((m, n) + o.shape[1:]), out), jax.tree.map(lambda _: True, out)

    return g(xs)


def apply(f: Callable, cost: int, *args, core: int = 2):
    """``f(*args)`` for one problem whose arrays have ``core`` trailing dimensions; leading
    dimensions of the first argument, and any ``vmap`` around the call, are batch dimensions run
    in chunks that keep each LAPACK call of ``cost`` FLOPs per matrix off the thread pool."""
    lead = args[0].shape[: args[0].ndim - core]
    if lead:
        n = math.prod(lead)
        flat = tuple(a.reshape((n,) + a.shape[len(lead) :]) for a in args)
        out = _batched_apply(lambda xs: f(*xs), cost, flat)
        return jax.tree.map(lambda o: o.reshape(lead + o.shape[1:]), out)

    @custom_vmap
    def one(args):
        return f(*args)

    @one.def_vmap
    def _rule(m, in_batched, args):
        out = _batched_apply(lambda xs: f(*xs), cost, _broadcast(m, in_batched[0], args))
        return out, jax.tree.map(lambda _: True, out)

    return one(args)


# -- LAPACK FLOP estimates per matrix (jaxlib 0.10.2 lapack_kernels.cc) -----------------------


def _potrf(n):
    return n**3 // 3


def _trsm(n, m):
    return n * m * n


def _getrf(m, n):
    return m * n * min(m, n)


def _geqrf(m, n):
    k = min(m, n)
    return 2 * m * n * k - 2 * k**3 // 3


def _gesdd(m, n):
    return 10 * m * n * min(m, n)


def _cols(B: Array, A: Array) -> int:
    """Right-hand sides per problem: ``B`` is (..., n, m) when it has ``A``'s rank, else (..., n)."""
    return B.shape[-1] if B.ndim == A.ndim else 1


# -- Cholesky and triangular solves ------------------------------------------------------------


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _tri_inverse(L: Array, lower: bool) -> Array:
    """Inverse of triangular ``L`` (n, n): the primal-only factor tangents are multiplied by."""
    n = L.shape[-1]
    f = lambda a: jsl.solve_triangular(a, jnp.eye(n, dtype=a.dtype), lower=lower)  # noqa: E731
    return apply(f, _trsm(n, n), L)


@_tri_inverse.defjvp
def _tri_inverse_jvp(lower, primals, tangents):
    (L,), (dL,) = primals, tangents
    Li = _tri_inverse(L, lower)
    return Li, -Li @ (jnp.tril(dL) if lower else jnp.triu(dL)) @ Li


@jax.custom_jvp
def cholesky(A: Array) -> Array:
    """Lower Cholesky factor ``L`` of symmetric positive definite ``A`` (n, n) (NaN where it is
    not, as ``jnp.linalg.cholesky``)."""
    return apply(jnp.linalg.cholesky, _potrf(A.shape[-1]), A)


@cholesky.defjvp
def _cholesky_jvp(primals, tangents):
    (A,), (dA,) = primals, tangents
    L = cholesky(A)
    Li = _tri_inverse(L, True)
    S = Li @ ((dA + jnp.swapaxes(dA, -1, -2)) / 2) @ jnp.swapaxes(Li, -1, -2)
    n = A.shape[-1]
    phi = jnp.tril(S) - 0.5 * S * jnp.eye(n, dtype=S.dtype)
    return L, L @ phi


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def solve_triangular(L: Array, B: Array, lower: bool = True, trans: bool = False) -> Array:
    """``X`` with ``op(L) X = B``, ``op(L) = L^T`` if ``trans``; ``L`` (n, n) triangular (only the
    ``lower`` or upper triangle is read), ``B`` (n,) or (n, m)."""
    f = partial(jsl.solve_triangular, lower=lower, trans="T" if trans else "N")
    return apply(f, _trsm(L.shape[-1], _cols(B, L)), L, B)


@solve_triangular.defjvp
def _solve_triangular_jvp(lower, trans, primals, tangents):
    (L, B), (dL, dB) = primals, tangents
    X = solve_triangular(L, B, lower, trans)
    dL = jnp.tril(dL) if lower else jnp.triu(dL)
    Li = _tri_inverse(L, lower)
    if trans:
        Li, dL = jnp.swapaxes(Li, -1, -2), jnp.swapaxes(dL, -1, -2)
    vec = B.ndim == L.ndim - 1
    Xm, dBm = (X[..., None], dB[..., None]) if vec else (X, dB)
    dX = Li @ (dBm - dL @ Xm)
    return X, dX[..., 0] if vec else dX


def cho_solve(L: Array, B: Array) -> Array:
    """``X`` with ``L L^T X = B`` from the lower Cholesky factor ``L`` (n, n); ``B`` (n,) or (n, m)."""
    return solve_triangular(L, solve_triangular(L, B, True, False), True, True)


# -- general square systems --------------------------------------------------------------------


@jax.custom_jvp
def inv(A: Array) -> Array:
    """Inverse of square ``A`` (n, n) (LU with partial pivoting)."""
    n = A.shape[-1]
    return apply(jnp.linalg.inv, max(_getrf(n, n), _trsm(n, n)), A)


@inv.defjvp
def _inv_jvp(primals, tangents):
    (A,), (dA,) = primals, tangents
    Ai = inv(A)
    return Ai, -Ai @ dA @ Ai


@jax.custom_jvp
def solve(A: Array, B: Array) -> Array:
    """``X`` with ``A X = B``; ``A`` (n, n), ``B`` (n,) or (n, m) (LU with partial pivoting)."""
    n = A.shape[-1]
    if B.ndim == A.ndim - 1:
        return solve(A, B[..., None])[..., 0]
    return apply(jnp.linalg.solve, max(_getrf(n, n), _trsm(n, _cols(B, A))), A, B)


@solve.defjvp
def _solve_jvp(primals, tangents):
    (A, B), (dA, dB) = primals, tangents
    X = solve(A, B)
    Ai = inv(A)
    if B.ndim == A.ndim - 1:
        mv = lambda M, x: jnp.einsum("...ij,...j->...i", M, x)  # noqa: E731
        return X, mv(Ai, dB - mv(dA, X))
    return X, Ai @ (dB - dA @ X)


def lu_factor(A: Array):
    """``(lu, piv)`` of square ``A`` (n, n), as ``jax.scipy.linalg.lu_factor``; not differentiated."""
    n = A.shape[-1]
    return apply(jsl.lu_factor, _getrf(n, n), lax.stop_gradient(A))


def lu_solve(lu_and_piv, B: Array) -> Array:
    """``X`` with ``A X = B`` from :func:`lu_factor`; ``B`` (n,) or (n, m); not differentiated."""
    lu, piv = lu_and_piv
    n = lu.shape[-1]
    return apply(lambda a, p, b: jsl.lu_solve((a, p), b), _trsm(n, _cols(B, lu)), lu, piv, lax.stop_gradient(B))


# -- rank-revealing factorizations (not differentiated) -----------------------------------------


def _qr_diag_pivots(M: Array) -> tuple[Array, Array]:
    R, P = jsl.qr(M, pivoting=True, mode="r")
    return jnp.abs(jnp.diagonal(R)), P


def pivoted_qr(M: Array) -> tuple[Array, Array]:
    """``(|diag R|, P)`` of the column-pivoted QR of ``M`` (m, n) (LAPACK ``geqp3``): the
    magnitudes (min(m, n),) on ``R``'s diagonal and the column permutation (n,). Only these leave
    the chunk (``R`` itself would be one more batch-sized buffer)."""
    m, n = M.shape[-2:]
    return apply(_qr_diag_pivots, _geqrf(m, n), lax.stop_gradient(M))


def singular_values(A: Array) -> Array:
    """Singular values of ``A`` (m, n), descending, shape (min(m, n),)."""
    m, n = A.shape[-2:]
    return apply(partial(jnp.linalg.svd, compute_uv=False), _gesdd(m, n), lax.stop_gradient(A))


# -- least squares -----------------------------------------------------------------------------


def _pinv_plain(A: Array, rtol: float) -> Array:
    U, s, Vt = jnp.linalg.svd(A, full_matrices=False)
    cut = (s >= rtol * s[..., :1]) & (s > 0)
    si = jnp.where(cut, 1.0 / jnp.where(cut, s, 1.0), 0.0)
    return jnp.swapaxes(Vt, -1, -2) @ (si[..., :, None] * jnp.swapaxes(U, -1, -2))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def pinv(A: Array, rtol: float) -> Array:
    """Moore-Penrose pseudo-inverse of ``A`` (m, n), singular values ``<= rtol * sigma_max``
    cut (SVD). Its derivative is the constant-rank one (Golub and Pereyra 1973)."""
    m, n = A.shape[-2:]
    return apply(partial(_pinv_plain, rtol=rtol), _gesdd(m, n), A)


@pinv.defjvp
def _pinv_jvp(rtol, primals, tangents):
    (A,), (dA,) = primals, tangents
    P = pinv(A, rtol)
    T = lambda X: jnp.swapaxes(X, -1, -2)  # noqa: E731
    m, n = A.shape[-2:]
    Im, In = jnp.eye(m, dtype=A.dtype), jnp.eye(n, dtype=A.dtype)
    dP = -P @ dA @ P + P @ T(P) @ T(dA) @ (Im - A @ P) + (In - P @ A) @ T(dA) @ T(P) @ P
    return P, dP


def _lstsq_plain(A: Array, b: Array, rtol: float) -> Array:
    U, s, Vt = jnp.linalg.svd(A, full_matrices=False)
    cut = (s >= rtol * s[..., :1]) & (s > 0)
    si = jnp.where(cut, 1.0 / jnp.where(cut, s, 1.0), 0.0)
    Utb = jnp.swapaxes(U, -1, -2) @ (b if b.ndim == A.ndim else b[..., None])
    x = jnp.swapaxes(Vt, -1, -2) @ (si[..., :, None] * Utb)
    return x if b.ndim == A.ndim else x[..., 0]


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def _lstsq(A: Array, b: Array, rtol: float) -> Array:
    m, n = A.shape[-2:]
    return apply(partial(_lstsq_plain, rtol=rtol), _gesdd(m, n), A, b)


@_lstsq.defjvp
def _lstsq_jvp(rtol, primals, tangents):
    (A, b), (dA, db) = primals, tangents
    x = _lstsq(A, b, rtol)
    _, dP = _pinv_jvp(rtol, (A,), (dA,))
    P = pinv(A, rtol)
    if b.ndim == A.ndim:
        return x, dP @ b + P @ db
    mv = lambda M, v: jnp.einsum("...ij,...j->...i", M, v)  # noqa: E731
    return x, mv(dP, b) + mv(P, db)


def lstsq(A: Array, b: Array, rtol: float | None = None) -> Array:
    """Minimum-norm least-squares solution of ``A x = b``; ``A`` (m, n), ``b`` (m,) or (m, k).

    Singular values below ``rtol * sigma_max`` are cut (default ``max(m, n) * eps``, as
    ``jnp.linalg.lstsq``); ``x = V diag(1/s) U^T b`` as there. Its derivative is the
    constant-rank one of :func:`pinv`."""
    m, n = A.shape[-2:]
    if rtol is None:
        rtol = max(m, n) * float(jnp.finfo(A.dtype).eps)
    if m == 0 or n == 0:
        return jnp.zeros(b.shape[:-2] + (n,) + b.shape[-1:] if b.ndim >= 2 else (n,), A.dtype)
    return _lstsq(A, b, float(rtol))
