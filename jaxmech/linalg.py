"""Small dense linear algebra for tiny fixed sizes, written to vectorize across a batch.

Every routine here is unrolled at trace time over its (static, small) matrix size and uses only
elementwise ``jnp`` arithmetic and reductions: under ``jax.vmap`` each step is one fused
elementwise kernel over the whole batch, with no per-state LAPACK call (jaxlib's batched LAPACK
kernels run one small matrix at a time and cost several microseconds per state). Leading
dimensions are batch dimensions: ``A`` (..., n, n).

* :func:`cholesky` -- ``A = L L^T`` (lower ``L``; NaN where ``A`` is not positive definite, as
  LAPACK's ``potrf`` under JAX);
* :func:`solve_lower`, :func:`solve_lower_t` -- ``L X = B`` and ``L^T X = B``;
* :func:`cho_solve` -- ``A x = b`` from the factor;
Measured on XLA's CPU backend (Stewart, 256 states, one process): the unrolled form is *not*
faster than the per-state LAPACK calls at these sizes (the 18-step pivoted row selection alone
25 us/state against 19 us/state for the whole LAPACK KKT solve; a 24 x 24 unrolled Cholesky
compiles in ~10 s), so :func:`jaxmech.forward_dynamics` uses it only with
``method="kkt_blocks"``, whose cost grows linearly with independent loops.

* :func:`pivoted_rows` -- rank-revealing row order of ``A`` (s, n): modified Gram-Schmidt with
  the largest remaining row norm first, i.e. the column-pivoted QR of ``A^T`` (LAPACK ``geqp3``
  makes the same choices up to rounding) with the ``|R_tt|`` it produces.

:class:`BlockKKT` holds the static block structure the constrained dynamics factorize with: the
mass matrix of a tree is block-diagonal over the subtrees hanging from the world (branch-induced
sparsity: the Stewart platform's ``M`` is the platform block and six leg blocks), and closure rows
couple only the blocks their loop paths run through, so blocks and rows fall apart into
independent components (N side-by-side four-bars: N components), each solved on its own and all of
equal (padded) shape, vectorized together.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

Array = jnp.ndarray


def cholesky(A: Array) -> Array:
    """Lower Cholesky factor of symmetric positive definite ``A`` (..., n, n), column by column."""
    n = A.shape[-1]
    cols: list[Array] = []
    below = [np.arange(n) >= j for j in range(n)]
    for j in range(n):
        c = A[..., :, j]
        for k in range(j):
            c = c - cols[k] * cols[k][..., j : j + 1]
        ljj = jnp.sqrt(c[..., j : j + 1])
        cols.append(jnp.where(below[j], c / ljj, 0.0))
    if not cols:
        return A
    return jnp.stack(cols, -1)


def solve_lower(L: Array, B: Array) -> Array:
    """``X`` with ``L X = B``: forward substitution; ``L`` (..., n, n), ``B`` (..., n, m)."""
    n = L.shape[-1]
    xs: list[Array] = []
    for i in range(n):
        r = B[..., i, :]
        for k in range(i):
            r = r - L[..., i, k, None] * xs[k]
        xs.append(r / L[..., i, i, None])
    return jnp.stack(xs, -2) if xs else B


def solve_lower_t(L: Array, B: Array) -> Array:
    """``X`` with ``L^T X = B``: back substitution; ``L`` (..., n, n), ``B`` (..., n, m)."""
    n = L.shape[-1]
    xs: list[Array | None] = [None] * n
    for i in reversed(range(n)):
        r = B[..., i, :]
        for k in range(i + 1, n):
            r = r - L[..., k, i, None] * xs[k]
        xs[i] = r / L[..., i, i, None]
    return jnp.stack(xs, -2) if n else B


def cho_solve(L: Array, b: Array) -> Array:
    """``x`` with ``L L^T x = b``; ``b`` (..., n) or (..., n, m)."""
    vec = b.ndim == L.ndim - 1
    B = b[..., None] if vec else b
    X = solve_lower_t(L, solve_lower(L, B))
    return X[..., 0] if vec else X


def pivoted_rows(A: Array, k: int) -> tuple[Array, Array]:
    """Rank-revealing order of the rows of ``A`` (..., s, n): ``(order, d)``.

    ``order`` (..., k) int32 row indices, ``d`` (..., k) the norm of each chosen row after
    removing its components along the rows chosen before it (non-increasing: ``|R_tt|`` of the
    column-pivoted QR of ``A^T``). Rows already chosen get norm -1 so they are never chosen twice.
    ``k <= s`` static."""
    s = A.shape[-2]
    idx = np.arange(s)
    R = A
    taken = jnp.zeros(A.shape[:-1], bool)
    order, diag = [], []
    for _ in range(k):
        nrm2 = jnp.where(taken, -1.0, jnp.sum(R * R, -1))
        p = jnp.argmax(nrm2, -1)
        oh = idx == p[..., None]  # (..., s)
        d2 = jnp.max(nrm2, -1)
        d = jnp.sqrt(jnp.maximum(d2, 0.0))
        row = jnp.sum(jnp.where(oh[..., None], R, 0.0), -2)  # (..., n)
        u = row / jnp.where(d > 0, d, 1.0)[..., None]
        R = R - jnp.sum(R * u[..., None, :], -1, keepdims=True) * u[..., None, :]
        taken = taken | oh
        order.append(p.astype(jnp.int32))
        diag.append(d)
    if not order:
        return jnp.zeros(A.shape[:-2] + (0,), jnp.int32), jnp.zeros(A.shape[:-2] + (0,), A.dtype)
    return jnp.stack(order, -1), jnp.stack(diag, -1)


# ----------------------------------------------------------------------------- block structure


class _UnionFind:
    def __init__(self, n: int):
        self.p = list(range(n))

    def find(self, i: int) -> int:
        while self.p[i] != i:
            self.p[i] = self.p[self.p[i]]
            i = self.p[i]
        return i

    def union(self, i: int, j: int) -> None:
        self.p[self.find(i)] = self.find(j)


class BlockKKT:
    """Static block structure of ``M`` and ``C`` for one mechanism (numpy index tables).

    ``blk_dof`` (nblk + 1, bs): the velocity indices of each block of ``M`` (one per subtree of
    the world), ``nv`` where padded, last row an all-pad block; ``comp_blk`` (ncomp, nbc): the
    blocks of each independent component (``nblk`` = pad block); ``comp_rows`` (ncomp, sc): its
    closure rows (``s`` = pad row). ``row_dofs`` lists, per raw row, the velocity indices its
    Jacobian row can touch (the dofs on its loop's paths)."""

    def __init__(self, topo, coupling_dofs: np.ndarray):
        nv, s = topo.nv, topo.n_rows
        root = np.empty(len(topo.body_names), dtype=int)
        for b in range(len(topo.body_names)):
            a = b
            while topo.parent[a] >= 0:
                a = topo.parent[a]
            root[b] = a
        roots = sorted(set(root[topo.v_body].tolist()))
        blocks = [np.nonzero(root[topo.v_body] == r)[0] for r in roots]
        nblk = len(blocks)
        bs = max((len(b) for b in blocks), default=1)
        blk_dof = np.full((nblk + 1, bs), nv, dtype=np.int32)
        for i, b in enumerate(blocks):
            blk_dof[i, : len(b)] = b
        blk_of_dof = np.empty(nv, dtype=int)
        for i, b in enumerate(blocks):
            blk_of_dof[b] = i
        row_dofs: list[np.ndarray] = [np.zeros(0, int)] * s
        for g in topo.groups:
            r = len(g.rows)
            for i in range(len(g.loop_id)):
                dofs = np.unique(g.dof_v[i][g.dof_sign[i] != 0])
                for j in range(r):
                    row_dofs[g.row_offset + i * r + j] = dofs
        for j in range(len(topo.coupling_names)):
            row_dofs[topo.coupling_rows + j] = np.asarray(coupling_dofs, dtype=int)
        uf = _UnionFind(nblk)
        row_blk = []
        for r in range(s):
            bl = np.unique(blk_of_dof[row_dofs[r]]) if row_dofs[r].size else np.zeros(0, int)
            for b in bl[1:]:
                uf.union(int(bl[0]), int(b))
            row_blk.append(int(bl[0]) if bl.size else -1)
        comp_id = {}
        comps_b: list[list[int]] = []
        for b in range(nblk):
            c = comp_id.setdefault(uf.find(b), len(comps_b))
            if c == len(comps_b):
                comps_b.append([])
            comps_b[c].append(b)
        comps_r: list[list[int]] = [[] for _ in comps_b]
        for r in range(s):
            if row_blk[r] >= 0:
                comps_r[comp_id[uf.find(row_blk[r])]].append(r)
        loose = [r for r in range(s) if row_blk[r] < 0]  # rows touching no dof (zero rows)
        if loose and comps_r:
            comps_r[0].extend(loose)
        self.nv, self.s, self.nblk, self.bs = nv, s, nblk, bs
        self.ncomp = len(comps_b)
        nbc = max((len(c) for c in comps_b), default=1)
        self.sc = max((len(c) for c in comps_r), default=0)
        self.comp_blk = np.full((self.ncomp, nbc), nblk, dtype=np.int32)
        self.comp_rows = np.full((self.ncomp, self.sc), s, dtype=np.int32)
        for c, (bl, rl) in enumerate(zip(comps_b, comps_r, strict=True)):
            self.comp_blk[c, : len(bl)] = bl
            self.comp_rows[c, : len(rl)] = rl
        self.blk_dof = blk_dof
        self.comp_dof = blk_dof[self.comp_blk]  # (ncomp, nbc, bs)
        self.pad_dof = self.comp_dof == nv
        self.pad_row = self.comp_rows == s
        self.row_dofs = row_dofs
