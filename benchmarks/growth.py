"""How cost grows with the mechanism: N copies of the shipped four-bar side by side on the ground
(N independent loops, nv = 3 N, 5 N closure rows), batch 1,024, one core.

For each N: forward dynamics with ``method="kkt"`` (the dense LAPACK KKT) and ``"kkt_blocks"``
(block terms and the per-component solve; what ``"auto"`` takes on CPU for small loops), the
closure residual + Jacobian (the dense public view: its output alone grows with the square) and
forward kinematics, in us per state (best of calls, each function timed on its own: interleaved,
the dense solve's 2 s calls at N = 48 evict the others' data from the caches), with compile times
and the ratio to N = 1. Issue 12's
goal: forward dynamics at N = 48 costs at most 60x one four-bar per state (linear growth).

    taskset -c 0 python benchmarks/growth.py [--n 1,4,16,48] [--batch 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import (  # noqa: E402
    add_reuse_flag,
    enable_x64,
    env_info,
    pin_to_core,
    print_table,
    reuse_host_buffers,
    time_fn,
    write_json,
)


def side_by_side(n: int, spacing: float = 0.2) -> str:
    """TOML text of ``n`` copies of configs/four_bar.toml, copy k shifted by ``k * spacing`` along z."""
    src = tomllib.loads((ROOT / "configs" / "four_bar.toml").read_text())
    lines = [f'name = "four_bar_x{n}"', f"gravity = {src['gravity']}", ""]

    def val(x):
        if isinstance(x, str):
            return f'"{x}"'
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, dict):
            return "{ " + ", ".join(f"{k} = {val(v)}" for k, v in x.items()) + " }"
        return repr(list(x)) if isinstance(x, (list, tuple)) else repr(x)

    bodies = {b["name"] for b in src["body"]}
    for k in range(n):
        for b in src["body"]:
            b = dict(b, name=f"{b['name']}_{k}")
            if "frames" in b:
                b["frames"] = {f"{f}_{k}": v for f, v in b["frames"].items()}
            lines += ["[[body]]"] + [f"{key} = {val(v)}" for key, v in b.items()] + [""]
        for j in src["joint"]:
            j = dict(j, name=f"{j['name']}_{k}")
            for side in ("parent", "child"):
                if j[side] in bodies:
                    j[side] = f"{j[side]}_{k}"
            if j["parent"] == "world":
                xyz = list(j.get("parent_xyz", [0.0, 0.0, 0.0]))
                j["parent_xyz"] = [xyz[0], xyz[1], xyz[2] + k * spacing]
            lines += ["[[joint]]"] + [f"{key} = {val(v)}" for key, v in j.items()] + [""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1,4,16,48")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--core", type=int, default=0, help="pin to this core (-1: no pinning)")
    ap.add_argument("--out", default="growth", help="JSON name under benchmarks/results/, or a path")
    add_reuse_flag(ap)
    a = ap.parse_args(argv)
    pin_to_core(None if a.core < 0 else a.core)
    enable_x64()
    reuse_host_buffers(a.reuse_buffers)
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxmech as jm

    rows, out = [], {"env": env_info(), "batch": a.batch, "rows": []}
    base = None
    for n in [int(x) for x in a.n.split(",")]:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"four_bar_x{n}.toml"
            path.write_text(side_by_side(n))
            mech = jm.load(path)
        rng = np.random.default_rng(0)
        q = jm.assemble(mech, mech.q0, throw=True).q
        Q = jnp.asarray(np.tile(np.asarray(q), (a.batch, 1)))
        V = jnp.asarray(rng.normal(size=(a.batch, mech.nv)))
        T = jnp.asarray(rng.normal(size=(a.batch, mech.nv)))
        axes = (None, 0, 0, 0)
        fns = {
            "fd": jm.jit(jax.vmap(lambda m, q, v, t: jm.forward_dynamics(m, q, v, t, method="kkt").a, axes)),
            "fd_blocks": jm.jit(
                jax.vmap(lambda m, q, v, t: jm.forward_dynamics(m, q, v, t, method="kkt_blocks").a, axes)
            ),
            "closure": jm.jit(jax.vmap(lambda m, q, v, t: jm.closure_residual_and_jacobian(m, q), axes)),
            "fk": jm.jit(jax.vmap(lambda m, q, v, t: jm.forward_kinematics(m, q), axes)),
        }
        t0 = time.perf_counter()
        res = {k: time_fn(f, mech, Q, V, T, reps=a.reps, min_time=1.0) for k, f in fns.items()}
        us = {k: t.per_state_us(a.batch) for k, t in res.items()}
        comp = {k: t.compile_s for k, t in res.items()}
        base = base or us
        row = {"n": n, "nv": mech.nv, "rows": mech.n_rows, "us": us, "compile_s": comp}
        row["ratio"] = {k: us[k] / base[k] for k in us}
        out["rows"].append(row)
        rows.append(
            [n, mech.nv, mech.n_rows]
            + [f"{us[k]:.1f} ({row['ratio'][k]:.0f}x)" for k in fns]
            + [f"{comp['fd']:.1f} / {comp['fd_blocks']:.1f}"]
        )
        print(f"  N={n} done in {time.perf_counter() - t0:.0f} s", flush=True)
    print_table(
        f"N four-bars side by side, batch {a.batch}, us per state (ratio to N = 1)",
        ["N", "nv", "rows", "fd (kkt)", "fd (kkt_blocks)", "closure res + jac", "fk", "fd compile s (kkt / blocks)"],
        rows,
        "goal (issue 12): forward dynamics at N = 48 at most 60x N = 1",
    )
    print(f"wrote {write_json(a.out, out)}")
    return out


if __name__ == "__main__":
    main()
