"""``jaxmech assemble`` and ``jaxmech track``: assembly and path tracking from the command line.

    jaxmech assemble four_bar --set crank=0.7
    jaxmech assemble stewart --active platform_free --set platform_free=0.03,-0.02,0.65,1,0,0,0
    jaxmech track four_bar path.csv --out result.csv --plot result.png

``--set NAME=VALUES`` writes q entries of a joint (comma-separated for multi-coordinate joints;
``joint:k`` for its k-th q entry) into the guess ``mech.q0``. The path CSV has one column per
active q entry, named like ``--set`` names (``crank``; ``platform_free:0`` .. ``platform_free:6``),
one row per step.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import typer
from rich.progress import Progress
from rich.table import Table

from ._jit import jit
from .cli import app, console, enable_x64, load_or_exit


def _q_entries(mech, name: str) -> list[int]:
    base, _, k = name.partition(":")
    try:
        sl = mech.q_slice(base)
    except KeyError as e:
        raise typer.BadParameter(str(e.args[0])) from None
    idx = list(range(sl.start, sl.stop))
    if k:
        try:
            return [idx[int(k)]]
        except (ValueError, IndexError):
            raise typer.BadParameter(f"'{name}': joint '{base}' has q entries 0..{len(idx) - 1}") from None
    return idx


def _apply_sets(mech, q: np.ndarray, sets: list[str]) -> np.ndarray:
    q = q.copy()
    for s in sets:
        name, eq, vals = s.partition("=")
        if not eq:
            raise typer.BadParameter(f"--set expects NAME=VALUE[,VALUE...], got '{s}'")
        idx = _q_entries(mech, name.strip())
        try:
            v = [float(x) for x in vals.split(",")]
        except ValueError:
            raise typer.BadParameter(f"--set {name}: values must be numbers, got '{vals}'") from None
        if len(v) != len(idx):
            raise typer.BadParameter(f"--set {name}: expected {len(idx)} value(s), got {len(v)}")
        q[idx] = v
    return q


def _q_labels(mech) -> list[str]:
    labels = []
    for n in mech.joint_names:
        sl = mech.q_slice(n)
        w = sl.stop - sl.start
        labels.extend([n] if w == 1 else [f"{n}:{k}" for k in range(w)])
    return labels


def _roles(mech, part) -> dict[str, str]:
    out = {}
    for n in mech.joint_names:
        vs = range(mech.v_slice(n).start, mech.v_slice(n).stop)
        if not len(vs):
            out[n] = "fixed"
        elif any(i in part.active for i in vs):
            out[n] = "active"
        elif any(i in part.passive for i in vs):
            out[n] = "passive"
        else:
            out[n] = "held"
    return out


@app.command()
def assemble(
    config: str = typer.Argument(..., help="mechanism file or example name"),
    set_: list[str] = typer.Option([], "--set", help="NAME=VALUE[,...]: q entries of the guess (active values)"),
    active: list[str] = typer.Option([], "--active", help="active joints (default: the actuated ones)"),
    tol: float = typer.Option(1e-13, help="convergence tolerance on the selected residual"),
) -> None:
    """Assemble a closure-consistent configuration by defect homotopy and print it."""
    enable_x64()
    import jax.numpy as jnp

    from .assembly import CONVERGED, STATUS_MESSAGES, partition
    from .assembly import assemble as _assemble

    mech = load_or_exit(config)
    q = _apply_sets(mech, np.asarray(mech.q0), set_)
    try:
        part = partition(mech, active or None)
    except ValueError as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    res = _assemble(mech, jnp.asarray(q), active or None, tol=tol)
    qa = np.asarray(res.q)
    roles = _roles(mech, part)
    tab = Table(title=f"{mech.name}: assembled configuration")
    for c in ("joint", "type", "role", "guess", "q"):
        tab.add_column(c, justify="right" if c in ("guess", "q") else "left")
    for n, ty in zip(mech.joint_names, mech.topo.joint_types, strict=True):
        sl = mech.q_slice(n)
        fmt = lambda x: ", ".join(f"{v:+.9f}" for v in x)  # noqa: E731
        tab.add_row(n, ty, roles[n], fmt(q[sl]), fmt(qa[sl]))
    console.print(tab)
    st = int(res.status)
    color = "green" if st == CONVERGED else "red"
    console.print(
        f"status [{color}]{st} ({STATUS_MESSAGES[st]})[/], residual {float(res.residual):.3e}, "
        f"iterations {int(res.iterations)}, rank {int(res.rank)}, passive {len(part.passive)}, "
        f"rcond {float(res.rcond):.3e}"
    )
    raise typer.Exit(0 if st == CONVERGED else 1)


def _read_path(mech, path: Path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise typer.BadParameter(f"{path}: need a header row and at least one step")
    header = [h.strip() for h in rows[0]]
    try:
        data = np.array([[float(x) for x in r] for r in rows[1:] if r], dtype=float)
    except ValueError as e:
        raise typer.BadParameter(f"{path}: non-numeric entry ({e})") from None
    if data.shape[1] != len(header):
        raise typer.BadParameter(f"{path}: rows have {data.shape[1]} entries, header {len(header)}")
    cols = [_q_entries(mech, h) for h in header]
    if any(len(c) != 1 for c in cols):
        bad = [h for h, c in zip(header, cols, strict=True) if len(c) != 1]
        raise typer.BadParameter(f"{path}: columns must be single q entries ('joint' or 'joint:k'), got {bad}")
    return header, [c[0] for c in cols], data


@app.command()
def track(
    config: str = typer.Argument(..., help="mechanism file or example name"),
    path_csv: Path = typer.Argument(..., exists=True, dir_okay=False, help="CSV: one column per active q entry"),
    out: Path = typer.Option(None, help="result CSV (default: <path>_tracked.csv)"),
    plot: Path = typer.Option(None, help="PNG plot (default: <path>_tracked.png)"),
    set_: list[str] = typer.Option([], "--set", help="NAME=VALUE[,...]: entries of the first-step guess"),
    chunk: int = typer.Option(100, min=1, help="steps per compiled chunk (progress granularity)"),
) -> None:
    """Track a path of active coordinates (predictor-corrector, homotopy fallback); write a CSV
    of all coordinates with status and residual per step, and a plot."""
    enable_x64()
    import jax.numpy as jnp

    from .assembly import CONVERGED, partition
    from .tracking import active_q_indices
    from .tracking import track as _track

    mech = load_or_exit(config)
    header, cols, data = _read_path(mech, path_csv)
    bases = list(dict.fromkeys(h.partition(":")[0] for h in header))
    try:
        part = partition(mech, bases)
        aq = active_q_indices(mech, part)
    except ValueError as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    if sorted(aq.tolist()) != sorted(cols):
        console.print(f"[red]error:[/] path columns must cover the active q entries {aq.tolist()} exactly")
        raise typer.Exit(2)
    data = data[:, [cols.index(i) for i in aq]]
    n = len(data)
    f = jit(lambda q0, p: _track(mech, q0, p, bases))
    q = jnp.asarray(_apply_sets(mech, np.asarray(mech.q0), set_))
    Q, S, R, FB = [], [], [], []
    with Progress(console=console) as prog:
        task = prog.add_task(f"tracking {n} steps", total=n)
        for k in range(0, n, chunk):
            seg = data[k : k + chunk]
            m = len(seg)
            seg = np.concatenate([seg, np.repeat(seg[-1:], chunk - m, 0)])  # fixed shape: one compile
            res = f(q, jnp.asarray(seg))
            Q.append(np.asarray(res.q)[:m])
            S.append(np.asarray(res.status)[:m])
            R.append(np.asarray(res.residual)[:m])
            fb = np.array(res.fallback)[:m]
            fb[0] &= k == 0  # later chunks start with a (trivial) acquisition of the known q
            FB.append(fb)
            q = res.q[m - 1]
            prog.advance(task, m)
    Q, S, R, FB = map(np.concatenate, (Q, S, R, FB))
    out = out or path_csv.with_name(path_csv.stem + "_tracked.csv")
    plot = plot or path_csv.with_name(path_csv.stem + "_tracked.png")
    labels = _q_labels(mech)
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", *labels, "status", "residual", "homotopy"])
        for k in range(n):
            w.writerow([k, *(f"{x:.15g}" for x in Q[k]), int(S[k]), f"{R[k]:.3e}", int(FB[k])])
    _plot(mech, part, Q, R, plot)
    ok = int(np.sum(S == CONVERGED))
    color = "green" if ok == n else "red"
    console.print(
        f"[{color}]{ok}/{n} steps converged[/], max residual {R.max():.3e}, homotopy re-acquisitions "
        f"{int(FB.sum())}; wrote {out} and {plot}"
    )
    raise typer.Exit(0 if ok == n else 1)


def _plot(mech, part, Q, R, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = _roles(mech, part)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 1))
    steps = np.arange(len(Q))
    for n in mech.joint_names:
        if roles[n] not in ("active", "passive"):
            continue
        sl = mech.q_slice(n)
        for j in range(sl.start, sl.stop):
            lab = n if sl.stop - sl.start == 1 else f"{n}:{j - sl.start}"
            ax1.plot(
                steps,
                Q[:, j],
                "-" if roles[n] == "active" else "--",
                lw=1.2 if roles[n] == "active" else 0.9,
                label=f"{lab} ({roles[n]})",
            )
    ax1.set_ylabel("q (rad / m)")
    ax1.set_title(f"{mech.name}: tracked path (solid active, dashed passive)")
    if len(ax1.lines) <= 12:
        ax1.legend(fontsize=7, ncol=2)
    ax2.semilogy(steps, np.maximum(R, 1e-18), "k-", lw=0.8)
    ax2.set_ylabel("max |residual|")
    ax2.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
