"""Per-component timing of batched Stewart forward dynamics (jit(vmap(f)), float64, CPU).

Times each building block of ``jm.forward_dynamics(..., method="kkt")`` separately at one batch
size, interleaved (A B C A B C ...) so machine load hits them alike, and reports the best and
median per-state time, the compile time and the size of the optimized HLO. Run pinned to one
core for stable numbers:

    taskset -c 0 .venv/bin/python benchmarks/profile_fd.py [--batch 1024] [--reps 7] [--only fd,crba]

Measured (Stewart, float64, one core of the shared 2-core CI machine, benchmarks/dynamics.py,
best of 5; Pinocchio 4.1 ``constraintDynamics`` 13.5-14.6 us/state in the same runs):

    batch            1     64   1024   8192
    before (f196c6c) 485    120    169    199  us/state, compile 3.8-5.0 s
    after            208     40     49     80  us/state, compile 2.5-2.6 s

At batch 8192 the working set leaves the caches: ``jax.lax.map(f, xs, batch_size=64)`` instead
of one ``vmap`` over all states runs 43 us/state against 85. After these changes a batched
state costs about 30 us of kinematics and tree terms (``kinematics.joint_columns`` ~10,
``local_transforms`` + world poses ~7) and about 15 us of per-state LAPACK calls (pivoted QR ~6,
two Cholesky factorizations and three triangular solves).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false")

import jax  # noqa: E402

import jaxmech as jm  # noqa: E402  (before any JAX computation: jaxmech/_xla.py)

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxmech import rank  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def components(mech):
    """name -> f(q, v, tau) of one state."""
    fd = lambda q, v, t: jm.forward_dynamics(mech, q, v, t).a  # noqa: E731
    out = {
        "fd_kkt": fd,
        "crba": lambda q, v, t: jm.crba(mech, q),
        "nle": lambda q, v, t: jm.nonlinear_effects(mech, q, v),
        "closure_jacobian": lambda q, v, t: jm.closure_jacobian(mech, q),
        "closure_bias": lambda q, v, t: jm.closure_bias(mech, q, v),
        "svd_rank": lambda q, v, t: rank.numerical_rank(jm.closure_jacobian(mech, q)),
        "qr_rows": lambda q, v, t: rank.select_rows(jm.closure_jacobian(mech, q), 18)[0],
        "cholesky_M": lambda q, v, t: jnp.linalg.cholesky(jm.crba(mech, q)),
    }
    return out


def states(mech, n, seed=0):
    rng = np.random.default_rng(seed)
    Q = np.tile(np.asarray(mech.q0), (n, 1))
    Q = Q + 0.01 * rng.normal(size=Q.shape)  # near q0, not exactly closed (timing only)
    Q = np.asarray(jax.vmap(lambda q: jm.kinematics.normalize(mech, q))(jnp.asarray(Q)))
    return jnp.asarray(Q), jnp.asarray(rng.normal(size=(n, mech.nv))), jnp.asarray(rng.normal(size=(n, mech.nv)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "stewart.toml"))
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", default="", help="comma-separated component names")
    args = ap.parse_args()
    mech = jm.load(args.config)
    comps = components(mech)
    if args.only:
        comps = {k: comps[k] for k in args.only.split(",")}
    Q, V, T = states(mech, args.batch)
    fns, info = {}, {}
    for k, f in comps.items():
        jf = jax.jit(jax.vmap(f))
        t0 = time.perf_counter()
        lowered = jf.lower(Q, V, T)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        hlo = compiled.as_text()
        n_jaxpr = len(jax.make_jaxpr(jax.vmap(f))(Q, V, T).jaxpr.eqns)
        info[k] = (t1 - t0, t2 - t1, hlo.count("\n"), n_jaxpr)
        jax.block_until_ready(compiled(Q, V, T))
        fns[k] = compiled
    times = {k: [] for k in fns}
    for _ in range(args.reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(Q, V, T))
            times[k].append(time.perf_counter() - t0)
    b = args.batch
    print(
        f"{mech.name}: batch {b}, {args.reps} reps; us/state best / median; trace s, compile s, HLO lines, jaxpr eqns"
    )
    for k, ts in times.items():
        tr, co, nh, nj = info[k]
        print(
            f"  {k:18s} {1e6 * min(ts) / b:8.2f} {1e6 * statistics.median(ts) / b:8.2f}   "
            f"trace {tr:5.2f} compile {co:5.2f}  hlo {nh:6d}  eqns {nj:5d}"
        )


if __name__ == "__main__":
    main()
