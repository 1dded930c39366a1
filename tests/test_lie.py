"""Lie-group helpers against scipy (expm/logm, Rotation) and closed forms.

References: ``scipy.linalg.expm``/``logm`` of hat matrices, ``scipy.spatial.transform.Rotation``
(xyzw!), the block exponential ``expm([[Z, I], [0, 0]])`` whose top-right block is
``sum_k Z^k / (k+1)! = J_l`` (paper 001), and forward / reverse / central finite differences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla
from scipy.spatial.transform import Rotation

import jaxmech as jm
from jaxmech import lie

RNG = np.random.default_rng(20261130)


def _unit(n=3):
    a = RNG.normal(size=n)
    return a / np.linalg.norm(a)


def _rotvecs():
    """Random, near-identity, exactly zero and near-pi rotation vectors (principal branch)."""
    out = [_unit() * a for a in RNG.uniform(0.05, 3.0, size=9)]
    out += [_unit() * a for a in (1e-9, 1e-6, 1e-4, 0.099, 0.101, np.pi - 1e-3, np.pi - 1e-6)]
    out += [np.zeros(3), np.array([1e-9, 0, 0]), np.array([0, 0, np.pi - 1e-6])]
    return out


ROTVECS = _rotvecs()
TWISTS = [np.concatenate([w, RNG.normal(size=3) * s]) for w, s in zip(ROTVECS, [1.0, 0.1, 2.0] * 10, strict=False)]
TWISTS.append(np.zeros(6))
TWISTS.append(np.array([0, 0, 0, 0.3, -0.2, 0.5]))  # pure translation


def hat6(xi):
    """4x4 twist matrix [[w^, v], [0, 0]] (angular-first xi)."""
    X = np.zeros((4, 4))
    X[:3, :3] = np.asarray(lie.hat(jnp.asarray(xi[:3])))
    X[:3, 3] = xi[3:]
    return X


def _ids(vals):
    return [f"|w|={np.linalg.norm(v[:3]):.3g}" for v in vals]


# ----------------------------------------------------------------------------- SO(3)


def test_hat_vee():
    w, x = RNG.normal(size=3), RNG.normal(size=3)
    W = np.asarray(lie.hat(jnp.asarray(w)))
    np.testing.assert_allclose(W @ x, np.cross(w, x), atol=1e-15)
    np.testing.assert_allclose(W, -W.T)
    np.testing.assert_allclose(np.asarray(lie.vee(jnp.asarray(W))), w, atol=1e-15)


@pytest.mark.parametrize("w", ROTVECS, ids=_ids(ROTVECS))
def test_so3_exp_vs_expm(w):
    R = np.asarray(lie.so3_exp(jnp.asarray(w)))
    np.testing.assert_allclose(R, sla.expm(np.asarray(lie.hat(jnp.asarray(w)))), atol=1e-12, rtol=0)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-14)


@pytest.mark.parametrize("w", ROTVECS, ids=_ids(ROTVECS))
def test_so3_log(w):
    """Principal log: log(exp(w)) == w for angles up to pi - 1e-6; and == logm (real part)."""
    w = np.asarray(w)
    R = sla.expm(np.asarray(lie.hat(jnp.asarray(w))))
    phi = np.asarray(lie.so3_log(jnp.asarray(R)))
    th = np.linalg.norm(w)
    # near pi the log's condition number is ~1/(pi - theta): the recovered angle is exact,
    # the axis to cond * eps.
    tol = 1e-12 if th < 3.0 else 1e-9
    np.testing.assert_allclose(phi, w, atol=tol, rtol=0)
    if th < 3.0:  # scipy's logm is itself ill-conditioned near pi
        L = np.real(sla.logm(R))
        np.testing.assert_allclose(phi, np.asarray(lie.vee(jnp.asarray(L))), atol=1e-12)


def test_so3_log_angle_below_pi():
    for _ in range(20):
        R = Rotation.random(random_state=RNG.integers(1 << 30)).as_matrix()
        phi = np.asarray(lie.so3_log(jnp.asarray(R)))
        assert np.linalg.norm(phi) <= np.pi + 1e-12
        np.testing.assert_allclose(sla.expm(np.asarray(lie.hat(jnp.asarray(phi)))), R, atol=1e-12)


@pytest.mark.parametrize("w", ROTVECS, ids=_ids(ROTVECS))
def test_so3_left_jacobian(w):
    """J_l = sum_k W^k/(k+1)! (block exponential) and its inverse."""
    W = np.asarray(lie.hat(jnp.asarray(w)))
    blk = sla.expm(np.block([[W, np.eye(3)], [np.zeros((3, 6))]]))[:3, 3:]
    J = np.asarray(lie.so3_left_jacobian(jnp.asarray(w)))
    np.testing.assert_allclose(J, blk, atol=1e-12)
    if np.linalg.norm(w) < 3.0:  # J_l is singular at 2 pi, fine below pi
        Ji = np.asarray(lie.so3_left_jacobian_inv(jnp.asarray(w)))
        np.testing.assert_allclose(Ji, np.linalg.inv(blk), atol=1e-11)
        np.testing.assert_allclose(Ji @ J, np.eye(3), atol=1e-12)


# ----------------------------------------------------------------------------- SE(3)


@pytest.mark.parametrize("xi", TWISTS, ids=_ids(TWISTS))
def test_se3_exp_vs_expm(xi):
    T = np.asarray(lie.se3_exp(jnp.asarray(xi)))
    np.testing.assert_allclose(T, sla.expm(hat6(xi)), atol=1e-12, rtol=0)


@pytest.mark.parametrize("xi", TWISTS, ids=_ids(TWISTS))
def test_se3_log(xi):
    T = sla.expm(hat6(xi))
    rho = np.asarray(lie.se3_log(jnp.asarray(T)))
    th = np.linalg.norm(xi[:3])
    if th < 3.0:
        np.testing.assert_allclose(rho, xi, atol=1e-12, rtol=0)
        L = np.real(sla.logm(T))
        np.testing.assert_allclose(rho[:3], np.asarray(lie.vee(jnp.asarray(L[:3, :3]))), atol=1e-12)
        np.testing.assert_allclose(rho[3:], L[:3, 3], atol=1e-11)
    else:  # near pi: the round trip stays exact on the group
        np.testing.assert_allclose(rho, xi, atol=1e-8, rtol=0)
        np.testing.assert_allclose(sla.expm(hat6(rho)), T, atol=1e-12)


def test_se3_inv_and_make_pose():
    for xi in TWISTS[:5]:
        T = np.asarray(lie.se3_exp(jnp.asarray(xi)))
        np.testing.assert_allclose(np.asarray(lie.se3_inv(jnp.asarray(T))), np.linalg.inv(T), atol=1e-13)


def _rand_pose():
    return sla.expm(hat6(RNG.normal(size=6)))


def test_adjoint_identities():
    for _ in range(5):
        A, B = _rand_pose(), _rand_pose()
        Ad = lambda T: np.asarray(lie.adjoint(jnp.asarray(T)))  # noqa: E731
        np.testing.assert_allclose(Ad(A @ B), Ad(A) @ Ad(B), atol=1e-12)
        np.testing.assert_allclose(Ad(np.linalg.inv(A)), np.linalg.inv(Ad(A)), atol=1e-12)
        # Ad_T xi is the twist whose matrix is T xi^ T^-1
        xi = RNG.normal(size=6)
        np.testing.assert_allclose(hat6(Ad(A) @ xi), A @ hat6(xi) @ np.linalg.inv(A), atol=1e-12)
        # ad_xi eta is the Lie bracket [xi^, eta^]
        eta = RNG.normal(size=6)
        ad = np.asarray(lie.small_adjoint(jnp.asarray(xi)))
        np.testing.assert_allclose(hat6(ad @ eta), hat6(xi) @ hat6(eta) - hat6(eta) @ hat6(xi), atol=1e-12)


@pytest.mark.parametrize("xi", TWISTS, ids=_ids(TWISTS))
def test_adjoint_of_exp_is_expm_of_ad(xi):
    Ad = np.asarray(lie.adjoint(lie.se3_exp(jnp.asarray(xi))))
    ad = np.asarray(lie.small_adjoint(jnp.asarray(xi)))
    np.testing.assert_allclose(Ad, sla.expm(ad), atol=1e-12 * max(1.0, np.abs(Ad).max()))


def _block_exp_jl(xi):
    """Paper 001 block exponential: top-right block of expm([[Z, I], [0, 0]]) = J_l(xi)."""
    Z = np.asarray(lie.small_adjoint(jnp.asarray(xi)))
    M = np.zeros((12, 12))
    M[:6, :6] = Z
    M[:6, 6:] = np.eye(6)
    return sla.expm(M)[:6, 6:]


@pytest.mark.parametrize("xi", TWISTS, ids=_ids(TWISTS))
def test_se3_left_jacobian_block_exponential(xi):
    Jb = _block_exp_jl(xi)
    J = np.asarray(lie.se3_left_jacobian(jnp.asarray(xi)))
    np.testing.assert_allclose(J, Jb, atol=1e-12 * max(1.0, np.abs(Jb).max()))
    if np.linalg.norm(xi[:3]) < 3.0:
        Ji = np.asarray(lie.se3_left_jacobian_inv(jnp.asarray(xi)))
        Jbi = np.linalg.inv(Jb)
        np.testing.assert_allclose(Ji, Jbi, atol=1e-11 * max(1.0, np.abs(Jbi).max()))


@jm.jit
def _dexp(xi, d):
    """d/dt exp(xi + t d) exp(xi)^-1 at t = 0 by forward-mode autodiff."""
    return jax.jacfwd(lambda t: lie.se3_exp(xi + t * d))(0.0) @ lie.se3_inv(lie.se3_exp(xi))


@jm.jit
def _dexp3(w, d):
    return jax.jacfwd(lambda t: lie.so3_exp(w + t * d))(0.0) @ lie.so3_exp(w).T


@pytest.mark.parametrize("xi", TWISTS, ids=_ids(TWISTS))
def test_se3_left_jacobian_is_derivative_of_exp(xi):
    """d/dt exp(xi + t delta) exp(xi)^-1 |_0 = (J_l(xi) delta)^ (left Jacobian definition)."""
    xi = jnp.asarray(xi)
    E0i = lie.se3_inv(lie.se3_exp(xi))
    J = np.asarray(lie.se3_left_jacobian(xi))
    for _ in range(3):
        d = jnp.asarray(RNG.normal(size=6))
        D = _dexp(xi, d)
        np.testing.assert_allclose(np.asarray(D), hat6(J @ np.asarray(d)), atol=1e-12)
        # and the same with a float64 central difference (independent of autodiff)
        h = 1e-5
        Dfd = (np.asarray(lie.se3_exp(xi + h * d)) - np.asarray(lie.se3_exp(xi - h * d))) / (2 * h) @ np.asarray(E0i)
        np.testing.assert_allclose(Dfd, hat6(J @ np.asarray(d)), atol=1e-8)
    # SO(3) part of the same identity
    w = xi[:3]
    Jr = np.asarray(lie.so3_left_jacobian(w))
    d = jnp.asarray(RNG.normal(size=3))
    D = np.asarray(_dexp3(w, d))
    np.testing.assert_allclose(np.asarray(lie.vee(jnp.asarray(D))), Jr @ np.asarray(d), atol=1e-12)


@pytest.mark.parametrize("scale", [0.0, 1e-9, 1e-6, 1e-4, 1e-3, 1e-2])
def test_se3_left_jacobian_inv_vs_bernoulli_series(scale):
    xi = jnp.asarray(RNG.normal(size=6) * scale)
    Ji = np.asarray(lie.se3_left_jacobian_inv(xi))
    Js = np.asarray(lie.se3_left_jacobian_inv_series(xi))
    # the 4th-order series truncates at Z^6 / 30240
    np.testing.assert_allclose(Ji, Js, atol=1e-14 + (3 * scale) ** 6 / 30240 * 10)
    np.testing.assert_allclose(Ji, np.linalg.inv(_block_exp_jl(np.asarray(xi))), atol=1e-13)


# ----------------------------------------------------------------------------- quaternions


def _wxyz(r: Rotation) -> np.ndarray:
    x, y, z, w = r.as_quat()
    return np.array([w, x, y, z])


def test_quaternions_vs_scipy():
    rots = Rotation.random(20, random_state=7)
    for k in range(20):
        r = rots[k]
        qw = _wxyz(r)
        np.testing.assert_allclose(np.asarray(lie.quat_to_matrix(jnp.asarray(qw))), r.as_matrix(), atol=1e-14)
        qm = np.asarray(lie.quat_from_matrix(jnp.asarray(r.as_matrix())))
        assert qm[0] >= 0
        np.testing.assert_allclose(qm, qw * np.sign(qw[0]), atol=1e-14)
        np.testing.assert_allclose(np.asarray(lie.quat_log(jnp.asarray(qw))), r.as_rotvec(), atol=1e-13)
        np.testing.assert_allclose(
            np.asarray(lie.quat_exp(jnp.asarray(r.as_rotvec()))), qw * np.sign(qw[0]), atol=1e-14
        )
        s = rots[(k + 1) % 20]
        prod = np.asarray(lie.quat_mul(jnp.asarray(qw), jnp.asarray(_wxyz(s))))
        ref = _wxyz(r * s)
        np.testing.assert_allclose(prod * np.sign(prod[0]), ref * np.sign(ref[0]), atol=1e-14)
        np.testing.assert_allclose(
            np.asarray(lie.quat_conj(jnp.asarray(qw))) * np.sign(qw[0]),
            _wxyz(r.inv()) * np.sign(_wxyz(r.inv())[0]),
            atol=1e-14,
        )


def test_quat_from_matrix_all_branches_and_pi():
    """Shepperd branches: trace-dominant and each diagonal-dominant case, incl. 180 deg turns."""
    for rv in [
        np.zeros(3),
        [np.pi, 0, 0],
        [0, np.pi, 0],
        [0, 0, np.pi],
        [2.5, 1.0, 0.1],
        [0.1, -2.9, 0.3],
        [0.2, 0.1, 3.0],
        np.array([1, 1, 1]) * (np.pi / np.sqrt(3)),
    ]:
        r = Rotation.from_rotvec(rv)
        q = np.asarray(lie.quat_from_matrix(jnp.asarray(r.as_matrix())))
        np.testing.assert_allclose(np.asarray(lie.quat_to_matrix(jnp.asarray(q))), r.as_matrix(), atol=1e-14)
        np.testing.assert_allclose(np.linalg.norm(q), 1.0, atol=1e-15)


def test_quat_log_near_identity_and_double_cover():
    for a in (0.0, 1e-12, 1e-9, 1e-5, 0.2, 3.0, np.pi - 1e-6):
        rv = _unit() * a
        q = _wxyz(Rotation.from_rotvec(rv))
        np.testing.assert_allclose(np.asarray(lie.quat_log(jnp.asarray(q))), rv, atol=1e-13)
        np.testing.assert_allclose(np.asarray(lie.quat_log(jnp.asarray(-q))), rv, atol=1e-13)  # -q same rotation


def test_pose_from_xyz_rpy_vs_scipy():
    rpy = RNG.normal(size=3)
    T = np.asarray(lie.pose_from_xyz_rpy([1.0, 2.0, 3.0], rpy))
    np.testing.assert_allclose(T[:3, :3], Rotation.from_euler("xyz", rpy).as_matrix(), atol=1e-14)
    np.testing.assert_allclose(T[:3, 3], [1, 2, 3])


# ----------------------------------------------------------------------------- derivatives


def _weights(shape):
    return np.random.default_rng(int(np.prod(shape))).normal(size=shape)


def _scal(x):
    """A generic scalar summary of an array output (random weights so nothing cancels)."""
    return jnp.sum(jnp.asarray(_weights(x.shape)) * x)


# name -> (function of a tangent-size vector x, size); every lie function is reached at x = 0
FUNCS = {
    "so3_exp": (lambda w: lie.so3_exp(w), 3),
    "so3_log": (lambda w: lie.so3_log(lie.so3_exp(w)), 3),
    "so3_log_direct": (lambda w: lie.so3_log(jnp.eye(3) + lie.hat(w) + 0.5 * lie.hat(w) @ lie.hat(w)), 3),
    "so3_left_jacobian": (lambda w: lie.so3_left_jacobian(w), 3),
    "so3_left_jacobian_inv": (lambda w: lie.so3_left_jacobian_inv(w), 3),
    "quat_exp": (lambda w: lie.quat_exp(w), 3),
    "quat_log": (lambda w: lie.quat_log(jnp.concatenate([jnp.ones(1), w * 0.5])), 3),
    "quat_log_unit": (lambda w: lie.quat_log(lie.quat_exp(w)), 3),
    "quat_to_matrix": (lambda w: lie.quat_to_matrix(jnp.concatenate([jnp.ones(1), w])), 3),
    "quat_from_matrix": (lambda w: lie.quat_from_matrix(lie.so3_exp(w)), 3),
    "quat_mul": (lambda w: lie.quat_mul(lie.quat_exp(w), lie.quat_exp(2 * w + 0.0)), 3),
    "quat_normalize": (lambda w: lie.quat_normalize(jnp.concatenate([jnp.ones(1), w])), 3),
    "se3_exp": (lambda x: lie.se3_exp(x), 6),
    "se3_log": (lambda x: lie.se3_log(lie.se3_exp(x)), 6),
    "se3_log_direct": (
        lambda x: lie.se3_log(lie.make_pose(jnp.eye(3) + lie.hat(x[:3]), x[3:])),
        6,
    ),
    "se3_inv": (lambda x: lie.se3_inv(lie.se3_exp(x)), 6),
    "adjoint": (lambda x: lie.adjoint(lie.se3_exp(x)), 6),
    "small_adjoint": (lambda x: lie.small_adjoint(x), 6),
    "se3_left_jacobian": (lambda x: lie.se3_left_jacobian(x), 6),
    "se3_left_jacobian_inv": (lambda x: lie.se3_left_jacobian_inv(x), 6),
    "se3_left_jacobian_inv_series": (lambda x: lie.se3_left_jacobian_inv_series(x), 6),
    "rot_axis": (lambda x: lie.rot_axis(jnp.array([0.0, 0.6, 0.8]), x[0] + 2 * x[1] - x[2]), 3),
}


def _points(n):
    u = np.random.default_rng(n).normal(size=n)
    u /= np.linalg.norm(u)
    return {
        "zero": np.zeros(n),
        "1e-9": 1e-9 * u,
        "small": 1e-3 * u,
        "random": 0.7 * np.random.default_rng(n + 1).normal(size=n),
    }


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_derivatives_finite_and_consistent(name):
    """Values and jax.grad / jacfwd / jacrev finite at exactly zero and at 1e-9 rad; forward ==
    reverse == float64 central finite differences at zero, 1e-9, 1e-3 and a random point."""
    f, n = FUNCS[name]
    fj = jm.jit(f)
    all_ = jm.jit(lambda x: (f(x), jax.grad(lambda x: _scal(f(x)))(x), jax.jacfwd(f)(x), jax.jacrev(f)(x)))
    h = 1e-6
    for label, x in _points(n).items():
        x = jnp.asarray(x)
        y, g, jf, jr = all_(x)
        jf, jr = np.asarray(jf), np.asarray(jr)
        for what, a in (("value", y), ("grad", g), ("jacfwd", jf), ("jacrev", jr)):
            assert bool(jnp.all(jnp.isfinite(a))), (name, label, what, a)
        fd = np.stack([(np.asarray(fj(x + h * e)) - np.asarray(fj(x - h * e))) / (2 * h) for e in jnp.eye(n)], -1)
        scale = max(1.0, np.abs(fd).max())
        np.testing.assert_allclose(jf, jr, atol=1e-12 * scale, err_msg=f"{name} at {label}: fwd vs rev")
        np.testing.assert_allclose(jf, fd, atol=2e-8 * scale, err_msg=f"{name} at {label}: fwd vs central FD")
        np.testing.assert_allclose(
            np.asarray(g),
            np.tensordot(_weights(y.shape), jf, axes=y.ndim),
            atol=1e-12 * scale * y.size,
            err_msg=f"{name} at {label}: grad",
        )
