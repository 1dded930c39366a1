"""The dense KKT solve (jaxmech/kkt.py): the certificate is a true bound, certified states skip the
pivoted QR and agree with it, uncertified ones (redundant or masked rows) take it, per state in
one vmap, and derivatives are those of the QR path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import closed_states, load

import jaxmech as jm
from jaxmech import kkt, lapack

RTOL = 1e-9


def _system(seed, nv=7, s=5, redundant=False, scale=1.0, cond=None):
    """A random SPD M (nv, nv) (condition ``cond`` if given), closure rows C (s, nv) (row 3 = row 0
    + row 1 when redundant), gamma (s,) consistent with the rows, b (nv,)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(nv, nv))
    M = A @ A.T + nv * np.eye(nv)
    if cond is not None:  # light links: Kangaroo's M has cond ~3e8
        U = np.linalg.qr(A)[0]
        M = (U * np.logspace(0, -np.log10(cond), nv)) @ U.T
    C = scale * rng.normal(size=(s, nv))
    if redundant:
        C[3] = C[0] + C[1]
    gamma = C @ rng.normal(size=nv)  # consistent: some a has C a + gamma = 0
    return tuple(jnp.asarray(x) for x in (M, C, gamma, rng.normal(size=nv)))


def _selected(M, C, gamma, mask, b):
    return kkt._selected(M, C, gamma, mask, b, lapack.cholesky(M), RTOL)


def test_sigma_min_lower_is_a_lower_bound():
    rng = np.random.default_rng(3)
    for n in (3, 24):
        T = np.tril(rng.normal(size=(20, n, n)))
        d = np.abs(np.diagonal(T, axis1=1, axis2=2)) + rng.uniform(1e-3, 1.0, (20, n))
        T[:, np.arange(n), np.arange(n)] = d
        lo = np.asarray(jax.vmap(kkt.sigma_min_lower)(jnp.asarray(T)))
        smin = np.linalg.svd(T, compute_uv=False)[:, -1]
        assert np.all(lo > 0) and np.all(lo <= smin * (1 + 1e-12)), (n, lo, smin)
    assert float(kkt.sigma_min_lower(jnp.full((3, 3), jnp.nan))) == 0.0


def test_certified_states_agree_with_the_selection_and_others_take_it():
    """One vmap over regular, redundant (rank 4 of 5), masked and badly scaled systems: every state's
    accelerations, multipliers and rank equal the pivoted-QR path's; the certificate holds exactly
    for the states whose active rows have full rank."""
    systems = [_system(0), _system(1, redundant=True), _system(2), _system(3, scale=1e-12), _system(6, cond=1e12)]
    masks = [np.ones(5), np.ones(5), np.array([1.0, 0.0, 1.0, 1.0, 0.0]), np.ones(5), np.ones(5)]
    M, C, gamma, b = (jnp.stack(x) for x in zip(*systems, strict=True))
    mask = jnp.asarray(np.stack(masks))
    got = jax.jit(jax.vmap(lambda *x: kkt.solve(*x, RTOL)))(M, C, gamma, mask, b)
    want = jax.jit(jax.vmap(_selected))(M, C, gamma, mask, b)
    np.testing.assert_array_equal(got[2], [5, 4, 3, 5, 5])
    np.testing.assert_array_equal(got[2], want[2])
    for g, w in zip(got[:2], want[:2], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-10)
    # the rows hold to round-off everywhere, also where M's condition made the correction step run
    Cm, gm = C * mask[..., None], gamma * mask
    viol = jnp.max(jnp.abs(jnp.einsum("bsn,bn->bs", Cm, got[0]) + gm), 1)
    scale = 1 + jnp.max(jnp.abs(gm), 1) + jnp.max(jnp.abs(Cm), (1, 2)) * jnp.max(jnp.abs(got[0]), 1)
    assert float(jnp.max(viol / scale)) < 64 * np.finfo(np.float64).eps

    def first_solve_at_roundoff(M, C, gamma, mask, b):
        rows = kkt.Rows(C, gamma, mask, RTOL, natural=True)
        a = kkt._schur(lapack.cholesky(M), rows, b)[0]
        return kkt.at_roundoff(rows.Cs, rows.gs, a)

    assert not bool(jax.vmap(first_solve_at_roundoff)(M, C, gamma, mask, b)[4])

    def cert(M, C, gamma, mask, b):
        L = lapack.cholesky(M)
        rows = kkt.Rows(C, gamma, mask, RTOL, natural=True)
        return kkt.certified(L, kkt.kkt_dense(M, rows, b, L)[2], rows.C, RTOL)

    # rows scaled by 1e-12 are still independent (the rank is relative): certified
    np.testing.assert_array_equal(jax.vmap(cert)(M, C, gamma, mask, b), [True, False, True, True, True])


def test_derivatives_are_those_of_the_selection():
    M, C, gamma, b = _system(5)
    mask = jnp.ones(5)

    def loss(solver, M, C, gamma, b):
        a, lam, _ = solver(M, C, gamma, mask, b)
        return jnp.sum(a**2) + jnp.sum(jnp.sin(lam))

    fast = lambda *x: kkt.solve(*x, RTOL)  # noqa: E731
    got = jax.jit(jax.grad(lambda *x: loss(fast, *x), argnums=(0, 1, 2, 3)))(M, C, gamma, b)
    want = jax.jit(jax.grad(lambda *x: loss(_selected, *x), argnums=(0, 1, 2, 3)))(M, C, gamma, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    # only b perturbed: the rule gives M, C no tangent work and the same result
    jvp = lambda f: jax.jit(lambda b: jax.jvp(lambda b: f(M, C, gamma, mask, b)[0], (b,), (jnp.ones_like(b),))[1])  # noqa: E731
    np.testing.assert_allclose(jvp(fast)(b), jvp(_selected)(b), rtol=1e-12, atol=1e-12)


def test_the_pivoted_qr_runs_only_inside_a_one_pass_loop():
    """The batched program keeps the QR (LAPACK geqp3) out of the straight-line path."""
    M, C, gamma, b = (jnp.stack([x] * 4) for x in _system(0))
    mask = jnp.ones((4, 5))
    hlo = jax.jit(jax.vmap(lambda *x: kkt.solve(*x, RTOL))).lower(M, C, gamma, mask, b).as_text()
    main = hlo[hlo.index("func.func public @main") :]
    body = main[: main.index("stablehlo.while")]
    assert "geqp3" not in body and "geqp3" in hlo


@pytest.fixture(scope="module")
def stewart_states():
    mech = load("stewart")
    Q = jnp.asarray(closed_states(mech, 16, 0.02, seed=4))
    rng = np.random.default_rng(4)
    return mech, Q, jnp.asarray(rng.normal(size=(16, mech.nv))), jnp.asarray(rng.normal(size=(16, mech.nv)))


@pytest.mark.slow  # 7 s cold; the default tier compares the Stewart's forward dynamics with Pinocchio
def test_stewart_forward_dynamics_certified_and_unchanged(stewart_states):
    """The Stewart's 18 rows are certified at every closed state, and forward dynamics equals the
    pivoted-QR path's to round-off (issue 12: the QR was 5 of its 19 us per state)."""
    mech, Q, V, T = stewart_states
    from jaxmech.constrained import _terms_batched

    def both(q, v, t):
        M, h, C, g = _terms_batched()(mech, q, v)
        L = lapack.cholesky(M)
        rows = kkt.Rows(C, g, jnp.ones(mech.n_rows), RTOL, natural=True)
        ok = kkt.certified(L, kkt.kkt_dense(M, rows, t - h, L)[2], rows.C, RTOL)
        return ok, kkt._selected(M, C, g, jnp.ones(mech.n_rows), t - h, L, RTOL)

    ok, (a, lam, rank) = jm.jit(jax.vmap(both))(Q, V, T)
    res = jm.jit(jax.vmap(lambda q, v, t: jm.forward_dynamics(mech, q, v, t, method="kkt")))(Q, V, T)
    assert bool(jnp.all(ok))
    np.testing.assert_array_equal(res.rank, rank)
    np.testing.assert_allclose(res.a, a, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(res.multipliers, lam, rtol=1e-11, atol=1e-11)


def test_which_models_try_the_natural_order(monkeypatch):
    """From the static mobility: the Stewart's 18 rows are independent (tried in natural order); the
    four-bar's 5 rows on 3 speeds never are. An unknown mobility (a traced model of a topology not
    seen concrete) tries whenever there are no more rows than speeds."""
    from jaxmech import independent
    from jaxmech.constrained import independent_rows

    stewart, four_bar = load("stewart"), load("four_bar")
    assert independent_rows(stewart) and not independent_rows(four_bar)
    monkeypatch.setattr(independent, "mobility", lambda mech, rtol=1e-9: None)
    assert independent_rows(stewart) and not independent_rows(four_bar)
