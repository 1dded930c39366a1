"""Run ``jaxmech bench`` on shipped mechanisms within one wall-clock budget (a thin wrapper over
:mod:`jaxmech.bench`), then, with ``--peers``, the side-by-side scripts in ``benchmarks/`` that
compare with Pinocchio and MuJoCo (each skipped with a word when its peer is not installed).

Writes ``benchmarks/results/all.json`` (one ``jaxmech bench`` report per mechanism, plus the peer
scripts' results) and ``benchmarks/results/all.png``. Runs unchanged on CPU and GPU:

    python benchmarks/run_all.py --budget 600                      # stewart, all stages
    python benchmarks/run_all.py --configs stewart four_bar --batch 1,1024,65536 --peers
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import jax  # noqa: E402
from rich.console import Console  # noqa: E402

import jaxmech as jm  # noqa: E402
from jaxmech import bench, bench_report  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PEER_SCRIPTS = ("closure", "assembly", "reduction", "dynamics", "rollout", "sysid")


def _peer(name: str, budget: float, dtypes, batches) -> dict:
    """One side-by-side script, called with the keyword arguments its ``run`` accepts."""
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as e:
        return {"skipped": f"needs {e.name}, not installed"}
    if hasattr(mod, "run"):
        sig = inspect.signature(mod.run).parameters
        kw = {"budget": budget, "dtypes": tuple(dtypes), "batches": batches}
        out = mod.run(**{k: v for k, v in kw.items() if k in sig})
    else:
        out = mod.main(["--budget", f"{budget:.0f}"])
    return out if isinstance(out, dict) else {"result": out}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="*", default=["stewart"], help="shipped example names or paths")
    ap.add_argument("--budget", type=float, default=600.0, help="total wall-clock seconds")
    ap.add_argument("--what", default=",".join(bench.STAGES))
    ap.add_argument("--batch", default="1,1024,65536")
    ap.add_argument("--precision", default="f64,f32")
    ap.add_argument("--peers", action="store_true", help="also run the Pinocchio/MuJoCo side-by-side scripts")
    a = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    end = time.perf_counter() + a.budget
    jobs = len(a.configs) + (len(PEER_SCRIPTS) if a.peers else 0)
    summary: dict = {"budget_s": a.budget, "bench": {}, "peers": {}}
    from jaxmech.cli import resolve_config

    for k, cfg in enumerate(a.configs):
        opts = bench.BenchOptions(
            what=tuple(a.what.split(",")),
            batches=tuple(int(b) for b in a.batch.split(",")),
            precisions=tuple(a.precision.split(",")),
            budget=max(end - time.perf_counter(), 0.0) / (jobs - k),
        )
        rep = bench.run(jm.load(resolve_config(cfg)), opts)
        bench_report.print_report(rep, Console(width=140))
        summary["bench"][cfg] = bench_report.clean(rep)
        bench_report.plot(rep, RESULTS / f"all_{Path(cfg).stem}.png")
    for k, name in enumerate(PEER_SCRIPTS if a.peers else ()):
        share = max(end - time.perf_counter(), 0.0) / (len(PEER_SCRIPTS) - k)
        try:
            summary["peers"][name] = _peer(name, share, ["float64", "float32"], (1, 64, 1024)) if share > 5 else {}
        except Exception as e:  # one broken script must not lose the others' results
            summary["peers"][name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        print(f"{name}: {', '.join(summary['peers'][name]) or 'skipped (budget)'}")
    path = RESULTS / "all.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1, default=str))
    print(f"wrote {path}")
    return summary


if __name__ == "__main__":
    main()
