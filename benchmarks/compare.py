"""jaxmech against Pinocchio (and MJX if installed), side by side in one process, one core.

The same closed states for every library; calls interleaved (jaxmech batch, peer loop, jaxmech
batch, ...) so machine load hits both alike; the process pinned to one core (``--core``, or
``--no-pin``). Per batch size and dtype it times, per state:

* ``fk``   forward kinematics: ``jm.forward_kinematics`` / ``pin.forwardKinematics``;
* ``closure`` closure rows: ``jm.closure_residual_and_jacobian`` / ``pin.computeJointJacobians``
  + ``pin.getConstraintsJacobian`` (the whole constraint Jacobian);
* ``fd``   constrained forward dynamics: ``jm.forward_dynamics`` / ``pin.constraintDynamics``;
* ``id``   tree inverse dynamics: ``jm.rnea`` / ``pin.rnea``;
* ``cid``  closed-chain inverse dynamics ``jm.inverse_dynamics`` (no peer);
* ``assemble`` ``jm.assemble`` from guesses within 5 cm / 0.05 rad of a closed state on the free
  joints and 0.03 rad / 3 cm on the other passive joints, ``track`` ``jm.track`` along a path of
  ``STEPS`` actuated values (per state-step) and ``rollout`` ``jm.rollout`` for ``STEPS`` steps of
  1 ms (per state-step): no peer computes these, so their ratio is against Pinocchio's
  ``constraintDynamics`` per state, the yardstick of issue 13 (goals 4x, 2x, 1.5x).

Peers run one state per call in a Python loop (their bindings cost ~0.5 us a call, included);
MJX runs batched from the same closed states and consistent velocities (``v_to_mujoco_qvel``).
Every timed call starts from an idle process (:data:`SETTLE` seconds of sleep before it): XLA's CPU
worker threads spin for a while after a parallel program (MJX's), and on the one pinned core that
spin took 2 us per state from the jaxmech call after it (Stewart forward dynamics 8.9-9.1 us
against 6.9 with MJX left out, session 50; 7.13 with a 20 ms pause, 7.00 with 300 ms).
Accuracy next to speed, float64: ``fd`` rows give the acceleration-level closure error ``max
|C a + gamma|`` (1/s^2 units of each row) of jaxmech's and MJX's accelerations, ``rollout`` rows
the position-level closure error ``max |r(q)|`` (m, rad) after the ``STEPS`` steps, both measured
by jaxmech's closure rows (MJX's loops are soft equality constraints).
Prints the ratio jaxmech / peer (below 1: jaxmech faster) and writes
``benchmarks/results/compare.json``. Peers that are not installed are skipped (GPU machines).

    taskset -c 0 python benchmarks/compare.py                 # batches 1 .. 65,536, float64 + float32
    python benchmarks/compare.py --budget 300                 # skips the batches that would not fit
    python benchmarks/compare.py --tiny                       # CI smoke: batch 1 and 64, seconds
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (XLA flags, then jaxmech, before any JAX use)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmech as jm  # noqa: E402

common.enable_x64()

try:
    import pinocchio as pin  # noqa: E402
except ImportError:  # GPU machines
    pin = None
try:
    from mujoco import mjx  # noqa: E402
except ImportError:
    mjx = None

OPS = ("fk", "closure", "fd", "id", "cid", "assemble", "track", "rollout")
STEPS = 10  # steps per tracked path / rollout
SETTLE = 0.1  # seconds idle before each timed call (module docstring)
YARDSTICK = ("assemble", "track", "rollout")  # timed against the peer's constrained forward dynamics
BATCHES = (1, 64, 1024, 4096, 16384, 65536)


# ----------------------------------------------------------------------------- states


def closed_states(mech, n: int, spread: float = 0.03, seed: int = 0):
    """n closed states (q from jm.assemble around q0), velocities in null(C), random efforts/accelerations."""
    rng = np.random.default_rng(seed)
    t = mech.topo
    qa = t.actuated_v
    qi = np.array([t.q_start[t.v_body[k]] + (k - t.v_start[t.v_body[k]]) for k in qa], dtype=int)
    base = min(n, 64)
    Q = np.tile(np.asarray(mech.q0), (base, 1))
    if qi.size:
        Q[:, qi] += rng.uniform(-spread, spread, (base, qi.size))
    if mech.n_rows:
        res = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))(jnp.asarray(Q))
        Q = np.asarray(res.q)[np.asarray(res.status) == 0]
        if not len(Q):
            raise RuntimeError(f"{mech.name}: no state assembled")
    Q = Q[np.arange(n) % len(Q)]
    V = rng.normal(size=(n, mech.nv))
    if mech.n_rows:
        C = np.asarray(jm.jit(jax.vmap(lambda q: jm.closure_jacobian(mech, q)))(jnp.asarray(Q[:base])))
        for i in range(min(n, base)):
            _, S, Vt = np.linalg.svd(C[i])
            r = int((S > 1e-9 * S[0]).sum())
            V[i] = Vt[r:].T @ rng.normal(size=mech.nv - r)
        V = V[np.arange(n) % min(n, base)]
    return Q, V, rng.normal(size=(n, mech.nv)), rng.normal(size=(n, mech.nv))


# ----------------------------------------------------------------------------- jaxmech


def guesses(mech, Q, seed: int = 1):
    """Guesses near the closed states Q: free joints moved by up to 5 cm / 0.05 rad, the other
    passive coordinates by up to 0.03 (rad or m); actuated coordinates exact."""
    rng = np.random.default_rng(seed)
    scale = np.full(mech.nv, 0.03)
    for n_, ty in zip(mech.topo.joint_names, mech.topo.joint_types, strict=True):
        if ty == "free":
            scale[mech.v_slice(n_)] = 0.05
    scale[mech.topo.actuated_v] = 0.0
    dv = jnp.asarray(rng.uniform(-1, 1, Q.shape[:1] + (mech.nv,)) * scale)
    return np.asarray(jm.jit(jax.vmap(lambda q, d: jm.integrate(mech, q, d)))(jnp.asarray(Q), dv))


def jax_fns(mech):
    """op -> jitted batched function of (Q, V, T, A) (``assemble``: Q are guesses)."""
    from jaxmech.active_set import partition
    from jaxmech.tracking import active_q_indices

    nu = jm.control_size(mech)
    jm.mobility(mech)  # static, on the host (the default active set needs it)
    aq = np.asarray(active_q_indices(mech, partition(mech)), int)
    ramp = jnp.linspace(0.0, 0.01, STEPS)[:, None]

    def track(m, q):
        r = jm.track(m, q, q[aq][None, :] + ramp.astype(q.dtype))
        return r.q[-1], r.status, r.iterations[1:]  # step 0 acquires the start; the rest track

    def rollout(m, q, v):
        return jm.rollout(m, jm.SimState(q, v), jnp.zeros(nu, q.dtype), 1e-3, STEPS)[0].q[-1]

    f = {
        "fk": lambda m, q, v, t, a: jm.forward_kinematics(m, q),
        "closure": lambda m, q, v, t, a: jm.closure_residual_and_jacobian(m, q),
        "fd": lambda m, q, v, t, a: jm.forward_dynamics(m, q, v, t).a,
        "id": lambda m, q, v, t, a: jm.rnea(m, q, v, a),
        "cid": lambda m, q, v, t, a: jm.inverse_dynamics(m, q, v, a).tau,
        "assemble": lambda m, q, v, t, a: (lambda r: (r.q, r.status, r.iterations))(jm.assemble(m, q)),
        "track": lambda m, q, v, t, a: track(m, q),
        "rollout": lambda m, q, v, t, a: rollout(m, q, v),
    }
    return {k: jm.jit(jax.vmap(g, in_axes=(None, 0, 0, 0, 0))) for k, g in f.items()}


# ----------------------------------------------------------------------------- peers


class Pinocchio:
    """Pinocchio 4 on the same model (``jm.to_pinocchio``); one state per call."""

    name = "pinocchio"

    def __init__(self, mech, Q, V, T, A):
        self.model, self.cons = jm.to_pinocchio(mech)
        self.data = self.model.createData()
        self.cdatas = pin.StdVec_RigidConstraintData([c.createData() for c in self.cons])
        pin.initConstraintDynamics(self.model, self.data, self.cons, self.cdatas)
        C = np.asarray(jm.closure_jacobian(mech, jnp.asarray(Q[0])))
        redundant = C.size and np.linalg.matrix_rank(C, 1e-9 * np.linalg.norm(C, 2)) < C.shape[0]
        self.settings = pin.ProximalSettings(1e-12, 1e-6, 100) if redundant else pin.ProximalSettings(1e-12, 0.0, 1)
        self.mech = mech
        self.q = jm.q_to_pinocchio(mech, Q)
        self.v, self.t, self.a = (jm.v_to_pinocchio(mech, x) for x in (V, T, A))

    def ops(self):
        m, d, cons, cd = self.model, self.data, self.cons, self.cdatas

        def closure(q, v, t, a):
            pin.computeJointJacobians(m, d, q)
            return pin.getConstraintsJacobian(m, d, cons, cd)

        fd = lambda q, v, t, a: pin.constraintDynamics(m, d, q, v, t, cons, cd, self.settings)  # noqa: E731
        return {
            "fk": lambda q, v, t, a: pin.forwardKinematics(m, d, q),
            "closure": closure,
            "fd": fd,
            "id": lambda q, v, t, a: pin.rnea(m, d, q, v, a),
            **{op: fd for op in YARDSTICK},  # the yardstick: constrained forward dynamics per state
        }

    def run(self, op, n: int) -> float:
        """Seconds per state over the first n states."""
        f = self.ops()[op]
        q, v, t, a = self.q, self.v, self.t, self.a
        t0 = time.perf_counter()
        for i in range(n):
            f(q[i], v[i], t[i], a[i])
        return (time.perf_counter() - t0) / n

    def fd_all(self, n: int) -> np.ndarray:
        out = np.array(
            [
                pin.constraintDynamics(
                    self.model, self.data, self.q[i], self.v[i], self.t[i], self.cons, self.cdatas, self.settings
                )
                for i in range(n)
            ]
        )
        return jm.v_from_pinocchio(self.mech, out)


def closure_error(mech, op: str, Q, V, out) -> float:
    """The closure error of a batch of results, by jaxmech's rows: ``fd`` (``out`` = accelerations
    (n, nv)): ``max |C(q) a + gamma(q, v)|``; ``rollout`` (``out`` = final q (n, nq)): ``max |r(q)|``."""
    if op == "fd":
        err = jax.vmap(lambda q, v, a: jm.closure_jacobian(mech, q) @ a + jm.closure_bias(mech, q, v))(Q, V, out)
    else:
        err = jax.vmap(lambda q: jm.closure_residual(mech, q))(out)
    return float(jnp.max(jnp.abs(err)))


def mujoco_qacc_to_a(mech, q, qvel, qacc):
    """MuJoCo ``qacc`` -> jaxmech ``a`` (nv,) at ``q = qpos``, ``qvel``. A free joint's jaxmech
    velocity is the body twist ``(omega_b, R^T pdot)``, so its linear acceleration is
    ``R^T pddot - omega_b x v_b``; the other joints' coordinates are MuJoCo's."""
    a = jm.mujoco_qvel_to_v(mech, q, qacc)
    t = mech.topo
    if t.free_q.size:
        xi = jm.mujoco_qvel_to_v(mech, q, qvel)[np.asarray(t.free_v)]  # (n, 6) = (omega_b, v_b)
        a = a.at[np.asarray(t.free_v)[:, 3:]].add(-jnp.cross(xi[:, :3], xi[:, 3:]))
    return a


class MJX:
    """MuJoCo XLA on the shipped MJCF of the same robot (``configs/NAME.xml``, exported at a closed
    ``qpos0``: its ``qpos`` is jaxmech's ``q``), batched like jaxmech: ``jit(vmap(mjx.forward))``
    (``fd``: qacc from its soft-constraint solver) and ``STEPS`` calls of ``mjx.step`` in a
    ``lax.scan`` (``rollout``, per state-step), from the same closed states and velocities as
    jaxmech. :meth:`closure_error` measures its results by jaxmech's closure rows. Other ops have
    no MJX counterpart."""

    name = "mjx"
    # float64 only: with x64 on (this script's float64 reference tier) MJX promotes float32 data to
    # float64 internally, so a "float32" MJX row would time mixed precision
    dtypes = (jnp.dtype(jnp.float64),)

    def __init__(self, xml: Path, steps: int, mech, Q, V):
        import mujoco

        self.model = mujoco.MjModel.from_xml_path(str(xml))
        self.model.opt.timestep = 1e-3  # jaxmech's rollout step (MuJoCo's default is 2 ms)
        self.steps = steps
        self.mech, self.Q = mech, jnp.asarray(Q)
        self.V = jnp.asarray(V)
        self.qvel = jax.vmap(lambda q, v: jm.v_to_mujoco_qvel(mech, q, v))(self.Q, self.V)
        self._compiled: dict = {}

    def ops(self):
        return {"fd": None, "rollout": None}

    def _data(self, n: int, dtype):
        mx = common.cast(mjx.put_model(self.model), dtype)
        d0 = common.cast(mjx.make_data(mx), dtype)
        qp, qv = (jnp.asarray(x[:n], dtype) for x in (self.Q, self.qvel))
        return mx, jax.vmap(lambda q, v: d0.replace(qpos=q, qvel=v))(qp, qv)

    def prepare(self, op: str, n: int, dtype) -> float:
        """Compile ``op`` at batch n (seconds), so :meth:`run` times the run only."""
        mx, ds = self._data(n, dtype)
        if op == "fd":
            f = jax.jit(jax.vmap(lambda d: mjx.forward(mx, d).qacc))
        else:

            def roll(d):
                return jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=self.steps)[0].qpos

            f = jax.jit(jax.vmap(roll))
        t0 = time.perf_counter()
        jax.block_until_ready(f(ds))
        self._compiled[op] = (f, ds, n * (self.steps if op == "rollout" else 1))
        return time.perf_counter() - t0

    def closure_error(self, op: str) -> float:
        """:func:`closure_error` of MJX's result at the batch :meth:`prepare` compiled."""
        f, ds, _ = self._compiled[op]
        out, n = f(ds), ds.qpos.shape[0]
        Q, V, qvel = self.Q[:n], self.V[:n], self.qvel[:n]
        if op == "fd":
            out = jax.vmap(lambda q, qv, qa: mujoco_qacc_to_a(self.mech, q, qv, qa))(Q, qvel, out)
        return closure_error(self.mech, op, Q, V, out)

    def run(self, op, n: int) -> float:
        """Seconds per state (per state-step for ``rollout``) at the batch :meth:`prepare` compiled."""
        f, ds, per = self._compiled[op]
        t0 = time.perf_counter()
        jax.block_until_ready(f(ds))
        return (time.perf_counter() - t0) / per


def make_peers(mech, Q, V, T, A, name: str = "") -> list:
    peers = []
    if pin is not None:
        try:
            peers.append(Pinocchio(mech, Q, V, T, A))
        except jm.ModelError as e:
            print(f"pinocchio: skipped ({e})")
    else:
        print("pinocchio: not installed, skipped")
    xml = common.CONFIGS / f"{name}.xml"
    if mjx is None:
        print("mjx: not installed, skipped")
    elif not xml.exists():
        print(f"mjx: no {xml.name} for {name}, skipped")
    else:
        peers.append(MJX(xml, STEPS, mech, Q, V))
    return peers


# ----------------------------------------------------------------------------- driver


def bench(name, mech, batches, dtypes, ops, reps, budget, peer_states):
    n = max(batches)
    Q, V, T, A = closed_states(mech, n, 0.03 if "stewart" in name else 0.2)
    G = guesses(mech, Q) if "assemble" in ops else Q
    peers = make_peers(mech, Q, V, T, A, name)
    rows = []
    for dtype in dtypes:
        m = common.cast(mech, dtype)
        fns = jax_fns(m)
        for b in batches:
            if budget.left() <= 0:
                print(f"{name} {jnp.dtype(dtype).name} batch {b}: skipped (--budget exhausted)")
                rows.append({"mechanism": name, "dtype": jnp.dtype(dtype).name, "batch": b, "skipped": "budget"})
                continue
            for op in ops:
                args = [jnp.asarray(x[:b], dtype) for x in (G if op == "assemble" else Q, V, T, A)]
                per = b * (STEPS if op in ("track", "rollout") else 1)  # states, or state-steps
                t0 = time.perf_counter()
                lowered = fns[op].lower(m, *args).compile()
                compile_s = time.perf_counter() - t0
                jax.block_until_ready(lowered(m, *args))
                active = [
                    p for p in peers if op in p.ops() and jnp.dtype(dtype) in getattr(p, "dtypes", (jnp.dtype(dtype),))
                ]
                jt, pt = [], {p.name: [] for p in active}
                peer_compile = {
                    p.name: p.prepare(op, b, dtype)  # batched peers run at the same batch, compiled first
                    for p in active
                    if hasattr(p, "prepare")
                }
                for _ in range(reps):
                    time.sleep(SETTLE)
                    s = time.perf_counter()
                    jax.block_until_ready(lowered(m, *args))
                    jt.append((time.perf_counter() - s) / per)
                    for p in active:
                        time.sleep(SETTLE)
                        pt[p.name].append(p.run(op, b if hasattr(p, "prepare") else min(b, peer_states)))
                row = {
                    "mechanism": name,
                    "nv": mech.nv,
                    "rows": mech.n_rows,
                    "op": op,
                    "dtype": jnp.dtype(dtype).name,
                    "batch": b,
                    "jaxmech_us": 1e6 * min(jt),
                    "jaxmech_median_us": 1e6 * float(np.median(jt)),
                    "compile_s": compile_s,
                    **{f"{pn}_compile_s": c for pn, c in peer_compile.items()},
                }
                if op in YARDSTICK:
                    row["peer_op"] = "constraintDynamics (yardstick)"
                    row["per"] = "state-step" if op != "assemble" else "state"
                if op == "assemble":
                    _, st, it = (np.asarray(x) for x in lowered(m, *args))
                    row.update(
                        success=float(np.mean(st == 0)), iterations_mean=float(it.mean()), iterations_max=int(it.max())
                    )
                if op == "track":
                    _, st, it = (np.asarray(x) for x in lowered(m, *args))
                    row.update(success=float(np.mean(st == 0)), iterations_per_step=float(it.mean()))
                msg = f"{name:10s} {op:8s} {row['dtype']:8s} batch {b:6d}: jaxmech {row['jaxmech_us']:9.2f} us"
                for pn, ts in pt.items():
                    row[f"{pn}_us"] = 1e6 * min(ts)
                    row[f"ratio_jaxmech_over_{pn}"] = min(jt) / min(ts)
                    msg += f"  {pn} {row[f'{pn}_us']:7.2f} us  ratio {row[f'ratio_jaxmech_over_{pn}']:6.3f}"
                if op in ("fd", "rollout") and jnp.dtype(dtype) == jnp.float64:  # accuracy next to speed
                    out = lowered(m, *args)
                    row["jaxmech_closure_error"] = closure_error(m, op, args[0], args[1], out)
                    msg += f"  closure error {row['jaxmech_closure_error']:.1e}"
                    for p in (p for p in active if hasattr(p, "closure_error")):
                        row[f"{p.name}_closure_error"] = p.closure_error(op)
                        msg += f" ({p.name} {row[f'{p.name}_closure_error']:.1e})"
                if op == "fd" and jnp.dtype(dtype) == jnp.float64:
                    a = np.asarray(lowered(m, *args))
                    for p in (p for p in peers if hasattr(p, "fd_all")):
                        k = min(b, peer_states)
                        ref = p.fd_all(k)
                        scale = np.max(np.abs(ref), axis=1, keepdims=True)
                        row[f"fd_max_rel_diff_{p.name}"] = float(np.max(np.abs(a[:k] - ref) / scale))
                        err = closure_error(m, "fd", args[0][:k], args[1][:k], jnp.asarray(ref))
                        row[f"{p.name}_closure_error"] = err
                        msg += f"  diff {row[f'fd_max_rel_diff_{p.name}']:.1e}"
                        msg += f" ({p.name} closure error {row[f'{p.name}_closure_error']:.1e})"
                print(msg + f"  (compile {compile_s:.1f} s)", flush=True)
                rows.append(row)
    return rows


def steady_yardstick(rows):
    """Add ``pinocchio_fd_best_us`` (the fastest Pinocchio forward dynamics timed in this run for
    the row's mechanism, dtype and batch: the fd row and every yardstick row) and
    ``ratio_over_best_fd`` to the fd and yardstick rows, and print them. Each row's own yardstick
    is timed beside it, which keeps the machine's swings out of the ratio but also lets one noisy
    window flatter it (a rollout row measured 26.5 us for Pinocchio where the fd row of the same
    run had 14.7); this second ratio is the conservative one."""
    best = {}
    for r in rows:
        if "pinocchio_us" in r and (r["op"] == "fd" or r["op"] in YARDSTICK):
            key = (r["mechanism"], r["dtype"], r["batch"])
            best[key] = min(best.get(key, np.inf), r["pinocchio_us"])
    for r in rows:
        key = (r.get("mechanism"), r.get("dtype"), r.get("batch"))
        if key in best and (r["op"] == "fd" or r["op"] in YARDSTICK):
            r["pinocchio_fd_best_us"] = best[key]
            r["ratio_over_best_fd"] = r["jaxmech_us"] / best[key]
            print(
                f"{key[0]:10s} {r['op']:8s} {key[1]:8s} batch {key[2]:6d}: {r['jaxmech_us']:9.2f} us = "
                f"{r['ratio_over_best_fd']:6.3f}x the run's fastest Pinocchio forward dynamics ({best[key]:.2f} us)"
            )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechs", default="stewart", help="comma-separated config names (configs/NAME.toml)")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peer-states", type=int, default=256, help="states per peer timing loop")
    ap.add_argument("--budget", type=float, default=None, help="seconds; batches started after it are skipped")
    ap.add_argument("--tiny", action="store_true", help="CI smoke: batches 1,64, float64, 3 reps")
    ap.add_argument("--core", type=int, default=0, help="CPU core to pin the process to")
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--out", default="compare")
    common.add_reuse_flag(ap)
    args = ap.parse_args()
    common.reuse_host_buffers(args.reuse_buffers)
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    batches = [int(b) for b in args.batches.split(",")]
    dtypes = [jnp.dtype(d).type for d in args.dtypes.split(",")]
    reps = args.reps
    if args.tiny:
        batches, dtypes, reps = [1, 64], [jnp.float64], 3
    budget = common.Budget(args.budget)
    rows = []
    for name in args.mechs.split(","):
        mech = jm.load(common.CONFIGS / f"{name}.toml")
        rows += bench(name, mech, batches, dtypes, args.ops.split(","), reps, budget, args.peer_states)
    steady_yardstick(rows)
    path = common.write_json(args.out, {"env": common.env_info([jnp.dtype(d).name for d in dtypes]), "results": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
