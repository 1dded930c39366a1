"""Inertial-parameter identification of the Stewart platform (closed chain) under effort noise.

Data: ``N`` random consistent states of ``configs/stewart.toml`` (the true model) driven by the
platform twist (``jaxmech.sysid.STEWART_EXCITATION``), leg forces from the constrained inverse
dynamics, plus Gaussian noise of 0 %, 1 %, 5 % of each leg's RMS force. The same motion samples
serve the three noise levels (only the noise differs). Unknowns: the payload's 10 inertial
parameters (log-Cholesky pseudo-inertia: mass, COM, inertia) and a mass scale (density) for each
of the 12 leg barrels and rods; the initial guess is off by up to +-30 % (payload mass and
inertia, COM by up to 1.5 cm; leg densities). Fit: optax L-BFGS on the QR-reduced regressor
(``jaxmech.sysid.identify_regressor``). Also reports which masses stay unidentifiable when every
moving body gets all 10 parameters (rank of the regressor, component of each mass direction in its
row space).

    python benchmarks/sysid.py [--quick] [--n N] [--iterations K]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (sets XLA_FLAGS before jax is imported)
import jax  # noqa: E402
import numpy as np  # noqa: E402

NOISES = (0.0, 0.01, 0.05)


def run(n=65536, iterations=100, quick=False, out="sysid"):
    common.enable_x64()
    import jaxmech as jm
    from jaxmech import sysid

    if quick:
        n = min(n, 2048)
    mech = jm.load(common.CONFIGS / "stewart.toml")
    full, scaled, fixed = sysid.stewart_identification_bodies(mech)
    bodies = full + scaled
    idx = sysid.body_indices(mech, bodies)
    m_true = np.asarray(mech.mass)[idx]

    t0 = time.perf_counter()
    data0 = jax.block_until_ready(sysid.make_dataset(mech, jax.random.PRNGKey(4), n, **sysid.STEWART_EXCITATION))
    t_data = time.perf_counter() - t0
    guess = sysid.perturb(mech, full, jax.random.PRNGKey(5), 0.3)
    guess = sysid.perturb_density(guess, scaled, jax.random.PRNGKey(6), 0.3)
    t0 = time.perf_counter()
    Y = jax.block_until_ready(sysid.regressor(guess, data0, full, scaled))
    t_reg = time.perf_counter() - t0
    err0 = sysid.parameter_errors(guess, mech, bodies)

    runs = {}
    for noise in NOISES:
        data = sysid.add_effort_noise(data0, jax.random.PRNGKey(7), noise)
        r = sysid.identify_regressor(guess, data, full, scaled, iterations=iterations, reference=mech, Y=Y)
        e = sysid.parameter_errors(r.mech, mech, bodies)
        # first iteration where the mean mass error is within 1 % of its final value
        me = r.mass_errors.mean(1)
        runs[noise] = {
            "noise_rel_rms": noise,
            "mass_true": m_true,
            "mass_est": np.asarray(r.mech.mass)[idx],
            "mass_rel_err": e["mass_rel"],
            "mass_sd_pred_rel": r.mass_sd / m_true,
            "mean_mass_err": float(e["mass_rel"].mean()),
            "max_mass_err": float(e["mass_rel"].max()),
            "payload_com_err_mm": 1e3 * float(e["com_abs"][0]),
            "payload_inertia_err_rel": float(e["inertia_rel"][0]),
            "payload_com_true": np.asarray(mech.com)[idx[0]],
            "payload_com_est": np.asarray(r.mech.com)[idx[0]],
            "payload_inertia_true": np.asarray(mech.inertia)[idx[0]],
            "payload_inertia_est": np.asarray(r.mech.inertia)[idx[0]],
            "loss_first": float(r.loss[0]),
            "loss_final": float(r.loss[-1]),
            "iterations": r.iterations,
            "iterations_to_converge": int(np.argmax(np.abs(me - me[-1]) <= 0.01 * me[-1] + 1e-12)),
            "fit_wall_s (compile included)": r.wall_s,
        }

    # full 10-parameter setting on every moving body: what the data cannot separate
    nb = min(n, 512)
    sub = jax.tree_util.tree_map(lambda x: x[:nb], data0)
    all_moving = full + tuple(b for b in mech.body_names if b.startswith("leg_"))
    Yf, _ = sysid.regressor(mech, sub, all_moving, ())
    rank, sv, comp = sysid.mass_identifiability(Yf)
    ident = {
        "bodies": list(all_moving),
        "samples": nb,
        "columns": int(Yf.shape[-1]),
        "rank": rank,
        "sv_at_rank_gap": [float(sv[rank - 1]), float(sv[rank]) if rank < sv.size else 0.0],
        "mass_row_space_component": dict(zip(all_moving, comp.tolist(), strict=True)),
    }

    pct = lambda x: f"{100 * float(x):.2f} %"  # noqa: E731
    rows = []
    for j, b in enumerate(bodies):
        r5 = runs[NOISES[-1]]
        row = [b, "10 (log-Chol.)" if b in full else "mass scale", m_true[j], pct(err0["mass_rel"][j])]
        row += [pct(runs[noise]["mass_rel_err"][j]) for noise in NOISES]
        row += [float(r5["mass_est"][j]), pct(r5["mass_sd_pred_rel"][j])]
        rows.append(row)
    cols = ["body", "params", "m true [kg]", "err guess"] + [f"err {x:.0%}" for x in NOISES]
    cols += [f"m est {NOISES[-1]:.0%}", f"sd pred {NOISES[-1]:.0%}"]
    common.print_table(
        f"Stewart sysid: relative mass errors ({n} samples, {iterations} L-BFGS iterations)",
        cols,
        rows,
        caption="sd pred: standard deviation predicted from the residual and the regressor (linear model)",
    )
    srows = [
        [
            f"{noise:.0%}",
            pct(rr["mean_mass_err"]),
            pct(rr["max_mass_err"]),
            rr["payload_com_err_mm"],
            rr["payload_inertia_err_rel"],
            rr["loss_first"],
            rr["loss_final"],
            rr["iterations_to_converge"],
            rr["fit_wall_s (compile included)"],
        ]
        for noise, rr in runs.items()
    ]
    common.print_table(
        "summary (13 bodies: payload + 6 barrels + 6 rods)",
        [
            "noise",
            "mean mass err",
            "max mass err",
            "payload COM err [mm]",
            "payload I err (rel)",
            "loss start",
            "loss end",
            "iters to converge",
            "fit wall [s]",
        ],
        srows,
        caption=f"data {t_data:.1f} s, regressor {t_reg:.1f} s (compile included); noise = x RMS leg force",
    )
    irows = [[b, f"{c:.3f}"] for b, c in ident["mass_row_space_component"].items()]
    common.print_table(
        f"10 parameters on each of {len(all_moving)} moving bodies: rank {rank} of {ident['columns']}",
        ["body", "mass in row space"],
        irows,
        caption="1: mass determined by noise-free data; 0: invisible; between: only in combinations "
        f"({nb} samples; the platform is welded to the payload and left out)",
    )
    payload = {
        "env": common.env_info(),
        "samples": n,
        "excitation": sysid.STEWART_EXCITATION,
        "bodies_full": list(full),
        "bodies_scaled": list(scaled),
        "bodies_fixed_unidentifiable": list(fixed),
        "guess_mass_rel_err": err0["mass_rel"],
        "data_s": t_data,
        "regressor_s": t_reg,
        "runs": {f"{k:.2f}": v for k, v in runs.items()},
        "full_parameter_identifiability": ident,
    }
    common.write_json(out, payload)
    return payload


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,048 samples")
    ap.add_argument("--n", type=int, default=65536, help="samples (default 65,536)")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--out", default="sysid")
    a = ap.parse_args(argv)
    run(a.n, a.iterations, a.quick, a.out)


if __name__ == "__main__":
    main()
