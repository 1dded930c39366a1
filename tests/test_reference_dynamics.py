"""Closed-loop forward dynamics with revolute cuts (four-bar, excavator) against a reference that
uses none of jaxmech's dynamics or closure code: M and h from Pinocchio (``crba``, ``nle`` on the
exported tree), C and gamma from Pinocchio frame Jacobians and accelerations of the cut frames
(``tests/_pinref.py``, checked row by row in test_reference_rows.py), and a float64 null-space
solve of the KKT system (redundant revolute rows included: the planar loops have rank 2 of 5)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _pinref import PinReference
from _shared import closed_states, load, normal, random_configurations

import jaxmech as jm


@jm.jit
def _fd(mech, q, v, tau):
    return jax.vmap(lambda q, v, t: jm.forward_dynamics(mech, q, v, t), (0, 0, 0))(q, v, tau)


@jm.jit
def _fd_projected(mech, q, v, tau):
    return jax.vmap(lambda q, v, t: jm.forward_dynamics(mech, q, v, t, method="projected"), (0, 0, 0))(q, v, tau)


def _consistent_velocities(C, rng):
    _, S, Vt = np.linalg.svd(C)
    N = Vt[int((S > 1e-9 * S[0]).sum()) :].T
    return N @ rng.normal(size=N.shape[1])


# the excavator (22 s, mostly compilation) runs in the slow tier; test_constrained's mpmath KKT check
# keeps an excavator in the default tier
@pytest.mark.parametrize("name,spread", [("four_bar", 0.3), pytest.param("excavator", 0.05, marks=pytest.mark.slow)])
def test_revolute_cut_dynamics_vs_pinocchio(name, spread):
    mech = load(name)
    ref = PinReference(mech)
    Q = closed_states(mech, 4, spread, seed=3)
    rng = np.random.default_rng(3)
    V = np.array([3 * _consistent_velocities(ref.jacobian_and_bias(q, np.zeros(mech.nv))[0], rng) for q in Q])
    T = rng.normal(size=(len(Q), mech.nv)) * 2
    res = _fd(mech, jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    proj = _fd_projected(mech, jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    assert np.all(np.asarray(res.status) == 0) and np.all(np.asarray(proj.status) == 0)
    for i in range(len(Q)):
        a_ref = ref.forward_dynamics(Q[i], V[i], T[i])
        scale = np.abs(a_ref).max()
        assert scale > 1e-3
        assert np.abs(np.asarray(res.a[i]) - a_ref).max() <= 1e-10 * scale, name
        assert np.abs(np.asarray(proj.a[i]) - a_ref).max() <= 1e-10 * scale, name
        C, g = ref.jacobian_and_bias(Q[i], V[i])
        assert np.abs(C @ a_ref + g).max() <= 1e-10 * max(1.0, scale)  # the reference closes too


class TestWithAndWithoutJit(chex.TestCase):
    """Closure Jacobian and curvature of the four-bar (a revolute cut), traced (jit) and op by op
    (no jit), against the Pinocchio reference rows, with per-quantity tolerances."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_four_bar_rows(self):
        mech = load("four_bar")
        ref = PinReference(mech)
        q = random_configurations(mech, 1, 4)[0]
        v = normal(5, (mech.nv,))

        def rows(mech, q, v):
            return {"C": jm.closure_jacobian(mech, q), "gamma": jm.closure_bias(mech, q, v)}

        got = self.variant(rows)(mech, q, v)
        C, g = ref.jacobian_and_bias(np.asarray(q), np.asarray(v))
        tol = {"C": 1e-12, "gamma": 1e-11 * max(1.0, np.abs(g).max())}
        jax.tree.map(lambda x, y, t: chex.assert_trees_all_close(x, y, atol=t, rtol=0), got, {"C": C, "gamma": g}, tol)
