"""Velocity / acceleration reduction, curvature, task maps and actuator ports.

References: ``jax.jvp`` of the analytic closure Jacobian (curvature), ``jax.jacfwd`` of port
values along ``integrate`` (port Jacobian), numpy SVD null spaces (tangent maps), finite
differences of ``jm.track`` (velocity lift).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import assemble_batch, assemble_each, load, normal, random_configurations

import jaxmech as jm
from jaxmech import reduction as red
from jaxmech.curvature import closure_bias, closure_bias_autodiff

CLOSED = ["four_bar", "five_bar", "slider_crank", "stewart", "stewart_graph", "excavator", "two_module"]
BATCH = 4


def _load(configs_dir, name):
    return load(name)


_STATES: dict = {}


def _assembled(mech, n, seed=0, scale=0.05):
    """n closure-consistent states: actuated coordinates of q0 perturbed, passive assembled
    (cached per mechanism, so each test module compiles one assembly per mechanism)."""
    ck = (mech.name, n, seed, scale)
    if ck in _STATES:
        return _STATES[ck]
    act_q = mech.q_indices([mech.topo.joint_names[int(mech.topo.v_body[i])] for i in mech.topo.actuated_v])
    act_q = np.unique(act_q)
    noise = scale * np.random.default_rng(seed).uniform(-1, 1, (n, act_q.size))
    guesses = jnp.broadcast_to(mech.q0, (n, mech.nq)).at[:, act_q].add(noise)
    res = assemble_batch(mech, guesses) if n > 64 else assemble_each(mech, guesses)  # tests/_shared.py
    ok = np.asarray(res.status) == 0
    assert ok.sum() >= max(1, n // 2), f"{mech.name}: assembly failed for {np.sum(~ok)} of {n} states"
    _STATES[ck] = jnp.asarray(res.q[ok])
    return _STATES[ck]


def _reduction_checks(mech, d_auto, with_autodiff=False):
    """One jitted, vmapped function per mechanism: C, named and automatic tangent maps, gamma,
    the acceleration lift (and the jvp curvature reference in the slow tier)."""

    def f(q, v_seed, udot):
        C = jm.closure_jacobian(mech, q)
        tm = red.tangent_map_status(mech, q)
        auto = red.tangent_map_status(mech, q, "auto", d=d_auto)
        v = tm.E @ v_seed[: tm.E.shape[1]]
        gam = closure_bias(mech, q, v)
        a, _ = red.acceleration_lift(mech, q, v, udot[: tm.E.shape[1]])
        gam_ad = closure_bias_autodiff(mech, q, v) if with_autodiff else gam
        return C, tm, auto, v, gam, gam_ad, a

    return jm.jit(jax.vmap(f))


# The default tier keeps the slider-crank (a planar loop cut automatically: 5 rows of rank 2, redundant
# out-of-plane rows, a prismatic joint; its assembled states are shared with the port tests below); the
# others run in the slow tier, each one more ~5-15 s compile of the same checks. The excavator there is
# the hardest case (five loops, cylinders, twin boom cylinders); the Stewart's spatial rows are checked
# by default in test_curvature_random_states and tests/test_constrained.py.
_SLOW_CLOSED = ("four_bar", "stewart", "five_bar", "excavator", "two_module", "stewart_graph")


@pytest.fixture(
    scope="module", params=[pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_CLOSED else n for n in CLOSED]
)
def closed(request, configs_dir):
    mech = _load(configs_dir, request.param)
    return mech, _assembled(mech, BATCH)


def _null_dim(C, rtol=1e-9):
    s = np.linalg.svd(C, compute_uv=False)
    return C.shape[1] - int(np.sum(s > rtol * s[0])) if s.size else C.shape[1]


def test_tangent_map_and_acceleration_lift(closed):
    mech, Q = closed
    assert np.max(np.abs(jm.jit(jax.vmap(jm.closure_residual, (None, 0)))(mech, Q))) < 1e-9
    n = Q.shape[0]
    d_auto = mech.nv - int(jm.rank.numerical_rank(jm.closure_jacobian(mech, Q[0])))
    tm0 = red.tangent_map_status(mech, Q[0], "auto")  # concrete q: d computed here
    assert tm0.E.shape == (mech.nv, d_auto)
    vs = normal(1, (n, mech.nv))
    ud = normal(2, (n, mech.nv))
    C, tm, auto, v, gam, _, a = _reduction_checks(mech, d_auto)(Q, vs, ud)
    assert np.all(np.asarray(tm.status) == red.OK), np.asarray(tm.status)
    assert np.all(np.asarray(auto.status) == red.OK), np.asarray(auto.status)
    C, gam, a = map(np.asarray, (C, gam, a))
    for k in range(n):
        d = _null_dim(C[k])
        _, s, Vt = np.linalg.svd(C[k])
        N = Vt[mech.nv - d :].T  # SVD null-space basis
        for E in (np.asarray(tm.E[k]), np.asarray(auto.E[k])):
            assert E.shape[-1] == d, (mech.name, E.shape, d)
            assert np.max(np.abs(C[k] @ E)) <= 1e-12 * max(1.0, np.abs(E).max())
            assert np.linalg.matrix_rank(E) == d
            assert np.linalg.matrix_rank(np.hstack([E, N]), tol=1e-8) == d
        assert np.max(np.abs(C[k] @ a[k] + gam[k])) <= 1e-11 * max(1.0, np.abs(a[k]).max())
        # a = E udot + a_gamma with a[I] = udot
        np.testing.assert_allclose(a[k][np.asarray(tm.independent[k])], np.asarray(ud[k][:d]), atol=1e-13)
    with pytest.raises(ValueError, match="static mobility"):  # a traced model has no static mobility
        jm.jit(lambda m, q: red.tangent_map(m, q, "auto"))(mech, Q[0])


_SLOW = pytest.mark.slow


_CURVATURES: dict = {}


def _curvatures(mech):
    """gamma = Cdot v (analytic), its jvp reference and d^2/dt^2 rho(q (+) v t) at t = 0, at BATCH
    random (not closed) states and velocities: one compiled program for both curvature checks
    (two programs compiled the analytic gamma twice; 0.5 s of compile saved)."""
    if mech.name not in _CURVATURES:

        def three(q, v):
            def rho(t):
                return jm.closure_residual(mech, jm.integrate(mech, q, v, t))

            d1 = lambda t: jax.jvp(rho, (t,), (1.0,))[1]  # noqa: E731
            return closure_bias(mech, q, v), closure_bias_autodiff(mech, q, v), jax.jvp(d1, (0.0,), (1.0,))[1]

        Q = random_configurations(mech, BATCH, 3)
        V = normal(4, (BATCH, mech.nv))
        _CURVATURES[mech.name] = jm.jit(jax.vmap(three))(Q, V)
    return _CURVATURES[mech.name]


@pytest.mark.parametrize(
    "name",
    [  # all slow (the Stewart ~8 s): by default gamma runs against Pinocchio on every algebraic row type
        # (test_reference_rows.py) and against autodiff on the four-bar's world pass (test_closure.py)
        pytest.param("stewart", marks=_SLOW),
        *[
            pytest.param(n, marks=_SLOW)
            for n in ("four_bar", "excavator", "cassie", "five_bar", "slider_crank", "two_module")
        ],
    ],
)
def test_curvature_random_states(configs_dir, name):
    """gamma = Cdot v against jax.jvp at random (not closed) states and velocities."""
    g, gr, _ = _curvatures(_load(configs_dir, name))
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(gr), -1))
    assert float(jnp.max(jnp.max(jnp.abs(g - gr), -1) / scale)) <= 1e-10


@pytest.mark.slow  # one ~12 s compile; the Stewart version and the second-derivative check run by default
def test_curvature_all_row_types():
    """Every cut / constraint type, a free base, spherical and universal joints in the paths."""
    G = jm.Graph(name="mix")
    G.add_body("base", mass=1, inertia=[0.1, 0.1, 0.1])
    G.add_joint("root", "free", "world", "base")
    prev = "base"
    for i, t in enumerate(["revolute", "universal", "prismatic", "cylindrical"]):
        G.add_body(f"l{i}", mass=1, inertia=[0.1, 0.1, 0.1])
        G.add_joint(
            f"j{i}", t, prev, f"l{i}", parent_pose=jm.pose([0.1, 0.2, 0.3], rpy=[0.1, 0.2, 0.3]), axis=[0.3, 0.5, 0.8]
        )
        prev = f"l{i}"
    G.add_body("s", mass=1, inertia=[0.1, 0.1, 0.1])
    G.add_joint("js", "spherical", "base", "s", parent_pose=jm.pose([0.3, 0, 0]))
    for k, t in enumerate(["weld", "point", "revolute", "universal", "prismatic", "cylindrical", "distance"]):
        G.add_constraint(
            f"c{k}",
            t,
            body_a="s",
            body_b=prev,
            pose_a=jm.pose([0.1 * k, 0.2, 0], rpy=[0.3, k * 0.1, 0.2]),
            pose_b=jm.pose([0, 0.1, 0.05 * k], rpy=[0.1, 0.2, 0.3 * k]),
            length=0.3,
        )
    G.add_constraint("cp", "pose", body_a="world", body_b="l1", axes=[1, 0, 1, 0, 1, 1])
    G.add_coupling("cc", {"j0": 1.0, "j2": -0.5})
    mech = jm.compile(G)
    Q = random_configurations(mech, BATCH, 5)
    V = normal(6, (BATCH, mech.nv))
    g, gr = jm.jit(jax.vmap(lambda q, v: (closure_bias(mech, q, v), closure_bias_autodiff(mech, q, v))))(Q, V)
    assert g.shape == (BATCH, mech.n_rows)
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(gr), -1))
    assert float(jnp.max(jnp.max(jnp.abs(g - gr), -1) / scale)) <= 1e-10


def test_curvature_second_derivative_of_residual(configs_dir):
    """Independent of the analytic C: d^2/dt^2 rho(q (+) v t) at t=0 equals gamma (a = 0)."""
    g, _, d2 = _curvatures(_load(configs_dir, "stewart"))
    np.testing.assert_allclose(np.asarray(g), np.asarray(d2), atol=1e-10)


# ----------------------------------------------------------------------------- ports


@pytest.mark.parametrize(
    "name", ["slider_crank", *[pytest.param(n, marks=_SLOW) for n in ("excavator", "stewart", "five_bar")]]
)
def test_port_jacobian_and_virtual_work(configs_dir, name):
    mech = _load(configs_dir, name)
    assert mech.topo.port_names, f"{name}: no ports"
    Q = _assembled(mech, BATCH)[:2]

    def f(q, v, fp):
        P = red.port_jacobian(mech, q)
        Pd = jax.jacfwd(lambda dv: red.port_values(mech, jm.integrate(mech, q, dv)))(jnp.zeros(mech.nv, q.dtype))
        E = red.tangent_map(mech, q)
        u = v[: E.shape[1]]
        vv = E @ u
        tau = red.port_effort(mech, q, fp)
        return P, Pd, fp @ (P @ vv), tau @ vv, (E.T @ P.T) @ fp, E.T @ tau

    V = normal(9, (Q.shape[0], mech.nv))
    F = normal(10, (Q.shape[0], len(mech.topo.port_names)))
    P, Pd, w1, w2, r1, r2 = jm.jit(jax.vmap(f))(Q, V, F)
    assert float(jnp.max(jnp.abs(P - Pd))) <= 1e-10 * max(1.0, float(jnp.max(jnp.abs(Pd))))
    assert float(jnp.max(jnp.abs(w1 - w2) / jnp.maximum(1.0, jnp.abs(w1)))) <= 1e-12
    assert float(jnp.max(jnp.abs(r1 - r2))) <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(r1))))


@pytest.mark.parametrize("name", ["slider_crank", *[pytest.param(n, marks=_SLOW) for n in ("stewart", "excavator")]])
def test_port_space_drive_matches_joint_space(configs_dir, name):
    """Driving by port (crank / piston / cylinder / leg) speeds gives the same full velocities as
    joint speeds."""
    mech = _load(configs_dir, name)
    Q = _assembled(mech, BATCH)[:2]
    ports = list(mech.topo.port_names)
    d = mech.nv - int(jm.rank.numerical_rank(jm.closure_jacobian(mech, Q[0])))
    if len(ports) != d:
        # excavator: twin boom cylinders -> keep one port per actuated coordinate; slider-crank: the
        # crank and the piston each drive its one degree of freedom -> the piston
        ports = (
            [p for p in ports if "right" not in p][-d:]
            if name == "slider_crank"
            else [p for p in ports if "right" not in p][:d]
        )
    assert len(ports) == d

    def f(q, u):
        E = red.tangent_map(mech, q)
        v = E @ u
        pdot = red.port_jacobian(mech, q)[red._port_index(mech, ports)] @ v
        tm = red.port_tangent_map_status(mech, q, ports)
        return v, tm.E @ pdot, tm.status

    U = normal(11, (Q.shape[0], d))
    v1, v2, st = jm.jit(jax.vmap(f))(Q, U)
    assert np.all(np.asarray(st) == 0)
    assert float(jnp.max(jnp.abs(v1 - v2))) <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(v1))))


def test_port_tangent_map_wrong_count(configs_dir, caplog):
    """Each port alone drives the slider-crank, both together over-specify it. Eager calls resolve
    the port names in Python: one compiled program per model and number of ports (another port
    compiles nothing; the body once ran primitive by primitive, ~45 compilations), with the values
    of the function run as written."""
    mech = _load(configs_dir, "slider_crank")  # two ports (crank, piston), mobility 1
    q = mech.q0  # closed in closed form (tests/test_configs.py::test_closed_form_q0_is_closed)
    assert float(jnp.max(jnp.abs(jm.closure_residual(mech, q)))) <= 1e-12
    assert int(red.port_tangent_map_status(mech, q).status) != red.OK
    P = np.asarray(red.port_jacobian(mech, q))
    for k, p in enumerate(mech.topo.port_names):
        caplog.clear()
        with jax.log_compiles(), caplog.at_level(logging.WARNING):
            tm = red.port_tangent_map_status(mech, q, [p])
        compiled = [
            r.getMessage().splitlines()[0]
            for r in caplog.records
            if r.levelno >= logging.WARNING and r.getMessage().startswith("Compiling")
        ]
        assert len(compiled) == (k == 0), compiled  # the first port compiles one program, the second none
        assert int(tm.status) == red.OK and tuple(np.asarray(tm.independent)) == (k,)
        np.testing.assert_allclose(P[[k]] @ np.asarray(tm.E), [[1.0]], atol=1e-12)
        ref = red._port_tangent_map_at.eager(mech, q, np.array([k], np.int32), 1e-10, 1e-8)
        np.testing.assert_allclose(np.asarray(tm.E), np.asarray(ref.E), rtol=0, atol=1e-14)
    with pytest.raises(KeyError, match="nope"):
        red.port_tangent_map_status(mech, q, ["nope"])


# ----------------------------------------------------------------------------- statuses


def test_status_singular_and_inconsistent(configs_dir):
    # slider-crank at top dead centre: the piston speed is 0 for every crank speed, so the
    # slider coordinate cannot parametrize the motion
    mech = _load(configs_dir, "slider_crank")
    q = jnp.zeros(mech.nq).at[mech.q_slice("slider")].set(0.25)  # r + l
    assert float(jnp.max(jnp.abs(jm.closure_residual(mech, q)))) < 1e-14
    tm = red.tangent_map_status(mech, q, ["slider"])
    assert int(tm.status) == red.SINGULAR and bool(jnp.all(jnp.isfinite(tm.E)))
    assert red.STATUS_MESSAGES[int(tm.status)].startswith("singular")
    ok = red.tangent_map_status(mech, q, ["crank"])
    assert int(ok.status) == red.OK
    np.testing.assert_allclose(np.asarray(ok.E)[mech.v_slice("slider")], 0.0, atol=1e-14)
    four = _load(configs_dir, "four_bar")
    tm2 = red.tangent_map_status(four, four.q0, ["crank", "coupler"])  # two speeds, mobility 1
    assert int(tm2.status) != red.OK
    with pytest.raises(KeyError):
        red.tangent_map(four, four.q0, ["nope"])
    assert int(red.tangent_map_status(four, four.q0, []).status) == red.SINGULAR  # mobility 1, none named


# ----------------------------------------------------------------------------- tracking


def test_velocity_lift_matches_track_finite_differences(configs_dir):
    track = jm.track
    mech = _load(configs_dir, "four_bar")
    q0 = _assembled(mech, BATCH)[0]
    th0 = float(q0[mech.q_slice("crank")][0])
    h = 1e-4
    # steps of h from th0; 1,000 of them, the length of test_assembly.py's four-bar tracking
    # test, so both run one compiled tracking program (the second loads it from the cache)
    path = th0 + h * jnp.arange(1000.0)[:, None]
    out = track(mech, q0, path)
    qs = out.q
    v_fd = np.asarray(jm.difference(mech, qs[0], qs[2])) / (2 * h)
    E = np.asarray(red.tangent_map(mech, qs[1]))
    np.testing.assert_allclose(E[:, 0], v_fd, atol=1e-7)


# ----------------------------------------------------------------------------- task constraints


def _go2_support_mech(configs_dir, feet):
    g = jm.read_graph(configs_dir / "go2.toml")
    base = jm.compile(g)
    q = jnp.asarray(base.q0).at[2].set(0.3)
    for j, val in (("thigh", 0.8), ("calf", -1.5)):
        for leg in ("FL", "FR", "RL", "RR"):
            q = q.at[base.q_slice(f"{leg}_{j}_joint")].set(val)
    g2 = g.copy()
    red.add_support_points(g2, base, q, [f"{f}_foot_center" for f in feet])
    mech = jm.compile(g2)
    assert mech.nv == 18
    return mech, jm.difference(base, base.q0, q), base, q


@pytest.mark.parametrize(
    "feet,d",
    [
        # all slow (~7 s each): by default the Go2's support points run in tests/test_support_balance.py
        # and tangent maps on the four-bar, slider-crank and Stewart above
        pytest.param(("FL", "FR", "RL", "RR"), 6, marks=_SLOW),
        pytest.param(("FL", "RR"), 12, marks=_SLOW),
        pytest.param(("FL", "FR", "RL"), 9, marks=_SLOW),
    ],
)
def test_go2_support_modes(configs_dir, feet, d):
    mech, _, base, q = _go2_support_mech(configs_dir, feet)
    # the supported mechanism's q layout equals the base one (same tree)
    assert mech.joint_names == base.joint_names
    assert float(jnp.max(jnp.abs(jm.closure_residual(mech, q)))) < 1e-12
    C = np.asarray(jm.closure_jacobian(mech, q))
    assert _null_dim(C) == d
    tm = red.tangent_map_status(mech, q, "auto")
    E = np.asarray(tm.E)
    assert E.shape == (18, d) and int(tm.status) == red.OK
    assert np.max(np.abs(C @ E)) <= 1e-12 * max(1.0, np.abs(E).max())
    _, s, Vt = np.linalg.svd(C)
    assert np.linalg.matrix_rank(np.hstack([E, Vt[18 - d :].T]), tol=1e-8) == d
    # reduced task Jacobian of the base: the supported feet do not move
    Jt = red.task_jacobian(mech, q, feet[0] + "_foot_center", tm.E, "world_aligned")
    assert float(jnp.max(jnp.abs(Jt[3:]))) <= 1e-12


@pytest.mark.slow  # ~9 s; by default: couplings in test_batchlast.py (zoo), task Jacobians in test_kinematics.py
def test_panda_coupling_and_tool_target(configs_dir):
    g = jm.read_graph(configs_dir / "panda.toml")
    base = jm.compile(g)
    q = jnp.asarray(base.q0)
    q = q.at[:7].set(jnp.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.6, 0.7])).at[7:].set(0.02)
    g2 = g.copy()
    if not base.topo.coupling_names:
        red.add_equal_coupling(g2, "panda_finger_joint1", "panda_finger_joint2")
    red.add_tool_target(g2, "tool", np.asarray(jm.frame_pose(base, q, "tool")))
    mech = jm.compile(g2)
    assert float(jnp.max(jnp.abs(jm.closure_residual(mech, q)))) < 1e-12
    C = np.asarray(jm.closure_jacobian(mech, q))
    assert _null_dim(C) == 2
    tm = red.tangent_map_status(mech, q, "auto")
    E = np.asarray(tm.E)
    assert E.shape == (9, 2) and int(tm.status) == red.OK
    assert np.max(np.abs(C @ E)) <= 1e-12
    _, s, Vt = np.linalg.svd(C)
    assert np.linalg.matrix_rank(np.hstack([E, Vt[-2:].T]), tol=1e-8) == 2
    # named: the arm's null-space motion is parametrized by joint 3 (elbow redundancy) and a finger
    tm2 = red.tangent_map_status(mech, q, ["panda_joint3", "panda_finger_joint1"])
    assert int(tm2.status) == red.OK
    np.testing.assert_allclose(C @ np.asarray(tm2.E), 0.0, atol=1e-12)
    # the tool does not move along the lift
    assert float(jnp.max(jnp.abs(red.task_jacobian(mech, q, "tool", tm.E)))) <= 1e-12


# ----------------------------------------------------------------------------- slow tier


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stewart", "excavator", "two_module"])
def test_reduction_thousand_states(configs_dir, name):
    mech = _load(configs_dir, name)
    Q = _assembled(mech, 1000, seed=11, scale=0.1)
    n = Q.shape[0]
    vs = normal(12, (n, mech.nv))
    ud = normal(13, (n, mech.nv))
    d_auto = mech.nv - int(jm.rank.numerical_rank(jm.closure_jacobian(mech, Q[0])))
    C, tm, auto, v, gam, gam_ad, a = _reduction_checks(mech, d_auto, with_autodiff=True)(Q, vs, ud)
    assert np.all(np.asarray(tm.status) == 0) and np.all(np.asarray(auto.status) == 0)
    for E in (tm.E, auto.E):
        sE = jnp.maximum(1.0, jnp.max(jnp.abs(E), (1, 2)))
        assert float(jnp.max(jnp.max(jnp.abs(jnp.einsum("bsn,bnd->bsd", C, E)), (1, 2)) / sE)) <= 1e-12
    sg = jnp.maximum(1.0, jnp.max(jnp.abs(gam_ad), -1))
    assert float(jnp.max(jnp.max(jnp.abs(gam - gam_ad), -1) / sg)) <= 1e-10
    sa = jnp.maximum(1.0, jnp.max(jnp.abs(a), -1))
    assert float(jnp.max(jnp.max(jnp.abs(jnp.einsum("bsn,bn->bs", C, a) + gam), -1) / sa)) <= 1e-11
