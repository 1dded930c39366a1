"""Constrained forward dynamics per state: jaxmech (jit(vmap), KKT) against Pinocchio 4
``constraintDynamics`` (one thread, Python loop over the same states; its binding costs about
0.6 us a call). Protocol: /work/shared/BENCHMARKS.md.

For each mechanism (Stewart free-platform and published-graph variants, four-bar, Cassie): closed
states from ``jm.assemble`` (actuated coordinates perturbed around q0), velocities in null(C),
random efforts. Reports per-state times, the ratio Pinocchio / jaxmech, jit compile time, max
``|C a + gamma|`` and the max relative difference from Pinocchio (mechanisms Pinocchio can
express), float64 and float32. Writes ``benchmarks/results/dynamics.json``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dynamics.py [--quick]
    taskset -c 0 .venv/bin/python benchmarks/dynamics.py --mechs stewart --batches 1,64,1024,8192 --dtypes float64
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jaxmech as jm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def states(mech, n, spread, seed=0):
    rng = np.random.default_rng(seed)
    qa = mech.topo.actuated_v
    qi = np.array([mech.topo.q_start[mech.topo.v_body[k]] + (k - mech.topo.v_start[mech.topo.v_body[k]]) for k in qa])
    base = min(n, 32)
    Q = np.tile(np.asarray(mech.q0), (base, 1))
    Q[:, qi] += rng.uniform(-spread, spread, (base, qi.size))
    asm = jax.jit(jax.vmap(lambda q: jm.assemble(mech, q)))
    res = asm(jnp.asarray(Q))
    Q = np.asarray(res.q)[np.asarray(res.status) == 0]
    if len(Q) == 0:
        raise RuntimeError(f"{mech.name}: no state assembled")
    Q = Q[np.arange(n) % len(Q)]
    C = np.asarray(jax.jit(jax.vmap(lambda q: jm.closure_jacobian(mech, q)))(jnp.asarray(Q)))
    V = np.empty((n, mech.nv))
    for i in range(n):
        _, S, Vt = np.linalg.svd(C[i])
        r = int((S > 1e-9 * S[0]).sum())
        N = Vt[r:].T
        V[i] = N @ rng.normal(size=N.shape[1])
    return Q, V, rng.normal(size=(n, mech.nv))


def time_call(f, *args, reps=5):
    best = np.inf
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t)
    return best


def pin_run(mech, Q, V, T):
    try:
        model, cons = jm.to_pinocchio(mech)
    except jm.ModelError:
        return None
    data = model.createData()
    datas = pin.StdVec_RigidConstraintData([c.createData() for c in cons])
    pin.initConstraintDynamics(model, data, cons, datas)
    C = np.asarray(jm.closure_jacobian(mech, jnp.asarray(Q[0])))
    redundant = np.linalg.matrix_rank(C, 1e-9 * np.linalg.norm(C, 2)) < C.shape[0]
    ps = pin.ProximalSettings(1e-12, 1e-6, 100) if redundant else pin.ProximalSettings(1e-12, 0.0, 1)
    qp, vp, tp = jm.q_to_pinocchio(mech, Q), jm.v_to_pinocchio(mech, V), jm.v_to_pinocchio(mech, T)
    out = np.empty_like(V)
    t0 = time.perf_counter()
    for i in range(len(Q)):
        out[i] = pin.constraintDynamics(model, data, qp[i], vp[i], tp[i], cons, datas, ps)
    dt = (time.perf_counter() - t0) / len(Q)
    return jm.v_from_pinocchio(mech, out), dt, "mu=1e-6 x100" if redundant else "mu=0"


def bench(name, mech, batches, dtypes):
    n = max(batches)
    Q, V, T = states(mech, n, 0.03 if "stewart" in name else 0.2)
    ref = pin_run(mech, Q, V, T)
    rows = []
    gam = jax.jit(jax.vmap(lambda q, v: (jm.closure_jacobian(mech, q), jm.closure_bias(mech, q, v))))
    Cs, Gs = (np.asarray(x) for x in gam(jnp.asarray(Q), jnp.asarray(V)))
    for dtype in dtypes:
        m = jax.tree_util.tree_map(lambda x, d=dtype: x.astype(d) if isinstance(x, jax.Array) else x, mech)
        f = jax.jit(jax.vmap(lambda q, v, t, m=m: jm.forward_dynamics(m, q, v, t).a))
        for b in batches:
            args = tuple(jnp.asarray(x[:b], dtype) for x in (Q, V, T))
            t0 = time.perf_counter()
            lowered = f.lower(*args).compile()
            compile_s = time.perf_counter() - t0
            per = time_call(lowered, *args) / b
            a = np.asarray(lowered(*args), np.float64)
            cerr = float(np.max(np.abs(np.einsum("nij,nj->ni", Cs[:b], a) + Gs[:b])))
            row = {
                "mechanism": name,
                "nv": mech.nv,
                "rows": mech.n_rows,
                "dtype": jnp.dtype(dtype).name,
                "batch": b,
                "jaxmech_us_per_state": per * 1e6,
                "compile_s": compile_s,
                "max_closure_accel_error": cerr,
            }
            if ref is not None:
                a_ref, pin_dt, settings = ref
                row["pinocchio_us_per_state"] = pin_dt * 1e6
                row["pinocchio_settings"] = settings
                row["ratio_pinocchio_over_jaxmech"] = pin_dt / per
                row["max_rel_diff_vs_pinocchio"] = float(
                    np.max(np.abs(a - a_ref[:b]) / np.max(np.abs(a_ref[:b]), axis=1, keepdims=True))
                )
                pc = np.einsum("nij,nj->ni", Cs[:b], a_ref[:b]) + Gs[:b]
                row["pinocchio_closure_accel_error"] = float(np.max(np.abs(pc)))
            rows.append(row)
            print(
                f"{name:14s} {row['dtype']:8s} batch {b:5d}: {row['jaxmech_us_per_state']:9.2f} us/state "
                f"(compile {compile_s:5.1f} s)  |Ca+g| {cerr:.1e}"
                + (
                    f"  pin {row['pinocchio_us_per_state']:6.2f} us  ratio {row['ratio_pinocchio_over_jaxmech']:6.2f}"
                    f"  diff {row['max_rel_diff_vs_pinocchio']:.1e}"
                    if ref is not None
                    else "  (no Pinocchio equivalent: revolute cut)"
                ),
                flush=True,
            )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batches 1 and 64, float64 only")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dynamics.json"))
    ap.add_argument("--mechs", default="stewart,stewart_graph,four_bar,cassie", help="comma-separated config names")
    ap.add_argument("--batches", default="", help="comma-separated batch sizes (default 1,64,1024,8192)")
    ap.add_argument("--dtypes", default="", help="comma-separated: float64,float32 (default both)")
    args = ap.parse_args()
    batches = [1, 64] if args.quick else [1, 64, 1024, 8192]
    dtypes = [jnp.float64] if args.quick else [jnp.float64, jnp.float32]
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    if args.dtypes:
        dtypes = [jnp.dtype(d).type for d in args.dtypes.split(",")]
    mechs = {}
    for name in args.mechs.split(","):
        try:
            mechs[name] = jm.load(ROOT / "configs" / f"{name}.toml")
        except Exception as e:  # noqa: BLE001 - report and continue with the others
            print(f"skip {name}: {e}")
    results = []
    for name, mech in mechs.items():
        try:
            results += bench(name, mech, batches, dtypes)
        except RuntimeError as e:  # e.g. no closed state assembled (Cassie's q0 is a singular state)
            print(f"skip {name}: {e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"jax": jax.__version__, "pinocchio": pin.__version__, "device": str(jax.devices()[0]), "quick": args.quick}
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
