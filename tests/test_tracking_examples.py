"""Tracking on the multi-loop examples (issue 4): the excavator (5 loops, cylinders driven) and
the two-module manipulator (one two-path and one three-path module) assemble from their rough
``q0`` and stay converged with residual <= 1e-10 along a 1,000-step path of their actuators."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech.tracking import active_q_indices


# slow tier: 20-30 s each, mostly compilation; test_assembly tracks the four-bar 1,000 steps by default
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) for n in ("excavator", "two_module")])
def test_assemble_from_q0_then_track_1000_steps(configs_dir, name):
    mech = jm.load(configs_dir / f"{name}.toml")
    res = jm.assemble(mech, mech.q0)
    assert int(res.status) == 0, res.message()
    assert float(res.residual) <= 1e-10
    aq = active_q_indices(mech, jm.assembly.partition(mech, None))
    a0 = np.asarray(res.q)[aq]
    lo, hi = np.asarray(mech.lower)[aq], np.asarray(mech.upper)[aq]
    # A smooth excursion around the assembled actuator values, inside the limits: each actuator
    # moves by up to 5% of its range (or 0.05 where unbounded) and back, phases staggered.
    span = np.where(np.isfinite(hi - lo), 0.05 * (hi - lo), 0.05)
    s = np.linspace(0.0, 1.0, 1000)[:, None]
    path = a0 + span * np.sin(2 * np.pi * s + np.arange(aq.size)[None, :])
    out = jm.jit(lambda p: jm.track(mech, res.q, p))(jnp.asarray(path))
    status = np.asarray(out.status)
    assert np.all(status == 0), f"{(status != 0).sum()} steps failed: {np.unique(status)}"
    assert float(np.max(np.asarray(out.residual))) <= 1e-10
    # The tracked configurations realize the commanded actuator values and close every loop.
    q = np.asarray(out.q)
    np.testing.assert_allclose(q[:, aq], path, atol=1e-12)
    r = jax.vmap(lambda qq: jm.closure_residual(mech, qq))(jnp.asarray(q))
    assert float(jnp.max(jnp.abs(r))) <= 1e-10
