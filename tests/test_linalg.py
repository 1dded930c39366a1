"""jaxmech.linalg (unrolled small linear algebra) against numpy, and the block KKT solve against
the dense LAPACK one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import assemble_each, load

import jaxmech as jm
from jaxmech import linalg
from jaxmech.constrained import block_structure


def _spd(rng, n, batch=()):
    A = rng.normal(size=batch + (n, n))
    return A @ np.swapaxes(A, -1, -2) + n * np.eye(n)


def test_cholesky_and_solves_vs_numpy():
    rng = np.random.default_rng(0)
    A = _spd(rng, 7, (5,))
    L = np.asarray(linalg.cholesky(jnp.asarray(A)))
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=1e-12, atol=1e-12)
    b = rng.normal(size=(5, 7, 3))
    np.testing.assert_allclose(np.asarray(linalg.solve_lower(jnp.asarray(L), jnp.asarray(b))), np.linalg.solve(L, b))
    Lt = np.swapaxes(L, -1, -2)
    np.testing.assert_allclose(np.asarray(linalg.solve_lower_t(jnp.asarray(L), jnp.asarray(b))), np.linalg.solve(Lt, b))
    x = np.asarray(linalg.cho_solve(jnp.asarray(L), jnp.asarray(b[..., 0])))
    np.testing.assert_allclose(x, np.linalg.solve(A, b[..., :1])[..., 0], rtol=1e-10)


def test_cholesky_not_positive_definite_is_nan():
    A = -np.eye(3)
    assert np.isnan(np.asarray(linalg.cholesky(jnp.asarray(A)))).any()


@pytest.mark.parametrize("rank", [1, 3, 5])
def test_pivoted_rows_rank_and_independence(rank):
    rng = np.random.default_rng(rank)
    A = rng.normal(size=(6, rank)) @ rng.normal(size=(rank, 8))
    order, d = (np.asarray(x) for x in linalg.pivoted_rows(jnp.asarray(A), 6))
    assert sorted(order.tolist()) == list(range(6))
    assert np.all(np.diff(d) <= 1e-12 * d[0])
    r = int(np.sum(d > 1e-9 * d[0]))
    assert r == rank == np.linalg.matrix_rank(A)
    assert np.linalg.matrix_rank(A[order[:r]]) == rank
    # |R_tt| of the column-pivoted QR of A^T: the product of the kept ones is the volume of the rows
    np.testing.assert_allclose(np.prod(d[:r]), np.sqrt(np.linalg.det(A[order[:r]] @ A[order[:r]].T)), rtol=1e-8)


def test_stewart_block_structure():
    mech = load("stewart")
    st = block_structure(mech)
    assert st.ncomp == 1 and st.sc == mech.n_rows
    sizes = sorted(int((row < mech.nv).sum()) for row in st.blk_dof[:-1])
    assert sizes == [3] * 6 + [6]  # six legs (universal + prismatic) and the free platform


_FD = jm.jit(
    jax.vmap(
        lambda m, q, v, t: (jm.forward_dynamics(m, q, v, t), jm.forward_dynamics(m, q, v, t, method="kkt_blocks")),
        in_axes=(None, 0, 0, 0),
    )
)


@pytest.mark.parametrize("cfg", [pytest.param("stewart", marks=pytest.mark.slow), "four_bar"])
def test_kkt_blocks_matches_dense(cfg):
    mech = load(cfg)
    rng = np.random.default_rng(0)
    n = 16
    Q = np.tile(np.asarray(mech.q0), (n, 1))
    asm = assemble_each(mech, Q + 0.01 * rng.normal(size=Q.shape))  # jm.assemble's own program
    Q = np.asarray(asm.q)[np.asarray(asm.status) == 0]
    C = np.asarray(jm.jit(jax.vmap(jm.closure_jacobian, (None, 0)))(mech, jnp.asarray(Q)))
    V = np.stack([np.linalg.svd(c)[2][-1] for c in C])  # a velocity in null(C)
    T = rng.normal(size=V.shape)
    dense, blocks = _FD(mech, jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    scale = np.max(np.abs(np.asarray(dense.a)))
    np.testing.assert_allclose(np.asarray(blocks.a), np.asarray(dense.a), atol=1e-10 * scale)
    np.testing.assert_array_equal(np.asarray(blocks.rank), np.asarray(dense.rank))
    np.testing.assert_array_equal(np.asarray(blocks.status), np.asarray(dense.status))
    # multipliers may differ on dependent rows; their generalized force may not
    fd = np.einsum("nsv,ns->nv", C, np.asarray(dense.multipliers))
    fb = np.einsum("nsv,ns->nv", C, np.asarray(blocks.multipliers))
    np.testing.assert_allclose(fb, fd, atol=1e-9 * max(1.0, np.max(np.abs(fd))))
