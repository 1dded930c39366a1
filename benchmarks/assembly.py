"""Assembly benchmark (CPU): throughput vs batch size, Stewart success rate from perturbed
guesses, tracking vs homotopy at every step (paper 001: 45.8x), and a per-state
``scipy.optimize.least_squares`` baseline on the same residual.

    .venv/bin/python benchmarks/assembly.py [--quick] [--out benchmarks/results/assembly.json]

On this 2-core machine ``jit(vmap(assemble))`` at batch 1024 (Stewart) used to hang at 0% CPU
(concurrent batched LAPACK kernels deadlocking XLA's thread pool); ``jaxmech/lapack.py`` now runs
each batched LAPACK call in chunks that stay off a small pool.

Protocol (docs/benchmarks.md): ``jax.jit(jax.vmap(...))``, first call timed separately as
compile + run, then the best of ``--repeat`` calls of ``jax.block_until_ready(f(x))``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import jaxmech as jm  # noqa: E402
from jaxmech import assembly as A  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
console = Console()


def timed(f, *args, repeat=5):
    t = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    first = time.perf_counter() - t
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - t)
    return out, first, best


def perturbed(mech, n, seed, ang=0.5, lin=0.2):
    """Guesses around q0: passive coordinates perturbed uniformly by up to ``ang`` rad / ``lin``
    m (velocity-space, so quaternions stay unit); actuated coordinates exact."""
    rng = np.random.default_rng(seed)
    scale = np.full(mech.nv, ang)
    t = mech.topo
    for n_, ty in zip(t.joint_names, t.joint_types, strict=True):
        vs = mech.v_slice(n_)
        if ty == "prismatic":
            scale[vs] = lin
        if ty == "free":
            scale[vs.start + 3 : vs.stop] = lin
    scale[t.actuated_v] = 0.0
    dv = rng.uniform(-1, 1, (n, mech.nv)) * scale
    return np.asarray(jm.jit(jax.vmap(lambda v: jm.integrate(mech, mech.q0, v)))(jnp.asarray(dv)))


def throughput(mech, sizes, repeat, label, max_batch=None):
    f = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))
    rows = []
    for B in sizes:
        if max_batch and B > max_batch:
            continue
        G = jnp.asarray(perturbed(mech, B, seed=B))
        r, first, best = timed(f, G, repeat=repeat if B < 1024 else min(repeat, 2) if B < 8192 else 1)
        st = np.asarray(r.status)
        rows.append(
            dict(
                mechanism=label,
                batch=B,
                compile_plus_run_s=first,
                run_s=best,
                per_state_us=best / B * 1e6,
                assemblies_per_s=B / best,
                success=float(np.mean(st == 0)),
                max_residual=float(np.asarray(r.residual)[st == 0].max()) if np.any(st == 0) else None,
                max_iterations=int(np.asarray(r.iterations).max()),
            )
        )
        console.print(
            f"  {label} batch {B}: {rows[-1]['per_state_us']:.1f} us/state, success {rows[-1]['success']:.3f}"
        )
    return rows


def stewart_success(mech, n, chunk):
    """Forward kinematics from n perturbed guesses (<= 0.2 m / 0.5 rad): success rate, residual,
    and whether each converged state is the nominal configuration (same assembly branch)."""
    f = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))
    G = perturbed(mech, n, seed=12345)
    st, res, same = [], [], []
    for k in range(0, n, chunk):
        g = G[k : k + chunk]
        m = len(g)
        g = np.concatenate([g, np.tile(np.asarray(mech.q0), (chunk - m, 1))])
        r = f(jnp.asarray(g))
        st.append(np.asarray(r.status)[:m])
        res.append(np.asarray(r.residual)[:m])
        d = jax.vmap(lambda q: jm.difference(mech, mech.q0, q))(r.q)
        same.append(np.abs(np.asarray(d)).max(1)[:m] < 1e-8)
    st, res, same = map(np.concatenate, (st, res, same))
    ok = st == 0
    return dict(
        guesses=n,
        success_rate=float(ok.mean()),
        nominal_branch_rate=float((ok & same).mean()),
        max_converged_residual=float(res[ok].max()),
        status_counts={A.STATUS_MESSAGES[k].split(":")[0]: int(np.sum(st == k)) for k in np.unique(st)},
    )


def straggler_policy(mech, n, repeat, label, chunks=(None, 64)):
    """Batch cost against the median state's cost, with and without the straggler policy
    (``jm.assemble_batch``; chunk None: its default), from 0.2 m / 0.5 rad guesses. The median state's cost alone is the
    per-state time of a batch of ``n`` copies of the guess that needs the median iteration count
    (same batch size, so the same per-call overheads, and no stragglers)."""
    G = jnp.asarray(perturbed(mech, n, seed=2024))
    f = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))
    r, _, t_plain = timed(f, G, repeat=repeat)
    it = np.asarray(r.iterations)
    st = np.asarray(r.status)
    k_med = int(np.argsort(it)[n // 2])
    _, _, t_med = timed(f, jnp.tile(G[k_med], (n, 1)), repeat=repeat)
    row = dict(
        mechanism=label,
        batch=n,
        iterations_median=float(np.median(it)),
        iterations_p99=float(np.percentile(it, 99)),
        iterations_max=int(it.max()),
        median_state_us=t_med / n * 1e6,
        vmap_us=t_plain / n * 1e6,
        vmap_ratio=t_plain / t_med,
        vmap_success=float(np.mean(st == 0)),
        policy=[],
    )
    for c in chunks:
        rb, _, tb = timed(lambda g, c=c: jm.assemble_batch(mech, g, chunk=c), G, repeat=repeat)
        sb = np.asarray(rb.status)
        row["policy"].append(
            dict(
                chunk=jm.straggler.default_chunk(n) if c is None else c,
                same_as_vmap=bool(np.array_equal(np.asarray(rb.iterations), it) and np.array_equal(sb, st)),
                us=tb / n * 1e6,
                ratio=tb / t_med,
                success=float(np.mean(sb == 0)),
                max_residual=float(np.asarray(rb.residual)[sb == 0].max()),
            )
        )
    console.print(
        f"  {label} batch {n}: median state {row['median_state_us']:.1f} us, vmap {row['vmap_us']:.1f} us "
        f"({row['vmap_ratio']:.2f}x), policy "
        + ", ".join(f"chunk {p['chunk']}: {p['us']:.1f} us ({p['ratio']:.2f}x)" for p in row["policy"])
    )
    return row


PAPER_DLAM0 = 0.1  # a continuation over lambda = 0, 0.1, 0.2, ... (paper 001's Table 1 is not in its text)


def homotopy_every_step(mech, q_start, path, dlam0=None):
    """Baseline of paper 001 Table 7: defect homotopy at every step from the previous solution.
    ``dlam0``: first homotopy increment (default: the library's, 1.0, which tries the physical
    closure first and so acts as a Newton corrector from the previous solution)."""
    part = A.partition(mech)
    opts = A.make_options() if dlam0 is None else A.make_options(dlam0=dlam0)
    aq = np.asarray([mech.q_slice(n).start for n in mech.topo.actuated], int)

    def step(q, a):
        r = A._assemble_impl(mech, q.at[aq].set(a), part, opts)
        return r.q, (r.q, r.status, r.residual)

    first = A._assemble_impl(mech, q_start.at[aq].set(path[0]), part, opts)
    _, out = jax.lax.scan(step, first.q, path[1:])
    return out


def tracking_vs_homotopy(mech, n_steps, repeat, label, path_fn):
    path = jnp.asarray(path_fn(n_steps))
    ftrack = jm.jit(lambda q, p: jm.track(mech, q, p))
    fhom = jm.jit(lambda q, p: homotopy_every_step(mech, q, p))
    fpap = jm.jit(lambda q, p: homotopy_every_step(mech, q, p, PAPER_DLAM0))
    tr, tc, tt = timed(ftrack, mech.q0, path, repeat=repeat)
    ho, hc, ht = timed(fhom, mech.q0, path, repeat=repeat)
    hp, _, hpt = timed(fpap, mech.q0, path, repeat=repeat)
    qt, qh = np.asarray(tr.q)[1:], np.asarray(ho[0])
    row = dict(
        mechanism=label,
        steps=n_steps,
        track_s=tt,
        track_compile_plus_run_s=tc,
        homotopy_every_step_s=ht,
        homotopy_compile_plus_run_s=hc,
        speedup=ht / tt,
        homotopy_paper_dlam0=PAPER_DLAM0,
        homotopy_paper_s=hpt,
        speedup_vs_paper_homotopy=hpt / tt,
        homotopy_paper_all_converged=bool(np.all(np.asarray(hp[1]) == 0)),
        track_all_converged=bool(np.all(np.asarray(tr.status) == 0)),
        homotopy_all_converged=bool(np.all(np.asarray(ho[1]) == 0)),
        track_max_residual=float(np.asarray(tr.residual).max()),
        homotopy_max_residual=float(np.asarray(ho[2]).max()),
        max_abs_difference=float(np.abs(np.asarray(jax.vmap(lambda a, b: jm.difference(mech, a, b))(qt, qh))).max()),
        track_fallbacks=int(np.asarray(tr.fallback)[1:].sum()),
        track_mean_iterations=float(np.asarray(tr.iterations)[1:].mean()),
    )
    console.print(
        f"  {label}: track {tt * 1e3:.1f} ms, homotopy every step {ht * 1e3:.1f} ms ({row['speedup']:.1f}x), "
        f"with dlam0 = {PAPER_DLAM0} {hpt * 1e3:.1f} ms ({row['speedup_vs_paper_homotopy']:.1f}x)"
    )
    return row


def scipy_baseline(mech, n, repeat, label):
    """Per-state scipy.optimize.least_squares (trust-region reflective; residual and its
    ``jax.jacfwd`` Jacobian as jitted single-state callbacks) on the same raw residual over the passive
    coordinates, vs jaxmech's batched assembly on the same guesses."""
    part = A.partition(mech)
    p = np.asarray(part.passive)
    res_fn = jm.jit(lambda q, dvp: jm.closure_residual(mech, jm.integrate(mech, q, jnp.zeros(mech.nv).at[p].set(dvp))))

    jac_fn = jm.jit(jax.jacfwd(lambda q, dvp: res_fn(q, dvp), argnums=1))
    G = perturbed(mech, n, seed=7)
    res_fn(jnp.asarray(G[0]), jnp.zeros(p.size)).block_until_ready()
    jac_fn(jnp.asarray(G[0]), jnp.zeros(p.size)).block_until_ready()
    t = time.perf_counter()
    ok, resid = 0, []
    for g in G:
        gq = jnp.asarray(g)
        sol = scipy.optimize.least_squares(
            lambda x, gq=gq: np.asarray(res_fn(gq, jnp.asarray(x))),
            np.zeros(p.size),
            jac=lambda x, gq=gq: np.asarray(jac_fn(gq, jnp.asarray(x))),
            xtol=1e-15,
            ftol=1e-15,
            gtol=1e-15,
        )
        r = np.abs(sol.fun).max()
        resid.append(r)
        ok += r <= 1e-9
    t_scipy = (time.perf_counter() - t) / n
    f = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))
    r, _, best = timed(f, jnp.asarray(G), repeat=repeat)
    row = dict(
        mechanism=label,
        states=n,
        scipy_per_state_us=t_scipy * 1e6,
        scipy_success=ok / n,
        scipy_median_residual=float(np.median(resid)),
        jaxmech_per_state_us=best / n * 1e6,
        jaxmech_success=float(np.mean(np.asarray(r.status) == 0)),
        jaxmech_max_residual=float(np.asarray(r.residual).max()),
        speedup=t_scipy / (best / n),
    )
    console.print(
        f"  {label}: scipy {row['scipy_per_state_us']:.0f} us/state, jaxmech {row['jaxmech_per_state_us']:.1f} us/state"
    )
    return row


def tracking_rows(four, stewart, steps: int, repeat: int) -> list[dict]:
    """Tracking against defect homotopy at every step on the four-bar, the Stewart platform and
    paper 001's two-module manipulator (its numerical study: a two-path and a three-path module),
    each along a smooth path of its actuators."""
    console.print("[bold]tracking vs defect homotopy at every step[/]")
    two = jm.load(ROOT / "configs" / "two_module.toml")
    q0s = np.asarray(stewart.q0)[[stewart.q_slice(f"leg_{i}_length").start for i in range(6)]]
    a2 = np.asarray(two.q0)[[two.q_slice(n).start for n in two.topo.actuated]]
    wave = lambda n, k: np.sin(np.linspace(0, 2 * np.pi, n)[:, None] + np.arange(k) * np.pi / 3)  # noqa: E731
    return [
        tracking_vs_homotopy(four, steps, repeat, "four_bar", lambda n: np.linspace(0, 2 * np.pi, n)[:, None]),
        tracking_vs_homotopy(stewart, steps, repeat, "stewart", lambda n: q0s + 0.08 * wave(n, 6)),
        tracking_vs_homotopy(two, steps, repeat, "two_module", lambda n: a2 + 0.05 * wave(n, a2.size)),
    ]


def print_tracking(rows: list[dict]) -> None:
    tt = Table(title="tracking vs homotopy at every step (paper 001: 45.8x)")
    cols = ("mechanism", "steps", "track ms", "homotopy ms", "speedup", f"dlam0 {PAPER_DLAM0} ms", "speedup")
    for c in cols + ("iter/step", "max |diff|", "fallbacks"):
        tt.add_column(c, justify="right")
    for r in rows:
        tt.add_row(
            r["mechanism"],
            str(r["steps"]),
            f"{r['track_s'] * 1e3:.1f}",
            f"{r['homotopy_every_step_s'] * 1e3:.1f}",
            f"{r['speedup']:.1f}x",
            f"{r['homotopy_paper_s'] * 1e3:.1f}",
            f"{r['speedup_vs_paper_homotopy']:.1f}x",
            f"{r['track_mean_iterations']:.2f}",
            f"{r['max_abs_difference']:.1e}",
            str(r["track_fallbacks"]),
        )
    console.print(tt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stewart-max-batch", type=int, default=8192, help="largest Stewart batch")
    ap.add_argument("--only", choices=["tracking"], help="run one section (printed, no JSON)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "assembly.json")
    args = ap.parse_args()
    sizes = [1, 64] if args.quick else [1, 64, 1024, 8192]
    steps = 200 if args.quick else 1000
    n_guess = 512 if args.quick else 10000
    n_scipy = 16 if args.quick else 200
    four = jm.load(ROOT / "configs" / "four_bar.toml")
    stewart = jm.load(ROOT / "configs" / "stewart.toml")
    if args.only == "tracking":
        print_tracking(tracking_rows(four, stewart, steps, args.repeat))
        return
    results = dict(
        machine=dict(
            platform=platform.platform(), cpus=os.cpu_count(), jax=jax.__version__, backend=jax.default_backend()
        ),
        dtype="float64",
    )
    console.print("[bold]throughput vs batch size[/]")
    results["throughput"] = throughput(four, sizes, args.repeat, "four_bar") + throughput(
        stewart, sizes, args.repeat, "stewart", args.stewart_max_batch
    )
    console.print("[bold]Stewart forward kinematics from perturbed guesses[/]")
    results["stewart_fk_success"] = stewart_success(stewart, n_guess, 1024 if not args.quick else 256)
    console.print("[bold]straggler policy (jm.assemble_batch) from 0.2 m / 0.5 rad guesses[/]")
    results["stragglers"] = [straggler_policy(stewart, 256 if args.quick else 1024, args.repeat, "stewart")]
    if not args.quick:
        results["stragglers"].append(straggler_policy(stewart, 8192, 1, "stewart"))
    results["tracking"] = tracking_rows(four, stewart, steps, args.repeat)
    console.print("[bold]per-state scipy.optimize.least_squares baseline[/]")
    results["scipy_baseline"] = [
        scipy_baseline(stewart, n_scipy, args.repeat, "stewart"),
        scipy_baseline(four, n_scipy, args.repeat, "four_bar"),
    ]

    tab = Table(title="assembly throughput (CPU, float64)")
    for c in ("mechanism", "batch", "compile+run s", "run s", "us/state", "assemblies/s", "success"):
        tab.add_column(c, justify="right")
    for r in results["throughput"]:
        tab.add_row(
            r["mechanism"],
            str(r["batch"]),
            f"{r['compile_plus_run_s']:.2f}",
            f"{r['run_s']:.4f}",
            f"{r['per_state_us']:.1f}",
            f"{r['assemblies_per_s']:.0f}",
            f"{r['success']:.3f}",
        )
    console.print(tab)
    s = results["stewart_fk_success"]
    console.print(
        f"Stewart FK, {s['guesses']} guesses: success {s['success_rate']:.4f}, nominal branch "
        f"{s['nominal_branch_rate']:.4f}, max residual {s['max_converged_residual']:.2e}, {s['status_counts']}"
    )
    print_tracking(results["tracking"])
    ts = Table(title="vs per-state scipy.optimize.least_squares")
    for c in (
        "mechanism",
        "states",
        "scipy us/state",
        "scipy success",
        "jaxmech us/state",
        "jaxmech success",
        "speedup",
    ):
        ts.add_column(c, justify="right")
    for r in results["scipy_baseline"]:
        ts.add_row(
            r["mechanism"],
            str(r["states"]),
            f"{r['scipy_per_state_us']:.0f}",
            f"{r['scipy_success']:.3f}",
            f"{r['jaxmech_per_state_us']:.1f}",
            f"{r['jaxmech_success']:.3f}",
            f"{r['speedup']:.0f}x",
        )
    console.print(ts)
    tg = Table(title="straggler policy: batch cost / median state's cost (goal <= 2x, >= 99 % converge)")
    for c in ("batch", "it median/p99/max", "median us", "schedule", "same as vmap", "us/state", "ratio", "success"):
        tg.add_column(c, justify="right")
    for r in results["stragglers"]:
        its = f"{r['iterations_median']:.0f}/{r['iterations_p99']:.0f}/{r['iterations_max']}"
        med = f"{r['median_state_us']:.1f}"
        tg.add_row(
            str(r["batch"]),
            its,
            med,
            "vmap",
            "-",
            f"{r['vmap_us']:.1f}",
            f"{r['vmap_ratio']:.2f}x",
            f"{r['vmap_success']:.4f}",
        )
        for p in r["policy"]:
            tg.add_row(
                "",
                "",
                "",
                f"assemble_batch, chunk {p['chunk']}",
                str(p["same_as_vmap"]),
                f"{p['us']:.1f}",
                f"{p['ratio']:.2f}x",
                f"{p['success']:.4f}",
            )
    console.print(tg)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
