"""Batch-last tree and closure terms of forward dynamics (``jaxmech.batchlast_dynamics``) against
the per-state code they re-express, and the forward dynamics that runs them under ``vmap``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import load, normal, random_configurations
from test_closure import _zoo

import jaxmech as jm
from jaxmech import batchlast_dynamics, constrained


@jm.jit
def _both(mech, Q, V):
    per_state = jax.vmap(lambda q, v: constrained._tree_and_closure_terms(mech, q, v))(Q, V)
    return per_state, batchlast_dynamics.terms(mech, Q.T, V.T)


def _check(mech, n=8, seed=0):
    Q = jnp.asarray(random_configurations(mech, n, seed, 0.3))
    V = normal(seed + 1, (n, mech.nv))
    ref, fast = _both(mech, Q, V)
    for name, a, b in zip(("M", "h", "C", "gamma"), ref, fast, strict=True):
        assert a.shape == b.shape, name
        scale = 1.0 + float(jnp.max(jnp.abs(a)))
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-13 * scale, err_msg=name)
    return Q, V


@pytest.mark.slow  # 18 s (the zoo's two programs); by default the Stewart below, and every batched
# forward-dynamics check against Pinocchio (test_reference_dynamics, test_constrained), run these terms
def test_every_joint_and_row_type_matches_the_per_state_code():
    """The zoo: free, spherical, universal, cylindrical, revolute, prismatic joints (the universal's
    joint bias is non-zero) and every row type, couplings included."""
    zoo = _zoo()
    assert {"universal", "cylindrical", "free", "spherical"} <= set(zoo.topo.joint_types)
    _check(zoo)


@pytest.mark.parametrize("name", ["stewart", pytest.param("excavator", marks=pytest.mark.slow)])
def test_shipped_robots_match_and_forward_dynamics_uses_them(name):
    mech = load(name)
    Q, V = _check(mech)
    T = normal(7, (Q.shape[0], mech.nv))
    batched = jm.jit(jax.vmap(jm.forward_dynamics, (None, 0, 0, 0)))(mech, Q, V, T)
    one = jm.forward_dynamics(mech, Q[3], V[3], T[3])  # a single state: the per-state code
    np.testing.assert_allclose(batched.a[3], one.a, rtol=0, atol=1e-11 * (1.0 + float(jnp.max(jnp.abs(one.a)))))
    assert int(batched.status[3]) == int(one.status)
