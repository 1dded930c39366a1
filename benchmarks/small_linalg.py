"""Small SPD solves batched four ways: is there a LAPACK-free form worth using on CPU?

Times ``x = L^-1 b`` with ``A = L L^T`` (Cholesky + forward substitution) for a batch of random
SPD ``n x n`` matrices, through ``jm.jit``:

* ``lapack`` -- ``jnp.linalg.cholesky`` + ``solve_triangular`` under ``vmap`` (per-state LAPACK);
* ``unrolled`` -- :mod:`jaxmech.linalg` (unrolled at trace time, batch dimension first, as vmap
  lays it out);
* ``unrolled_last`` -- the same algorithm written on ``(n, n, B)`` arrays, so every elementwise
  step runs along the batch;
* ``rolled_last`` -- a ``lax.fori_loop`` over columns with masked full-matrix updates on
  ``(n, n, B)`` arrays (program size independent of ``n``).

Prints us per state and compile seconds and writes JSON. Findings: ``benchmarks/PROFILE.md``
("Session 20"). Usage: ``python benchmarks/small_linalg.py --sizes 6 24 --batches 1024``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from common import enable_x64, env_info, print_table, time_fn, write_json

import jaxmech as jm
from jaxmech import linalg


def lapack(A, b):
    L = jnp.linalg.cholesky(A)
    return jax.vmap(lambda L, b: jax.scipy.linalg.solve_triangular(L, b, lower=True))(L, b)


def unrolled(A, b):
    return linalg.solve_lower(linalg.cholesky(A), b[..., None])[..., 0]


def unrolled_last(A, b):
    At, bt = jnp.moveaxis(A, 0, -1), b.T  # (n, n, B), (n, B)
    n = At.shape[0]
    cols = []  # cols[j]: rows j..n-1 of column j of L, (n - j, B)
    for j in range(n):
        c = At[j:, j]
        for k in range(j):
            c = c - cols[k][j - k :] * cols[k][j - k : j - k + 1]
        cols.append(c / jnp.sqrt(c[:1]))
    xs = []
    for i in range(n):
        r = bt[i]
        for k in range(i):
            r = r - cols[k][i - k] * xs[k]
        xs.append(r / cols[i][0])
    return jnp.stack(xs).T


def rolled_last(A, b):
    At, bt = jnp.moveaxis(A, 0, -1), b.T
    n = At.shape[0]
    idx = jnp.arange(n)

    def column(j, A):
        col = jax.lax.dynamic_index_in_dim(A, j, 1, keepdims=False)  # (n, B)
        d = jnp.sqrt(jax.lax.dynamic_index_in_dim(col, j, 0, keepdims=True))
        lj = jnp.where((idx >= j)[:, None], col / d, 0.0)
        trail = ((idx > j)[:, None] & (idx > j)[None, :])[..., None]
        A = A - lj[:, None, :] * lj[None, :, :] * trail
        return jax.lax.dynamic_update_index_in_dim(A, lj, j, 1)

    L = jax.lax.fori_loop(0, n, column, At)

    def row(i, x):
        Li = jax.lax.dynamic_index_in_dim(L, i, 0, keepdims=False)  # (n, B)
        bi = jax.lax.dynamic_index_in_dim(bt, i, 0, keepdims=False)
        s = jnp.sum(jnp.where((idx < i)[:, None], Li, 0.0) * x, 0)
        xi = (bi - s) / jax.lax.dynamic_index_in_dim(Li, i, 0, keepdims=False)
        return jax.lax.dynamic_update_index_in_dim(x, xi, i, 0)

    return jax.lax.fori_loop(0, n, row, jnp.zeros_like(bt)).T


FORMS = {"lapack": lapack, "unrolled": unrolled, "unrolled_last": unrolled_last, "rolled_last": rolled_last}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[6, 12, 24, 48])
    ap.add_argument("--batches", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--max-unrolled", type=int, default=24, help="largest n for the unrolled forms (compile ~n^2)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default="small_linalg.json")
    args = ap.parse_args()
    enable_x64()
    rng = np.random.default_rng(0)
    rows, records = [], []
    for n in args.sizes:
        for B in args.batches:
            X = rng.standard_normal((B, n, n))
            A = jnp.asarray(X @ np.swapaxes(X, 1, 2) + n * np.eye(n))
            b = jnp.asarray(rng.standard_normal((B, n)))
            ref = None
            for name, f in FORMS.items():
                if name.startswith("unrolled") and n > args.max_unrolled:
                    continue
                g = jm.jit(f)
                t = time_fn(g, A, b, reps=args.reps)
                out = np.asarray(g(A, b))
                ref = out if ref is None else ref
                err = float(np.max(np.abs(out - ref)))
                rows.append([n, B, name, t.per_state_us(B), t.compile_s, err])
                records.append(dict(n=n, batch=B, form=name, us_per_state=t.per_state_us(B), timing=t, err=err))
    print_table(
        "SPD solve (Cholesky + forward substitution), float64",
        ["n", "batch", "function", "us/state", "first call s", "max |x - x_lapack|"],
        rows,
        caption="first call = trace + compile + one run; us/state from the best of the timed calls",
    )
    print(write_json(args.out, dict(env=env_info(), results=records)))


if __name__ == "__main__":
    main()
