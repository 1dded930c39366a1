"""Constrained forward dynamics per state: jaxmech (jit(vmap), KKT) against Pinocchio 4
``constraintDynamics`` (Python loop over the same states; its binding costs about 0.6 us a call).
Protocol: docs/benchmarks.md.

For each mechanism (Stewart free-platform and published-graph variants, four-bar, Cassie): closed
states (actuated coordinates perturbed around q0 and assembled; Cassie, whose rough q0 does not
assemble, from ``simulate.random_closed_configurations`` around its exactly closed q0),
velocities in null(C), random efforts. The two are timed on the same states with the same
statistic, calls interleaved (jaxmech, Pinocchio, jaxmech, ...) so that load from other processes
hits both alike: best and median wall time and the process CPU time of the fastest call, per
state. Two passes: every thread of the process pinned to one core (``cores=1``: the fair
comparison, Pinocchio is single-threaded), then all cores (jaxmech's XLA pool may use them).
Also jit compile time, max ``|C a + gamma|`` and the max relative difference from Pinocchio.
float32 rows compare float32 jaxmech with float64 Pinocchio (the only Pinocchio there is): their
ratio is labelled so. The four-bar has a revolute cut, which Pinocchio's rigid constraints cannot
express: it has jaxmech figures only. Writes ``benchmarks/results/dynamics.json``.

    python benchmarks/dynamics.py [--quick]      # tiny run for CI: --tiny
    python benchmarks/dynamics.py --mechs stewart --batches 1,64,1024,8192 --dtypes float64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import common  # noqa: E402  (imports jaxmech first: CPU pool sizing)
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jaxmech as jm  # noqa: E402
from jaxmech import simulate as sim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def states(mech, n, spread, seed=0):
    rng = np.random.default_rng(seed)
    qa = mech.topo.actuated_v
    qi = np.array([mech.topo.q_start[mech.topo.v_body[k]] + (k - mech.topo.v_start[mech.topo.v_body[k]]) for k in qa])
    base = min(n, 32)
    Q = np.tile(np.asarray(mech.q0), (base, 1))
    Q[:, qi] += rng.uniform(-spread, spread, (base, qi.size))
    asm = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))
    res = asm(jnp.asarray(Q))
    Q = np.asarray(res.q)[np.asarray(res.status) == 0]
    if len(Q) == 0:  # e.g. Cassie: q0 closed but singular for the actuated partition
        Q = np.asarray(sim.random_closed_configurations(mech, jax.random.PRNGKey(seed), base, 0.5 * spread))
        print(f"{mech.name}: no assembled state; states from random_closed_configurations around q0", flush=True)
    Q = Q[np.arange(n) % len(Q)]
    C = np.asarray(jm.jit(jax.vmap(lambda q: jm.closure_jacobian(mech, q)))(jnp.asarray(Q)))
    V = np.empty((n, mech.nv))
    for i in range(n):
        _, S, Vt = np.linalg.svd(C[i])
        r = int((S > 1e-9 * S[0]).sum())
        N = Vt[r:].T
        V[i] = N @ rng.normal(size=N.shape[1])
    return Q, V, rng.normal(size=(n, mech.nv))


def pin_setup(mech, Q):
    """A function running Pinocchio's constraintDynamics over a batch of states (numpy in and
    out, our conventions), or None when Pinocchio cannot express the constraints."""
    try:
        model, cons = jm.to_pinocchio(mech)
    except jm.ModelError:
        return None, ""
    data = model.createData()
    datas = pin.StdVec_RigidConstraintData([c.createData() for c in cons])
    pin.initConstraintDynamics(model, data, cons, datas)
    C = np.asarray(jm.closure_jacobian(mech, jnp.asarray(Q[0])))
    redundant = np.linalg.matrix_rank(C, 1e-9 * np.linalg.norm(C, 2)) < C.shape[0]
    ps = pin.ProximalSettings(1e-12, 1e-6, 100) if redundant else pin.ProximalSettings(1e-12, 0.0, 1)

    def run(qp, vp, tp):
        out = np.empty_like(vp)
        for i in range(len(qp)):
            out[i] = pin.constraintDynamics(model, data, qp[i], vp[i], tp[i], cons, datas, ps)
        return out

    return run, ("mu=1e-6 x100" if redundant else "mu=0")


def bench(name, mech, batches, dtypes, passes, reps):
    n = max(batches)
    Q, V, T = states(mech, n, 0.03 if "stewart" in name else 0.2)
    pin_fn, settings = pin_setup(mech, Q)
    rows = []
    gam = jm.jit(jax.vmap(lambda q, v: (jm.closure_jacobian(mech, q), jm.closure_bias(mech, q, v))))
    Cs, Gs = (np.asarray(x) for x in gam(jnp.asarray(Q), jnp.asarray(V)))
    qp, vp, tp = jm.q_to_pinocchio(mech, Q), jm.v_to_pinocchio(mech, V), jm.v_to_pinocchio(mech, T)
    f = jm.jit(jax.vmap(lambda m, q, v, t: jm.forward_dynamics(m, q, v, t).a, (None, 0, 0, 0)))
    for dtype in dtypes:
        m = common.cast(mech, dtype)
        dname = jnp.dtype(dtype).name
        for b in batches:
            args = tuple(jnp.asarray(x[:b], dtype) for x in (Q, V, T))
            fns = {"jaxmech": lambda *_, a=args, m=m: f(m, *a)}
            if pin_fn is not None:
                fns["pinocchio"] = lambda *_, b=b: pin_fn(qp[:b], vp[:b], tp[:b])
            t0 = time.perf_counter()
            a = np.asarray(jax.block_until_ready(fns["jaxmech"]()), np.float64)
            compile_s = time.perf_counter() - t0  # trace + compile + one run
            cerr = float(np.max(np.abs(np.einsum("nij,nj->ni", Cs[:b], a) + Gs[:b])))
            row = {"mechanism": name, "nv": mech.nv, "rows": mech.n_rows, "dtype": dname, "batch": b}
            row["max_closure_accel_error"] = cerr
            row["jaxmech_compile_s"] = compile_s
            if pin_fn is not None:
                a_ref = jm.v_from_pinocchio(mech, fns["pinocchio"]())
                row["pinocchio_settings"] = settings
                row["max_rel_diff_vs_pinocchio"] = float(
                    np.max(np.abs(a - a_ref) / np.max(np.abs(a_ref), axis=1, keepdims=True))
                )
                row["pinocchio_closure_accel_error"] = float(
                    np.max(np.abs(np.einsum("nij,nj->ni", Cs[:b], a_ref) + Gs[:b]))
                )
            for label, cores in passes:
                common.pin_to_core(cores)
                t = common.time_interleaved(fns, reps=reps)
                for k, tk in t.items():
                    row[f"{k}_us_per_state_best_cores{label}"] = 1e6 * tk.best_s / b
                    row[f"{k}_us_per_state_median_cores{label}"] = 1e6 * tk.median_s / b
                    row[f"{k}_cpu_us_per_state_cores{label}"] = 1e6 * tk.cpu_best_s / b
                if pin_fn is not None:
                    key = (
                        "ratio_pinocchio_f64_over_jaxmech_f32" if dname == "float32" else "ratio_pinocchio_over_jaxmech"
                    )
                    row[f"{key}_median_cores{label}"] = t["pinocchio"].median_s / t["jaxmech"].median_s
                    row[f"ratio_cpu_cores{label}"] = t["pinocchio"].cpu_best_s / t["jaxmech"].cpu_best_s
                tp_ = t.get("pinocchio")
                pin_txt = (
                    f"  pin {1e6 * tp_.median_s / b:8.2f} us (cpu {1e6 * tp_.cpu_best_s / b:8.2f})"
                    f"  ratio {t['pinocchio'].median_s / t['jaxmech'].median_s:6.2f}"
                    + (" (vs f64 Pinocchio)" if dname == "float32" else "")
                    if pin_fn is not None
                    else "  (no Pinocchio equivalent: revolute cut)"
                )
                print(
                    f"{name:14s} {dname:8s} cores {label:3s} batch {b:5d}: jaxmech median "
                    f"{1e6 * t['jaxmech'].median_s / b:9.2f} us/state (cpu {1e6 * t['jaxmech'].cpu_best_s / b:8.2f}, "
                    f"compile {compile_s:5.1f} s)  |Ca+g| {cerr:.1e}" + pin_txt,
                    flush=True,
                )
            common.pin_to_core(passes[-1][1] | passes[0][1])
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batches 1 and 64, float64 only")
    ap.add_argument("--tiny", action="store_true", help="CI smoke run: four_bar and stewart, batch 4, 5 reps, one core")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dynamics.json"))
    ap.add_argument("--mechs", default="stewart,stewart_graph,four_bar,cassie", help="comma-separated config names")
    ap.add_argument("--batches", default="", help="comma-separated batch sizes (default 1,64,1024,8192)")
    ap.add_argument("--dtypes", default="", help="comma-separated: float64,float32 (default both)")
    ap.add_argument("--reps", type=int, default=7, help="interleaved timed calls per function")
    args = ap.parse_args()
    batches = [1, 64] if args.quick else [1, 64, 1024, 8192]
    dtypes = [jnp.float64] if args.quick else [jnp.float64, jnp.float32]
    mechs = args.mechs
    allc = os.sched_getaffinity(0)
    passes = [("1", {min(allc)}), ("all", allc)]
    if args.tiny:
        batches, dtypes, mechs, passes = [4], [jnp.float64], "four_bar,stewart", passes[:1]
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    if args.dtypes:
        dtypes = [jnp.dtype(d).type for d in args.dtypes.split(",")]
    results = []
    for name in mechs.split(","):
        results += bench(name, jm.load(ROOT / "configs" / f"{name}.toml"), batches, dtypes, passes, args.reps)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = common.env_info([jnp.dtype(d).name for d in dtypes]) | {"pinocchio": pin.__version__, "quick": args.quick}
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
