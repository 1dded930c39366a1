"""Run every benchmark (closure, assembly, reduction, dynamics, rollout, sysid) within one wall-clock
budget, in float64 and float32, and write one JSON (``benchmarks/results/all.json``) and a table.

Each benchmark script in ``benchmarks/`` is imported and its ``run(...)`` called with the
keyword arguments it accepts (``budget``, ``dtypes``, ``batches``, ``quick``); scripts with only
a ``main(argv)`` get ``--budget``. The remaining budget is shared evenly among the benchmarks
still to run, and each script skips its larger batches when its share runs low. Batch sizes go up
to 65,536 on a GPU and to 8,192 on a CPU (``--batches`` overrides). Runs unchanged on CPU (small
budget) and GPU:

    python benchmarks/run_all.py --budget 600            # CPU
    python benchmarks/run_all.py --budget 3000 --gpu     # GPU-sized batches
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (sets XLA_FLAGS before jax is imported)
import jax  # noqa: E402

ORDER = ("closure", "assembly", "reduction", "dynamics", "rollout", "sysid")
GPU_BATCHES = (1, 1024, 8192, 65536)
CPU_BATCHES = (1, 64, 1024, 8192)


def _call(mod, budget: float, dtypes, batches, quick: bool):
    if hasattr(mod, "run"):
        sig = inspect.signature(mod.run).parameters
        kw = {"budget": budget, "dtypes": tuple(dtypes), "batches": batches, "quick": quick}
        return mod.run(**{k: v for k, v in kw.items() if k in sig})
    argv = ["--budget", f"{budget:.0f}"] + (["--quick"] if quick else [])
    try:
        return mod.main(argv)
    except SystemExit as e:  # argparse without --budget / --quick: run with defaults
        if e.code not in (0, None):
            return mod.main([])
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=600.0, help="total wall-clock seconds")
    ap.add_argument("--dtypes", nargs="*", default=["float64", "float32"])
    ap.add_argument("--batches", nargs="*", type=int, default=None)
    ap.add_argument("--gpu", action="store_true", help="GPU-sized batches (default when a GPU is present)")
    ap.add_argument("--quick", action="store_true", help="each script's quick mode")
    ap.add_argument("--only", nargs="*", default=None, help=f"subset of {ORDER}")
    a = ap.parse_args(argv)
    common.enable_x64()
    gpu = a.gpu or jax.devices()[0].platform == "gpu"
    batches = tuple(a.batches) if a.batches else (GPU_BATCHES if gpu else CPU_BATCHES)
    budget = common.Budget(a.budget)
    names = [n for n in (a.only or ORDER) if (Path(__file__).parent / f"{n}.py").exists()]
    missing = [n for n in (a.only or ORDER) if n not in names]
    summary = {"env": common.env_info(tuple(a.dtypes)), "budget_s": a.budget, "batches": batches, "results": {}}
    rows = []
    for k, name in enumerate(names):
        share = max(budget.left(), 0.0) / (len(names) - k)
        if share < 5:
            summary["results"][name] = {"skipped": "budget"}
            rows.append([name, "skipped (budget)", "-", "-"])
            continue
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(name)
            out = _call(mod, share, a.dtypes, batches, a.quick)
            res_file = common.RESULTS / f"{name}.json"
            if (
                out is None
                and res_file.exists()
                and res_file.stat().st_mtime >= time.time() - (time.perf_counter() - t0) - 1
            ):
                out = json.loads(res_file.read_text())
            summary["results"][name] = out if isinstance(out, dict) else {"result": out}
            status = "ok"
        except Exception as e:  # one broken benchmark must not lose the others' results
            summary["results"][name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
            status = f"error: {type(e).__name__}"
        el = time.perf_counter() - t0
        rows.append([name, status, f"{share:.0f}", f"{el:.1f}"])
    for n in missing:
        summary["results"][n] = {"skipped": "script not present"}
        rows.append([n, "not present", "-", "-"])
    common.print_table("all benchmarks", ["benchmark", "status", "budget share [s]", "elapsed [s]"], rows)
    path = common.write_json("all", summary)
    print(f"wrote {path}")
    return summary


if __name__ == "__main__":
    main()
