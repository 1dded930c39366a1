"""The ``jaxmech`` command line (typer + rich).

Sub-commands live next to the code they drive and register themselves on :data:`app`:
``info`` here, ``assemble``/``track`` in :mod:`jaxmech.cli_assembly`, ``demo`` in
:mod:`jaxmech.cli_demo`.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="jaxmech: closed-chain robot mechanics in JAX (closure, assembly, reduction, dynamics).",
    no_args_is_help=False,
    add_completion=False,
)
console = Console()


def configs_dir() -> Path:
    """The shipped example configs (repository ``configs/``)."""
    return Path(__file__).resolve().parents[1] / "configs"


def resolve_config(path: str) -> Path:
    """A config path as given, or the name of a shipped example (``stewart`` -> configs/stewart.toml)."""
    p = Path(path)
    if p.exists():
        return p
    for cand in (configs_dir() / path, configs_dir() / f"{path}.toml"):
        if cand.exists():
            return cand
    console.print(f"[red]error:[/] {path}: file not found (shipped examples: {', '.join(_examples())})", soft_wrap=True)
    raise typer.Exit(2)


def _examples() -> list[str]:
    d = configs_dir()
    return (
        sorted(p.name for p in d.glob("*") if p.suffix in (".toml", ".xml", ".urdf", ".sdf", ".json"))
        if d.exists()
        else []
    )


def load_or_exit(path: str):
    """Load a mechanism, printing a one-line error (no traceback) for user mistakes."""
    from .graph import ModelError
    from .io import load

    try:
        return load(resolve_config(path))
    except ModelError as e:
        console.print(f"[red]error:[/] {e}", soft_wrap=True)
        raise typer.Exit(2) from None


def enable_x64() -> None:
    """The CLI computes in float64 (the reference precision)."""
    import jax

    jax.config.update("jax_enable_x64", True)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        console.print(ctx.get_help())
        console.print("\n[bold]Shipped examples[/] (pass the name or a path):")
        for name in _examples():
            console.print(f"  configs/{name}")
        raise typer.Exit(0)


@app.command()
def info(
    config: str = typer.Argument(..., help="mechanism file (.toml/.xml/.urdf/.sdf/.json) or example name"),
) -> None:
    """Print bodies, joints, the chosen tree and cuts, loops, residual rows, and the numerical
    rank and degrees of freedom at q0."""
    enable_x64()
    import jax.numpy as jnp
    import numpy as np

    from .closure import closure_jacobian, closure_residual

    mech = load_or_exit(config)
    t = mech.topo
    console.print(f"[bold]{mech.name}[/]  ({t.source})")
    console.print(
        f"bodies {mech.nb}, tree joints {len(t.joint_names)}, cuts {len(t.cut_names)}, "
        f"nq {mech.nq}, nv {mech.nv}, closure elements {mech.n_loops}, residual rows {mech.n_rows}"
    )
    tab = Table(title="tree joints (q / v order)")
    for c in ("#", "joint", "type", "parent -> child", "q", "v", "actuated"):
        tab.add_column(c)
    for i, (n, ty) in enumerate(zip(t.joint_names, t.joint_types, strict=False)):
        par = "world" if t.parent[i] < 0 else t.body_names[t.parent[i]]
        qs, vs = mech.q_slice(n), mech.v_slice(n)
        tab.add_row(
            str(i),
            n + (" (reversed)" if t.joint_reversed[i] else ""),
            ty,
            f"{par} -> {t.body_names[i]}",
            f"{qs.start}:{qs.stop}",
            f"{vs.start}:{vs.stop}",
            "yes" if n in t.actuated else "",
        )
    console.print(tab)
    if mech.n_loops or t.coupling_names:
        lt = Table(title="closure elements (cuts and constraints)")
        for c in ("loop", "type", "body A", "body B", "rows"):
            lt.add_column(c)
        for n, ty, (a, b) in zip(t.loop_names, t.loop_types, t.loop_bodies, strict=False):
            rows = [r for r in t.row_names if r.split(":")[0] == n]
            lt.add_row(
                n, ty, "world" if a < 0 else t.body_names[a], "world" if b < 0 else t.body_names[b], str(len(rows))
            )
        for n in t.coupling_names:
            lt.add_row(n, "coupling", "-", "-", "1")
        console.print(lt)
    q0 = jnp.asarray(mech.q0)
    if mech.n_rows:
        C = np.asarray(closure_jacobian(mech, q0))
        r = np.asarray(closure_residual(mech, q0))
        sv = np.linalg.svd(C, compute_uv=False)
        rank = int(np.sum(sv > 1e-9 * max(1.0, sv.max()))) if sv.size else 0
        console.print(
            f"at q0: max |residual| {np.abs(r).max():.3e}, numerical rank {rank} "
            f"(of {mech.n_rows} rows), degrees of freedom nv - rank = {mech.nv - rank}"
        )
        _print_independent(mech)
    else:
        console.print(f"open chain: degrees of freedom {mech.nv}")
    if t.frame_names:
        console.print(f"frames: {', '.join(t.frame_names)}")
    if t.port_names:
        console.print(f"ports: {', '.join(f'{n} ({ty})' for n, ty in zip(t.port_names, t.port_types, strict=False))}")


def _print_independent(mech) -> None:
    """The default independent speeds at the projected q0 and the rule that chose them."""
    from .independent import CE_TOL, independent_choice

    ch = independent_choice(mech)
    if ch is None:
        return
    rule = (
        "actuated first"
        if ch.actuated_first
        else f"best-conditioned (actuated-first set: max |C E| {ch.ce_actuated_first:.1e} > {CE_TOL:.0e})"
    )
    console.print(f"default independent speeds ({rule}): {', '.join(ch.names)}; max |C E| {ch.ce_chosen:.1e}")


for _mod in ("cli_assembly", "cli_demo", "cli_bench"):
    try:
        importlib.import_module(f"{__package__}.{_mod}")
    except ModuleNotFoundError as _e:  # command module not present in this build
        if _e.name != f"{__package__}.{_mod}":
            raise


def main() -> None:
    app(prog_name="jaxmech")


if __name__ == "__main__":  # python -m jaxmech.cli: run the package module's app, where sub-commands registered
    from jaxmech.cli import main as _main

    sys.exit(_main())
