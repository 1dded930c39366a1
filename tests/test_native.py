"""The native CPU kernels (jaxmech/native.py, native_kernels.cc): built on this machine, equal to
their LAPACK references to round-off on batches that do not fill the last SIMD group (13 states:
8-wide float64 and 16-wide float32 groups), on masked, redundant, badly conditioned and NaN
systems, switched off by JAXMECH_NATIVE=0, and a failed build falls back to LAPACK with a warning."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from jaxmech import kkt, lapack, native, simulate

RTOL = 1e-9
N = 13  # not a multiple of either lane count


def _systems(dtype, nv=9, s=6):
    """N KKT systems: regular, a redundant row, masked rows, an ill-conditioned M, a NaN M."""
    rng = np.random.default_rng(0)
    Ms, Cs, gs, masks, bs = [], [], [], [], []
    for i in range(N):
        A = rng.normal(size=(nv, nv))
        M = A @ A.T + nv * np.eye(nv)
        if i == 3:  # cond 1e10: the correction step runs
            U = np.linalg.qr(A)[0]
            M = (U * np.logspace(0, -10, nv)) @ U.T
        C = rng.normal(size=(s, nv))
        mask = np.ones(s)
        if i == 1:
            C[3] = C[0] + C[1]
        if i == 2:
            mask[[1, 4]] = 0.0
        if i == 5:
            M[0, 0] = np.nan
        (
            Ms.append(M),
            Cs.append(C),
            gs.append(C @ rng.normal(size=nv)),
            masks.append(mask),
            bs.append(rng.normal(size=nv)),
        )
    return tuple(jnp.asarray(np.stack(x), dtype) for x in (Ms, Cs, gs, masks, bs))


def test_the_kernels_are_built_here():
    """CI's machine has a C++ compiler: the native path must be the one that runs there."""
    assert native.available(jnp.float64) and native.available(jnp.float32)
    assert not native.available(jnp.int32)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_kkt_kernel_equals_the_lapack_path(dtype):
    M, C, gamma, mask, b = _systems(dtype)
    rtol = RTOL if dtype == jnp.float64 else 1e-5
    got = jax.jit(jax.vmap(lambda *x: kkt._natural_native(*x, rtol)))(M, C, gamma, mask, b)
    want = jax.jit(jax.vmap(lambda *x: kkt._natural_lapack(*x, rtol)))(M, C, gamma, mask, b)
    ok = np.asarray(want[3])
    np.testing.assert_array_equal(np.asarray(got[3]), ok)
    assert not ok[1] and not ok[5] and ok[0] and ok[2]  # redundant and NaN: not certified
    assert ok[3] == (dtype == jnp.float64)  # M's condition 1e10 is beyond float32
    tol = 1e-10 if dtype == jnp.float64 else 2e-3
    for g, w in zip(got[:3], want[:3], strict=True):  # a, lambda, L on the certified states
        g, w = np.asarray(g)[ok], np.asarray(w)[ok]
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.max(np.abs(w)))
    # the solve holds the rows (the ill-conditioned M needed the correction step)
    Cm, gm = C * mask[..., None], gamma * mask
    viol = np.abs(np.einsum("bsn,bn->bs", Cm, got[0]) + gm).max(1)[ok]
    assert viol.max() < (1e-12 if dtype == jnp.float64 else 1e-3) * (1 + np.abs(np.asarray(got[0])[ok]).max())
    # and the public solve's answers equal the QR path's on every state, certified or not
    full = jax.jit(jax.vmap(lambda *x: kkt.solve(*x, rtol)))(M, C, gamma, mask, b)
    sel = jax.jit(jax.vmap(lambda M, C, g, m, b: kkt._selected(M, C, g, m, b, lapack.cholesky(M), rtol)))(
        M, C, gamma, mask, b
    )
    fin = np.isfinite(np.asarray(sel[0])).all(1)
    np.testing.assert_array_equal(np.asarray(full[2]), np.asarray(sel[2]))
    np.testing.assert_allclose(np.asarray(full[0])[fin], np.asarray(sel[0])[fin], rtol=tol, atol=tol)


def _tree_systems(dtype, nv=11, s=5, seed=1):
    """N KKT systems on one random tree's sparsity: ``M = L0^T L0`` with ``L0`` on the ancestor
    relation (so ``M`` has the tree's branch sparsity and its natural-order Cholesky factor fills
    in), each row of ``C`` on a random subset of the speeds; state 2 masks two rows, state 5 is NaN."""
    rng = np.random.default_rng(seed)
    parent = [-1] + [int(rng.integers(-1, i)) for i in range(1, nv)]
    anc = np.eye(nv, dtype=bool)  # anc[i, k]: k is i or an ancestor of i
    for i in range(nv):
        if parent[i] >= 0:
            anc[i] |= anc[parent[i]]
    Cp = rng.random((s, nv)) < 0.3
    Cp[np.arange(s), rng.integers(0, nv, s)] = True
    Ms, Cs, gs, masks, bs = [], [], [], [], []
    for i in range(N):
        L0 = np.where(anc, rng.normal(size=(nv, nv)), 0.0) + 3 * np.eye(nv)
        M = L0.T @ L0
        C = np.where(Cp, rng.normal(size=(s, nv)), 0.0)
        mask = np.ones(s)
        if i == 2:
            mask[[0, 3]] = 0.0
        if i == 5:
            M[1, 1] = np.nan
        (
            Ms.append(M),
            Cs.append(C),
            gs.append(C @ rng.normal(size=nv)),
            masks.append(mask),
            bs.append(rng.normal(size=nv)),
        )
    P = anc | anc.T
    args = tuple(jnp.asarray(np.stack(x), dtype) for x in (Ms, Cs, gs, masks, bs))
    return args, kkt.sparsity(P, Cp)


def test_sparsity_holds_every_nonzero():
    """The symbolic pattern contains every non-zero of the numeric factors (fill-in included), and
    is smaller than dense, on random trees."""
    for seed in range(5):
        (M, C, *_), sp = _tree_systems(jnp.float64, seed=seed)
        M, C = np.asarray(M)[0], np.asarray(C)[0]
        L = np.linalg.cholesky(M)
        Z = scipy.linalg.solve_triangular(L, C.T, lower=True).T  # forward substitution: exact zeros
        assert not np.any((np.abs(np.tril(L, -1)) > 0) & ~sp.lower)
        assert not np.any((np.abs(Z) > 0) & ~sp.rows) and np.all(sp.rows >= sp.c)
        assert sp.lower.sum() < M.shape[0] * (M.shape[0] - 1) // 2


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_kernels_on_a_pattern_equal_the_dense_ones(dtype):
    """The kernels skip what the pattern says is zero: same results as on the dense pattern (and
    the same certificate) on a random tree's systems, masked and NaN states included."""
    (M, C, gamma, mask, b), sp = _tree_systems(dtype)
    rtol = RTOL if dtype == jnp.float64 else 1e-5
    tol = 1e-11 if dtype == jnp.float64 else 1e-4
    sparse = jax.jit(jax.vmap(lambda *x: kkt._natural_native(*x, rtol, sp)))(M, C, gamma, mask, b)
    dense = jax.jit(jax.vmap(lambda *x: kkt._natural_native(*x, rtol)))(M, C, gamma, mask, b)
    ok = np.asarray(dense[3])
    np.testing.assert_array_equal(np.asarray(sparse[3]), ok)
    assert ok.sum() >= N - 1 and not ok[5]
    for g, w in zip(sparse[:3], dense[:3], strict=True):
        g, w = np.asarray(g)[ok], np.asarray(w)[ok]
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.max(np.abs(w)))
    fin = np.ones(N, bool)
    fin[5] = False
    L = jax.vmap(lapack.cholesky)(M[fin])
    Cf, v = C[fin], b[fin]
    r = jnp.einsum("bsn,bn->bs", Cf, v)
    Lg = jax.vmap(simulate._min_norm_step)(Cf, r)[0]
    for kernel, args in [
        (native.project_velocity, (L, Cf, v)),
        (native.min_norm_step, (Cf, r)),
        (native.chord_step, (Lg, Cf, r)),
    ]:
        got = jax.jit(jax.vmap(lambda *x, k=kernel: k(*x, pattern=sp)))(*args)
        want = jax.jit(jax.vmap(kernel))(*args)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * float(jnp.max(jnp.abs(w))), err_msg=kernel.__name__)


def test_the_models_patterns():
    """The Stewart's mass matrix is the platform's 6 x 6 block and six 3 x 3 leg blocks (no fill-in:
    33 entries below the diagonal) and each closure row touches its leg and the platform (162 of
    432); the patterns hold the model's actual non-zeros at a random state (the public ``crba``
    and ``closure_jacobian``, compiled once per model for the whole suite)."""
    import _shared

    import jaxmech as jm
    from jaxmech.constrained import kkt_sparsity

    mech = _shared.load("stewart")
    sp = kkt_sparsity(mech)
    assert sp.lower.sum() == 6 * 5 // 2 + 6 * 3 and sp.c.sum() == sp.rows.sum() == 18 * 9
    q = _shared.random_configurations(mech, 1, seed=0, scale=0.5)[0]
    M, C = jm.crba(mech, q), jm.closure_jacobian(mech, q)
    L = np.linalg.cholesky(np.asarray(M))
    assert not np.any((np.tril(L, -1) != 0) & ~sp.lower) and not np.any((np.asarray(C) != 0) & ~sp.c)


@pytest.mark.slow  # every shipped closed-chain model (its crba and closure_jacobian compile)
@pytest.mark.parametrize(
    "name", ["cassie", "excavator", "five_bar", "four_bar", "panda", "slider_crank", "stewart_graph", "two_module"]
)
def test_every_models_patterns_hold_its_nonzeros(name):
    """``kkt_sparsity`` of each shipped model with closure rows contains the non-zeros of its mass
    matrix's Cholesky factor, its closure Jacobian and ``L^-1 C^T`` at random states: the rollout's
    projections use it on every model, the forward dynamics' kernel on those with independent rows."""
    import _shared

    import jaxmech as jm
    from jaxmech.constrained import kkt_sparsity

    mech = _shared.load(name)
    sp = kkt_sparsity(mech)
    for q in _shared.random_configurations(mech, 2, seed=1, scale=0.5):
        M, C = np.asarray(jm.crba(mech, q)), np.asarray(jm.closure_jacobian(mech, q))
        L = np.linalg.cholesky(M)
        Z = scipy.linalg.solve_triangular(L, C.T, lower=True).T
        assert not np.any((np.tril(L, -1) != 0) & ~sp.lower)
        assert not np.any((C != 0) & ~sp.c) and not np.any((Z != 0) & ~sp.rows)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_projection_kernels_equal_their_references(dtype):
    M, C, _, _, b = _systems(dtype)
    keep = np.ones(N, bool)
    keep[[1, 3, 5]] = False  # the redundant (a damped singular Gram matrix), ill-conditioned and NaN systems
    M, C, v = M[keep], C[keep], b[keep]
    L = jax.vmap(lapack.cholesky)(M)
    r = jnp.einsum("bsn,bn->bs", C, v)
    tol = 1e-11 if dtype == jnp.float64 else 1e-4
    pairs = [
        (native.project_velocity, simulate._project_velocity, (L, C, v)),
        (native.min_norm_step, simulate._min_norm_step, (C, r)),
    ]
    Lg = jax.vmap(simulate._min_norm_step)(C, r)[0]
    pairs.append((native.chord_step, simulate._chord_step, (Lg, C, r)))
    for kernel, reference, args in pairs:
        got, want = jax.jit(jax.vmap(kernel))(*args), jax.jit(jax.vmap(reference))(*args)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * float(jnp.max(jnp.abs(w))), err_msg=kernel.__name__)
    # the projected velocity satisfies the rows as well as the reference's does (the damping
    # mu = 1e3 eps leaves a relative 1e-4 in float32)
    viol = lambda f: float(jnp.max(jnp.abs(jnp.einsum("bsn,bn->bs", C, jax.jit(jax.vmap(f))(L, C, v)))))  # noqa: E731
    assert viol(native.project_velocity) <= 2 * viol(simulate._project_velocity) + 1e3 * tol * float(
        jnp.max(jnp.abs(r))
    )


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_gauss_newton_kernels_equal_their_references(dtype):
    """Assembly's and tracking's Levenberg-Marquardt factor and step (``corrector._lm_factor`` /
    ``_lm_solve``) on 13 states, square and tall Jacobians, one of them NaN (its step is 0)."""
    from jaxmech import corrector

    rng = np.random.default_rng(3)
    tol = 1e-11 if dtype == jnp.float64 else 1e-4
    for m, n in [(9, 9), (12, 7)]:
        J = rng.normal(size=(N, m, n))
        J[4] = np.nan
        J, f = jnp.asarray(J, dtype), jnp.asarray(rng.normal(size=(N, m)), dtype)
        mu = jnp.asarray(rng.uniform(1e-8, 1e-2, N), dtype)
        L = jax.jit(jax.vmap(native.lm_factor))(J, mu)
        Lr = jax.jit(jax.vmap(corrector._lm_factor_lapack))(J, mu)
        fin = np.ones(N, bool)
        fin[4] = False
        np.testing.assert_allclose(np.tril(L[fin]), np.tril(Lr[fin]), rtol=tol, atol=tol * float(jnp.max(Lr[fin])))
        assert np.isnan(np.asarray(L[4])).any()
        d = jax.jit(jax.vmap(native.lm_solve))(Lr, J, f)
        dr = jax.jit(jax.vmap(corrector._lm_solve_lapack))(Lr, J, f)
        np.testing.assert_allclose(d, dr, rtol=tol, atol=tol * float(jnp.max(jnp.abs(dr))))
        assert not np.asarray(d[4]).any()  # not finite: no step


def test_derivatives_are_the_references(monkeypatch):
    """Gradients through a native projection equal those of the LAPACK formula."""
    M, C, _, _, b = _systems(jnp.float64)
    L, C, v = jax.vmap(lapack.cholesky)(M[:4]), C[:4], b[:4]
    f = native.cpu_or(native.project_velocity, simulate._project_velocity)
    loss = lambda g: lambda L, C, v: jnp.sum(jnp.sin(jax.vmap(g)(L, C, v)))  # noqa: E731
    got = jax.jit(jax.grad(loss(f), argnums=(0, 1, 2)))(L, C, v)
    want = jax.jit(jax.grad(loss(simulate._project_velocity), argnums=(0, 1, 2)))(L, C, v)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_switch_and_fallback(monkeypatch):
    M, C, gamma, mask, b = _systems(jnp.float64)
    prog = lambda: jax.jit(jax.vmap(lambda *x: kkt.solve(*x, RTOL))).lower(M, C, gamma, mask, b).as_text()  # noqa: E731
    assert "jaxmech_kkt_f64" in prog()
    monkeypatch.setenv("JAXMECH_NATIVE", "0")
    assert not native.available(jnp.float64) and "jaxmech_kkt" not in prog()
    monkeypatch.delenv("JAXMECH_NATIVE")
    # a failed build: one warning naming the cause, and the LAPACK path
    native._load.cache_clear()
    monkeypatch.setattr(native, "_build", lambda: (_ for _ in ()).throw(RuntimeError("no C++ compiler found")))
    try:
        with pytest.warns(UserWarning, match="no C.. compiler found"):
            assert not native.available(jnp.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not native.available(jnp.float64)  # said once
        assert "jaxmech_kkt" not in prog()
    finally:
        monkeypatch.undo()
        native._load.cache_clear()
    assert native.available(jnp.float64)


@pytest.mark.slow  # a real compile (about 5 s)
def test_the_kernels_build_in_an_empty_cache(tmp_path, monkeypatch):
    """What a new machine does on first use: compile the shipped source into the cache folder, with
    every kernel's symbol in the library; a second call finds the build instead of compiling."""
    import ctypes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    so = native._build()
    assert so.is_file() and tmp_path in so.parents
    lib = ctypes.cdll.LoadLibrary(str(so))
    for symbol in native._KERNELS.values():
        for suffix in native._DTYPES.values():
            assert hasattr(lib, f"Jm{symbol}{suffix}")
    mtime = so.stat().st_mtime_ns
    assert native._build() == so and so.stat().st_mtime_ns == mtime
