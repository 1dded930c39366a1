"""``jaxmech bench``: stage timings and accuracy as tables, JSON and a plot (see :mod:`jaxmech.bench`).

jaxmech bench stewart --budget 60 --json out.json
jaxmech bench stewart --what fd,rollout --batch 1,1024,65536 --precision f64,f32 --plot bench.png
# several hosts: the same command in every process, with its own --process-id
jaxmech bench stewart --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0
"""

from __future__ import annotations

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .cli import app, console, enable_x64, load_or_exit


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x.replace("_", "")) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{what}: comma-separated integers expected, got '{text}'") from None
    if not out or min(out) < 1:
        raise typer.BadParameter(f"{what}: positive integers expected, got '{text}'")
    return out


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in allowed]
    if bad or not out:
        raise typer.BadParameter(f"{what}: unknown {bad or text!r}; choose from {', '.join(allowed)}")
    return out


@app.command()
def bench(
    config: str = typer.Argument(..., help="mechanism file or example name"),
    what: str = typer.Option("fd,closure,kinematics,assemble,track,rollout", help="stages, comma-separated"),
    batch: str = typer.Option("1,1024,65536", help="batch sizes, comma-separated"),
    precision: str = typer.Option("f64,f32", help="f64 and/or f32"),
    devices: str = typer.Option("all", help="'all' (every device of every process) or a count N"),
    budget: float = typer.Option(600.0, help="wall-clock seconds; the largest batches are skipped to fit"),
    reps: int = typer.Option(5, help="timed calls per batch (best and median reported)"),
    matmul_precision: str = typer.Option(
        "default",
        help="jax.default_matmul_precision for the stages: 'default' (JAX's: TF32 for float32 on recent NVIDIA "
        "GPUs), 'highest' (true float32), ...",
    ),
    reuse_buffers: bool = typer.Option(
        False,
        "--reuse-buffers",
        help="keep freed host memory in the process (jm.reuse_host_buffers): large batches stop page-faulting",
    ),
    json: str = typer.Option(None, "--json", help="write the report as JSON here"),
    plot: str = typer.Option(None, "--plot", help="write time per state vs batch size as a PNG here"),
    outputs: str = typer.Option(None, "--outputs", help="write the float64 output heads (.npz) here"),
    coordinator: str = typer.Option(None, help="HOST:PORT of process 0 (multi-host run via jax.distributed)"),
    num_processes: int = typer.Option(1, help="number of processes (multi-host)"),
    process_id: int = typer.Option(0, help="this process's id, 0..num_processes-1 (multi-host)"),
) -> None:
    """Time forward dynamics, closure, kinematics, assembly, tracking and rollouts on batches of
    states sharded over all devices (and hosts), in float64 and float32, with compile time
    apart and the accuracy of each stage."""
    from . import bench as B
    from . import bench_report as R
    from . import sharding

    if coordinator:
        sharding.initialize(coordinator, num_processes, process_id)
    elif num_processes != 1:
        raise typer.BadParameter("--num-processes > 1 needs --coordinator HOST:PORT")
    enable_x64()
    import jax

    from .allocator import reuse_host_buffers

    reused = reuse_host_buffers() if reuse_buffers else False

    ndev = None if devices == "all" else _ints(devices, "--devices")[0]
    opts = B.BenchOptions(
        what=_names(what, B.STAGES, "--what"),
        batches=_ints(batch, "--batch"),
        precisions=_names(precision, tuple(B.DTYPES), "--precision"),
        devices=ndev,
        budget=budget,
        reps=max(1, reps),
        matmul_precision=None if matmul_precision == "default" else matmul_precision,
    )
    mech = load_or_exit(config)
    lead = jax.process_index() == 0
    cols = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
    with Progress(*cols, TimeElapsedColumn(), console=console, transient=True, disable=not lead) as prog:
        task = prog.add_task("compiling states", total=len(opts.what) * len(opts.precisions) * len(opts.batches))
        try:
            report = B.run(mech, opts, progress=lambda text, n: prog.update(task, advance=n, description=text))
            report["env"]["reuse_host_buffers"] = reused
        except ValueError as e:
            console.print(f"[red]error:[/] {e}", soft_wrap=True)
            raise typer.Exit(2) from None
    if lead:
        R.print_report(report, console)
        if json:
            console.print(f"wrote {R.write_json(report, json)}")
        if plot:
            console.print(f"wrote {R.plot(report, plot)}")
        if outputs:
            console.print(f"wrote {R.save_outputs(report, outputs)}")
    if coordinator:
        jax.distributed.shutdown()
