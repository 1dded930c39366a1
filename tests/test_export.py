"""MJCF export: round trip (load -> export -> MuJoCo load -> same bodies, masses, equalities,
kinematics and closure rows) and the multi-simulator check against MuJoCo rollouts."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest
from _shared import random_configurations

import jaxmech as jm

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
DATA = Path(__file__).parent / "data"

res_fn = jm.jit(jm.closure_residual)


@jm.jit
def fk_res(mech, q):
    """Forward kinematics and closure residual in one compiled call."""
    return jm.forward_kinematics(mech, q), jm.closure_residual(mech, q)


def _n_equalities(mech) -> int:
    """What export_mjcf writes: one equality per point/weld/distance loop, two per revolute cut and
    per universal cut (connect + tendon twist row), one per coupling."""
    return sum(2 if t in ("revolute", "universal") else 1 for t in mech.topo.loop_types) + len(mech.topo.coupling_names)


@pytest.mark.parametrize(
    "path",
    [  # default tier: the Stewart and the every-joint-type file; the other robots run slow
        "stewart.toml",
        "cmg_variants.json",
        *[
            pytest.param(p, marks=pytest.mark.slow)
            for p in ("four_bar.toml", "panda.toml", "cassie.toml", "excavator.toml")
        ],
    ],
    ids=lambda p: p,
)
def test_export_round_trip(path, tmp_path):
    src = CONFIGS / path if (CONFIGS / path).exists() else DATA / path
    mech = jm.load(src)
    out = tmp_path / "out.xml"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jm.export_mjcf(mech, out)
    # no warning: every cut of these files has an exact MuJoCo form (a universal cut is a connect
    # plus a tendon equality for its twist row)
    msgs = [str(w.message) for w in caught]
    assert not msgs, msgs
    m = mujoco.MjModel.from_xml_path(str(out))
    assert m.nbody - 1 == len(mech.body_names)
    assert (m.nq, m.nv) == (mech.nq, mech.nv)
    for b in range(1, m.nbody):
        i = mech.body_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b))
        assert m.body_mass[b] == pytest.approx(float(mech.mass[i]), abs=1e-12)
    assert m.neq == _n_equalities(mech)
    t = mech.topo
    assert m.nu == (len(t.port_names) if t.port_names else len(t.actuated_v))
    # qpos0 is the reference configuration (spherical tree joints reset to identity)
    q0 = np.array(mech.q0)
    for idx in mech.topo.sph_q:
        q0[idx] = [1, 0, 0, 0]
    np.testing.assert_allclose(m.qpos0, q0, atol=1e-14)
    # re-import: same kinematics, and exactly the same rows for point / weld / coupling closures
    back = jm.load(out)
    assert back.topo.port_types[: len(t.port_names)] == t.port_types  # distance ports come back via tendons
    for q in random_configurations(mech, 2, 0, scale=0.5):
        (T, r), (Tb, rb) = fk_res(mech, q), fk_res(back, q)
        T, r, Tb, rb = np.array(T), np.array(r), np.array(Tb), np.array(rb)
        np.testing.assert_allclose(Tb[[back.body_names.index(n) for n in mech.body_names]], T, atol=1e-12)
        for n in mech.topo.row_names:
            loop = n.split(":")[0]
            typ = dict(zip(mech.topo.loop_names, mech.topo.loop_types, strict=True)).get(loop, "coupling")
            if typ in ("point", "weld", "coupling"):
                assert n in back.topo.row_names, f"{path}: row {n} lost on re-import"
                a, b = rb[back.topo.row_names.index(n)], r[mech.topo.row_names.index(n)]
                if typ == "coupling":  # MuJoCo's form q1 = f(q2) normalizes the row (sign, scale)
                    a, b = abs(a), abs(b)
                assert a == pytest.approx(b, abs=1e-12)


def test_export_revolute_cut_as_two_connects(tmp_path):
    """A revolute cut becomes two connects (6 rows) with the same rank and zero set."""
    mech = jm.load(CONFIGS / "four_bar.toml")
    jm.export_mjcf(mech, tmp_path / "fb.xml")
    back = jm.load(tmp_path / "fb.xml")
    assert back.topo.loop_types == ("point", "point")
    rj = jm.jit(jm.closure_residual_and_jacobian)
    for q in random_configurations(mech, 3, 10):
        (_, J), (_, Jb) = rj(mech, q), rj(back, q)
        sv, svb = np.linalg.svd(np.array(J), compute_uv=False), np.linalg.svd(np.array(Jb), compute_uv=False)
        assert (sv > 1e-9 * sv[0]).sum() == (svb > 1e-9 * svb[0]).sum()
    q = jm.load(CONFIGS / "four_bar.xml").q0  # closed
    assert np.abs(np.array(res_fn(back, q))).max() < 1e-12


def _multisim():
    spec = importlib.util.spec_from_file_location("multisim", ROOT / "benchmarks" / "multisim.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["four_bar", "stewart"])
def test_multisim_mujoco_vs_jaxmech(name):
    """MuJoCo simulates 1 s from an assembled state under the same inputs; along its trajectory
    our forward kinematics agrees to rounding, and our closure residual measures MuJoCo's
    constraint drift (soft equalities) -- the same number MuJoCo reports itself."""
    r = _multisim().compare(name)
    print(r)
    assert r["fk"] < 1e-12
    assert r["gap"] < 2e-2 and r["gap_mj"] < 2e-2
    # Point rows are frame-A components of MuJoCo's world-frame violation: same norm, so the
    # max-abs figures agree within sqrt(3).
    assert r["gap"] <= np.sqrt(3) * r["gap_mj"] + 1e-12 and r["gap_mj"] <= np.sqrt(3) * r["gap"] + 1e-12
    assert r["joint"] < 0.1
