"""System identification from data jaxmech did not make (issue 15's figures).

The motion (closed configurations with consistent speeds and accelerations) is kinematics only;
the efforts are Pinocchio's tree inverse dynamics (``rnea``) of a *true* model that differs from
the shipped one, plus known crank friction and armature for the four-bar, plus Gaussian effort
noise of 0 % and 1 % of each port's RMS effort. ``jaxmech.sysid.Dataset.from_measurements`` turns
the generalized forces into port efforts; ``jaxmech.sysid_model.fit`` identifies the chosen
parametrization starting from the shipped model.

Truths and fits, per robot:

* ``mass``: masses scaled, COMs and inertias about the COM unchanged; fitted by a mass per body;
* ``density``: mass and inertia scaled together; fitted by a density scale per body;
* ``full``: all 10 inertial parameters of one body perturbed (four-bar coupler, Stewart payload);
  fitted with the 10 parameters of that body;
* ``wrong``: the ``mass`` truth fitted by density scales (must be flagged);
* four-bar ``friction``: crank viscous and Coulomb friction, armature; fitted with them and the
  masses, and without them (must be flagged).

Columns: regressor rank of its columns, the largest relative mass error, the largest mass error
in predicted standard deviations, whether the fit was flagged as a probable wrong
parametrization, and the recovered joint terms.

    python benchmarks/sysid_measured.py [--n-four-bar 2048] [--n-stewart 512] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

EPS = 1e-2  # Coulomb smoothing tanh(v / EPS), the same in the data and the model
FRICTION = {"viscous": 0.02, "coulomb": 0.05, "armature": 2e-4}  # crank, SI units
NOISES = (0.0, 0.01)


def _scaled(mech, idx, s, inertia: bool):
    import equinox as eqx

    s = jnp.asarray(s)
    if not inertia:
        return eqx.tree_at(lambda m: m.mass, mech, mech.mass.at[idx].multiply(s))
    return eqx.tree_at(
        lambda m: (m.mass, m.inertia),
        mech,
        (mech.mass.at[idx].multiply(s), mech.inertia.at[idx].multiply(s[:, None, None])),
    )


def _truth(mech, kind, bodies, seed):
    from jaxmech import sysid

    idx = np.asarray([mech.body_names.index(b) for b in bodies])
    if kind == "full":
        return sysid.perturb(mech, bodies, jax.random.PRNGKey(seed), rel=0.3)
    s = np.random.default_rng(seed).uniform(0.8, 1.25, idx.size)
    return _scaled(mech, idx, s, inertia=(kind == "density"))


def _efforts(truth, motion, friction=None):
    from jaxmech.io.pinocchio import pinocchio_tree_efforts

    tau = pinocchio_tree_efforts(truth, motion.q, motion.v, motion.a)
    if friction:
        v, a = np.asarray(motion.v)[:, 0], np.asarray(motion.a)[:, 0]
        tau[:, 0] += friction["viscous"] * v + friction["coulomb"] * np.tanh(v / EPS) + friction["armature"] * a
    return tau


def _case(mech, motion, truth, fit_bodies, noise, joints=None, friction=None, seed=7):
    """Fit ``fit_bodies`` (dict body -> kind) to Pinocchio efforts of ``truth``; one result row."""
    from jaxmech import sysid, sysid_model

    t0 = time.perf_counter()
    d = sysid.Dataset.from_measurements(mech, motion.q, motion.v, motion.a, _efforts(truth, motion, friction))
    d = sysid.add_effort_noise(d, jax.random.PRNGKey(seed), noise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sysid_model.fit(mech, d, fit_bodies, joints, offsets=bool(joints), coulomb_eps=EPS)
    bodies = list(fit_bodies)
    m = np.array([r.masses[b] for b in bodies])
    sd = np.array([r.mass_sd[b] for b in bodies])
    m_true = np.asarray(truth.mass)[[mech.body_names.index(b) for b in bodies]]
    x = dict(zip(r.names, r.x, strict=True))
    terms = {k: float(x[f"crank.{k}"]) for k in FRICTION if f"crank.{k}" in x}
    return {
        "noise": noise,
        "samples": int(d.f.shape[0]),
        "rank": int(r.rank),
        "columns": len(r.names),
        "max_mass_rel_err": float(np.max(np.abs(m - m_true) / m_true)),
        "max_mass_err_in_sd": float(np.max(np.abs(m - m_true) / sd)) if np.all(np.isfinite(sd)) else float("inf"),
        "mass_sd_rel_max": float(np.max(sd / m_true)),
        "nan_sd": bool(np.isnan(r.sd).any()),
        "unidentifiable": len(r.unidentifiable),
        "flagged_wrong": bool(r.wrong_parametrization),
        "f_statistic": float(r.f_statistic),
        "joint_terms": terms,
        "wall_s": time.perf_counter() - t0,
    }


def four_bar(n: int) -> dict:
    import jaxmech as jm
    from jaxmech import sysid

    fb = jm.load(common.CONFIGS / "four_bar.toml")
    motion = sysid.make_dataset(fb, jax.random.PRNGKey(0), n, spread=1.0, speed=3.0, accel=20.0)
    links = ("crank", "coupler", "rocker")
    mass_t, dens_t = _truth(fb, "mass", links, 1), _truth(fb, "density", links, 2)
    full_t = _truth(fb, "full", ["coupler"], 3)
    fric_t = _truth(fb, "mass", links, 4)
    joints = {"crank": tuple(FRICTION)}
    out = {}
    for noise in NOISES:
        out[f"mass/mass/{noise}"] = _case(fb, motion, mass_t, {b: "mass" for b in links}, noise)
        out[f"density/density/{noise}"] = _case(fb, motion, dens_t, {b: "density" for b in links}, noise)
        out[f"full/full(coupler)/{noise}"] = _case(fb, motion, full_t, {"coupler": "full"}, noise)
        out[f"mass/density (wrong)/{noise}"] = _case(fb, motion, mass_t, {b: "density" for b in links}, noise)
        out[f"friction/mass+friction/{noise}"] = _case(
            fb, motion, fric_t, {b: "mass" for b in links}, noise, joints, FRICTION
        )
        out[f"friction/mass (no friction)/{noise}"] = _case(
            fb, motion, fric_t, {b: "mass" for b in links}, noise, friction=FRICTION
        )
    return out


def stewart(n: int) -> dict:
    import jaxmech as jm
    from jaxmech import sysid

    sw = jm.load(common.CONFIGS / "stewart.toml")
    motion = sysid.make_dataset(sw, jax.random.PRNGKey(4), n, **sysid.STEWART_EXCITATION)
    legs = [b for b in sw.body_names if b.startswith("leg_") and b.endswith(("_barrel", "_rod"))]
    bodies = ["payload"] + legs
    mass_t, dens_t = _truth(sw, "mass", bodies, 1), _truth(sw, "density", bodies, 2)
    full_t = _truth(sw, "full", ["payload"], 5)
    out = {}
    for noise in NOISES:
        out[f"mass/mass/{noise}"] = _case(sw, motion, mass_t, {b: "mass" for b in bodies}, noise)
        out[f"density/density/{noise}"] = _case(sw, motion, dens_t, {b: "density" for b in bodies}, noise)
        out[f"full/full(payload)/{noise}"] = _case(sw, motion, full_t, {"payload": "full"}, noise)
        out[f"mass/density (wrong)/{noise}"] = _case(sw, motion, mass_t, {b: "density" for b in bodies}, noise)
    return out


def run(n_four_bar: int = 2048, n_stewart: int = 512, quick: bool = False, out: str = "sysid_measured") -> dict:
    common.enable_x64()
    if quick:
        n_four_bar, n_stewart = min(n_four_bar, 128), min(n_stewart, 64)
    res = {"four_bar": four_bar(n_four_bar), "stewart": stewart(n_stewart) if n_stewart else {}}
    rows = []
    for robot, cases in res.items():
        for key, c in cases.items():
            truth, fitted, _ = key.split("/")
            terms = c["joint_terms"]
            fric = max((abs(terms[k] / FRICTION[k] - 1) for k in terms), default=None)
            rows.append(
                [robot, f"{truth} -> {fitted}", f"{c['noise']:.0%}", c["samples"], f"{c['rank']}/{c['columns']}"]
                + [c["max_mass_rel_err"], c["max_mass_err_in_sd"], "yes" if c["flagged_wrong"] else "no"]
                + ["-" if fric is None else fric, c["wall_s"]]
            )
    common.print_table(
        "System identification from Pinocchio-made efforts",
        ["robot", "truth -> fitted", "noise", "N", "rank", "max |dm|/m", "max |dm|/sd", "flagged"]
        + ["crank terms |d|/true", "s"],
        rows,
        caption="dm: identified minus true mass over the fitted bodies; sd: predicted standard deviation; "
        "crank terms: viscous, Coulomb friction and armature",
    )
    info = common.env_info()
    info["n_four_bar"], info["n_stewart"] = n_four_bar, n_stewart
    path = common.write_json(out, {"env": info, "friction_true": FRICTION, "results": res})
    print(f"wrote {path}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-four-bar", type=int, default=2048)
    ap.add_argument("--n-stewart", type=int, default=512)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="sysid_measured")
    a = ap.parse_args()
    run(a.n_four_bar, a.n_stewart, a.quick, a.out)


if __name__ == "__main__":
    main()
