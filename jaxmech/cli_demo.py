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
from pathlib import Path

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
    import jax
    import jax.numpy as jnp

    if cache:  # JAX's persistent compilation cache (CPU and GPU); first run compiles as usual
        compilation_cache()

    from . import plots
    from .assembly import assemble, partition
    from .dynamics import gravity_torques
    from .kinpass import frame_pose
    from .reduction import port_jacobian, tangent_map
    from .simulate import SimState, make_rollout
    from .tracking import active_q_indices, track

    t_start = time.perf_counter()
    rows = []
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
        t0 = time.perf_counter()
        mech = load_or_exit(config)
        t_load = time.perf_counter() - t0
        act = mech.topo.actuated
        legs = [p for p in mech.topo.port_names if p.startswith("leg_")]
        if not legs:
            console.print(f"[red]error:[/] {mech.name}: the demo needs leg ports leg_0.. (a Stewart platform)")
            raise typer.Exit(2)
        center = "platform_center" if "platform_center" in mech.frame_names else mech.body_names[0]
        rows.append(("load + compile graph", "1", f"{t_load:.2f}", "-", "-", "-"))
        prog.update(task, advance=1, description=f"assembling {batch} configurations")

        # ---- assemble a batch: perturbed actuated leg lengths, passive coordinates solved
        rng = np.random.default_rng(seed)
        qa = active_q_indices(mech, partition(mech, list(act)))  # q entries of the leg lengths
        Q0 = np.repeat(np.asarray(mech.q0)[None], batch, 0)
        Q0[:, qa] += rng.uniform(-0.04, 0.04, (batch, qa.size))
        f_asm = jit(jax.vmap(lambda q: assemble(mech, q)))
        res, c_asm, r_asm = _timed(f_asm, jnp.asarray(Q0))
        ok = np.asarray(res.status) == 0
        rows.append(
            (
                "assemble (defect homotopy)",
                str(batch),
                f"{c_asm:.2f}",
                f"{r_asm * 1e3:.1f}",
                f"{1e6 * r_asm / batch:.0f}",
                f"{float(np.max(np.asarray(res.residual))):.1e} ({ok.sum()}/{batch} ok)",
            )
        )
        prog.update(task, advance=1, description=f"tracking a {path_steps}-step leg path")

        # ---- track a leg-length path (breathing motion of all legs)
        s = np.linspace(0.0, 2 * np.pi, path_steps)
        base = np.asarray(mech.q0)[qa]
        path = base[None] + 0.03 * np.sin(s)[:, None] * np.cos(np.arange(qa.size) * np.pi / 3)[None]
        f_tr = jit(lambda q, p: track(mech, q, p, list(act)))
        tr, c_tr, r_tr = _timed(f_tr, mech.q0, jnp.asarray(path))
        z_path = np.asarray(jax.vmap(lambda q: frame_pose(mech, q, center))(tr.q)[:, :3, 3])
        rows.append(
            (
                "track (predictor-corrector)",
                f"{path_steps} steps",
                f"{c_tr:.2f}",
                f"{r_tr * 1e3:.1f}",
                f"{1e6 * r_tr / path_steps:.0f}",
                f"{float(np.max(np.asarray(tr.residual))):.1e}",
            )
        )
        prog.update(task, advance=1, description=f"simulating {batch} rollouts x {steps} steps")

        # ---- rollouts from the assembled batch: gravity compensation + sinusoidal leg forces
        Qs = jnp.asarray(np.where(ok[:, None], np.asarray(res.q), np.asarray(res.q)[np.argmax(ok)][None]))
        idx = np.asarray([mech.topo.port_names.index(p) for p in legs])

        def grav_comp(q):
            E = tangent_map(mech, q, d=len(mech.topo.port_names))
            P = port_jacobian(mech, q)
            Ep = E @ jnp.linalg.inv(P @ E)
            return Ep.T @ gravity_torques(mech, q)

        F0 = jit(jax.vmap(grav_comp))(Qs)
        tt = dt * np.arange(steps)
        phase = rng.uniform(0, 2 * np.pi, (batch, 1, len(mech.topo.port_names)))
        amp = np.zeros(len(mech.topo.port_names))
        amp[idx] = 0.2
        U = np.asarray(F0)[:, None, :] * (1.0 + amp * np.sin(2 * np.pi * 2.0 * tt[None, :, None] + phase))
        f_ro = make_rollout(mech, dt, steps, with_energy=True)
        states = SimState(Qs, jnp.zeros((batch, mech.nv), Qs.dtype))
        (traj, info), c_ro, r_ro = _timed(f_ro, states, jnp.asarray(U))
        gap = np.asarray(info.closure_gap)
        rows.append(
            (
                "rollout (semi-implicit Euler + projection)",
                f"{batch} x {steps}",
                f"{c_ro:.2f}",
                f"{r_ro * 1e3:.1f}",
                f"{1e6 * r_ro / (batch * steps):.1f}",
                f"{gap.max():.1e}",
            )
        )
        prog.update(task, advance=1, description="writing figure")

        pos = np.asarray(jax.vmap(jax.vmap(lambda q: frame_pose(mech, q, center)))(traj.q)[..., :3, 3])
        import matplotlib.pyplot as plt

        fig, axs = plt.subplots(2, 2, figsize=(11, 7))
        t_ro = dt * np.arange(1, steps + 1)
        plots.trajectories(
            t_ro, pos[..., 2].T, ax=axs[0, 0], title="platform height, batch of rollouts", ylabel="z [m]"
        )
        plots.closure_gap(t_ro, gap, ax=axs[0, 1], title="closure gap during rollouts")
        axs[1, 0].plot(np.arange(path_steps), path - base[None], lw=1)
        axs[1, 0].set(xlabel="path step", ylabel="leg length change [m]", title="tracked leg-length path")
        axs[1, 1].plot(np.arange(path_steps), z_path - z_path[0], lw=1.2)
        axs[1, 1].legend(["x", "y", "z"], fontsize=8)
        axs[1, 1].set(xlabel="path step", ylabel="platform displacement [m]", title="tracked platform motion")
        for a in axs.ravel():
            a.grid(alpha=0.3)
        fig.suptitle(f"jaxmech demo: {mech.name} (nq {mech.nq}, nv {mech.nv}, {mech.n_rows} closure rows)")
        fig.tight_layout()
        png = plots.save(fig, Path(out) / "stewart_demo.png")
        prog.update(task, advance=1)

    tab = Table(title=f"jaxmech demo: {mech.name} ({jax.devices()[0].platform}, float64)")
    for c in ("stage", "batch", "jit compile [s]", "run [ms]", "per state [us]", "max closure gap"):
        tab.add_column(c, justify="right" if c != "stage" else "left")
    for r in rows:
        tab.add_row(*r)
    console.print(tab)
    console.print(
        f"peak closure gap: assembly {float(np.max(np.asarray(res.residual))):.1e}, tracking "
        f"{float(np.max(np.asarray(tr.residual))):.1e}, rollouts {gap.max():.1e}; "
        f"total {time.perf_counter() - t_start:.1f} s"
    )
    console.print(f"wrote {png}")
    bad = (~ok).sum() or not np.isfinite(gap).all() or np.asarray(tr.status).max() != 0
    raise typer.Exit(1 if bad else 0)
