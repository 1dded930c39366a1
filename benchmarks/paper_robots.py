"""The five robots of paper 000 from the authors' own graph files (configs/*_physical_graph.json).

One row per robot: bodies, joints, independent cycles, closure rows, rank and independent speeds
d at the assembled seed; the assembly residual from the file's own seed; max ‖C E‖ and
max ‖C a + γ‖ over random consistent states per support mode (Kangaroo: floating, left, right,
double sole welds; Go2: two, three, four feet as point supports); closure residual + Jacobian
time per state, batched, next to paper 000 Table VI (authors' Python: Kangaroo 0.339 ms,
excavator 0.984 ms). Also Kangaroo's total mass (42.2149 kg) and its constrained dynamics
against a 30-digit mpmath KKT solve at a few states (double support).

    python benchmarks/paper_robots.py                  # 100 states per mode, batch 256 timing
    python benchmarks/paper_robots.py --small          # CI size: 4 states, batch 16, 1 mpmath state
    python benchmarks/paper_robots.py --cpu 0          # pin to one core (as taskset -c 0)
    python benchmarks/paper_robots.py --robots kangaroo,go2 --budget 600

Writes benchmarks/results/paper_robots.json. Consistent states: the active coordinates of the
file's seed perturbed, then assembled (batched); velocities in the null space of the active rows;
support targets placed at each state's own sole / foot pose (so every mode is consistent).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__" and "--cpu" in sys.argv:  # pin before jax starts its threads
    os.sched_setaffinity(0, {int(sys.argv[sys.argv.index("--cpu") + 1])})

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (sets XLA_FLAGS before jax is imported)
import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmech as jm  # noqa: E402
from jaxmech.reduction import add_support_points, add_tool_target  # noqa: E402

CONFIGS, Budget = common.CONFIGS, common.Budget

ROBOTS = ("stewart", "excavator", "go2", "kangaroo", "panda")
PAPER_TABLE_VI_MS = {"kangaroo": 0.339, "excavator": 0.984}
KANGAROO_MASS = 42.2149
#: support modes: {mode: frames welded (sole) / pinned (foot)}
MODES = {
    "kangaroo": (
        "weld",
        {"floating": [], "left": ["left_sole"], "right": ["right_sole"], "double": ["left_sole", "right_sole"]},
    ),
    "go2": ("point", {"two": ["FL", "RR"], "three": ["FL", "FR", "RL"], "four": ["FL", "FR", "RL", "RR"]}),
}


def path_of(robot: str) -> Path:
    return CONFIGS / f"{robot}_physical_graph.json"


def active_of(robot: str, mech):
    """Default independent set, except the excavator: its eight actuators over-specify mobility 7
    (redundant actuation), so this uses the file's own ``partition_requests.joint_space``."""
    if robot == "excavator":
        return tuple(json.loads(path_of(robot).read_text())["partition_requests"]["joint_space"])
    return None


def rank_of(C: np.ndarray) -> int:
    if not C.size:
        return 0
    sv = np.linalg.svd(C, compute_uv=False)
    return int(np.sum(sv > 1e-9 * max(1.0, sv.max())))


def structure(robot: str, mech) -> dict:
    data = json.loads(path_of(robot).read_text())
    t = mech.topo
    return dict(
        bodies=len(data["bodies"]),
        joints=len(data["joints"]),
        cycles=len(t.cut_names) + len(data.get("loop_cuts", [])),
        rows=mech.n_rows,
        nv=mech.nv,
        mass_kg=float(np.sum(mech.mass)),
    )


def seed_assembly(robot: str, mech) -> dict:
    out = {}
    res = jm.assemble(mech, mech.q0)
    out["default"] = dict(status=jm.STATUS_MESSAGES[int(res.status)].split(":")[0], residual=float(res.residual))
    act = active_of(robot, mech)
    if act is not None:
        res = jm.assemble(mech, mech.q0, active=act)
        out["file_partition"] = dict(
            status=jm.STATUS_MESSAGES[int(res.status)].split(":")[0], residual=float(res.residual)
        )
    return res, out


def random_states(robot, mech, q_seed, n, key):
    """n consistent configurations near the seed: the active coordinates perturbed, then the
    passive ones corrected by Gauss-Newton on all closure rows (least squares: the redundant rows
    are consistent). This is the plain Newton step: it leaves the joint limits alone, which
    ``jm.assemble`` enforces. From Kangaroo's seed, ``jm.assemble`` converges when all coordinates are
    perturbed by 1e-4 or 1e-3 rad. At 1e-2 rad, 3 of 4 guesses stop: the nearest closed state moves a
    passive joint by 0.47 rad, past its +-0.4712 rad limit. Returns (q (n, nq), ok (n,) residual <= 1e-12)."""
    act = active_of(robot, mech)
    part = jm.assembly.partition(mech, act)
    a_q = np.asarray(part.a_lin_q, int)
    lo, hi = np.array(mech.lower)[a_q], np.array(mech.upper)[a_q]
    span = np.where(np.isfinite(hi - lo), 0.02 * (hi - lo), 0.02)  # small: stay on the seed's assembly branch
    dq = jax.random.uniform(key, (n, a_q.size), minval=-1.0, maxval=1.0) * span
    qg = jnp.tile(q_seed, (n, 1)).at[:, a_q].add(dq)
    qg = qg.at[:, a_q].set(jnp.clip(qg[:, a_q], lo, hi))
    if not mech.n_rows:
        return qg, np.ones(n, bool)
    p = np.asarray(part.passive, int)

    def correct(q):
        def body(_, q):
            r, C = jm.closure_residual_and_jacobian(mech, q)
            dv = jnp.zeros(mech.nv, q.dtype).at[p].set(-jnp.linalg.lstsq(C[:, p], r, rcond=1e-10)[0])
            return jm.integrate(mech, q, dv)

        q = jax.lax.fori_loop(0, 12, body, q)
        return q, jnp.max(jnp.abs(jm.closure_residual(mech, q)))

    Q, res = jm.jit(jax.vmap(correct))(qg)
    return Q, np.asarray(res) <= 1e-12


def support_model(robot, q):
    """(mechanism with every support as a constraint, {mode: row mask}) or (plain, {"fixed": None})."""
    g = jm.read_graph(path_of(robot))
    if robot not in MODES:
        return jm.compile(g), {"fixed": None}
    kind, modes = MODES[robot]
    m0 = jm.compile(g)
    frames = sorted({f for fs in modes.values() for f in fs})
    add_support_points(g, m0, q, frames, prefix="support", kind=kind)
    ms = jm.compile(g)
    closure = [n for n in ms.loop_names if not n.startswith("support_")]
    masks = {mode: jm.support_mask(ms, closure + [f"support_{f}" for f in fs]) for mode, fs in modes.items()}
    return ms, masks


def _retarget(ms, q):
    """Support targets at the state's own foot / sole poses (a consistent state in every mode)."""
    idx = [k for k, n in enumerate(ms.loop_names) if n.startswith("support_")]
    if not idx:
        return ms
    T = jnp.stack([jm.frame_pose(ms, q, n[len("support_") :]) for n in (ms.loop_names[k] for k in idx)])
    pa = ms.cut_pose_a.at[np.array([_param(ms, k) for k in idx])].set(T)
    return eqx.tree_at(lambda m: m.cut_pose_a, ms, pa)


def _param(ms, loop: int) -> int:
    for grp in ms.topo.groups:
        hit = np.nonzero(grp.loop_id == loop)[0]
        if hit.size:
            return int(grp.param_index[hit[0]])
    raise KeyError(loop)


def _null(C, mask, key, nv):
    Cm = C * mask[:, None]
    _, s, Vt = jnp.linalg.svd(Cm, full_matrices=True)
    tol = 1e-9 * jnp.maximum(1.0, s.max(initial=0.0)) if s.size else 1.0
    sfull = jnp.zeros(nv, C.dtype).at[: s.size].set(s)
    w = jnp.where(sfull <= tol, 1.0, 0.0)  # null-space directions
    u = jax.random.normal(key, (nv,), C.dtype) * w
    return Vt.T @ u


def state_checks(ms, q, key, mask):
    """(max |C E| of the closure, max |C a + gamma| of the active rows) at one consistent state."""
    m = _retarget(ms, q)
    C = jm.closure_jacobian(m, q)
    nv = m.nv
    k1, k2 = jax.random.split(key)
    v = _null(C, mask, k1, nv) if m.n_rows else jax.random.normal(k1, (nv,))
    tau = jax.random.normal(k2, (nv,))
    fd = jm.forward_dynamics(m, q, v, tau, support=mask)
    if m.n_rows:
        gam = jm.closure_bias(m, q, v)
        err = jnp.max(jnp.abs((C @ fd.a + gam) * mask))
    else:
        err = jnp.zeros(())
    return err, fd.a, v, tau


def mp_check(ms, q, v, tau, mask, dps=30):
    """max |a_jaxmech - a_mpmath| / max |a_mpmath| (mpmath KKT on an independent row subset)."""
    import mpmath as mp

    from jaxmech.rank import select_rows_ranked

    m = _retarget(ms, q)
    M = np.array(jm.crba(m, q))
    h = np.array(jm.nonlinear_effects(m, q, v))
    C = np.array(jm.closure_jacobian(m, q))[np.asarray(mask, bool)]
    gam = np.array(jm.closure_bias(m, q, v))[np.asarray(mask, bool)]
    r = rank_of(C)
    rows, _ = select_rows_ranked(jnp.asarray(C), r)
    rows = np.asarray(rows)[:r]
    C, gam = C[rows], gam[rows]
    mp.mp.dps = dps
    nv = M.shape[0]
    K = mp.matrix(nv + r, nv + r)
    for i in range(nv):
        for j in range(nv):
            K[i, j] = M[i, j]
    for i in range(r):
        for j in range(nv):
            K[nv + i, j] = C[i, j]
            K[j, nv + i] = -C[i, j]
    b = mp.matrix([*(tau - h).tolist(), *(-gam).tolist()])
    x = mp.lu_solve(K, b)
    a_ref = np.array([float(x[i]) for i in range(nv)])
    a = np.array(jm.forward_dynamics(m, q, v, tau, support=mask).a)
    return float(np.abs(a - a_ref).max() / max(1.0, np.abs(a_ref).max()))


def run_robot(robot: str, n: int, batch: int, n_mp: int, budget: Budget) -> dict:
    t0 = time.perf_counter()
    mech = jm.load(path_of(robot))
    row = dict(robot=robot, **structure(robot, mech))
    res, row["seed_assembly"] = seed_assembly(robot, mech)
    q_seed = res.q
    C0 = np.array(jm.closure_jacobian(mech, q_seed)) if mech.n_rows else np.zeros((0, mech.nv))
    row["rank"] = rank_of(C0)
    row["d"] = mech.nv - row["rank"]
    if robot == "panda":  # the paper's 6-D tool target on the hand leaves 2 speeds
        g = jm.read_graph(path_of(robot))
        add_tool_target(g, "tool", np.array(jm.frame_pose(mech, q_seed, "tool")))
        mt = jm.compile(g)
        row["d_tool_target"] = mt.nv - rank_of(np.array(jm.closure_jacobian(mt, q_seed)))
    Q, ok = random_states(robot, mech, q_seed, n, jax.random.PRNGKey(0))
    row["states_assembled"] = f"{int(ok.sum())}/{n}"
    Q = Q[np.nonzero(ok)[0]] if ok.any() else q_seed[None]
    if mech.n_rows:
        E = jm.jit(jax.vmap(lambda q: jm.tangent_map(mech, q, independent=active_of(robot, mech))))(Q)
        CE = jm.jit(jax.vmap(lambda q, e: jm.closure_jacobian(mech, q) @ e))(Q, E)
        row["max_CE"] = float(jnp.max(jnp.abs(CE)))
    else:
        row["max_CE"] = 0.0
    ms, masks = support_model(robot, q_seed)
    check = jm.jit(jax.vmap(state_checks, in_axes=(None, 0, 0, None)))
    keys = jax.random.split(jax.random.PRNGKey(1), Q.shape[0])
    row["modes"] = {}
    mp_state = None
    for mode, mk in masks.items():
        mask = jnp.ones(ms.n_rows) if mk is None else jnp.asarray(mk, float)
        err, a, v, tau = check(ms, Q, keys, mask)
        row["modes"][mode] = float(jnp.max(err))
        if mode in ("double", "fixed") and robot == "kangaroo":
            mp_state = (v, tau, mask)
    if robot == "kangaroo" and n_mp and mp_state is not None:
        v, tau, mask = mp_state
        row["mpmath_rel_err"] = max(
            mp_check(ms, Q[i], np.array(v[i]), np.array(tau[i]), np.array(mask)) for i in range(min(n_mp, Q.shape[0]))
        )
    if mech.n_rows and budget.left() > 0:
        Qb = jnp.tile(Q, (int(np.ceil(batch / Q.shape[0])), 1))[:batch]
        f = jm.jit(jax.vmap(lambda q: jm.closure_residual_and_jacobian(mech, q)))
        # best of >= 30 calls (>= 0.5 s): on this shared 2-core VM a best of 5 swung 14-18 us
        tm = common.time_interleaved({"resjac": f}, Qb, reps=30, min_time=0.5)["resjac"]
        row["resjac_us"] = tm.per_state_us(batch)  # wall time of the fastest call
        row["resjac_cpu_us"] = 1e6 * tm.cpu_best_s / batch  # process CPU time (robust to descheduling)
        row["resjac_compile_s"] = tm.compile_s
    row["paper_resjac_us"] = 1e3 * PAPER_TABLE_VI_MS[robot] if robot in PAPER_TABLE_VI_MS else None
    row["wall_s"] = time.perf_counter() - t0
    return row


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--robots", default=",".join(ROBOTS))
    ap.add_argument("--states", type=int, default=100, help="random consistent states per support mode")
    ap.add_argument(
        "--batch",
        type=int,
        default=256,
        help="batch of the residual+Jacobian timing (Kangaroo's dense 80 x 82 Jacobian is 13 MB at 256; "
        "past 32 MiB, e.g. 53 MB at 1,024, glibc maps fresh pages on every call)",
    )
    ap.add_argument("--mpmath", type=int, default=3, help="Kangaroo states checked against mpmath")
    ap.add_argument("--small", action="store_true", help="CI size: 4 states, batch 16, 1 mpmath state")
    ap.add_argument("--budget", type=float, default=None, help="seconds; robots past it are skipped")
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core (like taskset -c N)")
    ap.add_argument("--out", default="paper_robots")
    common.add_reuse_flag(ap)
    a = ap.parse_args(argv)
    common.reuse_host_buffers(a.reuse_buffers)
    if a.small:
        a.states, a.batch, a.mpmath = 4, 16, 1
    common.enable_x64()
    budget = Budget(a.budget)
    rows = []
    for robot in a.robots.split(","):
        if budget.left() <= 0:
            print(f"budget spent: {robot} skipped")
            continue
        rows.append(run_robot(robot, a.states, a.batch, a.mpmath, budget))
        print(json.dumps(rows[-1], default=str))
    cols = [
        "example",
        "bodies",
        "joints",
        "cycles",
        "rows",
        "rank",
        "d",
        "seed res",
        "max |CE|",
        "max |Ca+γ| per mode",
        f"res+jac µs (batch {a.batch})",
        "paper µs",
    ]
    table = []
    for r in rows:
        sa = r["seed_assembly"]
        seed = f"{sa['default']['residual']:.1e} ({sa['default']['status']})"
        if "file_partition" in sa:
            seed += f"; file set {sa['file_partition']['residual']:.1e}"
        modes = ", ".join(f"{k} {v:.1e}" for k, v in r["modes"].items())
        d = f"{r['d']}" + (f" ({r['d_tool_target']} tool)" if "d_tool_target" in r else "")
        table.append(
            [
                r["robot"],
                r["bodies"],
                r["joints"],
                r["cycles"],
                r["rows"],
                r["rank"],
                d,
                seed,
                r["max_CE"],
                modes,
                f"{r.get('resjac_us', float('nan')):.1f} (cpu {r.get('resjac_cpu_us', float('nan')):.1f})",
                r["paper_resjac_us"] or float("nan"),
            ]
        )
    kg = next((r for r in rows if r["robot"] == "kangaroo"), None)
    cap = None
    if kg:
        cap = f"Kangaroo mass {kg['mass_kg']:.4f} kg (paper {KANGAROO_MASS})"
        if "mpmath_rel_err" in kg:
            cap += f"; constrained dynamics vs 30-digit mpmath KKT: max rel err {kg['mpmath_rel_err']:.1e}"
    common.print_table("Paper 000 robots from the authors' graph files", cols, table, caption=cap)
    payload = dict(env=common.env_info(), args=vars(a), rows=rows)
    print(f"wrote {common.write_json(a.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
