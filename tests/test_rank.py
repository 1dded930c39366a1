"""rank.py against numpy / scipy references (SVD rank, pivoted QR, condition numbers)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxmech as jm
from jaxmech.rank import complement, numerical_rank, rcond, select_columns, select_rows


def low_rank(rng, m, n, r):
    return rng.standard_normal((m, r)) @ rng.standard_normal((r, n))


@pytest.mark.parametrize("shape,r", [((6, 4), 2), ((5, 5), 5), ((8, 3), 3), ((3, 7), 1), ((4, 4), 0)])
def test_numerical_rank_matches_numpy(shape, r):
    rng = np.random.default_rng(0)
    A = low_rank(rng, *shape, r) if r else np.zeros(shape)
    assert int(numerical_rank(jnp.asarray(A))) == np.linalg.matrix_rank(A) == r


def test_rank_is_scale_invariant_and_batched():
    rng = np.random.default_rng(1)
    As = np.stack([low_rank(rng, 6, 5, k) * s for k, s in zip((1, 2, 3, 4), (1e-6, 1.0, 1e3, 1e8), strict=True)])
    ranks = jm.jit(jax.vmap(numerical_rank))(jnp.asarray(As))
    np.testing.assert_array_equal(np.asarray(ranks), [1, 2, 3, 4])


def test_rcond_matches_numpy():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((5, 5))
    assert float(rcond(jnp.asarray(A))) == pytest.approx(1.0 / np.linalg.cond(A), rel=1e-10)
    assert float(rcond(jnp.zeros((3, 3)))) == 0.0
    B = rng.standard_normal((6, 3))
    sv = np.linalg.svd(B, compute_uv=False)
    assert float(rcond(jnp.asarray(B))) == pytest.approx(sv[-1] / sv[0], rel=1e-10)


def test_select_rows_matches_scipy_pivoted_qr():
    rng = np.random.default_rng(3)
    # 9 rows, passive block of 4 columns with a duplicated and a zero row
    A = rng.standard_normal((9, 4))
    A[2] = A[5]
    A[7] = 0.0
    rows, rc = jm.jit(select_rows, static_argnums=1)(jnp.asarray(A), 4)
    _, _, P = scipy.linalg.qr(A.T, pivoting=True)
    np.testing.assert_array_equal(np.sort(np.asarray(rows)), np.sort(P[:4]))
    sel = A[np.asarray(rows)]
    assert np.linalg.matrix_rank(sel) == 4
    assert 7 not in set(np.asarray(rows).tolist())
    assert float(rc) == pytest.approx(1.0 / np.linalg.cond(sel), rel=1e-9)


def test_select_rows_flags_rank_deficient_block():
    rng = np.random.default_rng(4)
    A = low_rank(rng, 6, 3, 2)  # passive block of rank 2 < 3 columns
    _, rc = select_rows(jnp.asarray(A), 3)
    assert float(rc) < 1e-12


def test_select_columns_batched():
    rng = np.random.default_rng(5)
    As = rng.standard_normal((4, 3, 6))
    As[:, :, 1] = As[:, :, 0] * 2.0  # column 1 parallel to column 0: never both chosen
    cols, rc = jax.vmap(lambda A: select_columns(A, 3))(jnp.asarray(As))
    for A, c in zip(As, np.asarray(cols), strict=True):
        assert np.linalg.matrix_rank(A[:, c]) == 3
        assert not {0, 1} <= set(c.tolist())
        _, _, P = scipy.linalg.qr(A, pivoting=True)
        np.testing.assert_array_equal(np.sort(c), np.sort(P[:3]))
    assert np.all(np.asarray(rc) > 1e-3)


def test_select_rows_rejects_too_many():
    with pytest.raises(ValueError, match="cannot select"):
        select_rows(jnp.zeros((2, 2)), 3)
    np.testing.assert_array_equal(complement([0, 2], 4), [1, 3])
