"""Closure rows, their Jacobian and curvature against an independent formula: Pinocchio frame
placements, frame Jacobians and accelerations plus scipy's rotation logarithms
(``tests/_pinref.py``), at random (not closed) states of a mechanism with every cut type in its
loops (revolute, prismatic, cylindrical, universal, point, weld and pose cuts; revolute,
universal, prismatic, cylindrical, spherical and free joints on the paths)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _pinref import PinReference
from _shared import normal, random_configurations

import jaxmech as jm

# 12, not 8: XLA:CPU's LLVM fully unrolls the batch loops of 4-10 states, and the vmapped rows of this
# 7-loop model then compile in 11 s instead of 7 s (benchmarks/PROFILE.md, session 38).
N_STATES = 12
TYPES = ["weld", "point", "revolute", "universal", "prismatic", "cylindrical"]


@pytest.fixture(scope="module")
def mix():
    G = jm.Graph(name="mix")
    G.add_body("base", mass=1, inertia=[0.1, 0.2, 0.3])
    G.add_joint("root", "free", "world", "base")
    prev = "base"
    for i, t in enumerate(["revolute", "universal", "prismatic", "cylindrical"]):
        G.add_body(f"l{i}", mass=1 + i, inertia=[0.1, 0.1, 0.1], com=[0.05, 0.0, 0.1])
        G.add_joint(
            f"j{i}", t, prev, f"l{i}", parent_pose=jm.pose([0.1, 0.2, 0.3], rpy=[0.1, 0.2, 0.3]), axis=[0.3, 0.5, 0.8]
        )
        prev = f"l{i}"
    G.add_body("s", mass=1, inertia=[0.1, 0.1, 0.1])
    G.add_joint("js", "spherical", "base", "s", parent_pose=jm.pose([0.3, 0, 0]))
    for k, t in enumerate(TYPES):
        G.add_constraint(
            f"c{k}",
            t,
            body_a="s",
            body_b=prev,
            pose_a=jm.pose([0.1 * k, 0.2, 0], rpy=[0.3, k * 0.1, 0.2]),
            pose_b=jm.pose([0, 0.1, 0.05 * k], rpy=[0.1, 0.2, 0.3 * k]),
        )
    G.add_constraint("cp", "pose", body_a="world", body_b="l1", axes=[1, 0, 1, 0, 1, 1])
    mech = jm.compile(G)
    Q = random_configurations(mech, N_STATES, 5, 0.5)
    V = normal(6, (N_STATES, mech.nv))
    ours = jm.jit(
        jax.vmap(lambda m, q, v: (*jm.closure_residual_and_jacobian(m, q), jm.closure_bias(m, q, v)), (None, 0, 0))
    )(mech, Q, V)
    return mech, PinReference(mech), np.asarray(Q), np.asarray(V), [np.asarray(x) for x in ours]


def test_every_loop_type_is_present(mix):
    mech, ref, *_ = mix
    assert set(mech.topo.loop_types) == set(TYPES) | {"pose"}
    assert sum(len(x[6]) for x in ref.loops) == mech.n_rows


def test_residual_rows_match_pinocchio_and_scipy(mix):
    mech, ref, Q, _, (r, _, _) = mix
    for i in range(N_STATES):
        rr = ref.residual(Q[i])
        assert np.abs(r[i]).max() > 1e-2  # random states: the loops are open
        for name, typ, *_, idx in ref.loops:
            np.testing.assert_allclose(r[i][idx], rr[idx], atol=1e-12, err_msg=f"{name} ({typ})")


def test_jacobian_and_curvature_rows_match_pinocchio(mix):
    """C from Pinocchio's LOCAL frame Jacobians (relative twist w = Ad_Delta J_B - J_A) and
    gamma from their spatial accelerations at a = 0, for the rows whose rates are algebraic in w."""
    mech, ref, Q, V, (_, C, g) = mix
    algebraic = [x for x in ref.loops if x[1] in ("point", "revolute", "cylindrical", "universal")]
    assert len(algebraic) == 4
    for i in range(N_STATES):
        Cr, gr = ref.jacobian_and_bias(Q[i], V[i])
        for name, typ, *_, idx in algebraic:
            np.testing.assert_allclose(C[i][idx], Cr[idx], atol=1e-12, err_msg=f"{name} ({typ})")
            np.testing.assert_allclose(g[i][idx], gr[idx], atol=1e-11 * max(1.0, np.abs(gr[idx]).max()), err_msg=name)


def test_log_rows_jacobian_matches_finite_differences_of_scipy_rows(mix):
    """Prismatic, weld and pose rows (rotation logs): C against 4th-order central differences of
    the scipy residual along q (+) t e_j (jaxmech's own integrate only moves the state)."""
    mech, ref, Q, _, (_, C, _) = mix
    logs = [x for x in ref.loops if x[1] in ("prismatic", "weld", "pose")]
    idx = np.concatenate([x[6] for x in logs])
    step = jm.jit(jm.integrate)
    h = 1e-4
    for i in range(2):
        fd = np.zeros((idx.size, mech.nv))
        for j in range(mech.nv):
            e = np.zeros(mech.nv)
            e[j] = 1.0
            f = [ref.residual(step(mech, jnp.asarray(Q[i]), jnp.asarray(e * s * h)))[idx] for s in (-2, -1, 1, 2)]
            fd[:, j] = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h)
        np.testing.assert_allclose(C[i][idx], fd, atol=1e-9)
