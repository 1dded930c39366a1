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


@pytest.mark.slow  # 18 s (the zoo's two programs); by default every batched
# forward-dynamics check against Pinocchio (test_reference_dynamics, test_constrained), run these terms
def test_every_joint_and_row_type_matches_the_per_state_code():
    """The zoo: free, spherical, universal, cylindrical, revolute, prismatic joints (the universal's
    joint bias is non-zero) and every row type, couplings included."""
    zoo = _zoo()
    assert {"universal", "cylindrical", "free", "spherical"} <= set(zoo.topo.joint_types)
    _check(zoo)


# slow (the Stewart ~12 s): by default the batch-last path runs in every vmapped forward-dynamics check
# against Pinocchio (test_constrained.py's Stewart, test_reference_dynamics.py's four-bar)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) for n in ("stewart", "excavator")])
def test_shipped_robots_match_and_forward_dynamics_uses_them(name):
    mech = load(name)
    Q, V = _check(mech)
    T = normal(7, (Q.shape[0], mech.nv))
    batched = jm.jit(jax.vmap(jm.forward_dynamics, (None, 0, 0, 0)))(mech, Q, V, T)
    one = jm.forward_dynamics(mech, Q[3], V[3], T[3])  # a single state: the per-state code
    np.testing.assert_allclose(batched.a[3], one.a, rtol=0, atol=1e-11 * (1.0 + float(jnp.max(jnp.abs(one.a)))))
    assert int(batched.status[3]) == int(one.status)


def _side_by_side(n: int) -> jm.Mechanism:
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from growth import side_by_side

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.toml"
        path.write_text(side_by_side(n))
        return jm.load(path)


def _shapes(jaxpr):
    """Shapes of every array a traced program computes (sub-programs included)."""
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            yield tuple(getattr(v.aval, "shape", ()))
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _shapes(inner)


def _dense(shape, mech) -> bool:
    """Whether ``shape`` has two adjacent axes of the dense sizes (nv, nv) or (s, nv)."""
    big = {mech.nv, mech.n_rows}
    return any(a in big and b in big for a, b in zip(shape, shape[1:], strict=False))


@pytest.mark.slow  # a growth check (~9 s of compiles); every four-bar forward dynamics by default takes the block path
def test_many_small_loops_take_the_block_path_without_dense_matrices():
    """Sixteen four-bars side by side (nv 48, 80 rows): "auto" takes the per-component solve, and
    the batched program computes no array with the dense M's (nv, nv) or C's (s, nv) axes, so its
    cost grows with the number of loops, not its square (``benchmarks/growth.py`` times it; the
    LAPACK path computes both). Accelerations equal the dense KKT's and one four-bar's."""
    one, mech = load("four_bar"), _side_by_side(16)
    assert constrained.default_method(mech) == "kkt_blocks" == constrained.default_method(one)
    assert constrained.default_method(load("stewart")) == "kkt"  # one 18-row component: LAPACK
    n = 8
    Q = jnp.asarray(random_configurations(mech, n, 0, 0.3))
    V, T = normal(1, (n, mech.nv)), normal(2, (n, mech.nv))

    def f(method):
        return jax.vmap(lambda q, v, t: jm.forward_dynamics(mech, q, v, t, method=method).a)

    for method, dense in (("auto", False), ("kkt", True)):
        found = [s for s in _shapes(jax.make_jaxpr(f(method))(Q, V, T).jaxpr) if _dense(s, mech)]
        assert bool(found) == dense, (method, found[:3])
    a, ref = jm.jit(f("auto"))(Q, V, T), jm.jit(f("kkt"))(Q, V, T)
    np.testing.assert_allclose(a, ref, rtol=0, atol=1e-10 * (1.0 + float(jnp.max(jnp.abs(ref)))))
    # copy 5 of the sixteen is the shipped four-bar, shifted along z (gravity along -y: same motion)
    a1 = jm.jit(jax.vmap(lambda q, v, t: jm.forward_dynamics(one, q, v, t).a))(Q[:, 15:18], V[:, 15:18], T[:, 15:18])
    np.testing.assert_allclose(a[:, 15:18], a1, rtol=0, atol=1e-10 * (1.0 + float(jnp.max(jnp.abs(a1)))))


@pytest.mark.slow  # a 150-state Stewart program of its own (~6 s)
def test_large_batches_run_in_chunks_with_the_same_values(monkeypatch):
    """A batch larger than ``batchlast.chunk_size`` runs in chunks (``lax.map``) of the batch-last
    kernels, the remainder included: the same values as one state at a time."""
    from jaxmech import batchlast

    mech = load("stewart")
    monkeypatch.setattr(batchlast, "CHUNK_BUDGET", 64 * (mech.nb + mech.nv + mech.n_rows))
    assert batchlast.chunk_size(mech) == 64
    n = 150  # two chunks of 64 and a remainder of 22
    Q = jnp.asarray(random_configurations(mech, n, 4, 0.3))
    V, T = normal(5, (n, mech.nv)), normal(6, (n, mech.nv))
    chunked = jm.jit(jax.vmap(lambda q, v, t: jm.forward_dynamics(mech, q, v, t).a))(Q, V, T)
    for i in (0, 63, 64, 140, 149):
        one = jm.forward_dynamics(mech, Q[i], V[i], T[i]).a
        np.testing.assert_allclose(chunked[i], one, rtol=0, atol=1e-11 * (1.0 + float(jnp.max(jnp.abs(one)))))
