"""Simulation throughput and long-rollout accuracy.

* Environment steps per second of the Stewart pose-tracking environment (``jaxmech.envs``,
  one env step = ``SUBSTEPS`` simulator steps) at batch 1, 1,024, 8,192 and 65,536:
  ``jit(vmap(env.step))``, next to MJX stepping the same robot (``configs/stewart.xml``) the same
  number of times per env step (when mujoco-mjx is installed).
* 10 s rollouts at dt = 1 ms of the Stewart platform, passive (no leg forces, no damping, no
  end stops: it falls freely with its legs extending without bound) and with stops (passive, the
  leg-length and joint limits acting as stiff damped end stops, ``STOP_STIFFNESS``: it drops onto
  its lower leg limits and stays in the workspace), and of the excavator (cylinder forces =
  gravity compensation at the start): peak closure gap over the rollout (target <= 1e-10 m in
  float64, <= 1e-5 m in float32) and, for the passive Stewart, the energy drift
  ``max |E(t) - E(0)|`` relative to the peak kinetic energy. Simulated in chunks of
  ``chunk`` steps (one compiled scan, re-used), so ``--budget`` can stop a rollout early (the JSON
  then records the simulated time reached).

float64 (reference) and float32. Compile time separate, runs blocked on the result. The process
is pinned to one core (``--core``, default 0) as ``docs/benchmarks.md`` asks: on two cores MJX's batched
solver deadlocks XLA's CPU pool (seen in CI's smoke run; ``--no-pin`` to use every core).

    python benchmarks/rollout.py [--quick] [--budget SECONDS] [--dtypes float64 float32]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (sets XLA_FLAGS before jax is imported)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ENV_BATCHES = (1, 1024, 8192, 65536)
SUBSTEPS = 2  # simulator steps per environment step (both engines)


def mjx_env_throughput(dtype, batches, budget, reps=5):
    """MJX on the same Stewart (``configs/stewart.xml``): one environment step = ``SUBSTEPS`` calls
    of ``mjx.step`` at dt = 1 ms with the action written to ``ctrl``, ``jit(vmap)`` over the batch.
    MJX's equality constraints are soft (its default solref); jaxmech's closure is exact. Empty
    when mujoco-mjx is not installed, and for float32: with x64 on (this script's float64 tier) MJX
    promotes float32 data to float64 internally, so a float32 row would time mixed precision."""
    if jnp.dtype(dtype) != jnp.float64:
        return []
    try:
        import mujoco
        from mujoco import mjx
    except ImportError:
        return []
    m = mujoco.MjModel.from_xml_path(str(common.CONFIGS / "stewart.xml"))
    m.opt.timestep = 1e-3
    mx = common.cast(mjx.put_model(m), dtype)
    d0 = common.cast(mjx.make_data(mx), dtype)

    def env_step(d, a):
        d = d.replace(ctrl=a)
        for _ in range(SUBSTEPS):
            d = mjx.step(mx, d)
        return d

    step = jax.jit(jax.vmap(env_step))
    out = []
    for b in batches:
        if budget.left() <= 0:
            out.append({"batch": b, "skipped": "budget"})
            continue
        qv = 0.1 * jax.random.normal(jax.random.PRNGKey(0), (b, m.nv), dtype)
        ds = jax.vmap(lambda v: d0.replace(qvel=v))(qv)
        t = common.time_fn(step, ds, jnp.zeros((b, m.nu), dtype), reps=reps)
        out.append(
            {
                "batch": b,
                "compile_s": t.compile_s,
                "best_s": t.best_s,
                "env_steps_per_s": b / t.best_s,
                "sim_steps_per_s": b * SUBSTEPS / t.best_s,
                "us_per_env_step": 1e6 * t.best_s / b,
            }
        )
    return out


def env_throughput(jm, dtype, batches, budget, reps=5):
    from jaxmech import envs

    mech = common.cast(jm.load(common.CONFIGS / "stewart.toml"), jnp.dtype(dtype))
    env = envs.stewart_pose_env(mech, n_targets=8, substeps=SUBSTEPS, dt=1e-3)
    env = common.cast(env, jnp.dtype(dtype))
    step = jm.jit(jax.vmap(lambda s, a: env.step(s, a)))
    reset = jm.jit(jax.vmap(lambda k: env.reset(k)))
    out = []
    for b in batches:
        if budget.left() <= 0:
            out.append({"batch": b, "skipped": "budget"})
            continue
        s = reset(jax.random.split(jax.random.PRNGKey(0), b))
        a = jnp.zeros((b, env.action_size), dtype)
        t = common.time_fn(step, s, a, reps=reps)
        out.append(
            {
                "batch": b,
                "compile_s": t.compile_s,
                "best_s": t.best_s,
                "env_steps_per_s": b / t.best_s,
                "sim_steps_per_s": b * env.substeps / t.best_s,
                "us_per_env_step": 1e6 * t.best_s / b,
            }
        )
    return out


STOP_STIFFNESS, STOP_DAMPING = 1e5, 1e3
"""End stops of the "stops" rollouts: N/m (N m/rad) and N s/m (N m s/rad) at every joint limit."""


def long_rollout(jm, name, dtype, batch, seconds, dt, chunk, budget, excite="passive"):
    from jaxmech import simulate as sim

    mech = common.cast(jm.load(common.CONFIGS / f"{name}.toml"), jnp.dtype(dtype))
    Q = sim.random_closed_configurations(mech, jax.random.PRNGKey(0), batch + 1, 0.03)[1:]
    nu = sim.control_size(mech)
    if excite == "gravity":
        from jaxmech.reduction import port_jacobian, tangent_map_status

        m64 = common.cast(mech, jnp.float64)

        def comp(q):
            P = port_jacobian(m64, q)
            # the status variant: the excavator's redundant rows agree only to ~3e-12 (issue 10), so
            # the plain map raises at some states; a least-squares balance needs no exact lift
            E = tangent_map_status(m64, q).E
            # least-squares port efforts balancing gravity on the mobility: E^T P^T f = E^T g
            return jnp.linalg.lstsq((P @ E).T, E.T @ jm.gravity_torques(m64, q))[0]

        # the balance is the controller's job, computed in float64 and handed over as data: the
        # excavator's 8 x 7 least-squares problem in float32 missed by 100 %, and its rollout then
        # accelerated away from rest and diverged (the simulation itself held the gap at 5e-7)
        U0 = jm.jit(jax.vmap(comp))(Q.astype(jnp.float64)).astype(dtype)
    else:
        U0 = jnp.zeros((batch, nu), dtype)
    # "stops": passive, but the joint limits act as stiff damped end stops (simulate.limit_force),
    # so the motion stays in the workspace; "passive" has no stops: the Stewart's legs extend
    # without bound and the platform falls freely (|q| ~ 300 m after 10 s), where float32 resolves
    # a coordinate only to eps |q| ~ 4e-5 and no closure gap below that is possible
    kw = dict(limit_stiffness=STOP_STIFFNESS, limit_damping=STOP_DAMPING) if excite == "stops" else {}
    state = sim.SimState(Q, jnp.zeros((batch, mech.nv), dtype))
    f = jm.jit(jax.vmap(lambda s, u: sim.rollout(mech, s, u, dt, chunk, with_energy=True, **kw)))
    e0 = jm.jit(jax.vmap(lambda q, v: sim.energy(mech, q, v)))(state.q, state.v)
    ke = jm.jit(jax.vmap(lambda q, v: sim.kinetic_energy(mech, q, v)))
    n_total = int(round(seconds / dt))
    done, gap, drift, ke_max, q_max, t_run, t_compile = 0, 0.0, 0.0, 0.0, 0.0, 0.0, None
    while done < n_total:
        if budget.left() <= 0 and done > 0:
            break
        t0 = time.perf_counter()
        traj, info = jax.block_until_ready(f(state, U0))
        dt_call = time.perf_counter() - t0
        if t_compile is None:
            t_compile = dt_call
        else:
            t_run += dt_call
        state = jax.tree_util.tree_map(lambda x: x[:, -1], traj)
        done += chunk
        gap = max(gap, float(jnp.max(info.closure_gap)))
        drift = max(drift, float(jnp.max(jnp.abs(info.energy - e0[:, None]))))
        ke_max = max(ke_max, float(jnp.max(ke(state.q, state.v))))
        q_max = max(q_max, float(jnp.max(jnp.abs(state.q))))
        if not np.isfinite(gap):
            break
    steps_timed = max(done - chunk, 1)
    return {
        "example": name,
        "excitation": excite,
        "batch": batch,
        "dt": dt,
        "target_s": seconds,
        "simulated_s": done * dt,
        "peak_closure_gap": gap,
        # float32 resolves a coordinate of size |q| to eps |q|: the gap cannot be much below that
        "max_abs_q": q_max,
        "gap_floor_eps_q": float(jnp.finfo(dtype).eps) * q_max,
        "energy_drift_J": drift if excite == "passive" else None,
        "energy_drift_rel": drift / max(ke_max, 1e-12) if excite == "passive" else None,
        "first_chunk_s (compile+run)": t_compile,
        "us_per_state_step": 1e6 * t_run / (steps_timed * batch) if done > chunk else None,
    }


def run(
    quick=False,
    budget=None,
    dtypes=("float64", "float32"),
    batch=None,
    seconds=None,
    out="rollout",
    examples=("stewart", "excavator"),
    env=True,
):
    common.enable_x64()
    import jaxmech as jm

    B = common.Budget(budget)
    batch = batch or (16 if quick else 1024)
    seconds = seconds or (0.2 if quick else 10.0)
    env_batches = (1, 64) if quick else ENV_BATCHES
    recs = {"env_steps": {}, "mjx_env_steps": {}, "rollouts": []}
    for dt_name in dtypes if env else ():
        recs["env_steps"][dt_name] = env_throughput(jm, dt_name, env_batches, B)
        recs["mjx_env_steps"][dt_name] = mjx_env_throughput(jnp.dtype(dt_name), env_batches, B)
    for dt_name in dtypes:
        for name, ex in (("stewart", "passive"), ("stewart", "stops"), ("excavator", "gravity")):
            if name not in examples:
                continue
            if B.left() <= 0:
                recs["rollouts"].append({"example": name, "dtype": dt_name, "skipped": "budget"})
                continue
            r = long_rollout(jm, name, dt_name, batch, seconds, 1e-3, 100 if quick else 500, B, ex)
            r["dtype"] = dt_name
            recs["rollouts"].append(r)
    rows = []
    for engine, d, lst in [("env step", d, x) for d, x in recs["env_steps"].items()] + [
        ("MJX env step", d, x) for d, x in recs["mjx_env_steps"].items()
    ]:
        for r in lst:
            rows.append(
                [
                    engine,
                    d,
                    r["batch"],
                    r.get("compile_s"),
                    r.get("us_per_env_step"),
                    r.get("env_steps_per_s"),
                    "-",
                    "-",
                    "-",
                ]
            )
    for r in recs["rollouts"]:
        if "skipped" in r:
            continue
        rows.append(
            [
                f"{r['example']} ({r['excitation']}) {r['simulated_s']:.2f} s",
                r["dtype"],
                r["batch"],
                r["first_chunk_s (compile+run)"],
                r["us_per_state_step"],
                "-",
                r["peak_closure_gap"],
                r["gap_floor_eps_q"],
                r["energy_drift_rel"] if r["energy_drift_rel"] is not None else "-",
            ]
        )
    common.print_table(
        "rollouts",
        [
            "what",
            "dtype",
            "batch",
            "compile [s]",
            "us/state-step",
            "env steps/s",
            "peak gap",
            "eps max|q|",
            "energy drift (rel)",
        ],
        rows,
    )
    payload = {"env": common.env_info(dtypes), **recs}
    common.write_json(out, payload)
    return payload


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small batches and 0.2 s rollouts")
    ap.add_argument("--budget", type=float, default=None, help="stop starting new work after this many seconds")
    ap.add_argument("--dtypes", nargs="*", default=["float64", "float32"])
    ap.add_argument("--batch", type=int, default=None, help="rollout batch (default 1024, quick 16)")
    ap.add_argument("--seconds", type=float, default=None, help="simulated seconds (default 10)")
    ap.add_argument("--out", default="rollout")
    ap.add_argument("--examples", nargs="*", default=["stewart", "excavator"], help="rollouts to run")
    ap.add_argument("--no-env", action="store_true", help="skip the environment-throughput table")
    ap.add_argument("--core", type=int, default=0, help="CPU core to pin the process to (MJX hangs on two)")
    ap.add_argument("--no-pin", action="store_true", help="use every core (MJX's batched solver may hang)")
    common.add_reuse_flag(ap)
    a = ap.parse_args(argv)
    common.pin_to_core(None if a.no_pin else a.core)
    common.reuse_host_buffers(a.reuse_buffers)
    run(a.quick, a.budget, tuple(a.dtypes), a.batch, a.seconds, a.out, tuple(a.examples), not a.no_env)


if __name__ == "__main__":
    main()
