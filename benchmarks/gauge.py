"""How fast this machine compiles and runs jaxmech right now: three fixed programs, timed.

The 2-core CI machine's speed moves by 15-25 % within an hour (a VM on a shared host): the same
tree's default test tier took 6:00 at one hour and 5:02 forty minutes later (``benchmarks/PROFILE.md``,
sessions 42-43), and a suite that is compile-bound follows the machine, not the code. CI
(``.ci/run``) prints this gauge right before the test tiers, so each tier's time can be read
against the machine's speed at that moment. Compile times are of a fresh process with no
persistent compilation cache (``jm.compilation_cache`` is not switched on here).

Programs (float64, ``jm.jit``, i.e. jaxmech's compile options):

* ``assemble``: ``vmap(jm.assemble)`` of the Stewart platform (configs/stewart.toml), 32 guesses;
* ``fd_grad``: ``vmap(grad)`` of the four-bar's constrained forward dynamics, 32 states;
* ``closure_jacobian``: ``vmap(jm.closure_jacobian)`` of the Stewart, 256 states.

Reference figures on the 2-core CI machine type (jaxlib 0.10.2), summed compile seconds: 7.8 at a
fast hour (the default tier took 4:53-5:02 then), 9.7 at a slow one (6:00). Usage:
``python benchmarks/gauge.py [--reps N] [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from common import CONFIGS, enable_x64, env_info, print_table, write_json

import jaxmech as jm


def _programs():
    """``(name, function, args)`` for the three gauge programs (fixed shapes and data)."""
    st = jm.load(CONFIGS / "stewart.toml")
    fb = jm.load(CONFIGS / "four_bar.toml")

    def fd_loss(m, q, v):
        return jm.forward_dynamics(m, q, v, jnp.zeros(m.nv)).a.sum()

    yield (
        "assemble",
        jax.vmap(lambda m, q: jm.assemble(m, q).q, (None, 0)),
        (st, jnp.tile(st.q0, (32, 1)) + 0.01),
    )
    yield (
        "fd_grad",
        jax.vmap(jax.grad(fd_loss, 1), (None, 0, 0)),
        (fb, jnp.tile(fb.q0, (32, 1)), jnp.zeros((32, fb.nv))),
    )
    yield ("closure_jacobian", jax.vmap(jm.closure_jacobian, (None, 0)), (st, jnp.tile(st.q0, (256, 1))))


def gauge(reps: int = 5) -> list[dict]:
    """Compile time (s, backend compile alone: traced and lowered first) and best run time (ms)
    of each gauge program."""
    rows = []
    for name, f, args in _programs():
        lowered = jm.jit(f).lower(*args)
        t0 = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t0
        jax.block_until_ready(compiled(*args))
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            best = min(best, time.perf_counter() - t0)
        rows.append({"program": name, "compile_s": compile_s, "run_ms": 1e3 * best})
    rows.append({"program": "total", "compile_s": sum(r["compile_s"] for r in rows), "run_ms": float("nan")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="timed runs per program (best is kept)")
    ap.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/gauge.json)")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error(f"--reps must be at least 1, got {args.reps}")
    enable_x64()
    rows = gauge(args.reps)
    print_table(
        "machine gauge (fresh process)",
        ["program", "compile s", "run ms"],
        [
            [r["program"], f"{r['compile_s']:.2f}", "" if r["program"] == "total" else f"{r['run_ms']:.2f}"]
            for r in rows
        ],
    )
    write_json(args.out or "gauge.json", {"env": env_info(), "rows": rows})


if __name__ == "__main__":
    main()
