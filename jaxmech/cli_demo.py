"""``jaxmech demo``: the Stewart platform end to end.

    jaxmech demo                       # configs/stewart.toml, figure in out/
    jaxmech demo --batch 64 --steps 1000 --out results/

Stages (each timed, jit compile time separately from the run): load + compile the graph,
assemble a batch of configurations from perturbed leg lengths (``jm.assemble``), track a leg-length
path (``jm.track``), simulate a batch of rollouts with gravity-compensated leg forces plus a
sinusoidal excitation (``jm.rollout``, closure kept by projection). Prints a rich table with the
closure gaps and timings and writes ``stewart_demo.png``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._jit import compilation_cache, jit
from .cli import app, console, enable_x64, load_or_exit


def _timed(f, *args):
    """(result, compile seconds, run seconds): first call minus a second call."""
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    t1 = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    t2 = time.perf_counter()
    run = t2 - t1
    return out, max(t1 - t0 - run, 0.0), run


@dataclass
class _Demo:
    """Working state of one demo run: the options, the mechanism and each stage's results.

    Shapes: ``qa`` (n_act,) q indices of the actuated leg lengths; ``ok`` (batch,) assembled;
    ``base`` (n_act,) and ``path`` (path_steps, n_act) leg lengths [m]; ``z_path``
    (path_steps, 3) tracked platform position [m]; ``gap`` (batch, steps) closure gap [m/rad].
    """

    batch: int
    steps: int
    dt: float  # [s]
    path_steps: int
    rng: np.random.Generator
    rows: list[tuple[str, ...]] = field(default_factory=list)  # the report table, one row per stage
    mech: Any = None  # the compiled Mechanism
    legs: list[str] = field(default_factory=list)
    center: str = ""
    qa: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    res: Any = None  # batched jm.assemble result
    ok: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    base: np.ndarray = field(default_factory=lambda: np.zeros(0))
    path: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tr: Any = None  # jm.track result
    z_path: np.ndarray = field(default_factory=lambda: np.zeros(0))
    traj: Any = None  # rollout states, q (batch, steps, nq)
    gap: np.ndarray = field(default_factory=lambda: np.zeros(0))


@app.command()
def demo(
    config: str = typer.Option("stewart", help="Stewart-type config (leg ports leg_0..leg_5) or its name"),
    batch: int = typer.Option(32, min=1, max=4096, help="configurations assembled and rollouts simulated"),
    steps: int = typer.Option(200, min=2, help="rollout steps (0.2 s at the default dt)"),
    dt: float = typer.Option(1e-3, min=1e-6, help="time step [s]"),
    path_steps: int = typer.Option(100, min=2, help="steps of the tracked leg-length path"),
    out: Path = typer.Option(Path("out"), help="output folder for the PNG figure"),
    seed: int = typer.Option(0, help="random seed"),
    cache: bool = typer.Option(
        True, help="keep compiled programs in ~/.cache/jaxmech/xla (a second run skips most jit compile)"
    ),
) -> None:
    """Run the Stewart platform end to end: compile, assemble a batch, track a path, simulate a
    batch of rollouts; print closure gaps and timings, write a PNG figure."""
    enable_x64()
    if cache:  # JAX's persistent compilation cache (CPU and GPU); first run compiles as usual
        compilation_cache()
    _import_stages()

    t_start = time.perf_counter()
    d = _Demo(batch, steps, dt, path_steps, np.random.default_rng(seed))
    prog = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with prog:
        task = prog.add_task("loading", total=4)
        d.rows.append(_load(d, config))
        prog.update(task, advance=1, description=f"assembling {batch} configurations")
        d.rows.append(_assemble_batch(d))
        prog.update(task, advance=1, description=f"tracking a {path_steps}-step leg path")
        d.rows.append(_track_path(d))
        prog.update(task, advance=1, description=f"simulating {batch} rollouts x {steps} steps")
        d.rows.append(_rollouts(d))
        prog.update(task, advance=1, description="writing figure")
        png = _figure(d, out)
        prog.update(task, advance=1)

    _report(d, t_start, png)
    bad = (~d.ok).sum() or not np.isfinite(d.gap).all() or np.asarray(d.tr.status).max() != 0
    raise typer.Exit(1 if bad else 0)


def _import_stages() -> None:
    """Import the modules the stages use before the clock starts (import time is no stage)."""
    from . import assembly, dynamics, kinpass, plots, reduction, simulate, tracking  # noqa: F401


def _load(d: _Demo, config: str) -> tuple[str, ...]:
    """Load + compile the graph; find the leg ports and the platform frame (exit 2 without legs)."""
    t0 = time.perf_counter()
    d.mech = mech = load_or_exit(config)
    t_load = time.perf_counter() - t0
    d.legs = [p for p in mech.topo.port_names if p.startswith("leg_")]
    if not d.legs:
        console.print(f"[red]error:[/] {mech.name}: the demo needs leg ports leg_0.. (a Stewart platform)")
        raise typer.Exit(2)
    d.center = "platform_center" if "platform_center" in mech.frame_names else mech.body_names[0]
    return ("load + compile graph", "1", f"{t_load:.2f}", "-", "-", "-")


def _assemble_batch(d: _Demo) -> tuple[str, ...]:
    """Assemble a batch: actuated leg lengths perturbed by up to +-0.04 m, passive coordinates
    solved (``jm.assemble`` under ``vmap``)."""
    import jax
    import jax.numpy as jnp

    from .assembly import assemble, partition
    from .tracking import active_q_indices

    mech, batch = d.mech, d.batch
    d.qa = qa = active_q_indices(mech, partition(mech, list(mech.topo.actuated)))  # q entries of the leg lengths
    Q0 = np.repeat(np.asarray(mech.q0)[None], batch, 0)
    Q0[:, qa] += d.rng.uniform(-0.04, 0.04, (batch, qa.size))
    f_asm = jit(jax.vmap(lambda q: assemble(mech, q)))
    d.res, c_asm, r_asm = _timed(f_asm, jnp.asarray(Q0))
    d.ok = ok = np.asarray(d.res.status) == 0
    return (
        "assemble (defect homotopy)",
        str(batch),
        f"{c_asm:.2f}",
        f"{r_asm * 1e3:.1f}",
        f"{1e6 * r_asm / batch:.0f}",
        f"{float(np.max(np.asarray(d.res.residual))):.1e} ({ok.sum()}/{batch} ok)",
    )


def _track_path(d: _Demo) -> tuple[str, ...]:
    """Track a leg-length path (breathing motion of all legs, amplitude 0.03 m) with
    ``jm.track``; record the platform position along it."""
    import jax
    import jax.numpy as jnp

    from .kinpass import frame_pose
    from .tracking import track

    mech, path_steps, qa, center = d.mech, d.path_steps, d.qa, d.center
    s = np.linspace(0.0, 2 * np.pi, path_steps)
    d.base = np.asarray(mech.q0)[qa]
    d.path = d.base[None] + 0.03 * np.sin(s)[:, None] * np.cos(np.arange(qa.size) * np.pi / 3)[None]
    f_tr = jit(lambda q, p: track(mech, q, p, list(mech.topo.actuated)))
    d.tr, c_tr, r_tr = _timed(f_tr, mech.q0, jnp.asarray(d.path))
    d.z_path = np.asarray(jax.vmap(lambda q: frame_pose(mech, q, center))(d.tr.q)[:, :3, 3])
    return (
        "track (predictor-corrector)",
        f"{path_steps} steps",
        f"{c_tr:.2f}",
        f"{r_tr * 1e3:.1f}",
        f"{1e6 * r_tr / path_steps:.0f}",
        f"{float(np.max(np.asarray(d.tr.residual))):.1e}",
    )


def _rollouts(d: _Demo) -> tuple[str, ...]:
    """Rollouts from the assembled batch (a failed assembly starts from the first good one):
    gravity-compensating port forces times ``1 + 0.2 sin(2 pi 2 Hz t + phase)`` on the legs."""
    import jax
    import jax.numpy as jnp

    from .dynamics import gravity_torques
    from .reduction import port_tangent_map
    from .simulate import SimState, make_rollout

    mech, batch, steps, dt, ok = d.mech, d.batch, d.steps, d.dt, d.ok
    Qs = jnp.asarray(np.where(ok[:, None], np.asarray(d.res.q), np.asarray(d.res.q)[np.argmax(ok)][None]))
    idx = np.asarray([mech.topo.port_names.index(p) for p in d.legs])

    def grav_comp(q):
        return port_tangent_map(mech, q).T @ gravity_torques(mech, q)

    F0 = jit(jax.vmap(grav_comp))(Qs)
    tt = dt * np.arange(steps)
    phase = d.rng.uniform(0, 2 * np.pi, (batch, 1, len(mech.topo.port_names)))
    amp = np.zeros(len(mech.topo.port_names))
    amp[idx] = 0.2
    U = np.asarray(F0)[:, None, :] * (1.0 + amp * np.sin(2 * np.pi * 2.0 * tt[None, :, None] + phase))
    f_ro = make_rollout(mech, dt, steps, with_energy=True)
    states = SimState(Qs, jnp.zeros((batch, mech.nv), Qs.dtype))
    (d.traj, info), c_ro, r_ro = _timed(f_ro, states, jnp.asarray(U))
    d.gap = np.asarray(info.closure_gap)
    return (
        "rollout (semi-implicit Euler + projection)",
        f"{batch} x {steps}",
        f"{c_ro:.2f}",
        f"{r_ro * 1e3:.1f}",
        f"{1e6 * r_ro / (batch * steps):.1f}",
        f"{d.gap.max():.1e}",
    )


def _figure(d: _Demo, out: Path) -> Path:
    """Write ``<out>/stewart_demo.png`` (platform height and closure gap of the rollouts, the
    tracked leg-length path and platform motion); returns its path."""
    import jax
    import matplotlib.pyplot as plt

    from . import plots
    from .kinpass import frame_pose

    mech, steps, dt, path_steps, center = d.mech, d.steps, d.dt, d.path_steps, d.center
    pos = np.asarray(jax.vmap(jax.vmap(lambda q: frame_pose(mech, q, center)))(d.traj.q)[..., :3, 3])
    fig, axs = plt.subplots(2, 2, figsize=(11, 7))
    t_ro = dt * np.arange(1, steps + 1)
    plots.trajectories(t_ro, pos[..., 2].T, ax=axs[0, 0], title="platform height, batch of rollouts", ylabel="z [m]")
    plots.closure_gap(t_ro, d.gap, ax=axs[0, 1], title="closure gap during rollouts")
    axs[1, 0].plot(np.arange(path_steps), d.path - d.base[None], lw=1)
    axs[1, 0].set(xlabel="path step", ylabel="leg length change [m]", title="tracked leg-length path")
    axs[1, 1].plot(np.arange(path_steps), d.z_path - d.z_path[0], lw=1.2)
    axs[1, 1].legend(["x", "y", "z"], fontsize=8)
    axs[1, 1].set(xlabel="path step", ylabel="platform displacement [m]", title="tracked platform motion")
    for a in axs.ravel():
        a.grid(alpha=0.3)
    fig.suptitle(f"jaxmech demo: {mech.name} (nq {mech.nq}, nv {mech.nv}, {mech.n_rows} closure rows)")
    fig.tight_layout()
    return plots.save(fig, Path(out) / "stewart_demo.png")


def _report(d: _Demo, t_start: float, png: Path) -> None:
    """Print the stage table, the peak closure gaps with the total time since ``t_start``
    (``time.perf_counter`` seconds), and the figure's path."""
    import jax

    tab = Table(title=f"jaxmech demo: {d.mech.name} ({jax.devices()[0].platform}, float64)")
    for c in ("stage", "batch", "jit compile [s]", "run [ms]", "per state [us]", "max closure gap"):
        tab.add_column(c, justify="right" if c != "stage" else "left")
    for r in d.rows:
        tab.add_row(*r)
    console.print(tab)
    console.print(
        f"peak closure gap: assembly {float(np.max(np.asarray(d.res.residual))):.1e}, tracking "
        f"{float(np.max(np.asarray(d.tr.residual))):.1e}, rollouts {d.gap.max():.1e}; "
        f"total {time.perf_counter() - t_start:.1f} s"
    )
    console.print(f"wrote {png}")
