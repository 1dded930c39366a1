"""Stewart platform identification from Pinocchio-made efforts (slow tier): mass-only, density
and full-10 truths, recovered by the matching parametrization (<= 1e-8 noise-free, within 3
predicted SDs at 1 % effort noise)."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import sysid, sysid_model
from jaxmech.io.pinocchio import pinocchio_tree_efforts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stewart(configs_dir):
    return jm.load(configs_dir / "stewart.toml")


@pytest.fixture(scope="module")
def motion(stewart):
    return sysid.make_dataset(stewart, jax.random.PRNGKey(4), 512, **sysid.STEWART_EXCITATION)


def _legs(mech):
    return [n for n in mech.body_names if n.startswith("leg_") and n.endswith(("_barrel", "_rod"))]


def pin_tau(truth, motion):
    return pinocchio_tree_efforts(truth, motion.q, motion.v, motion.a)


def _truth(mech, kind, bodies):
    idx = np.asarray([mech.body_names.index(b) for b in bodies])
    s = jnp.asarray(np.random.default_rng(1).uniform(0.8, 1.25, idx.size))
    if kind == "mass":
        return eqx.tree_at(lambda m: m.mass, mech, mech.mass.at[idx].multiply(s))
    if kind == "density":
        return eqx.tree_at(
            lambda m: (m.mass, m.inertia),
            mech,
            (mech.mass.at[idx].multiply(s), mech.inertia.at[idx].multiply(s[:, None, None])),
        )
    return sysid.perturb(mech, bodies, jax.random.PRNGKey(5), rel=0.3)


@pytest.mark.parametrize("kind", ["mass", "density", "full"])
@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_stewart_truths(stewart, motion, kind, noise):
    bodies = ["payload"] if kind == "full" else ["payload"] + _legs(stewart)
    truth = _truth(stewart, kind, bodies)
    d = sysid.Dataset.from_measurements(stewart, motion.q, motion.v, motion.a, pin_tau(truth, motion))
    if noise:
        d = sysid.add_effort_noise(d, jax.random.PRNGKey(6), noise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sysid_model.fit(stewart, d, {b: kind for b in bodies})
    m = np.array([r.masses[b] for b in bodies])
    sd = np.array([r.mass_sd[b] for b in bodies])
    m_true = np.asarray(truth.mass)[[stewart.body_names.index(b) for b in bodies]]
    assert np.isfinite(sd).all()
    if noise == 0:
        np.testing.assert_allclose(m, m_true, rtol=1e-8)
        assert not r.wrong_parametrization
    else:
        assert np.all(np.abs(m - m_true) <= 3 * sd), (m - m_true) / sd
