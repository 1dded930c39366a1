"""Batch-last tree and closure terms of forward dynamics: ``M``, ``h``, ``C`` and ``gamma`` of many
states at once.

The world-frame formulas of :class:`jaxmech.dynamics._World` and
:func:`jaxmech.curvature.closure_terms_world`, written with the batch as the last axis of every
intermediate (see :mod:`jaxmech.batchlast`): the kinematics pass, body twists ``V`` and
velocity-product accelerations ``Ab`` as sums over ancestors, RNEA's forces and CRBA's composite
inertias, and the closure rows. Sums over ancestors and subtrees are products with the static 0/1
ancestor matrices; with the batch last they are plain matrix products ``(nb, nv) @ (nv, 6 B)``.
The per-row curvature formulas and the joint bias of joints with two moving factors (universal,
cylindrical) run their per-state code vmapped (one implementation of each formula).

:func:`jaxmech.forward_dynamics` calls :func:`terms` under ``vmap`` through
:func:`jaxmech.batchlast.batched` (derivatives from the per-state code); the KKT solve that follows
is unchanged. Values agree with the per-state code to rounding (``tests/test_batchlast_dynamics.py``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from . import batchlast as bl
from .constraint_types import ROW_TYPES
from .mechanism import Mechanism

# ----------------------------------------------------------------------------- spatial algebra, (..., 6, B)


def _ad(V, x):
    """``ad_V x`` for twists (..., 6, B), angular first."""
    w, v = V[..., :3, :], V[..., 3:, :]
    return jnp.concatenate([bl.cross(w, x[..., :3, :]), bl.cross(v, x[..., :3, :]) + bl.cross(w, x[..., 3:, :])], -2)


def _cross_force(V, F):
    """``ad_V^* F`` for a twist and a wrench (..., 6, B)."""
    w, v = V[..., :3, :], V[..., 3:, :]
    n, f = F[..., :3, :], F[..., 3:, :]
    return jnp.concatenate([bl.cross(w, n) + bl.cross(v, f), bl.cross(w, f)], -2)


def _to_local(R, p, x):
    """``Ad_{T^-1} x`` for world twists (n, 6, B) in frames ``T = (R, p)`` (n, 3, 3, B), (n, 3, B)."""
    w = x[:, :3]
    return jnp.concatenate([bl.mtv3(R, w), bl.mtv3(R, x[:, 3:] - bl.cross(p, w))], 1)


def _ancestor_sum(A: np.ndarray, x):
    """``sum_j A[i, j] x[j]`` for a static matrix ``A`` (n, m) and ``x`` (m, ..., B)."""
    return jnp.tensordot(jnp.asarray(A, x.dtype), x, axes=1)


def _to_batch_first(x):
    """(..., B) -> (B, ...) by one 2-D transpose."""
    return x.reshape(-1, x.shape[-1]).T.reshape((x.shape[-1],) + x.shape[:-1])


# ----------------------------------------------------------------------------- tree terms


def _joint_bias_world(mech: Mechanism, Re, pe, QT, VT):
    """World ``Ad_T (Sdot v)`` per body (nb, 6, B), or None when every joint has at most one moving
    factor (then it is zero: :func:`jaxmech.curvature.joint_bias`)."""
    from . import kinpass as kp
    from .curvature import joint_bias
    from .kinpass import twist_to_world

    hinge, slide, other, _ = kp._pose_classes(mech)
    rest = bl._split_other(mech, other)[1]  # universal, cylindrical
    if not rest.size:
        return None

    def one(q, v, R, p):
        _, _, th1, th2, d = kp.joint_values(mech, q)
        return twist_to_world(R, p, joint_bias(mech, kp.joint_columns(mech, th1, th2, d), v))

    return bl._per_state(one, QT, VT, Re, pe)


def _world_inertia(mech: Mechanism, Re, pe):
    """Mass (nb, 1), world COM (nb, 3, B) and world rotational inertia about it (nb, 3, 3, B)."""
    dt = Re.dtype
    com = pe + bl.mv3(Re, bl._c(mech.com.astype(dt)))
    Ic = bl.mm3(bl.mm3(Re, bl._c(mech.inertia.astype(dt))), bl._t3(Re))
    return mech.mass.astype(dt)[:, None], com, Ic


def _momentum(mech: Mechanism, Re, mass, com, x):
    """``I^w_b x_b`` (nb, 6, B) for world twists ``x`` (nb, 6, B): momenta about the world origin
    (:meth:`jaxmech.dynamics._World.inertia_times`)."""
    w = x[:, :3]
    P = mass[..., None] * (x[:, 3:] + bl.cross(w, com))
    Icw = bl.mv3(Re, bl.mv3(bl._c(mech.inertia.astype(Re.dtype)), bl.mtv3(Re, w)))
    return jnp.concatenate([Icw + bl.cross(com, P), P], 1)


def _spatial_inertia(mass, com, Ic):
    """World spatial inertias about the world origin (nb, 6, 6, B) (:func:`jaxmech.spatial_inertia`)."""
    c = _hat(com)  # (nb, 3, 3, B)
    m = mass[..., None, None]
    cc = bl.mm3(c, c)
    eye = jnp.eye(3, dtype=com.dtype)[None, :, :, None]
    top = jnp.concatenate([Ic - m * cc, m * c], 2)
    bot = jnp.concatenate([-m * c, m * jnp.broadcast_to(eye, c.shape)], 2)
    return jnp.concatenate([top, bot], 1)


def _hat(x):
    """``x^`` (..., 3, 3, B) of vectors (..., 3, B)."""
    x0, x1, x2 = x[..., 0, :], x[..., 1, :], x[..., 2, :]
    z = jnp.zeros_like(x0)
    return jnp.stack([jnp.stack([z, -x2, x1], -2), jnp.stack([x2, z, -x0], -2), jnp.stack([-x1, x0, z], -2)], -3)


def _mass_pairs(mech: Mechanism):
    """Static index pairs of the structurally non-zero entries of ``M``: ``(m, n)`` with coordinate
    ``m`` moving body ``b(n)`` only (``up``), and ``m <= n`` moving each other (same body, ``both``)."""
    topo = mech.topo
    up = topo.ancestor[topo.v_body].T  # up[m, n]: coordinate m moves body b(n)
    both = up & up.T
    mu, nu = np.nonzero(up & ~up.T)
    mb, nb_ = np.nonzero(both & (np.arange(mech.nv)[:, None] <= np.arange(mech.nv)[None, :]))
    return mu, nu, mb, nb_


def _mass_matrix(mech: Mechanism, I_w, cols, B: int):
    """``M`` (B, nv, nv) with armature, batch first (:meth:`jaxmech.dynamics._World.mass_matrix`):
    ``M[m, n] = s_m . (I^c_{b(n)} s_n)`` for the structurally non-zero pairs only (the tree's
    branch sparsity: the Stewart's 90 of 576), written into the batch-first output by one scatter
    (no (nv, nv, B) intermediate and no transpose of it)."""
    topo, dt = mech.topo, cols.dtype
    # each product written to a buffer first (bl.materialize): fused into the next one, which
    # broadcasts it, XLA:CPU recomputes it per use
    (I_w,) = bl.materialize(I_w)
    Icv = _ancestor_sum(np.asarray(topo.ancestor, float).T, I_w)  # (nv, 6, 6, B) composite of b(n)
    (F,) = bl.materialize(jnp.sum(Icv * cols[:, None], 2))  # (nv, 6, B)
    mu, nu, mb, nb_ = _mass_pairs(mech)

    def dot(m, n):  # s_m . F_n, (len(m), B)
        return jnp.sum(cols[m] * F[n], 1)

    gu = dot(mu, nu)
    gb = 0.5 * (dot(mb, nb_) + dot(nb_, mb)) + jnp.where((mb == nb_)[:, None], bl._c(mech.armature.astype(dt)[mb]), 0.0)
    off = mb != nb_
    rows = np.concatenate([mu, nu, mb, nb_[off]])
    cols_ = np.concatenate([nu, mu, nb_, mb[off]])
    vals = jnp.concatenate([gu, gu, gb, gb[off]], 0)
    return jnp.zeros((B, mech.nv, mech.nv), dt).at[:, rows, cols_].set(vals.T, unique_indices=True)


# ----------------------------------------------------------------------------- closure terms


def _closure(mech: Mechanism, Re, pe, cols, V, Ab, B: int):
    """``C`` (B, s, nv) batch first and ``gamma`` (s, B) (:func:`jaxmech.curvature.closure_terms_world`)."""
    from .lie import make_pose

    topo, dt, nb = mech.topo, Re.dtype, mech.nb
    Re, pe = bl.with_world(Re, pe)
    z = jnp.zeros((1, 6, B), dt)
    Ve, Abe = jnp.concatenate([V, z], 0), jnp.concatenate([Ab, z], 0)
    vals, gs = [], []
    for g in topo.groups:
        terms = bl._group_terms(mech, Re, pe, cols, g)
        _, j = bl._rows(mech, g, terms, True)
        vals.append(j.reshape(-1, B))
        DR, Dp, RA, pA = terms[:4]
        lb = np.array([topo.loop_bodies[li] for li in g.loop_id], dtype=int).reshape(-1, 2)
        ba, bb = np.where(lb[:, 0] < 0, nb, lb[:, 0]), np.where(lb[:, 1] < 0, nb, lb[:, 1])
        dV = Ve[bb] - Ve[ba]
        w = _to_local(RA, pA, dV)
        wb = _to_local(RA, pA, Abe[bb] - Abe[ba] - _ad(Ve[ba], dV))
        rt = ROW_TYPES[g.type]

        def bias(R, p, w, wb, rt=rt, g=g):
            return rt.bias(mech, g, make_pose(R, p), w, wb)

        gs.append(bl._per_state(bias, DR, Dp, w, wb).reshape(-1, B))
    nc = len(topo.coupling_names)
    if nc:
        gs.append(jnp.zeros((nc, B), dt))
    gamma = jnp.concatenate(gs, 0) if gs else jnp.zeros((0, B), dt)
    return bl.dense_jacobian(mech, vals, B, dt), gamma


# ----------------------------------------------------------------------------- entry


def terms(mech: Mechanism, QT, VT):
    """``(M, h, C, gamma)`` of the states ``QT`` (nq, B), ``VT`` (nv, B), batch first on output
    (B, nv, nv), (B, nv), (B, s, nv), (B, s): the mass matrix with armature, ``h = rnea(q, v, 0)``
    (no external wrenches), the closure Jacobian and curvature (as the per-state
    :func:`jaxmech.constrained._tree_and_closure_terms`)."""
    topo, dt, B = mech.topo, QT.dtype, QT.shape[-1]
    Re, pe = bl.world_poses(mech, *bl.local_poses(mech, QT))
    cols = bl.world_columns(mech, Re, pe, QT)  # (nv, 6, B)
    vJ = cols * VT[:, None]
    V = _ancestor_sum(topo.ancestor, vJ)  # (nb, 6, B)
    own = (np.asarray(topo.v_body)[None, :] == np.arange(mech.nb)[:, None]).astype(float)
    beta = _ad(V, _ancestor_sum(own, vJ))
    sd = _joint_bias_world(mech, Re, pe, QT, VT)
    if sd is not None:
        beta = beta + sd
    from .dynamics import _body_ancestor

    Ab = _ancestor_sum(_body_ancestor(mech), beta)
    mass, com, Ic = _world_inertia(mech, Re, pe)
    g = jnp.concatenate([jnp.zeros(3, dt), -mech.gravity.astype(dt)])[:, None]
    f = _momentum(mech, Re, mass, com, Ab + g) + _cross_force(V, _momentum(mech, Re, mass, com, V))
    h = jnp.sum(cols * _ancestor_sum(np.asarray(topo.ancestor, float).T, f), 1) + bl._c(mech.damping.astype(dt)) * VT
    M = _mass_matrix(mech, _spatial_inertia(mass, com, Ic), cols, B)
    C, gamma = _closure(mech, Re, pe, cols, V, Ab, B)
    return M, h.T, C, gamma.T
