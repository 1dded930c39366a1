"""The shipped example mechanisms in ``configs/``: they load, have the structure their header
comments claim (loops, rows, rank, mobility, cut types), closed-form q0 values are closed, the
analytic closure Jacobian matches ``jax.jacfwd`` on random states, and (``jm.assemble``) rough
or perturbed guesses assemble to feasible states with the expected mobility.

References are independent of jaxmech's own output: the published Stewart graph (JSON), the
closed-form position analysis in the config headers, graph counting (loops = joints - bodies
+ 1), numpy SVD, and ``jax.jacfwd`` of the residual.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import load as shared_load
from _shared import random_configurations

import jaxmech as jm

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TOMLS = sorted(p.name for p in CONFIGS.glob("*.toml"))
STEWART_JSON = Path(__file__).parent / "data" / "stewart_physical_graph.json"  # copy of shared/reference-robots

#: Closed-chain configs and their mobility (DoF) as stated in their header comments.
DOF = {
    "four_bar.toml": 1,
    "slider_crank.toml": 1,
    "five_bar.toml": 2,
    "two_module.toml": 5,
    "excavator.toml": 4,
    "stewart.toml": 6,
    "stewart_graph.toml": 6,
}


def load(name: str) -> jm.Mechanism:
    """The session's copy of configs/<name> (tests/_shared.py: shared by every test module)."""
    return shared_load(name.removesuffix(".toml"))


_RJ: dict[str, object] = {}


def res_jac(m: jm.Mechanism):
    """Jitted (residual, Jacobian) of one mechanism, cached (compiled once per config)."""
    if m.name not in _RJ:
        _RJ[m.name] = jm.jit(lambda q: jm.closure_residual_and_jacobian(m, q))
    return _RJ[m.name]


def svd_rank(J, rtol: float = 1e-9) -> int:
    s = np.linalg.svd(np.asarray(J), compute_uv=False)
    return int((s > rtol * s[0]).sum()) if s.size and s[0] > 0 else 0


def rpy_matrix(r, p, y):
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


# ----------------------------------------------------------------------------- every config


def test_expected_configs_are_shipped():
    for name in DOF:
        assert name in TOMLS, f"configs/{name} missing"


@pytest.mark.parametrize("name", TOMLS)
def test_config_loads(name):
    m = load(name)
    assert m.nq >= m.nv > 0
    assert m.q0.shape == (m.nq,) and bool(jnp.all(jnp.isfinite(m.q0)))
    assert len(m.topo.row_names) == m.n_rows


@jm.jit
def _worst_jacobian_error(m, qs):
    """Largest relative / absolute error of the analytic Jacobian against jax.jacfwd over the
    states ``qs`` (n, nq) (jitted once per mechanism and batch size; the model is an argument)."""
    out = jax.vmap(lambda q: jm.check_jacobian(m, q))(qs)
    return jnp.max(out["max_rel"]), jnp.max(out["max_abs"])


# default tier: 128 states of one config per kind (planar loop, spatial platform, excavator, a leg
# with springs, a tree); the rest, and 1,000 states of every config, in the slow tier
# Default tier: the spatial platform and the coupled arm; every row type is checked against autodiff by
# default on the zoo (tests/test_closure.py::test_analytic_jacobian_vs_autodiff); the rest run slow.
_JAC_DEFAULT = {"stewart.toml", "panda.toml"}


@pytest.mark.parametrize("n", [128, pytest.param(1000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", [n if n in _JAC_DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in TOMLS])
def test_jacobian_matches_autodiff_on_random_states(name, n):
    """Analytic C vs jax.jacfwd along integrate, 128 (slow tier: 1,000) random, mostly
    infeasible states."""
    m = load(name)
    if m.n_rows == 0:  # a tree: no rows, an empty (0, nv) Jacobian
        assert jm.closure_jacobian(m, m.q0).shape == (0, m.nv)
        return
    rel, ab = _worst_jacobian_error(m, random_configurations(m, n, 7, 3.0))
    assert np.isfinite(float(rel)) and float(rel) <= 1e-9, f"{name}: max rel {float(rel):.3e}, abs {float(ab):.3e}"


@pytest.mark.parametrize("name", sorted(DOF))
def test_mobility_and_square_active_set(name):
    """nv - rank = DoF at a feasible state, actuated coordinates = DoF, and the passive block
    has full column rank (the actuated joints parametrize the closure locally)."""
    m = load(name)
    q = m.q0
    if float(jnp.abs(res_jac(m)(q)[0]).max()) > 1e-3:  # a rough guess: close it first
        q = _newton_close(m, q)
    J = np.asarray(res_jac(m)(q)[1])
    rank = svd_rank(J)
    assert m.nv - rank == DOF[name]
    act = np.asarray(m.topo.actuated_v)
    assert act.size == DOF[name], f"{name}: {act.size} actuated coordinates for {DOF[name]} DoF"
    passive = np.setdiff1d(np.arange(m.nv), act)
    assert svd_rank(J[:, passive]) == passive.size == rank


def _newton_close(m, q, iters: int = 50):
    """Plain Gauss-Newton on the passive coordinates (numpy lstsq), independent of jm.assemble."""
    passive = np.setdiff1d(np.arange(m.nv), np.asarray(m.topo.actuated_v))
    f = res_jac(m)
    step = jm.jit(lambda q, v: jm.integrate(m, q, v))
    for _ in range(iters):
        r, J = f(q)
        if float(jnp.abs(r).max()) < 1e-13:
            break
        v = np.zeros(m.nv)
        v[passive] = -np.linalg.lstsq(np.asarray(J)[:, passive], np.asarray(r), rcond=1e-12)[0]
        q = step(q, jnp.asarray(v))
    assert float(jnp.abs(f(q)[0]).max()) < 1e-12
    return q


@pytest.mark.parametrize("name", ["slider_crank.toml", "five_bar.toml"])
def test_closed_form_q0_is_closed(name):
    m = load(name)
    assert float(jnp.abs(res_jac(m)(m.q0)[0]).max()) <= 1e-12


# ----------------------------------------------------------------------------- Stewart platform


def test_stewart_free_structure_and_exact_q0():
    m = load("stewart.toml")
    assert (m.nq, m.nv, m.n_rows) == (25, 24, 18)
    assert m.topo.loop_types == ("point",) * 6
    assert sorted(m.topo.cut_names) == [f"cut_{i}" for i in range(6)]
    r, J = res_jac(m)(m.q0)
    assert float(jnp.abs(r).max()) <= 1e-12
    assert svd_rank(J) == 18
    # The leg lengths in q0 against an independent inverse kinematics of the nominal pose stated
    # in the header (platform at (0.03, -0.02, 0.62), rpy (0.04, -0.03, 0.08)), computed in numpy
    # from the published graph's anchors: length_i = |p + R b_i - a_i| - (rod-side offset).
    data = {j["id"]: j for j in json.loads(STEWART_JSON.read_text())["joints"]}
    p, R = np.array([0.03, -0.02, 0.62]), rpy_matrix(0.04, -0.03, 0.08)
    for i in range(6):
        a = np.array(data[f"leg_{i}_u_x"]["T_AJ"])[:3, 3]  # U-joint centre, world
        cut = data[f"cut_{i}"]  # rod (A) -> platform (B) sphere
        b = np.array(cut["T_BJ"])[:3, 3]
        offset = np.array(cut["T_AJ"])[2, 3]  # sphere centre along the rod axis
        length = np.linalg.norm(p + R @ b - a) - offset
        np.testing.assert_allclose(float(m.q0[m.q_slice(f"leg_{i}_length")][0]), length, atol=1e-12)
    T = np.asarray(jm.frame_pose(m, m.q0, "platform_center"))
    np.testing.assert_allclose(T[:3, :3], rpy_matrix(0.04, -0.03, 0.08), atol=1e-14)  # quaternion <-> rpy
    assert set(m.topo.actuated) == {f"leg_{i}_length" for i in range(6)}
    assert set(m.topo.port_names) >= {f"leg_{i}" for i in range(6)}
    for f in ["platform_center"] + [f"leg_{i}_{s}" for i in range(6) for s in ("base", "top")]:
        assert f in m.frame_names


@pytest.mark.parametrize("name", ["stewart.toml", "stewart_graph.toml"])
def test_stewart_numbers_match_published_graph(name):
    """Every joint placement, axis and limit, and every body's inertia, equals the JSON's."""
    data = json.loads(STEWART_JSON.read_text())
    g = jm.read_graph(CONFIGS / name)
    for j in data["joints"]:
        gj = g.joints[j["id"]]
        assert gj.type == j["type"] and (gj.parent, gj.child) == (j["body_a"], j["body_b"])
        np.testing.assert_allclose(gj.parent_pose, np.array(j["T_AJ"]), atol=1e-14)
        np.testing.assert_allclose(gj.child_pose, np.array(j["T_BJ"]), atol=1e-14)
        if j["type"] in ("revolute", "prismatic"):
            np.testing.assert_allclose(gj.axis, j["axis"])
        if j.get("limits"):
            np.testing.assert_allclose([gj.lower[0], gj.upper[0]], [j["limits"]["lower"], j["limits"]["upper"]])
    for b in data["bodies"]:
        gb = g.bodies[b["id"]]
        np.testing.assert_allclose(gb.mass, b["mass_kg"])
        np.testing.assert_allclose(gb.com, b["com_m"])
        np.testing.assert_allclose(gb.inertia, np.array(b["inertia_kg_m2"]))
    n_bodies = len(g.bodies)  # with world
    assert n_bodies == 21
    extra = 1 if name == "stewart.toml" else 0  # the free joint
    assert len(g.joints) == 25 + extra


def test_stewart_graph_cuts_are_spherical():
    g = jm.read_graph(CONFIGS / "stewart_graph.toml")
    assert len(g.joints) - len(g.bodies) + 1 == 5
    m = load("stewart_graph.toml")
    assert len(m.topo.cut_names) == 5
    assert all(g.joints[c].type == "spherical" for c in m.topo.cut_names)
    assert m.topo.loop_types == ("point",) * 5 and m.n_rows == 15
    r, J = res_jac(m)(m.q0)
    assert float(jnp.abs(r).max()) <= 1e-12
    assert m.nv - svd_rank(J) == 6


def test_stewart_leg_frames_measure_leg_length():
    """leg_i_base (barrel, U centre) to leg_i_top (rod, sphere centre) = prismatic coordinate,
    on random tree states (pure kinematics)."""
    m = load("stewart.toml")
    qs = random_configurations(m, 64, 3)

    def dist_err(q):
        errs = []
        for i in range(6):
            pa = jm.frame_pose(m, q, f"leg_{i}_base")[:3, 3]
            pb = jm.frame_pose(m, q, f"leg_{i}_top")[:3, 3]
            errs.append(jnp.linalg.norm(pb - pa) - q[m.q_slice(f"leg_{i}_length")][0])
        return jnp.max(jnp.abs(jnp.stack(errs)))

    assert float(jnp.max(jm.jit(jax.vmap(dist_err))(qs))) <= 1e-13


@pytest.mark.parametrize("n", [256, pytest.param(8192, marks=pytest.mark.slow)])
def test_stewart_batched_residual_and_jacobian(n):
    m = load("stewart.toml")
    qs = random_configurations(m, n, 11)
    f = jm.jit(jax.vmap(jm.closure_residual_and_jacobian, in_axes=(None, 0)))
    r, J = f(m, qs)
    assert r.shape == (n, 18) and J.shape == (n, 18, 24)
    assert bool(jnp.all(jnp.isfinite(r))) and bool(jnp.all(jnp.isfinite(J)))
    k = n // 2 - 1
    rk, Jk = res_jac(m)(qs[k])  # batched == single-state evaluation
    np.testing.assert_allclose(r[k], rk, atol=1e-14)
    np.testing.assert_allclose(J[k], Jk, atol=1e-13)


# ----------------------------------------------------------------------------- excavator


def test_excavator_graph_counts():
    g = jm.read_graph(CONFIGS / "excavator.toml")
    m = load("excavator.toml")
    loops = len(g.joints) - len(g.bodies) + 1  # bodies include the world
    assert loops >= 5
    assert m.n_loops == loops == len(m.topo.cut_names)
    assert set(m.topo.actuated) == {"swing", "boom_cyl_left", "arm_cyl", "bucket_cyl"}
    assert {"boom_cylinder", "arm_cylinder", "bucket_cylinder"} <= set(m.topo.port_names)


def test_excavator_cylinder_ports_measure_cylinder_length():
    """Distance between a cylinder's base-pin and rod-end frames = its prismatic coordinate."""
    m = load("excavator.toml")
    pairs = [
        ("boom_cyl_left_base", "boom_cyl_left_end", "boom_cyl_left"),
        ("boom_cyl_right_base", "boom_cyl_right_end", "boom_cyl_right"),
        ("arm_cyl_base", "arm_cyl_end", "arm_cyl"),
        ("bucket_cyl_base", "bucket_cyl_end", "bucket_cyl"),
    ]
    qs = random_configurations(m, 64, 5, 3.0)

    def err(q):
        e = [
            jnp.linalg.norm(jm.frame_pose(m, q, b)[:3, 3] - jm.frame_pose(m, q, a)[:3, 3]) - q[m.q_slice(j)][0]
            for a, b, j in pairs
        ]
        return jnp.max(jnp.abs(jnp.stack(e)))

    assert float(jnp.max(jm.jit(jax.vmap(err))(qs))) <= 1e-13
    # the nominal pose keeps every cylinder inside its stroke and the bucket teeth above ground
    q = _newton_close(m, m.q0)
    assert bool(jnp.all((q >= m.lower - 1e-12) & (q <= m.upper + 1e-12)))
    assert float(jm.frame_pose(m, q, "bucket_teeth")[2, 3]) > 0.0


def test_two_module_structure():
    g = jm.read_graph(CONFIGS / "two_module.toml")
    m = load("two_module.toml")
    assert len(g.joints) - len(g.bodies) + 1 == 3 == m.n_loops
    # module 1 (four-bar) has one loop; module 2 (3-RRR) two loops that share the platform
    assert sorted(m.topo.cut_names) == ["coupler_rocker", "leg_2_platform", "leg_3_platform"]


# ----------------------------------------------------------------------------- assembly


#: Configs whose q0 is exact in closed form: a perturbed guess must assemble back to q0.
EXACT = ["slider_crank.toml", "five_bar.toml", "stewart.toml", "stewart_graph.toml"]
#: Configs whose q0 is a rough guess (rounded or eyeballed).
ROUGH = ["four_bar.toml", "two_module.toml", "excavator.toml"]


def _check_assembled(m, res, dof):
    assert int(res.status) == 0, res.message()
    r, J = res_jac(m)(res.q)
    assert float(jnp.abs(r).max()) <= 1e-10
    rank = svd_rank(J)
    assert int(res.rank) == rank and m.nv - rank == dof


def test_perturbed_guess_assembles_back_to_closed_form():
    _assemble_back("stewart.toml")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["slider_crank.toml", "five_bar.toml", "stewart_graph.toml"])
def test_perturbed_guess_assembles_back_to_closed_form_slow(name):
    _assemble_back(name)


def _assemble_back(name):
    m = load(name)
    passive = np.setdiff1d(np.arange(m.nv), np.asarray(m.topo.actuated_v))
    v = np.zeros(m.nv)
    v[passive] = 0.05 * np.random.default_rng(1).normal(size=passive.size)
    guess = jm.integrate(m, m.q0, jnp.asarray(v))
    res = jm.assemble(m, guess)
    _check_assembled(m, res, DOF[name])
    assert float(jnp.abs(jm.difference(m, m.q0, res.q)).max()) <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("name", ROUGH)
def test_rough_q0_assembles(name):
    m = load(name)
    res = jm.assemble(m, m.q0)
    _check_assembled(m, res, DOF[name])
    act = np.asarray(m.topo.actuated_v)
    np.testing.assert_array_equal(np.asarray(jm.difference(m, m.q0, res.q))[act], 0.0)
    if name == "four_bar.toml":  # closed form: coupler pin on the circle of radius 0.3 about (0.4, 0)
        crank = float(res.q[m.q_slice("crank")][0])
        A = 0.1 * np.array([np.cos(crank), np.sin(crank)])
        B = np.asarray(jm.frame_pose(m, res.q, "coupler")[:2, 3]) + 0.35 * np.asarray(
            jm.frame_pose(m, res.q, "coupler")[:2, 0]
        )
        np.testing.assert_allclose(np.asarray(jm.frame_pose(m, res.q, "coupler")[:2, 3]), A, atol=1e-12)
        assert abs(np.linalg.norm(B - [0.4, 0.0]) - 0.3) <= 1e-10
    else:  # q0 came from a planar closed-form analysis rounded to 1e-4
        assert float(jnp.abs(jm.difference(m, m.q0, res.q)).max()) <= 1e-3
