"""Report of ``jaxmech bench``: rich tables, JSON and a PNG of time per state against batch size."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table


def _fmt(x: float, spec: str = ".3g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def header(report: dict) -> str:
    e = report["env"]
    mp = report.get("options", {}).get("matmul_precision")
    return (
        f"{report['mechanism']}: {e['device_count']} x {e['device_kind']} ({e['platform']}), "
        f"{e['process_count']} process(es), jax {e['jax']}, wall {report['elapsed_s']:.1f} s"
        + (f", matmul precision {mp}" if mp else "")
        + (", host buffers reused" if e.get("reuse_host_buffers") else "")
        + (f", native kernels {e['native_kernels']}" if e.get("native_kernels") else "")
    )


def print_report(report: dict, console: Console) -> None:
    """One table per stage: batch, precision, µs per state, states per second, compile time,
    accuracy; then the skipped batches."""
    console.print(f"[bold]{header(report)}[/]")
    stages = list(dict.fromkeys(r["stage"] for r in report["rows"]))
    for s in stages:
        rows = [r for r in report["rows"] if r["stage"] == s]
        if all(r["skipped"] for r in rows):
            continue  # said below
        unit = next((r["unit"] for r in rows if not r["skipped"]), "state")
        metrics = list(dict.fromkeys(k for r in rows for k in r["accuracy"]))
        tab = Table(title=f"{s}  (per {unit}; accuracy in float64 on the first rows)")
        for c in ("prec", "batch", f"µs/{unit}", f"{unit}s/s", "compile s", *metrics):
            tab.add_column(c, justify="right")
        for r in rows:
            if r["skipped"]:
                tab.add_row(r["precision"], str(r["batch"]), f"skipped ({r['skipped']})", *[""] * (2 + len(metrics)))
                continue
            acc = [_fmt(r["accuracy"].get(k), ".3f" if "fraction" in k else ".2e") for k in metrics]
            pad = "" if r["padded_batch"] == r["batch"] else f" (pad {r['padded_batch']})"
            tab.add_row(
                r["precision"],
                f"{r['batch']}{pad}",
                _fmt(r["us_per_state"]),
                _fmt(r["states_per_s"], ",.0f"),
                _fmt(r["compile_s"], ".2f"),
                *acc,
            )
        console.print(tab)
    for msg in report["skipped"]:
        console.print(f"[yellow]skipped:[/] {msg}", soft_wrap=True)


def clean(report: dict) -> dict:
    """The report without the output arrays, NaN as None (valid JSON)."""

    def fix(o):
        if isinstance(o, float) and math.isnan(o):
            return None
        if isinstance(o, dict):
            return {k: fix(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [fix(v) for v in o]
        return o

    return fix({k: v for k, v in report.items() if k != "outputs"})


def write_json(report: dict, path: str | Path) -> Path:
    """The report as JSON (see :func:`clean`)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(clean(report), indent=1))
    return p


def save_outputs(report: dict, path: str | Path) -> Path:
    """The float64 output heads of each stage and precision (``STAGE_PREC/LEAF`` keys), as .npz."""
    import jax

    flat = {}
    for key, tree in report["outputs"].items():
        leaves = jax.tree_util.tree_leaves(tree)
        for i, x in enumerate(leaves):
            flat[f"{key}/{i}"] = np.asarray(x)
    p = Path(path)
    np.savez(p, **flat)
    return p


def plot(report: dict, path: str | Path) -> Path:
    """Time per state (µs, log) against batch size (log), one line per stage and precision.
    Uses matplotlib's Agg canvas directly: no global backend change."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    keys = list(dict.fromkeys((r["stage"], r["precision"]) for r in report["rows"]))
    colors = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(s for s, _ in keys))}
    for s, p in keys:
        pts = [(r["batch"], r["us_per_state"]) for r in report["rows"] if (r["stage"], r["precision"]) == (s, p)]
        pts = [(b, t) for b, t in pts if t is not None and not math.isnan(t)]
        if pts:
            b, t = zip(*pts, strict=True)
            ax.plot(b, t, marker="o", color=colors[s], ls="-" if p == "f64" else "--", label=f"{s} {p}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (states)")
    ax.set_ylabel("time per state [µs] (per state-step: track, rollout)")
    ax.set_title(header(report), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out
