"""SO(3) / SE(3) Lie-group helpers, angular-first, quaternions (w, x, y, z).

Conventions (DESIGN.md section 2):

* twist ``xi = (omega, v)``; ``Ad_T = [[R, 0], [p^ R, R]]``; ``ad_xi = [[w^, 0], [v^, w^]]``.
* ``exp``/``log``/left Jacobians switch to Taylor branches near zero with ``jnp.where`` on
  *safe* inputs (the "where-shim" of jaxlie), so values and gradients are finite at exactly zero.
* ``log`` is the principal branch (rotation angle in ``[0, pi)``); at ``pi`` the axis is ambiguous.

All functions act on a single element; batch with ``jax.vmap`` (most also broadcast over
leading axes). The ones called most often inside jaxmech's programs (``hat``, ``quat_to_matrix``,
``so3_exp``, ...) are ``jax.jit``-wrapped so that a program traces them once per shape (see
``jaxmech/kinpass.py``); XLA inlines them, so compiled code is unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jnp.ndarray


def _eps(x: Array) -> float:
    """Taylor-branch threshold on the squared angle.

    The series below run to t^6, so at t^2 < 1e-2 their truncation error is below 1e-14
    relative, while the closed forms lose at most ~1e-12 relative to cancellation there."""
    return 1e-2


@jax.jit
def hat(w: Array) -> Array:
    """Skew matrix of a 3-vector: ``hat(w) @ x == cross(w, x)``. (..., 3) -> (..., 3, 3)."""
    z = jnp.zeros_like(w[..., 0])
    return jnp.stack(
        [
            jnp.stack([z, -w[..., 2], w[..., 1]], -1),
            jnp.stack([w[..., 2], z, -w[..., 0]], -1),
            jnp.stack([-w[..., 1], w[..., 0], z], -1),
        ],
        -2,
    )


def vee(W: Array) -> Array:
    """Inverse of :func:`hat` (uses the antisymmetric part). (..., 3, 3) -> (..., 3)."""
    return 0.5 * jnp.stack([W[..., 2, 1] - W[..., 1, 2], W[..., 0, 2] - W[..., 2, 0], W[..., 1, 0] - W[..., 0, 1]], -1)


# ----------------------------------------------------------------------------- SO(3)


@jax.jit
def _so3_coeffs(theta2: Array):
    """A = sin t / t, B = (1 - cos t) / t^2, C = (t - sin t) / t^3 with safe Taylor branches."""
    small = theta2 < _eps(theta2)
    t2 = jnp.where(small, 1.0, theta2)
    t = jnp.sqrt(t2)
    s, c = jnp.sin(t), jnp.cos(t)
    x = theta2
    A = jnp.where(small, 1.0 - x / 6.0 + x**2 / 120.0 - x**3 / 5040.0, s / t)
    B = jnp.where(small, 0.5 - x / 24.0 + x**2 / 720.0 - x**3 / 40320.0, (1.0 - c) / t2)
    C = jnp.where(small, 1.0 / 6.0 - x / 120.0 + x**2 / 5040.0 - x**3 / 362880.0, (t - s) / (t2 * t))
    return A, B, C


@jax.jit
def so3_exp(w: Array) -> Array:
    """Rodrigues: rotation vector (..., 3) -> rotation matrix (..., 3, 3)."""
    th2 = jnp.sum(w * w, -1)
    A, B, _ = _so3_coeffs(th2)
    W = hat(w)
    eye = jnp.eye(3, dtype=w.dtype)
    return eye + A[..., None, None] * W + B[..., None, None] * (W @ W)


@jax.jit
def so3_left_jacobian(w: Array) -> Array:
    """Left Jacobian of SO(3): ``J_l(w) = I + B w^ + C w^2``. (..., 3) -> (..., 3, 3)."""
    th2 = jnp.sum(w * w, -1)
    _, B, C = _so3_coeffs(th2)
    W = hat(w)
    return jnp.eye(3, dtype=w.dtype) + B[..., None, None] * W + C[..., None, None] * (W @ W)


def so3_left_jacobian_inv(w: Array) -> Array:
    """Inverse left Jacobian of SO(3): ``I - w^/2 + D w^2``, D = 1/t^2 - (1+cos t)/(2 t sin t).

    Near zero D = 1/12 + t^2/720 + t^4/30240 (Bernoulli series, paper 001 section 2.2).
    """
    th2 = jnp.sum(w * w, -1)
    small = th2 < _eps(th2)
    t2 = jnp.where(small, 1.0, th2)
    t = jnp.sqrt(t2)
    D = jnp.where(
        small,
        1.0 / 12.0 + th2 / 720.0 + th2**2 / 30240.0 + th2**3 / 1209600.0,
        1.0 / t2 - (1.0 + jnp.cos(t)) / (2.0 * t * jnp.sin(t)),
    )
    W = hat(w)
    return jnp.eye(3, dtype=w.dtype) - 0.5 * W + D[..., None, None] * (W @ W)


def so3_log(R: Array) -> Array:
    """Principal logarithm of a rotation matrix (..., 3, 3) -> rotation vector (..., 3).

    Uses the quaternion route (numerically sound near 0 and near pi)."""
    return quat_log(quat_from_matrix(R))


# ----------------------------------------------------------------------------- quaternions


@jax.jit
def quat_to_matrix(q: Array) -> Array:
    """Unit quaternion (w, x, y, z) (..., 4) -> rotation (..., 3, 3).

    The formula divides by |q|^2, so a non-unit quaternion maps to the rotation of its
    normalization (robust for iterates that drift slightly off the unit sphere)."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    s = 2.0 / jnp.sum(q * q, -1)
    return jnp.stack(
        [
            jnp.stack([1 - s * (y * y + z * z), s * (x * y - w * z), s * (x * z + w * y)], -1),
            jnp.stack([s * (x * y + w * z), 1 - s * (x * x + z * z), s * (y * z - w * x)], -1),
            jnp.stack([s * (x * z - w * y), s * (y * z + w * x), 1 - s * (x * x + y * y)], -1),
        ],
        -2,
    )


def quat_from_matrix(R: Array) -> Array:
    """Rotation (..., 3, 3) -> unit quaternion (w, x, y, z) with w >= 0 (Shepperd's method,
    branch chosen with masks so it vmaps)."""
    m00, m11, m22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    tr = m00 + m11 + m22
    cands = jnp.stack(
        [
            jnp.stack(
                [1 + tr, R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]],
                -1,
            ),
            jnp.stack(
                [
                    R[..., 2, 1] - R[..., 1, 2],
                    1 + m00 - m11 - m22,
                    R[..., 0, 1] + R[..., 1, 0],
                    R[..., 0, 2] + R[..., 2, 0],
                ],
                -1,
            ),
            jnp.stack(
                [
                    R[..., 0, 2] - R[..., 2, 0],
                    R[..., 0, 1] + R[..., 1, 0],
                    1 - m00 + m11 - m22,
                    R[..., 1, 2] + R[..., 2, 1],
                ],
                -1,
            ),
            jnp.stack(
                [
                    R[..., 1, 0] - R[..., 0, 1],
                    R[..., 0, 2] + R[..., 2, 0],
                    R[..., 1, 2] + R[..., 2, 1],
                    1 - m00 - m11 + m22,
                ],
                -1,
            ),
        ],
        -2,
    )  # (..., 4, 4): row k is 4*q_k*q scaled
    diag = jnp.stack([tr, m00, m11, m22], -1)
    k = jnp.argmax(diag, -1)
    row = jnp.take_along_axis(cands, k[..., None, None], -2)[..., 0, :]
    q = row / jnp.linalg.norm(row, axis=-1, keepdims=True)
    return q * jnp.where(q[..., :1] < 0, -1.0, 1.0)


@jax.jit
def quat_mul(a: Array, b: Array) -> Array:
    """Hamilton product a * b (wxyz)."""
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - jnp.sum(av * bv, -1, keepdims=True)
    v = aw * bv + bw * av + jnp.cross(av, bv)
    return jnp.concatenate([w, v], -1)


def quat_conj(q: Array) -> Array:
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


@jax.jit
def quat_exp(w: Array) -> Array:
    """Rotation vector (..., 3) -> unit quaternion (..., 4)."""
    th2 = jnp.sum(w * w, -1)
    small = th2 < _eps(th2)
    t = jnp.sqrt(jnp.where(small, 1.0, th2))
    x = th2
    half_sinc = jnp.where(small, 0.5 - x / 48.0 + x**2 / 3840.0 - x**3 / 645120.0, jnp.sin(0.5 * t) / t)
    c = jnp.where(small, 1.0 - x / 8.0 + x**2 / 384.0 - x**3 / 46080.0, jnp.cos(0.5 * t))
    return jnp.concatenate([c[..., None], half_sinc[..., None] * w], -1)


def quat_log(q: Array) -> Array:
    """Unit quaternion -> rotation vector of the principal branch (angle <= pi)."""
    q = q * jnp.where(q[..., :1] < 0, -1.0, 1.0)  # shortest arc
    w, v = q[..., 0], q[..., 1:]
    n2 = jnp.sum(v * v, -1)
    # atan2(n, w) / n has no cancellation, so the series (error (n/w)^8 / 9) is only needed very
    # close to zero; with the shared 1e-2 threshold it would cost ~1e-9 at 0.2 rad.
    small = n2 < 1e-6
    n = jnp.sqrt(jnp.where(small, 1.0, n2))
    # angle = 2 atan2(n, w); factor = angle / n
    r2 = n2 / (w * w + (w == 0))  # (n / w)^2, only used on the small branch where w ~ 1
    series = (2.0 / w) * (1.0 - r2 / 3.0 + r2**2 / 5.0 - r2**3 / 7.0)
    factor = jnp.where(small, series, 2.0 * jnp.arctan2(n, w) / n)
    return factor[..., None] * v


def quat_normalize(q: Array) -> Array:
    return q / jnp.linalg.norm(q, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- SE(3)


def make_pose(R: Array, p: Array) -> Array:
    """(..., 3, 3), (..., 3) -> homogeneous (..., 4, 4)."""
    top = jnp.concatenate([R, p[..., :, None]], -1)
    bottom = jnp.broadcast_to(jnp.array([0.0, 0.0, 0.0, 1.0], dtype=R.dtype), top.shape[:-2] + (1, 4))
    return jnp.concatenate([top, bottom], -2)


def se3_inv(T: Array) -> Array:
    R, p = T[..., :3, :3], T[..., :3, 3]
    Rt = jnp.swapaxes(R, -1, -2)
    return make_pose(Rt, -jnp.einsum("...ij,...j->...i", Rt, p))


def se3_exp(xi: Array) -> Array:
    """Twist (omega, v) (..., 6) -> pose (..., 4, 4)."""
    w, v = xi[..., :3], xi[..., 3:]
    R = so3_exp(w)
    V = so3_left_jacobian(w)
    return make_pose(R, jnp.einsum("...ij,...j->...i", V, v))


def se3_log(T: Array) -> Array:
    """Pose (..., 4, 4) -> twist (omega, v) (..., 6), principal branch."""
    w = so3_log(T[..., :3, :3])
    v = jnp.einsum("...ij,...j->...i", so3_left_jacobian_inv(w), T[..., :3, 3])
    return jnp.concatenate([w, v], -1)


def adjoint(T: Array) -> Array:
    """``Ad_T = [[R, 0], [p^ R, R]]`` (..., 6, 6): maps twists in the child frame to the parent."""
    R, p = T[..., :3, :3], T[..., :3, 3]
    z = jnp.zeros_like(R)
    return jnp.concatenate([jnp.concatenate([R, z], -1), jnp.concatenate([hat(p) @ R, R], -1)], -2)


def small_adjoint(xi: Array) -> Array:
    """``ad_xi = [[w^, 0], [v^, w^]]`` (..., 6, 6); ``ad_xi eta`` is the spatial cross product."""
    W, V = hat(xi[..., :3]), hat(xi[..., 3:])
    z = jnp.zeros_like(W)
    return jnp.concatenate([jnp.concatenate([W, z], -1), jnp.concatenate([V, W], -1)], -2)


def _se3_Q(xi: Array) -> Array:
    """The off-diagonal block Q(w, v) of the SE(3) left Jacobian (Barfoot's closed form)."""
    w, v = xi[..., :3], xi[..., 3:]
    th2 = jnp.sum(w * w, -1)
    small = th2 < _eps(th2)
    t2 = jnp.where(small, 1.0, th2)
    t = jnp.sqrt(t2)
    s, c = jnp.sin(t), jnp.cos(t)
    # Coefficients with Taylor fallbacks (safe where-shim so gradients stay finite at 0).
    x = th2
    c1 = jnp.where(small, 1 / 6 - x / 120 + x**2 / 5040 - x**3 / 362880, (t - s) / (t2 * t))
    c2 = jnp.where(small, 1 / 24 - x / 720 + x**2 / 40320 - x**3 / 3628800, (t2 + 2 * c - 2) / (2 * t2 * t2))
    c3 = jnp.where(
        small, 1 / 120 - x / 2520 + x**2 / 120960 - x**3 / 9979200, (2 * t - 3 * s + t * c) / (2 * t2 * t2 * t)
    )
    W, V = hat(w), hat(v)
    WV, VW = W @ V, V @ W
    WVW = W @ V @ W
    e = lambda x: x[..., None, None]  # noqa: E731
    return 0.5 * V + e(c1) * (WV + VW + WVW) + e(c2) * (W @ WV + VW @ W - 3 * WVW) + e(c3) * (WVW @ W + W @ WVW)


def se3_left_jacobian(xi: Array) -> Array:
    """Left Jacobian of SE(3), angular-first: ``[[J, 0], [Q, J]]`` (..., 6, 6)."""
    J = so3_left_jacobian(xi[..., :3])
    Q = _se3_Q(xi)
    z = jnp.zeros_like(J)
    return jnp.concatenate([jnp.concatenate([J, z], -1), jnp.concatenate([Q, J], -1)], -2)


def se3_left_jacobian_inv(xi: Array) -> Array:
    """Inverse left Jacobian of SE(3): ``[[Ji, 0], [-Ji Q Ji, Ji]]``.

    Paper 001 eq. (13)-(16) use the Bernoulli series near zero and a block exponential
    elsewhere; the closed form here is exact everywhere below pi and reduces to the Bernoulli
    series ``I - ad/2 + ad^2/12 - ...`` at small arguments (tests check both)."""
    Ji = so3_left_jacobian_inv(xi[..., :3])
    Q = _se3_Q(xi)
    z = jnp.zeros_like(Ji)
    return jnp.concatenate([jnp.concatenate([Ji, z], -1), jnp.concatenate([-Ji @ Q @ Ji, Ji], -1)], -2)


def se3_left_jacobian_inv_series(xi: Array) -> Array:
    """Fourth-order Bernoulli series ``I - Z/2 + Z^2/12 - Z^4/720``, Z = ad_xi (paper 001)."""
    Z = small_adjoint(xi)
    Z2 = Z @ Z
    return jnp.eye(6, dtype=xi.dtype) - 0.5 * Z + Z2 / 12.0 - (Z2 @ Z2) / 720.0


def rot_axis(axis: Array, angle: Array) -> Array:
    """Rotation about a unit axis (..., 3) by angle (...,) -> (..., 3, 3)."""
    return so3_exp(axis * angle[..., None])


def pose_from_xyz_rpy(xyz, rpy) -> Array:
    """Pose from translation and roll-pitch-yaw (URDF convention R = Rz(y) Ry(p) Rx(r))."""
    xyz = jnp.asarray(xyz, dtype=float)
    r, p, y = (jnp.asarray(a, dtype=float) for a in rpy)
    ex, ey, ez = jnp.eye(3)
    R = rot_axis(ez, y) @ rot_axis(ey, p) @ rot_axis(ex, r)
    return make_pose(R, xyz)
