"""Multi-simulator check: MuJoCo simulates the exported four-bar and Stewart platform for 1 s
from an assembled state under the same actuator inputs; jaxmech evaluates its own kinematics
along MuJoCo's trajectory.

For each mechanism (``configs/<name>.toml`` and its MJCF export ``configs/<name>.xml``, generated
by ``configs/make_mjcf.py`` at a closed ``qpos0``; MuJoCo's ``qpos`` is our ``q``) we report:

* ``fk``: max |MuJoCo body pose - jaxmech forward kinematics| at MuJoCo's qpos (should be ~1e-15);
* ``gap``: max |jaxmech closure residual| of the TOML model on MuJoCo's qpos (MuJoCo's equality
  constraints are soft, so its trajectory drifts off the constraint manifold by this much);
* ``gap_mj``: MuJoCo's own max equality violation (efc_pos) along the trajectory;
* ``vgap``: max |C(q) v| (closure velocity, v converted from qvel);
* ``joint``: max |q_passive(MuJoCo) - q_passive(jaxmech)| where jaxmech assembles the passive
  coordinates (Gauss-Newton on the closure) for MuJoCo's actuated coordinates at each sample;
* ``wall``: MuJoCo simulation wall time.

Run:  python benchmarks/multisim.py [--duration 0.05]  (tiny run for CI)
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxmech as jm  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def controls(name: str, t: float, nu: int) -> np.ndarray:
    """The actuator inputs (same for any simulator): crank torque (N m) / leg forces (N)."""
    if name == "four_bar":
        return np.array([0.05 * np.sin(2 * np.pi * t)])
    # Stewart: about the static leg force for the 29.9 kg platform + payload, plus a wobble
    return 50.0 + 10.0 * np.sin(2 * np.pi * t + np.arange(nu))


def simulate(name: str, duration: float = 1.0, dt: float = 1e-3, every: int = 20, stiff: bool = False):
    """MuJoCo rollout; ``stiff``: equality solref time constant 2 dt (MuJoCo's stiffest) instead
    of the default 0.02 s."""
    m = mujoco.MjModel.from_xml_path(str(CONFIGS / f"{name}.xml"))
    m.opt.timestep = dt
    if stiff:
        m.eq_solref[:, 0] = 2 * dt
    d = mujoco.MjData(m)
    qs, vs, gaps = [], [], []
    t0 = time.perf_counter()
    for k in range(int(round(duration / dt)) + 1):
        if k % every == 0:
            mujoco.mj_forward(m, d)
            qs.append(d.qpos.copy())
            vs.append(d.qvel.copy())
            eq = d.efc_pos[d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY]
            gaps.append(np.abs(eq).max() if eq.size else 0.0)
        d.ctrl[:] = controls(name, d.time, m.nu)
        mujoco.mj_step(m, d)
    wall = time.perf_counter() - t0
    return m, np.array(qs), np.array(vs), float(max(gaps)), wall


def jaxmech_rollout(mech, m, q0, name: str, duration: float = 1.0, dt: float = 1e-3) -> tuple[float, float, float]:
    """jaxmech's own rollout of the same motion (same start, same actuator inputs, same step):
    (run wall time s, compile time s, max closure gap). Timed after compilation, blocking on the
    result."""
    from jaxmech import simulate as sim

    n = int(round(duration / dt))
    nu = sim.control_size(mech)
    assert nu == m.nu, (nu, m.nu)
    U = jnp.asarray(np.array([controls(name, k * dt, nu) for k in range(n)]))
    state = sim.SimState(jnp.asarray(q0), jnp.zeros(mech.nv))
    f = jm.jit(lambda mech, s, u: sim.rollout(mech, s, u, dt, n))
    t0 = time.perf_counter()
    jax.block_until_ready(f(mech, state, U))
    t_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, info = jax.block_until_ready(f(mech, state, U))
    return time.perf_counter() - t0, t_compile, float(jnp.max(info.closure_gap))


def compare(name: str, duration: float = 1.0, stiff: bool = False, with_jaxmech: bool = False) -> dict:
    """MuJoCo's rollout checked with jaxmech's kinematics; ``with_jaxmech``: also time jaxmech's
    own rollout of the same motion (``wall_jm``, ``gap_jm``)."""
    mech = jm.load(CONFIGS / f"{name}.toml")
    m, qs, vs, gap_mj, wall = simulate(name, duration, stiff=stiff)
    extra = {}
    if with_jaxmech:
        wall_jm, compile_jm, gap_jm = jaxmech_rollout(mech, m, qs[0], name, duration)
        extra = dict(wall_jm=wall_jm, compile_jm=compile_jm, gap_jm=gap_jm)
    d = mujoco.MjData(m)
    resjac = jm.jit(jm.closure_residual_and_jacobian)
    fk = jm.jit(jm.forward_kinematics)
    integrate, difference = jm.jit(jm.integrate), jm.jit(jm.difference)
    act = np.asarray(mech.topo.actuated_v)
    passive = np.array([i for i in range(mech.nv) if i not in set(act.tolist())])
    fk_err = gap = vgap = joint = 0.0
    for q, qv in zip(qs, vs, strict=True):
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        T = np.array(fk(mech, jnp.array(q)))
        for b in range(1, m.nbody):
            i = mech.body_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b))
            fk_err = max(
                fk_err, np.abs(T[i][:3, 3] - d.xpos[b]).max(), np.abs(T[i][:3, :3] - d.xmat[b].reshape(3, 3)).max()
            )
        r, C = resjac(mech, jnp.array(q))
        gap = max(gap, float(np.abs(np.array(r)).max()))
        v = jm.mujoco_qvel_to_v(mech, jnp.array(q), jnp.array(qv))
        vgap = max(vgap, float(np.abs(np.array(C) @ np.array(v)).max()))
        # jaxmech's own passive coordinates for MuJoCo's actuated ones
        qa = jnp.array(q)
        for _ in range(30):
            r, C = resjac(mech, qa)
            r, C = np.array(r), np.array(C)
            if np.abs(r).max() < 1e-14:
                break
            dv = np.zeros(mech.nv)
            dv[passive] = -np.linalg.lstsq(C[:, passive], r, rcond=None)[0]
            qa = integrate(mech, qa, jnp.array(dv))
        joint = max(joint, float(np.abs(np.array(difference(mech, jnp.array(q), qa))).max()))
    return dict(
        name=name + (" (stiff)" if stiff else ""),
        samples=len(qs),
        fk=fk_err,
        gap=gap,
        gap_mj=gap_mj,
        vgap=vgap,
        joint=joint,
        wall=wall,
        **extra,
    )


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=1.0, help="simulated seconds (tiny run: 0.05)")
    ap.add_argument("--names", nargs="*", default=["four_bar", "stewart"])
    args = ap.parse_args()
    print(
        f"MuJoCo {args.duration:g} s rollouts (dt 1 ms, mj_step) of configs/*.xml vs jaxmech kinematics on MuJoCo's "
        "qpos, and jaxmech's own rollout of the same motion (same start, inputs and step; one CPU process each)"
    )
    print(
        f"{'mechanism':18s} {'samples':>7s} {'fk':>9s} {'gap':>9s} {'gap_mj':>9s} {'vgap':>9s} {'joint':>9s}"
        f" {'MuJoCo s':>9s} {'jaxmech s':>9s} {'jm gap':>9s}"
    )
    for name in args.names:
        for stiff in (False, True):
            r = compare(name, args.duration, stiff=stiff, with_jaxmech=not stiff)
            jm_cols = f"{r['wall_jm']:9.3f} {r['gap_jm']:9.2e}" if "wall_jm" in r else f"{'':9s} {'':9s}"
            print(
                f"{r['name']:18s} {r['samples']:7d} {r['fk']:9.2e} {r['gap']:9.2e} {r['gap_mj']:9.2e} {r['vgap']:9.2e} "
                f"{r['joint']:9.2e} {r['wall']:9.3f} {jm_cols}"
            )
    print(
        "gap_mj: MuJoCo's own equality violation (soft constraints); jm gap: jaxmech's closure gap after its "
        "projections. jaxmech times exclude compilation. MJX (batched, soft constraints) is timed in compare.py "
        "and rollout.py."
    )


if __name__ == "__main__":
    main()
