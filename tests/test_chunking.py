"""Large CPU batches run in slices (jaxmech/chunking.py): same results as one vmap, same
derivatives, and the slicing really happens (a loop over slices in the program)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import closed_states, load

import jaxmech as jm
from jaxmech import chunking


def test_slice_size_prefers_divisors_and_skips_small_batches():
    assert chunking.slice_size(chunking.MIN_BATCH - 1) is None
    assert chunking.slice_size(4096) == 64
    assert chunking.slice_size(600) == 60  # a divisor near 64: no padded states
    assert chunking.slice_size(521) == 64  # prime: the last slice is padded
    assert chunking.slice_size(4096, width=chunking.WIDE + 1) == 32  # wide models: smaller slices


@pytest.mark.parametrize("size", [521, 600])
def test_map_in_slices_equals_vmap_with_shared_and_padded_arguments(size):
    x = jnp.arange(size * 3, dtype=jnp.float64).reshape(size, 3)
    w = jnp.asarray([1.0, -2.0, 0.5])
    f = lambda x, w: (jnp.sin(x) * w, jnp.sum(x))  # noqa: E731
    got = chunking.map_in_slices(f, size, (x, w), (True, False))
    want = jax.vmap(f, (0, None))(x, w)
    for g, e in zip(got, want, strict=True):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def _fd_and_rows(mech):
    def f(q, v, tau):
        return jm.forward_dynamics(mech, q, v, tau).a, jm.closure_residual(mech, q)

    return jax.vmap(f)


def test_forward_dynamics_and_rows_in_slices_match_one_vmap():
    """576 four-bar states (nine slices of 64) against the same states in two calls of 288, which
    run as one vmap each; and a jvp (it goes through the per-state code either way)."""
    mech = load("four_bar")
    base = closed_states(mech, 64, 0.3, seed=3)
    Q = jnp.asarray(base[np.arange(576) % len(base)])
    rng = np.random.default_rng(3)
    V, T, dQ = (jnp.asarray(rng.normal(size=Q.shape[:1] + (mech.nv,))) for _ in range(3))
    f = jm.jit(_fd_and_rows(mech))
    assert "scan" in str(jax.make_jaxpr(f)(Q, V, T))
    assert "scan" not in str(jax.make_jaxpr(f)(Q[:288], V[:288], T[:288]))
    whole = f(Q, V, T)
    halves = [f(Q[k : k + 288], V[k : k + 288], T[k : k + 288]) for k in (0, 288)]
    for got, *parts in zip(whole, *halves, strict=True):
        np.testing.assert_allclose(got, jnp.concatenate(parts), rtol=1e-13, atol=1e-13)

    fk = jax.vmap(lambda q, dq: jm.forward_kinematics(mech, jm.integrate(mech, q, dq)))
    tangent = jm.jit(lambda Q, dQ: jax.jvp(lambda e: fk(Q, e * dQ), (0.0,), (1.0,))[1])
    tan = tangent(Q, dQ)
    np.testing.assert_allclose(tan[:288], tangent(Q[:288], dQ[:288]), rtol=0, atol=1e-13)
    assert float(jnp.max(jnp.abs(tan))) > 1e-2
