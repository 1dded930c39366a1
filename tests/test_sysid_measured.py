"""System identification from measured data made by Pinocchio (not by jaxmech's dynamics): the
four-bar's efforts are Pinocchio's tree inverse dynamics (rnea) plus known joint friction and
armature, passed as generalized forces (the constraint forces drop out through the port lift).
The motion (closed configurations, consistent speeds and accelerations) is only kinematics."""

import logging
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import sysid, sysid_data, sysid_model
from jaxmech.io.pinocchio import pinocchio_tree_efforts

BODIES = ("crank", "coupler", "rocker")
EPS = 1e-2  # Coulomb smoothing (tanh(v / EPS)) used by both the data and the model


@pytest.fixture(scope="module")
def fb(configs_dir):
    return jm.load(configs_dir / "four_bar.toml")


@pytest.fixture(scope="module")
def motion(fb):
    """128 closed states with crank speeds ~3 rad/s and accelerations ~20 rad/s^2."""
    return sysid.make_dataset(fb, jax.random.PRNGKey(0), 128, spread=1.0, speed=3.0, accel=20.0)


def pin_tau(truth, motion, viscous=0.0, coulomb=0.0, armature=0.0):
    """Generalized forces (N, nv) by Pinocchio's rnea on ``truth``, plus crank friction terms."""
    t = pinocchio_tree_efforts(truth, motion.q, motion.v, motion.a)  # the loop is ours; rnea is the tree's
    v, a = np.asarray(motion.v), np.asarray(motion.a)
    t[:, 0] += viscous * v[:, 0] + coulomb * np.tanh(v[:, 0] / EPS) + armature * a[:, 0]
    return t


def with_masses(mech, s):
    return eqx.tree_at(lambda m: m.mass, mech, mech.mass * jnp.asarray(s))


def with_density(mech, s):
    s = jnp.asarray(s)
    return eqx.tree_at(lambda m: (m.mass, m.inertia), mech, (mech.mass * s, mech.inertia * s[:, None, None]))


def _fit(*args, **kw):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = sysid_model.fit(*args, **kw)
    return r, [str(x.message) for x in w]


def _masses(r, bodies):
    return np.array([r.masses[b] for b in bodies]), np.array([r.mass_sd[b] for b in bodies])


def test_from_measurements_shapes_and_errors(fb, motion):
    tau = pin_tau(fb, motion)
    d_gen = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, tau)
    f = np.asarray(d_gen.f)
    # port efforts as (N,) and (N, 1) give the same data set
    for e in (f[:, 0], f):
        d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, e)
        np.testing.assert_array_equal(np.asarray(d.f), f)
    # Pinocchio's generalized forces through the lift equal jaxmech's port inverse dynamics
    np.testing.assert_allclose(f, np.asarray(motion.f), rtol=1e-10, atol=1e-12)
    with pytest.raises(jm.ModelError, match="shape"):
        sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, tau[:, :2])
    with pytest.raises(jm.ModelError, match="closure residual"):
        sysid.Dataset.from_measurements(fb, np.asarray(motion.q) + 0.01, motion.v, motion.a, tau)
    with pytest.raises(jm.ModelError, match="C v"):
        sysid.Dataset.from_measurements(fb, motion.q, np.asarray(motion.v) + 0.1, motion.a, tau)
    with pytest.raises(jm.ModelError, match="non-finite"):
        sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, np.where(tau > 0, np.nan, tau))


def test_a_first_fit_compiles_a_handful_of_programs(fb, motion, caplog):
    """The module's first fit (so nothing of it is compiled yet in this process: keep it above
    the other fits) builds its affine spec on the host and its design matrix in a few compiled
    programs, at most 12; the old fit ran its array arithmetic eagerly, ~140 compilations (5.3 s)
    on a first call. The same fit as the mass case below, which then compiles nothing."""
    truth = with_masses(fb, [1.25, 0.85, 1.1])
    d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, pin_tau(truth, motion))
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        r, _ = _fit(fb, d, {b: "mass" for b in BODIES})
    compiled = [
        x.getMessage().splitlines()[0]
        for x in caplog.records
        if x.levelno >= logging.WARNING and x.getMessage().startswith("Compiling")
    ]
    assert len(compiled) <= 12, compiled
    np.testing.assert_allclose(_masses(r, BODIES)[0], np.asarray(truth.mass), rtol=1e-8)


@pytest.mark.parametrize("kind", ["mass", "density"])
@pytest.mark.parametrize("noise", [0.0, pytest.param(0.01, marks=pytest.mark.slow)])
def test_matching_parametrization_recovers_masses(fb, motion, kind, noise):
    s = [1.25, 0.85, 1.1]
    truth = with_masses(fb, s) if kind == "mass" else with_density(fb, s)
    d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, pin_tau(truth, motion))
    if noise:
        d = sysid.add_effort_noise(d, jax.random.PRNGKey(7), noise)
    r, w = _fit(fb, d, {b: kind for b in BODIES})
    m, sd = _masses(r, BODIES)
    m_true = np.asarray(truth.mass)
    assert r.rank == 3 and not r.unidentifiable and np.isfinite(sd).all()
    if noise == 0:
        np.testing.assert_allclose(m, m_true, rtol=1e-8)
        assert not r.wrong_parametrization, w
    else:
        assert np.all(np.abs(m - m_true) <= 3 * sd), (m, m_true, sd)
        assert np.all(sd < 0.05 * m_true)


@pytest.mark.slow
def test_full_ten_on_one_body(fb, motion):
    """Coupler with all 10 parameters (COM, inertia, mass unknown), the others known: the planar
    parameters are identifiable, the out-of-plane ones are reported (SD inf, warning), no NaN."""
    truth = sysid.perturb(fb, ["coupler"], jax.random.PRNGKey(3), rel=0.3)
    d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, pin_tau(truth, motion))
    r, w = _fit(fb, d, {"coupler": "full"})
    assert r.rank == 4  # m, m cx, m cy, Izz about the joint
    assert any("not identifiable" in x for x in w)
    assert not np.isnan(r.sd).any() and np.isinf(r.sd).sum() == 6
    np.testing.assert_allclose(r.masses["coupler"], float(truth.mass[1]), rtol=1e-8)
    assert np.isfinite(r.mass_sd["coupler"])
    # all three bodies full: masses not identifiable, told (not a NaN SD)
    r3, w3 = _fit(fb, d, {b: "full" for b in BODIES})
    assert r3.rank == 8 and all(np.isinf(r3.mass_sd[b]) for b in BODIES)
    assert any("rank 8 of 30" in x for x in w3)


@pytest.mark.parametrize("noise", [0.0, 0.001])
def test_wrong_parametrization_is_flagged(fb, motion, noise):
    """Truth: masses changed, inertias about the COM not; a density fit cannot match it. (Its
    rms misfit is ~9e-4 of the effort: at 1 % noise 128 samples cannot tell, ~5,000 can.)"""
    truth = with_masses(fb, [1.25, 0.85, 1.1])
    d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, pin_tau(truth, motion))
    d = sysid.add_effort_noise(d, jax.random.PRNGKey(8), noise)
    wrong, w = _fit(fb, d, {b: "density" for b in BODIES})
    assert wrong.wrong_parametrization and any("wrong parametrization" in x for x in w)
    right, _ = _fit(fb, d, {b: "mass" for b in BODIES})
    assert not right.wrong_parametrization


def test_friction_and_armature_recovered(fb, motion):
    truth = with_masses(fb, [1.1, 1.0, 0.9])
    tau = pin_tau(truth, motion, viscous=0.02, coulomb=0.05, armature=2e-4)
    d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, tau)
    r, w = _fit(
        fb, d, {b: "mass" for b in BODIES}, {"crank": ("viscous", "coulomb", "armature")}, offsets=True, coulomb_eps=EPS
    )
    x = dict(zip(r.names, r.x, strict=True))
    np.testing.assert_allclose(
        [x["crank.viscous"], x["crank.coulomb"], x["crank.armature"]], [0.02, 0.05, 2e-4], rtol=1e-7
    )
    assert abs(x["offset[0]"]) < 1e-10
    np.testing.assert_allclose(_masses(r, BODIES)[0], np.asarray(truth.mass), rtol=1e-8)
    np.testing.assert_allclose(float(r.mech.damping[0]), 0.02, rtol=1e-7)
    # the same data fitted without the friction terms is flagged
    bad, _ = _fit(fb, d, {b: "mass" for b in BODIES})
    assert bad.wrong_parametrization


@pytest.mark.slow
def test_weights_and_point_mass(fb, motion):
    """A payload at the coupler point (point mass at a frame); zero weights drop samples."""
    m_p = 0.2
    truth = _add_point_mass(fb, "coupler", m_p, np.array([0.175, 0.05, 0.0]))
    tau = pin_tau(truth, motion)
    tau[::2] += 50.0  # corrupted samples, weighted out
    w = np.where(np.arange(tau.shape[0]) % 2 == 0, 0.0, 1.0)
    d = sysid.Dataset.from_measurements(fb, motion.q, motion.v, motion.a, tau, weights=w)
    r, _ = _fit(fb, d, {"coupler": ("point", "coupler_point")})
    np.testing.assert_allclose(r.x[0], m_p, rtol=1e-8)


def _add_point_mass(mech, body, m_p, r):
    i = mech.body_names.index(body)
    phi = sysid.standard_parameters(mech.mass[i], mech.com[i], mech.inertia[i])
    x, y, z = r
    phi = phi + m_p * jnp.array([1.0, x, y, z, y * y + z * z, x * x + z * z, x * x + y * y, -x * y, -x * z, -y * z])
    m, c, inertia = sysid.inertial_from_standard(phi)
    return eqx.tree_at(
        lambda k: (k.mass, k.com, k.inertia),
        mech,
        (mech.mass.at[i].set(m), mech.com.at[i].set(c), mech.inertia.at[i].set(inertia)),
    )


def test_savgol_exact_on_cubics():
    t = np.linspace(0.0, 1.0, 101)
    x = 1.0 + 2.0 * t - 3.0 * t**2 + 0.5 * t**3
    s, d, dd = sysid_data.savgol(x, t[1] - t[0], window=11, order=3)
    np.testing.assert_allclose(s, x, atol=1e-12)
    np.testing.assert_allclose(d, 2.0 - 6.0 * t + 1.5 * t**2, atol=1e-9)
    np.testing.assert_allclose(dd, -6.0 + 3.0 * t, atol=1e-7)


def test_toml_actuated_joint_creates_port(fb, tmp_path):
    assert fb.topo.port_names == ("crank",)
    bad = tmp_path / "ball.toml"
    bad.write_text(
        'name = "ball"\n[[body]]\nname = "b"\nmass = 1.0\ninertia = [0.1, 0.1, 0.1]\n'
        '[[joint]]\nname = "j"\ntype = "spherical"\n'
        'parent = "world"\nchild = "b"\nactuated = true\n'
    )
    with pytest.raises(jm.ModelError, match=r"add a \[\[port\]\]"):
        jm.load(bad)


@pytest.mark.slow
def test_from_encoders_rebuilds_passive_states(fb):
    """Encoder-only data: the crank angle of a known motion at 1 kHz; the crank speed and
    acceleration of the data set match the analytic derivatives and the passive coordinates
    close the loop (checked by from_measurements)."""
    t = np.arange(300) * 1e-3
    th0 = float(fb.q0[0])
    w = 2 * np.pi * 2.0
    crank = th0 + 0.3 * np.sin(w * t)
    d = sysid.Dataset.from_encoders(fb, t, crank, np.zeros(t.size), window=15, order=4)
    np.testing.assert_allclose(np.asarray(d.q)[:, 0], crank, atol=1e-8)
    np.testing.assert_allclose(np.asarray(d.v)[:, 0], 0.3 * w * np.cos(w * t), rtol=0, atol=2e-4 * 0.3 * w)
    np.testing.assert_allclose(np.asarray(d.a)[:, 0], -0.3 * w**2 * np.sin(w * t), rtol=0, atol=2e-2 * 0.3 * w**2)
    r = jax.vmap(lambda q: jm.closure_residual(fb, q))(d.q)
    assert float(jnp.max(jnp.abs(r))) < 1e-9
