"""Constrained forward / inverse dynamics against Pinocchio ``constraintDynamics`` (Stewart, Go2
support modes), against a 40-digit mpmath KKT solve (planar linkages with redundant rows), KKT
against projected, and derivatives against finite differences."""

import functools
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pinocchio as pin
import pytest
from _shared import closed_states, load, pad, random_configurations

import jaxmech as jm

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
_CACHE = {}


def _load(name):
    return load(name)


def _assembled(mech, n, spread, seed=0):
    """Closed configurations: actuated coordinates perturbed around q0, then assembled (one
    padded compile per mechanism for the whole session, tests/_shared.py)."""
    return closed_states(mech, n, spread, seed)


def _consistent_states(mech, Q, seed=0, rows=None):
    """Random velocities in null(C) (rows: optional row mask) and random efforts."""
    rng = np.random.default_rng(seed)
    C = np.asarray(_padded(_jacobians)(mech, jnp.asarray(Q)))
    V = []
    for i, Ci in enumerate(C):
        if rows is not None:
            Ci = Ci[np.asarray(rows[i], bool)]
        if Ci.shape[0] == 0:
            V.append(rng.normal(size=mech.nv))
            continue
        _, S, Vt = np.linalg.svd(Ci)
        r = int((S > 1e-9 * S[0]).sum())
        N = Vt[r:].T
        V.append(N @ rng.normal(size=N.shape[1]))
    return np.array(V), rng.normal(size=(len(Q), mech.nv))


@jm.jit
def _jacobians(mech, Q):
    return jax.vmap(jm.closure_jacobian, (None, 0))(mech, Q)


@functools.partial(jm.jit, static_argnames="autodiff")
def _closure_terms(mech, Q, V, autodiff=True):
    """C, gamma (analytic), gamma (jvp autodiff; zeros with ``autodiff=False``, which halves the
    compile), M and h per state: one compile per mechanism."""
    return jax.vmap(
        lambda q, v: (
            jm.closure_jacobian(mech, q),
            jm.closure_bias(mech, q, v),
            jm.closure_bias_autodiff(mech, q, v) if autodiff else jnp.zeros(mech.n_rows, q.dtype),
            jm.crba(mech, q),
            jm.nonlinear_effects(mech, q, v),
        )
    )(Q, V)


@functools.partial(jm.jit, static_argnames="method")
def _fd_batch(mech, Q, V, T, method="kkt"):
    return jax.vmap(lambda q, v, t: jm.forward_dynamics(mech, q, v, t, method=method))(Q, V, T)


def _padded(f):
    """Call ``f(mech, *batches)`` at the batch size padded to a multiple of 32 (one compilation
    for every batch size up to 32), then drop the padding rows."""

    def g(mech, *xs, **kw):
        n = xs[0].shape[0]
        out = f(mech, *(jnp.asarray(pad(np.asarray(x))) for x in xs), **kw)
        return jax.tree.map(lambda y: y[:n], out)

    return g


def _fd_fn(mech, method="kkt"):
    """Batched forward dynamics; jitted once per mechanism and method (the model is an argument)."""
    return lambda Q, V, T: _padded(_fd_batch)(mech, Q, V, T, method=method)


def _pin_fd(mech, model, cons, q, v, tau, mu=0.0, iters=1):
    data = model.createData()
    datas = pin.StdVec_RigidConstraintData([c.createData() for c in cons])
    pin.initConstraintDynamics(model, data, cons, datas)
    ps = pin.ProximalSettings(1e-12, mu, iters)
    qp, vp, tp = (jm.q_to_pinocchio(mech, q), jm.v_to_pinocchio(mech, v), jm.v_to_pinocchio(mech, tau))
    if len(cons) == 0:
        return jm.v_from_pinocchio(mech, pin.aba(model, data, qp, vp, tp))
    return jm.v_from_pinocchio(mech, pin.constraintDynamics(model, data, qp, vp, tp, cons, datas, ps))


@pytest.mark.parametrize("cfg", ["stewart", pytest.param("stewart_graph", marks=pytest.mark.slow)])
def test_stewart_vs_pinocchio(cfg):
    mech = _load(cfg)
    Q = _assembled(mech, 24, 0.03)
    V, T = _consistent_states(mech, Q)
    kkt = _fd_fn(mech)(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    assert np.all(np.asarray(kkt.status) == 0)
    assert np.all(np.asarray(kkt.rank) == mech.n_rows)  # independent point rows
    model, cons = jm.to_pinocchio(mech)
    A = np.asarray(kkt.a)
    for i in range(len(Q)):
        a_ref = _pin_fd(mech, model, cons, Q[i], V[i], T[i])
        assert np.max(np.abs(A[i] - a_ref)) / np.max(np.abs(a_ref)) < 1e-10
    assert float(jnp.max(kkt.constraint_error)) < 1e-11
    # (the Stewart's analytic gamma against jvp autodiff: test_reduction.test_curvature_random_states;
    # the accelerations above against Pinocchio check C a + gamma = 0 independently)


@pytest.mark.slow  # two ~3.5 s compiles; both methods are compared by default on the planar linkages
def test_stewart_projected_method_and_multipliers():
    """The projected method equals the KKT one on the Stewart (accelerations and multipliers), and
    the multipliers satisfy the dynamics equation M a + h = tau + C^T lambda."""
    mech = _load("stewart")
    Q = _assembled(mech, 24, 0.03)
    V, T = _consistent_states(mech, Q)
    kkt = _fd_fn(mech)(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    proj = _fd_fn(mech, method="projected")(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    assert np.all(np.asarray(proj.status) == 0)
    Cs, _, _, Ms, hs = _padded(_closure_terms)(mech, jnp.asarray(Q), jnp.asarray(V), autodiff=False)
    # KKT and projected agree, accelerations and multipliers
    assert float(jnp.max(jnp.abs(kkt.a - proj.a)) / jnp.max(jnp.abs(kkt.a))) < 1e-10
    assert float(jnp.max(jnp.abs(kkt.multipliers - proj.multipliers)) / jnp.max(jnp.abs(kkt.multipliers))) < 1e-10
    # the dynamics equation itself: M a + h = tau + C^T lambda
    for i in range(len(Q)):
        np.testing.assert_allclose(Ms[i] @ kkt.a[i] + hs[i], T[i] + Cs[i].T @ kkt.multipliers[i], atol=1e-10)


def _mp_reference(M, h, C, gamma, tau, dps=40):
    """a from M a + h = tau + C^T lam, C a + gamma = 0 in mpmath (null space by SVD)."""
    mp.mp.dps = dps
    Mm, Cm = mp.matrix(M.tolist()), mp.matrix(C.tolist())
    b = mp.matrix((tau - h).tolist())
    g = mp.matrix(gamma.tolist())
    U, S, Vt = mp.svd_r(Cm)
    smax = max(abs(x) for x in S)
    # C is float64 data: singular values below ~1e-13 relative are its round-off (a planar loop's
    # out-of-plane rows are dependent to 1e-16, not exactly), not structure
    r = sum(1 for x in S if abs(x) > mp.mpf("1e-12") * smax)
    nv = M.shape[0]
    # particular solution a_p = -C^+ gamma, null-space basis N (rows r.. of Vt)
    ap = mp.matrix(nv, 1)
    for k in range(r):
        coef = -sum(U[i, k] * g[i] for i in range(C.shape[0])) / S[k]
        for j in range(nv):
            ap[j] += coef * Vt[k, j]
    N = mp.matrix(nv, nv - r)
    for j in range(nv):
        for c in range(nv - r):
            N[j, c] = Vt[r + c, j]
    u = mp.lu_solve(N.T * Mm * N, N.T * (b - Mm * ap))
    a = N * u + ap
    return np.array([float(a[j]) for j in range(nv)]), r


@pytest.mark.parametrize(
    "cfg",
    [  # all slow (the four-bar ~10 s): by default the four-bar's dynamics run against Pinocchio's M and h
        # and independent closure rows, both methods (test_reference_dynamics.py)
        pytest.param("four_bar", marks=pytest.mark.slow),
        pytest.param("excavator", marks=pytest.mark.slow),
        pytest.param("five_bar", marks=pytest.mark.slow),
        pytest.param("slider_crank", marks=pytest.mark.slow),
    ],
)
def test_planar_linkages_vs_mpmath(cfg):
    mech = _load(cfg)
    Q = _assembled(mech, 6, 0.2, seed=2)
    V, T = _consistent_states(mech, Q, seed=2)
    V, T = 3 * V, 0.5 * T
    res = _fd_fn(mech)(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    proj = _fd_fn(mech, method="projected")(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    assert np.all(np.asarray(res.status) == 0)
    C_, g_, _, M_, h_ = _padded(_closure_terms)(mech, jnp.asarray(Q), jnp.asarray(V), autodiff=False)
    # 40-digit SVDs in pure Python cost seconds each for the excavator's 25-row, 14-column system: two of its
    # states here (test_reference_dynamics.py checks it against Pinocchio as well)
    for i in range(2 if cfg == "excavator" else len(Q)):
        M, h, C, g = (np.asarray(x[i]) for x in (M_, h_, C_, g_))
        a_ref, r = _mp_reference(M, h, C, g, T[i])
        assert int(res.rank[i]) == r
        assert np.max(np.abs(np.asarray(res.a[i]) - a_ref)) / np.max(np.abs(a_ref)) < 1e-11
        assert np.max(np.abs(np.asarray(proj.a[i]) - a_ref)) / np.max(np.abs(a_ref)) < 1e-11
        assert np.max(np.abs(C @ np.asarray(res.a[i]) + g)) < 1e-11
        # rows dropped as redundant carry no multiplier
        assert np.count_nonzero(np.asarray(res.multipliers[i])) <= r


def _go2_with_feet():
    if "go2_feet" not in _CACHE:
        from jaxmech.reduction import add_support_points

        g = jm.read_graph(CONFIGS / "go2.toml")
        mech = jm.compile(g)
        q = np.asarray(mech.q0).copy()
        q[2] = 0.3
        q[3:7] = np.array([0.99, 0.05, -0.08, 0.03]) / np.linalg.norm([0.99, 0.05, -0.08, 0.03])
        rng = np.random.default_rng(4)
        q[7:] = rng.uniform(-0.4, 0.4, 12) + np.tile([0.0, 0.8, -1.5], 4)
        feet = ["FL_sole", "FR_sole", "RL_sole", "RR_sole"]
        names = add_support_points(g, mech, jnp.asarray(q), feet)
        _CACHE["go2_feet"] = (jm.compile(g), q, names)
    return _CACHE["go2_feet"]


@pytest.mark.slow  # ~9 s; by default support masks run in tests/test_support_balance.py (forces against weight
# and moments) and test_support_mask_array_takes_the_compiled_path below
def test_go2_support_modes_batch_vs_pinocchio():
    """All 16 foot-contact modes of a quadruped in one vmap; each against Pinocchio with the
    same active contacts (CONTACT_3D, foot frame to world)."""
    mech, q, names = _go2_with_feet()
    assert mech.loop_names == tuple(names) and mech.n_rows == 12
    modes = np.array([[(m >> k) & 1 for k in range(4)] for m in range(16)], bool)  # per loop
    rows = np.array([jm.support_mask(mech, [n for n, on in zip(names, mo, strict=True) if on]) for mo in modes])
    Q = np.tile(q, (16, 1))
    V, T = _consistent_states(mech, Q, seed=5, rows=rows)
    fd = jm.jit(jax.vmap(lambda q, v, t, s: jm.forward_dynamics(mech, q, v, t, support=s)))
    res = fd(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T), jnp.asarray(modes))  # loop masks
    res_rows = fd(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T), jnp.asarray(rows))  # row masks
    np.testing.assert_array_equal(np.asarray(res.a), np.asarray(res_rows.a))
    assert np.all(np.asarray(res.status) == 0)
    np.testing.assert_array_equal(np.asarray(res.rank), 3 * modes.sum(1))
    model, cons = jm.to_pinocchio(mech)
    for i, mo in enumerate(modes):
        active = pin.StdVec_RigidConstraintModel([cons[k] for k in range(4) if mo[k]])
        a_ref = _pin_fd(mech, model, active, Q[i], V[i], T[i])
        assert np.max(np.abs(np.asarray(res.a[i]) - a_ref)) / np.max(np.abs(a_ref)) < 1e-10
        lam = np.asarray(res.multipliers[i])
        assert np.all(lam[~rows[i]] == 0)  # inactive feet carry no force
    assert float(jnp.max(res.constraint_error)) < 1e-11


def test_inverse_dynamics_stewart_and_tree():
    mech = _load("stewart")
    Q = _assembled(mech, 8, 0.03, seed=6)
    V, _ = _consistent_states(mech, Q, seed=6)
    rng = np.random.default_rng(6)
    F = rng.normal(size=(len(Q), mech.topo.actuated_v.size)) * 50
    Tau = np.zeros((len(Q), mech.nv))
    Tau[:, mech.topo.actuated_v] = F
    fwd = _fd_fn(mech)(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(Tau))
    inv = jm.jit(jax.vmap(lambda q, v, a: jm.inverse_dynamics(mech, q, v, a)))(jnp.asarray(Q), jnp.asarray(V), fwd.a)
    assert np.all(np.asarray(inv.status) == 0)
    np.testing.assert_allclose(inv.effort, F, atol=1e-8 * np.abs(F).max())
    np.testing.assert_allclose(inv.multipliers, fwd.multipliers, atol=1e-8 * float(jnp.max(jnp.abs(fwd.multipliers))))
    # a tree: all coordinates actuated, efforts = rnea
    tree = _load("go2")
    q = random_configurations(tree, 1, 0)[0]
    v, a = jnp.asarray(rng.normal(size=(2, tree.nv)))
    out = jm.inverse_dynamics(tree, q, v, a, actuators=list(range(tree.nv)))  # a list: one compiled call
    np.testing.assert_allclose(out.tau, jm.rnea(tree, q, v, a), atol=1e-10)


@pytest.mark.parametrize("cfg", ["four_bar", pytest.param("stewart", marks=pytest.mark.slow)])
def test_forward_dynamics_gradients_vs_finite_differences(cfg):
    """Forward mode, reverse mode (through the rank-revealing row selection and the KKT solve)
    and central differences agree, with respect to q, v, tau and the body masses."""
    mech = _load(cfg)
    Q = _assembled(mech, 2, 0.03, seed=8)
    V, T = _consistent_states(mech, Q, seed=8)
    q, v, tau = (jnp.asarray(x[0]) for x in (Q, V, T))
    rng = np.random.default_rng(8)
    dq, dv, dt = (jnp.asarray(rng.normal(size=mech.nv)) for _ in range(3))
    dm = jnp.asarray(rng.uniform(0.5, 1.5, mech.nb))
    w = jnp.asarray(rng.normal(size=mech.nv))

    def perturbed(eps):
        """The model, q, v and tau moved by eps along (dm, dq, dv, dt)."""
        m = eqx.tree_at(lambda m: m.mass, mech, mech.mass * (1 + eps * dm))
        return m, jm.integrate(mech, q, eps * dq), v + eps * dv, tau + eps * dt

    @jm.jit
    def derivs(mech, q, v, tau):
        """Forward and reverse mode in one compiled program, from one linearization (reverse mode
        is its transpose, as in ``jax.grad``; a jvp and a grad compiled the forward pass twice)."""
        along = lambda eps: jm.forward_dynamics(*perturbed(eps)).a  # noqa: E731
        _, lin = jax.linearize(along, jnp.zeros(()))
        return lin(jnp.ones(())), jax.linear_transpose(lin, jnp.zeros(()))(w)[0]

    jvp, g = derivs(mech, q, v, tau)
    # central differences through the module's batched forward dynamics (the model is an argument)
    ends = [perturbed(eps) for eps in (1e-6, -1e-6)]
    vals = [_fd_fn(m)(*(jnp.asarray(x)[None] for x in rest)).a[0] for m, *rest in ends]
    fd = (vals[0] - vals[1]) / 2e-6
    assert float(jnp.max(jnp.abs(jvp - fd)) / jnp.max(jnp.abs(jvp))) < 1e-6
    np.testing.assert_allclose(g, w @ jvp, rtol=1e-8)


def test_bad_inputs():
    mech = _load("four_bar")
    q, v = mech.q0, jnp.zeros(mech.nv)
    with pytest.raises(ValueError, match="method"):
        jm.forward_dynamics(mech, q, v, v, method="lagrange")
    with pytest.raises(ValueError, match="rtol"):
        jm.inverse_dynamics(mech, q, v, v, rtol=-1.0)
    with pytest.raises(ValueError, match="f_ext_reference"):
        jm.forward_dynamics(mech, q, v, v, f_ext_reference="body")
    with pytest.raises(TypeError, match="unknown dynamics option.*'tol'"):
        jm.forward_dynamics(mech, q, v, v, tol=1e-9)
    with pytest.raises(ValueError, match="support mask"):
        jm.forward_dynamics(mech, q, v, v, support=jnp.ones(7, bool))
    with pytest.raises(KeyError, match="unknown loops"):
        jm.support_mask(mech, ["nope"])
    with pytest.raises(jm.ModelError, match="revolute"):
        jm.to_pinocchio(mech)


def test_support_mask_array_takes_the_compiled_path():
    """An eager call with a mask array compiles once (the mask is data, not a static option): all
    rows active equals the default, none active is the tree's M^-1 (tau - h)."""
    mech = _load("four_bar")
    Q = _assembled(mech, 2, 0.03, seed=3)
    V, T = _consistent_states(mech, Q, seed=3)
    q, v, tau = (jnp.asarray(x[0]) for x in (Q, V, T))
    fd = jm.forward_dynamics
    before = fd.jitted._cache_size()
    on = fd(mech, q, v, tau, support=jnp.ones(mech.n_rows, bool))
    off = fd(mech, q, v, tau, support=jnp.zeros(mech.n_rows, bool))
    assert fd.jitted._cache_size() == before + 1
    ref = _fd_fn(mech)(*(jnp.asarray(x[:1]) for x in (Q, V, T)))
    np.testing.assert_allclose(np.asarray(on.a), np.asarray(ref.a[0]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(off.multipliers), 0.0)
    np.testing.assert_allclose(np.asarray(jm.rnea(mech, q, v, off.a)), np.asarray(tau), atol=1e-10)


@pytest.mark.slow
def test_stewart_thousand_states():
    mech = _load("stewart")
    Q = _assembled(mech, 1000, 0.03, seed=9)
    V, T = _consistent_states(mech, Q, seed=9)
    res = _fd_fn(mech)(jnp.asarray(Q), jnp.asarray(V), jnp.asarray(T))
    model, cons = jm.to_pinocchio(mech)
    err = max(
        np.max(np.abs(np.asarray(res.a[i]) - (r := _pin_fd(mech, model, cons, Q[i], V[i], T[i])))) / np.max(np.abs(r))
        for i in range(len(Q))
    )
    assert err < 1e-10 and float(jnp.max(res.constraint_error)) < 1e-11


def test_options_object_and_keywords_are_one_compiled_call():
    """``options=DynamicsOptions(...)`` and the same fields as keywords select the same compiled
    program (one static key), and keywords override the object's fields."""
    from jaxmech.constrained import _forward_dynamics

    mech = _load("four_bar")
    q, v = mech.q0, jnp.zeros(mech.nv)
    tau = jnp.arange(1.0, mech.nv + 1.0)
    a = jm.forward_dynamics(mech, q, v, tau, method="projected", rtol=1e-10)
    n = _forward_dynamics.jitted._cache_size()
    b = jm.forward_dynamics(mech, q, v, tau, options=jm.DynamicsOptions(method="projected", rtol=1e-10))
    c = jm.forward_dynamics(mech, q, v, tau, options=jm.DynamicsOptions(method="kkt", rtol=1e-10), method="projected")
    assert _forward_dynamics.jitted._cache_size() == n
    np.testing.assert_array_equal(a.a, b.a)
    np.testing.assert_array_equal(a.a, c.a)
