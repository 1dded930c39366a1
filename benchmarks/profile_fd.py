"""Per-component timing of batched Stewart forward dynamics (jit(vmap(f)), float64, CPU).

Times each building block of ``jm.forward_dynamics(..., method="kkt")`` separately at one batch
size, interleaved (A B C A B C ...) so machine load hits them alike, and reports the best and
median per-state time, the compile time and the size of the optimized HLO. Run pinned to one
core for stable numbers:

    PYTHONPATH=. taskset -c 0 .venv/bin/python benchmarks/profile_fd.py [--batches 1,64,1024,4096] [--reps 7]

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

import jax  # noqa: E402

import jaxmech as jm  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def components(mech):
    """Stage name -> f(q, v, tau) of one state. Each stage is timed alone; the later stages take the
    earlier ones' outputs as inputs computed inside (so their time includes them: read differences)."""
    from jaxmech.curvature import closure_terms_world
    from jaxmech.dynamics import _rnea, _World
    from jaxmech.kkt import Rows as _Rows

    def kin(q, v, t):
        k = jm.kinematics(mech, q)
        return k.R, k.p, k.cols

    def kin_v(q, v, t):
        return jm.kinematics(mech, q, v)

    def crows(q, v, t):
        w = _World(mech, q)
        return closure_terms_world(mech, w.R, w.p, w.cols)[0]

    def gamma(q, v, t):
        w = _World(mech, q)
        V, Ab = w.motion(v)
        return closure_terms_world(mech, w.R, w.p, w.cols, V, Ab)

    def mass(q, v, t):
        return _World(mech, q).mass_matrix()

    def nle(q, v, t):
        w = _World(mech, q)
        return _rnea(mech, w, q, v, None)

    def rank_sel(q, v, t):
        w = _World(mech, q)
        C = closure_terms_world(mech, w.R, w.p, w.cols)[0]
        r = _Rows(C, jnp.zeros(C.shape[0], q.dtype), jnp.ones(C.shape[0], q.dtype), 1e-9)
        return r.Cs, r.rank

    return {
        "fd_kkt": lambda q, v, t: jm.forward_dynamics(mech, q, v, t).a,
        "kinematics": kin,
        "kinematics_v": kin_v,
        "closure_C": crows,
        "closure_C_gamma": gamma,
        "crba_M": mass,
        "rnea_h": nle,
        "rank_select": rank_sel,
        "closure_jacobian(public)": lambda q, v, t: jm.closure_jacobian(mech, q),
        "forward_kinematics(public)": lambda q, v, t: jm.forward_kinematics(mech, q),
    }


def batchlast_components(mech):
    """Stage name -> f(Q, V, T) of a whole batch (batch first in, as ``vmap`` hands them over):
    the batch-last stages forward dynamics runs under ``vmap`` (``jaxmech.batchlast_dynamics``),
    each cumulative (read differences)."""
    from jaxmech import batchlast as bl
    from jaxmech import batchlast_dynamics as bd

    def upto(stage):
        def f(Q, V, T):
            QT, VT = Q.T, V.T
            Re, pe = bl.world_poses(mech, *bl.local_poses(mech, QT))
            cols = bl.world_columns(mech, Re, pe, QT)
            if stage == "kin":
                return Re, pe, cols
            vJ = cols * VT[:, None]
            own = bd._per_body(mech, vJ)
            Vb = bd._down(mech, own)
            Ab = bd._down(mech, bd._ad(Vb, own))
            if stage == "motion":
                return Vb, Ab
            mass, com, Ic = bd._world_inertia(mech, Re, pe)
            if stage == "M":
                return Vb, Ab, bd._mass_matrix(mech, bd._spatial_inertia(mass, com, Ic), cols, QT.shape[-1])
            if stage == "C_gamma":
                return bd._closure(mech, Re, pe, cols, Vb, Ab, QT.shape[-1])
            return bd.terms(mech, QT, VT)

        return f

    return {
        "bl: poses + columns": upto("kin"),
        "bl: + V, Ab": upto("motion"),
        "bl: + M": upto("M"),
        "bl: + C, gamma (no M)": upto("C_gamma"),
        "bl: M, h, C, gamma": upto("all"),
    }


def kkt_only(mech, Q, V, T):
    """The KKT solve alone on precomputed (M, C, gamma, b): the linear algebra of fd_kkt."""
    from jaxmech.curvature import closure_terms_world
    from jaxmech.dynamics import _rnea, _World

    def pre(q, v, t):
        w = _World(mech, q)
        V_, Ab = w.motion(v)
        C, g = closure_terms_world(mech, w.R, w.p, w.cols, V_, Ab)
        M = w.mass_matrix() + jnp.diag(mech.armature)
        return M, C, g, t - _rnea(mech, w, q, v, None, motion=(V_, Ab))

    M, C, g, b = jm.jit(jax.vmap(pre))(Q, V, T)

    def solve(M, C, g, b):
        from jaxmech.kkt import solve as kkt_solve

        return kkt_solve(M, C, g, jnp.ones(C.shape[0], M.dtype), b, 1e-9)

    def solve_blocks(M, C, g, b):
        from jaxmech.constrained import _kkt_solve, _to_blocks

        Mb, Cc, gc = _to_blocks(mech, M, C, g)
        return _kkt_solve(mech, Mb, Cc, gc, jnp.ones(C.shape[0], M.dtype), b, 1e-9)[0]

    return solve, solve_blocks, (M, C, g, b)


def states(mech, n, seed=0):
    rng = np.random.default_rng(seed)
    Q = np.tile(np.asarray(mech.q0), (n, 1))
    Q = Q + 0.01 * rng.normal(size=Q.shape)  # near q0, not exactly closed (timing only)
    Q = np.asarray(jax.vmap(lambda q: jm.normalize(mech, q))(jnp.asarray(Q)))
    return jnp.asarray(Q), jnp.asarray(rng.normal(size=(n, mech.nv))), jnp.asarray(rng.normal(size=(n, mech.nv)))


def _flops(compiled) -> float:
    try:
        ca = compiled.cost_analysis()
        ca = ca[0] if isinstance(ca, (list, tuple)) else ca
        return float(ca.get("flops", float("nan")))
    except Exception:  # noqa: BLE001 - backend without cost analysis
        return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "stewart.toml"))
    ap.add_argument("--batches", default="1,64,1024,4096")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", default="", help="comma-separated component names")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--core", type=int, default=0, help="pin to this core (-1: no pinning)")
    args = ap.parse_args()
    if args.core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    dt = jnp.dtype(args.dtype)
    mech = jm.load(args.config)
    mech = jax.tree_util.tree_map(
        lambda x: x.astype(dt) if isinstance(x, jax.Array) and x.dtype.kind == "f" else x, mech
    )
    comps = components(mech)
    if args.only:
        comps = {k: comps[k] for k in args.only.split(",") if k in comps}
    batches = [int(b) for b in args.batches.split(",")]
    Qa, Va, Ta = states(mech, max(batches))
    Qa, Va, Ta = (x.astype(dt) for x in (Qa, Va, Ta))
    table = {}
    for b in batches:
        Q, V, T = Qa[:b], Va[:b], Ta[:b]
        fns, args_of, info = {}, {}, {}
        items = [(k, f, (Q, V, T)) for k, f in comps.items()]
        if not args.only or "bl" in args.only.split(","):
            for k, f in batchlast_components(mech).items():
                t0 = time.perf_counter()
                compiled = jm.jit(f).lower(Q, V, T).compile()
                info[k] = (time.perf_counter() - t0, _flops(compiled) / b)
                jax.block_until_ready(compiled(Q, V, T))
                fns[k], args_of[k] = compiled, (Q, V, T)
        if not args.only or "kkt_solve" in args.only:
            solve, solve_blocks, kargs = kkt_only(mech, Q, V, T)
            items.append(("kkt_solve(certified rank, LAPACK)", solve, kargs))
            items.append(("kkt_blocks(+rank, unrolled)", solve_blocks, kargs))
        for k, f, a in items:
            t0 = time.perf_counter()
            compiled = jm.jit(jax.vmap(f)).lower(*a).compile()
            info[k] = (time.perf_counter() - t0, _flops(compiled) / b)
            jax.block_until_ready(compiled(*a))
            fns[k], args_of[k] = compiled, a
        times = {k: [] for k in fns}
        for _ in range(args.reps):
            for k, f in fns.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(*args_of[k]))
                times[k].append(time.perf_counter() - t0)
        for k, ts in times.items():
            table.setdefault(k, {})[b] = (1e6 * min(ts) / b, 1e6 * statistics.median(ts) / b) + info[k]
    print(f"{mech.name} {dt.name}: us/state (best of {args.reps}) per batch; XLA flops/state; compile s (last batch)")
    print(f"  {'stage':28s}" + "".join(f"{b:>10d}" for b in batches) + f"{'flops':>10s}{'GF/s':>8s}{'compile':>9s}")
    for k, row in table.items():
        last = row[batches[-1]]
        gfs = last[3] / last[0] / 1e3
        print(
            f"  {k:28s}" + "".join(f"{row[b][0]:10.2f}" for b in batches) + f"{last[3]:10.0f}{gfs:8.2f}{last[2]:9.2f}"
        )


if __name__ == "__main__":
    main()
