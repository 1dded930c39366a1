"""Physically consistent parametrizations of rigid-body inertia (used by :mod:`jaxmech.sysid`).

* Pseudo-inertia (Wensing et al.): ``J = [[Sigma, m c], [m c^T, m]]`` with
  ``Sigma = 0.5 tr(Ibar) I - Ibar`` (``Ibar`` = rotational inertia about the body origin); a body is
  physically realizable (positive mass, inertia obeying the triangle inequalities) iff ``J`` is
  positive definite.
* Log-Cholesky (Rucker & Wensing, RA-L 2022): ``J = U U^T`` with ``U`` upper triangular,
  exponentials on the diagonal -- every real 10-vector ``theta`` is a physical body.
* Standard parameters ``phi = (m, m c (3), Ibar_xx, Ibar_yy, Ibar_zz, Ibar_xy, Ibar_xz, Ibar_yz)``:
  the coordinates in which inverse dynamics is linear.
* Mass scale (density): the whole ``(m, m c, I)`` of a body of known geometry times ``exp(s)``.
* A mechanism's bodies: :func:`body_indices`, :func:`get_theta` (log-Cholesky parameters of
  named bodies) and :func:`set_theta` (a copy of the model with them replaced).

Units: kg, m, kg m^2; inertia "about the COM" unless said "about the origin".
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import lapack
from ._jit import jit
from .mechanism import Mechanism


def pseudo_inertia(mass, com, inertia) -> jnp.ndarray:
    """4x4 pseudo-inertia from mass (kg), COM (3,) m and inertia about the COM (3, 3) kg m^2."""
    h = mass * com
    Ibar = inertia + mass * (jnp.dot(com, com) * jnp.eye(3, dtype=com.dtype) - jnp.outer(com, com))
    Sigma = 0.5 * jnp.trace(Ibar) * jnp.eye(3, dtype=com.dtype) - Ibar
    top = jnp.concatenate([Sigma, h[:, None]], 1)
    return jnp.concatenate([top, jnp.concatenate([h, mass[None]])[None]], 0)


def from_pseudo_inertia(J):
    """Inverse of :func:`pseudo_inertia`: (mass, com (3,), inertia about the COM (3, 3))."""
    m = J[3, 3]
    c = J[:3, 3] / m
    Sigma = J[:3, :3]
    Ibar = jnp.trace(Sigma) * jnp.eye(3, dtype=J.dtype) - Sigma
    Ic = Ibar - m * (jnp.dot(c, c) * jnp.eye(3, dtype=J.dtype) - jnp.outer(c, c))
    return m, c, Ic


def _U(theta):
    a, d1, d2, d3, s12, s23, s13, t1, t2, t3 = theta
    z = jnp.zeros_like(a)
    U = jnp.stack(
        [
            jnp.stack([jnp.exp(d1), s12, s13, t1]),
            jnp.stack([z, jnp.exp(d2), s23, t2]),
            jnp.stack([z, z, jnp.exp(d3), t3]),
            jnp.stack([z, z, z, jnp.ones_like(a)]),
        ]
    )
    return jnp.exp(a) * U


def theta_to_inertial(theta):
    """Log-Cholesky 10-vector -> (mass, com, inertia about the COM); always physical."""
    U = _U(theta)
    return from_pseudo_inertia(U @ U.T)


def inertial_to_theta(mass, com, inertia) -> jnp.ndarray:
    """(mass, com, inertia) -> log-Cholesky 10-vector (needs a positive-definite pseudo-inertia)."""
    J = pseudo_inertia(jnp.asarray(mass), jnp.asarray(com), jnp.asarray(inertia))
    Pm = jnp.eye(4, dtype=J.dtype)[::-1]
    L = lapack.cholesky(Pm @ J @ Pm)
    U = Pm @ L @ Pm  # upper triangular, U U^T = J
    a = jnp.log(U[3, 3])
    U = U / U[3, 3]
    return jnp.stack(
        [a, jnp.log(U[0, 0]), jnp.log(U[1, 1]), jnp.log(U[2, 2]), U[0, 1], U[1, 2], U[0, 2], U[0, 3], U[1, 3], U[2, 3]]
    )


@jit
def theta_to_inertial_batch(theta):
    """Masses (n,) of a batch of log-Cholesky vectors (n, 10)."""
    return jax.vmap(theta_to_inertial)(theta)[0]


def standard_parameters(mass, com, inertia) -> jnp.ndarray:
    """(mass, COM, inertia about the COM) -> standard parameters (10,) ``(m, m c, Ibar)``."""
    J = pseudo_inertia(jnp.asarray(mass), jnp.asarray(com), jnp.asarray(inertia))
    return _phi_from_pseudo(J)


def _phi_from_pseudo(J):
    Sigma = J[:3, :3]
    Ibar = jnp.trace(Sigma) * jnp.eye(3, dtype=J.dtype) - Sigma
    return jnp.concatenate(
        [J[3, 3][None], J[:3, 3], Ibar[jnp.array([0, 1, 2, 0, 0, 1]), jnp.array([0, 1, 2, 1, 2, 2])]]
    )


def inertial_from_standard(phi):
    """Standard parameters (10,) -> (mass, COM (3,), inertia about the COM (3, 3))."""
    m, h = phi[0], phi[1:4]
    xx, yy, zz, xy, xz, yz = phi[4:]
    Ibar = jnp.stack([jnp.stack([xx, xy, xz]), jnp.stack([xy, yy, yz]), jnp.stack([xz, yz, zz])])
    c = h / m
    return m, c, Ibar - m * (jnp.dot(c, c) * jnp.eye(3, dtype=phi.dtype) - jnp.outer(c, c))


def theta_to_standard(theta) -> jnp.ndarray:
    """Log-Cholesky 10-vector -> standard parameters (10,) (polynomial in exp(theta), no division)."""
    U = _U(theta)
    return _phi_from_pseudo(U @ U.T)


def scaled_inertial(log_scale, mass, com, inertia):
    """Mass-scale (density) parametrization: the whole inertial of a body of known geometry scaled
    by ``exp(log_scale)`` -> (mass, com, inertia). Physically consistent for every real
    ``log_scale`` when the nominal body is (its pseudo-inertia is scaled by a positive number)."""
    k = jnp.exp(log_scale)
    return k * mass, com, k * inertia


# ----------------------------------------------------------------------------- body parameters of a mechanism


def body_indices(mech: Mechanism, bodies) -> np.ndarray:
    missing = [b for b in bodies if b not in mech.body_names]
    if missing:
        raise ValueError(f"{mech.name}: unknown bodies {missing} (bodies: {', '.join(mech.body_names)})")
    return np.asarray([mech.body_names.index(b) for b in bodies], int)


def get_theta(mech: Mechanism, bodies) -> jnp.ndarray:
    """Log-Cholesky parameters (nbodies, 10) of the named bodies."""
    idx = body_indices(mech, bodies)
    return jax.vmap(inertial_to_theta)(mech.mass[idx], mech.com[idx], mech.inertia[idx])


def set_theta(mech: Mechanism, bodies, theta) -> Mechanism:
    """A copy of ``mech`` with the named bodies' inertial parameters from ``theta`` (n, 10)."""
    idx = body_indices(mech, bodies)
    m, c, I = jax.vmap(theta_to_inertial)(theta)
    return eqx.tree_at(
        lambda k: (k.mass, k.com, k.inertia),
        mech,
        (mech.mass.at[idx].set(m), mech.com.at[idx].set(c), mech.inertia.at[idx].set(I)),
    )
