"""Throughput of the velocity reduction and the constraint curvature vs batch size.

For each mechanism: ``jit(vmap(tangent_map))``, analytic ``closure_bias`` (gamma) and the
autodiff reference ``closure_bias_autodiff`` (``jax.jvp`` of ``C v``) at batch sizes
1, 64, 1024, 8192 (``--quick``: 1, 64, 1024 and one mechanism). Compilation is timed separately;
runs block on the result. Prints a table and writes ``benchmarks/results/reduction.json``.

    python benchmarks/reduction.py [--quick] [--float32] [--configs four_bar stewart ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _time(fn, *args, reps: int = 5):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, min(times)


def _functions(jm, red, mech):
    return {
        "tangent_map": jm.jit(jax.vmap(lambda q, v: red.tangent_map(mech, q))),
        "gamma_analytic": jm.jit(jax.vmap(lambda q, v: jm.closure_bias(mech, q, v))),
        "gamma_autodiff": jm.jit(jax.vmap(lambda q, v: jm.closure_bias_autodiff(mech, q, v))),
    }


def _states(jm, mech, q0, key, b, dtype):
    keys = jax.random.split(key, b)
    return jax.vmap(lambda k: jm.integrate(mech, q0, 1e-3 * jax.random.normal(k, (mech.nv,), dtype)))(keys)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small batches, one mechanism")
    ap.add_argument("--float32", action="store_true", help="run in float32 (default float64)")
    ap.add_argument("--configs", nargs="*", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reduction.json"))
    args = ap.parse_args(argv)
    if not args.float32:
        jax.config.update("jax_enable_x64", True)
    import jaxmech as jm
    from jaxmech import reduction as red

    dtype = jnp.float32 if args.float32 else jnp.float64
    names = args.configs or (["stewart"] if args.quick else ["four_bar", "stewart", "excavator"])
    batches = [1, 64, 1024] if args.quick else [1, 64, 1024, 8192]
    rows = []
    for name in names:
        mech = jm.load(ROOT / "configs" / f"{name}.toml")
        if args.float32:
            mech = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32) if hasattr(x, "dtype") else x, mech)
        q0 = jm.assemble(mech, mech.q0).q.astype(dtype)
        d = red.tangent_map(mech, q0).shape[1]
        fns = _functions(jm, red, mech)
        for b in batches:
            key = jax.random.PRNGKey(b)
            # states near the assembled one (curvature and E are defined at any q; throughput only)
            Q = _states(jm, mech, q0, key, b, dtype)
            V = jax.random.normal(key, (b, mech.nv), dtype)
            rec = {"mechanism": name, "nv": mech.nv, "rows": mech.n_rows, "d": d, "batch": b}
            for k, fn in fns.items():
                c, t = _time(fn, Q, V)
                rec[f"{k}_compile_s"] = c
                rec[f"{k}_s"] = t
                rec[f"{k}_per_s"] = b / t
            g1 = fns["gamma_analytic"](Q, V)
            g2 = fns["gamma_autodiff"](Q, V)
            rec["gamma_max_rel_err"] = float(jnp.max(jnp.abs(g1 - g2)) / jnp.maximum(1.0, jnp.max(jnp.abs(g2))))
            rec["gamma_speedup"] = rec["gamma_autodiff_s"] / rec["gamma_analytic_s"]
            rows.append(rec)
            print(
                f"{name:>12} b={b:>5}  E: {rec['tangent_map_per_s']:>11.0f}/s  "
                f"gamma analytic: {rec['gamma_analytic_per_s']:>11.0f}/s  "
                f"autodiff: {rec['gamma_autodiff_per_s']:>11.0f}/s  "
                f"(x{rec['gamma_speedup']:.2f}, err {rec['gamma_max_rel_err']:.1e})",
                flush=True,
            )
    out = {
        "device": str(jax.devices()[0]),
        "platform": platform.platform(),
        "dtype": "float32" if args.float32 else "float64",
        "jax": jax.__version__,
        "results": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
