"""Eager calls of public functions go through one cached compilation (jaxmech/_entry.py)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import load

import jaxmech as jm
from jaxmech._entry import entry


def test_eager_call_equals_the_function_as_written_and_compiles_once():
    mech = load("four_bar")
    q = jnp.asarray(mech.q0) + 0.01
    fn = jm.closure_jacobian
    np.testing.assert_allclose(np.asarray(fn(mech, q)), np.asarray(fn.eager(mech, q)), rtol=0, atol=1e-15)
    before = fn.jitted._cache_size()
    other = jax.tree.map(lambda x: x * 1.0 if isinstance(x, jax.Array) else x, mech)  # same topology
    fn(other, q + 0.02)
    fn(mech, q - 0.02)
    assert fn.jitted._cache_size() == before  # new values, same shapes: no new compilation


def test_traced_calls_run_as_written_and_index_arrays_compile():
    mech = load("four_bar")
    q = jnp.asarray(mech.q0) + 0.01
    # inside jit / vmap / grad the function is traced as written (no nested compiled call needed)
    r = jm.jit(jax.vmap(jm.closure_residual, (None, 0)))(mech, jnp.stack([q, q]))
    np.testing.assert_allclose(np.asarray(r[0]), np.asarray(jm.closure_residual(mech, q)), atol=1e-15)
    g = jax.grad(lambda x: jnp.sum(jm.closure_residual(mech, x) ** 2))(q)
    assert np.all(np.isfinite(np.asarray(g)))
    # a numpy array of indices is passed as a tuple: one compiled call for both spellings
    ind = np.asarray(jm.tangent_map_status(mech, q).independent)
    before = jm.tangent_map_status.jitted._cache_size()
    a = jm.tangent_map_status(mech, q, independent=ind)
    b = jm.tangent_map_status(mech, q, independent=tuple(int(i) for i in ind))
    assert jm.tangent_map_status.jitted._cache_size() == before + 1
    np.testing.assert_allclose(np.asarray(a.E), np.asarray(b.E), atol=1e-14)


def test_bodies_that_need_concrete_values_fall_back():
    calls = []

    @entry(static_argnames=("k",))
    def f(x, k=1):
        calls.append(k)
        return x * float(np.asarray(x).sum()) + k  # needs a concrete x

    out = f(jnp.ones(3), k=2)
    np.testing.assert_allclose(np.asarray(out), 5.0)
    assert f(jnp.ones(3), k=2).shape == (3,)  # second call: straight to the eager path


def test_bad_input_errors_are_unchanged():
    mech = load("four_bar")
    with pytest.raises(ValueError, match="q_guess must have shape"):
        jm.assemble(mech, jnp.zeros(mech.nq + 1))
    with pytest.raises(ValueError, match="method must be"):
        jm.forward_dynamics(mech, mech.q0, jnp.zeros(mech.nv), jnp.zeros(mech.nv), method="nope")


def test_eager_vmap_runs_one_batched_program():
    """An eager jax.vmap of a public function goes through the cached jit (one batched program,
    not one compilation per primitive) and gives the same values; a batched model runs as written."""
    mech = load("four_bar")
    Q = jnp.asarray(mech.q0) + 0.01 * jnp.arange(5.0)[:, None]
    r = jax.vmap(jm.closure_residual, (None, 0))(mech, Q)
    assert jm.closure_residual.jitted._nested is not None  # the batched call took the jit
    ref = jm.jit(jax.vmap(jm.closure_residual.eager, (None, 0)))(mech, Q)
    np.testing.assert_allclose(np.asarray(r), np.asarray(ref), rtol=0, atol=1e-15)
    ms = jax.tree.map(lambda x: jnp.stack([x, x]) if eqx.is_array(x) else x, mech)
    rb = jax.vmap(jm.closure_residual)(ms, Q[:2])
    np.testing.assert_allclose(np.asarray(rb), np.asarray(ref[:2]), rtol=0, atol=1e-15)
