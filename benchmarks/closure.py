"""Closure residual + Jacobian throughput vs batch size: analytic vs ``jax.jacfwd``, side by side.

For each shipped example with closure rows, on CPU, in float64 and float32:

* analytic: ``jit(vmap(closure_residual_and_jacobian))`` (paper 001 eq. (11)-(12));
* autodiff: ``jit(vmap(q -> (closure_residual, jacfwd of the residual along integrate)))``
  (``closure_jacobian_autodiff``), the reference the tests compare against;

at batch sizes 1, 64, 1024, 8192 on the same random states. Compile time (first call) is
reported separately; run times are the best of >= 7 calls (and >= 0.3 s), alternating analytic
and autodiff calls so shared-machine load hits both alike, each blocked on the result. Prints a
rich table and writes ``benchmarks/results/closure.json`` with the environment and, per example
and dtype, the autodiff/analytic time ratio at each batch.

    python benchmarks/closure.py [--quick] [--budget SECONDS] [--examples four_bar stewart ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (sets XLA_FLAGS before jax is imported)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

BATCHES = (1, 64, 1024, 8192)


def functions(jm, mech):
    analytic = jm.jit(jax.vmap(lambda q: jm.closure_residual_and_jacobian(mech, q)))
    autodiff = jm.jit(jax.vmap(lambda q: (jm.closure_residual(mech, q), jm.closure_jacobian_autodiff(mech, q))))
    return {"analytic": analytic, "autodiff": autodiff}


def run(
    examples=None, quick=False, budget=None, dtypes=("float64", "float32"), batches=None, out="closure", min_time=0.3
):
    common.enable_x64()
    import jaxmech as jm

    B = common.Budget(budget)
    batches = tuple(batches or ((1, 64, 1024) if quick else BATCHES))
    paths = [common.CONFIGS / f"{e}.toml" for e in examples] if examples else common.shipped_examples()
    if quick and not examples:
        paths = [p for p in paths if p.stem in ("four_bar", "stewart")]
    records, skipped, table = [], [], []
    setups = []  # (record, mech, fns, states) per example and dtype
    for path in paths:
        if B.exhausted():
            skipped.append({"example": path.stem, "why": "budget"})
            continue
        try:
            mech64 = jm.load(path)
        except Exception as e:  # an example another module is still writing
            skipped.append({"example": path.stem, "why": f"load failed: {e}"})
            continue
        if mech64.n_rows == 0:
            skipped.append({"example": path.stem, "why": "no closure rows (open chain)"})
            continue
        keys = jax.random.split(jax.random.PRNGKey(0), max(batches))
        Q64 = jm.jit(jax.vmap(jm.random_configuration, in_axes=(None, 0)))(mech64, keys)
        # float64 autodiff reference Jacobians on 64 states: accuracy of each tier next to its speed
        q_acc = Q64[:64]
        _, ref_J = functions(jm, mech64)["autodiff"](q_acc)
        for dt in dtypes:
            dtype = jnp.float32 if dt == "float32" else jnp.float64
            mech = common.cast(mech64, dtype)
            # accuracy with a separate jit so the timed functions' compile times stay honest
            _, Ja = functions(jm, mech)["analytic"](q_acc.astype(dtype))
            scale = float(jnp.maximum(1.0, jnp.max(jnp.abs(ref_J))))
            err = float(jnp.max(jnp.abs(Ja.astype(jnp.float64) - ref_J))) / scale
            rec = {
                "example": path.stem,
                "dtype": dt,
                "nq": mech.nq,
                "nv": mech.nv,
                "rows": mech.n_rows,
                "loops": mech.n_loops,
                "jacobian_max_rel_err_vs_f64_autodiff": err,
                "batches": {},
            }
            records.append(rec)
            setups.append((rec, mech, functions(jm, mech), Q64.astype(dtype)))
    # batch-major, so a budget cuts the largest batches rather than whole examples
    for b in batches:
        for rec, mech, fns, Qd in setups:
            if B.exhausted():
                rec["truncated"] = f"budget (from batch {b})"
                continue
            entry = {}
            for name, t in common.time_interleaved(fns, Qd[:b], reps=7, min_time=min_time).items():
                entry[name] = {
                    "compile_s": t.compile_s,
                    "best_s": t.best_s,
                    "median_s": t.median_s,
                    "reps": t.reps,
                    "us_per_state": t.per_state_us(b),
                    "cpu_best_s": t.cpu_best_s,
                    "cpu_us_per_state": 1e6 * t.cpu_best_s / b,
                }
            entry["ratio_autodiff_over_analytic"] = entry["autodiff"]["best_s"] / entry["analytic"]["best_s"]
            entry["cpu_ratio_autodiff_over_analytic"] = entry["autodiff"]["cpu_best_s"] / max(
                entry["analytic"]["cpu_best_s"], 1e-9
            )
            rec["batches"][str(b)] = entry
            table.append(
                [
                    rec["example"],
                    rec["dtype"],
                    b,
                    mech.nv,
                    mech.n_rows,
                    entry["analytic"]["us_per_state"],
                    entry["autodiff"]["us_per_state"],
                    entry["ratio_autodiff_over_analytic"],
                    entry["analytic"]["cpu_us_per_state"],
                    entry["autodiff"]["cpu_us_per_state"],
                    entry["analytic"]["compile_s"],
                    entry["autodiff"]["compile_s"],
                ]
            )
            print(
                f"  {rec['example']:>14s} {rec['dtype']} batch {b:5d}: "
                f"analytic {entry['analytic']['us_per_state']:9.2f}"
                f" us/state, jacfwd {entry['autodiff']['us_per_state']:9.2f} "
                f"(x{entry['ratio_autodiff_over_analytic']:.2f})",
                flush=True,
            )
    table.sort(key=lambda r: (r[0], r[1], r[2]))
    common.print_table(
        "closure residual + Jacobian throughput (CPU)",
        [
            "example",
            "dtype",
            "batch",
            "nv",
            "rows",
            "analytic us/state",
            "jacfwd us/state",
            "jacfwd/analytic",
            "analytic cpu us",
            "jacfwd cpu us",
            "compile analytic s",
            "compile jacfwd s",
        ],
        table,
        caption="best of >= 5 calls, blocked on the result; compile = first call",
    )
    summary = _summary(records)
    common.print_table(
        "autodiff / analytic time ratio (> 1: analytic faster)",
        ["example", "dtype"] + [f"batch {b}" for b in batches] + ["J rel err"],
        [[s["example"], s["dtype"]] + [s["ratio"].get(str(b), "-") for b in batches] + [s["err"]] for s in summary],
    )
    payload = {
        "benchmark": "closure",
        "env": common.env_info(dtypes),
        "batches": list(batches),
        "results": records,
        "summary": summary,
        "skipped": skipped,
        "elapsed_s": B.elapsed(),
    }
    p = common.write_json(out, payload)
    print(f"wrote {p}" + (f"; skipped: {skipped}" if skipped else ""))
    return payload


def _summary(records):
    out = []
    for r in records:
        out.append(
            {
                "example": r["example"],
                "dtype": r["dtype"],
                "err": r["jacobian_max_rel_err_vs_f64_autodiff"],
                "ratio": {b: e["ratio_autodiff_over_analytic"] for b, e in r["batches"].items()},
            }
        )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batches 1, 64, 1024; four_bar and stewart only")
    ap.add_argument("--budget", type=float, default=None, help="stop starting new work after this many seconds")
    ap.add_argument("--examples", nargs="*", default=None, help="config names (default: every configs/*.toml)")
    ap.add_argument("--dtypes", nargs="*", default=["float64", "float32"])
    ap.add_argument("--batches", nargs="*", type=int, default=None)
    ap.add_argument("--out", default="closure", help="results file name under benchmarks/results/")
    args = ap.parse_args(argv)
    np.set_printoptions(precision=3)
    run(args.examples, args.quick, args.budget, tuple(args.dtypes), args.batches, args.out)


if __name__ == "__main__":
    main()
