"""Batch-last tree and closure terms of forward dynamics: ``M``, ``h``, ``C`` and ``gamma`` of many
states at once.

The world-frame formulas of :class:`jaxmech.dynamics._World` and
:func:`jaxmech.curvature.closure_terms_world`, written with the batch as the last axis of every
intermediate (see :mod:`jaxmech.batchlast`): the kinematics pass, body twists ``V`` and
velocity-product accelerations ``Ab`` as sums over ancestors, RNEA's forces and CRBA's composite
inertias, and the closure rows. Sums over ancestors and subtrees run one step per depth level
(:func:`_down`, :func:`_up`: linear in the bodies; the dense ancestor products they replace grew
with the square, 48 four-bars side by side spent most of their time there).
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


def _down(mech: Mechanism, x):
    """``out_b = sum of x_c over c = b and its ancestors`` (nb, ..., B): one step per depth level
    (linear in the bodies; a product with the dense ancestor matrix was quadratic)."""
    parent = np.asarray(mech.topo.parent)
    for lv in mech.topo.levels[1:]:
        lv = np.asarray(lv)
        x = x.at[lv].add(x[parent[lv]])
    return x


def _up(mech: Mechanism, x):
    """``out_b = sum of x_c over c = b and its descendants`` (nb, ..., B), deepest level first."""
    parent = np.asarray(mech.topo.parent)
    for lv in reversed(mech.topo.levels[1:]):
        lv = np.asarray(lv)
        x = x.at[parent[lv]].add(x[lv])
    return x


def _per_body(mech: Mechanism, x):
    """``sum of x_n over the coordinates n of body b`` (nb, ..., B) from (nv, ..., B)."""
    return jnp.zeros((mech.nb,) + x.shape[1:], x.dtype).at[np.asarray(mech.topo.v_body)].add(x)


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


def _mass_values(mech: Mechanism, I_w, cols):
    """Structurally non-zero entries of ``M`` with armature: ``(rows, cols, vals)``, static (k,)
    index arrays and values (k, B), ``M[m, n] = s_m . (I^c_{b(n)} s_n)`` (the tree's branch
    sparsity: the Stewart's 90 of 576 entries)."""
    topo, dt = mech.topo, cols.dtype
    # each product written to a buffer first (bl.materialize): fused into the next one, which
    # broadcasts it, XLA:CPU recomputes it per use
    (I_w,) = bl.materialize(I_w)
    Icv = _up(mech, I_w)[np.asarray(topo.v_body)]  # (nv, 6, 6, B) composite inertia of b(n)
    (F,) = bl.materialize(jnp.sum(Icv * cols[:, None], 2))  # (nv, 6, B)
    mu, nu, mb, nb_ = _mass_pairs(mech)

    def dot(m, n):  # s_m . F_n, (len(m), B)
        return jnp.sum(cols[m] * F[n], 1)

    gu = dot(mu, nu)
    gb = 0.5 * (dot(mb, nb_) + dot(nb_, mb)) + jnp.where((mb == nb_)[:, None], bl._c(mech.armature.astype(dt)[mb]), 0.0)
    rows, cols_ = _mass_pairs_all(mech)
    return rows, cols_, jnp.concatenate([gu, gu, gb, gb[mb != nb_]], 0)


def _mass_matrix(mech: Mechanism, I_w, cols, B: int):
    """``M`` (B, nv, nv) with armature, batch first (:meth:`jaxmech.dynamics._World.mass_matrix`):
    the non-zero entries of :func:`_mass_values` written into the batch-first output by one scatter
    (no (nv, nv, B) intermediate and no transpose of it)."""
    rows, cols_, vals = _mass_values(mech, I_w, cols)
    return jnp.zeros((B, mech.nv, mech.nv), cols.dtype).at[:, rows, cols_].set(vals.T, unique_indices=True)


# ----------------------------------------------------------------------------- closure terms


def _closure_values(mech: Mechanism, Re, pe, cols, V, Ab, B: int):
    """The groups' Jacobian rows on their path dofs (one (n * r * m, B) array per group, the order
    of :func:`jaxmech.closure._jacobian_targets`) and ``gamma`` (s, B)."""
    from .closure import cut_bodies
    from .lie import make_pose

    topo, dt = mech.topo, Re.dtype
    Re, pe = bl.with_world(Re, pe)
    z = jnp.zeros((1, 6, B), dt)
    Ve, Abe = jnp.concatenate([V, z], 0), jnp.concatenate([Ab, z], 0)
    vals, gs = [], []
    for g in topo.groups:
        terms = bl._group_terms(mech, Re, pe, cols, g)
        _, j = bl._rows(mech, g, terms, True)
        vals.append(j.reshape(-1, B))
        DR, Dp, RA, pA = terms[:4]
        ba, bb = cut_bodies(mech, g)
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
    return vals, gamma


def _closure(mech: Mechanism, Re, pe, cols, V, Ab, B: int):
    """``C`` (B, s, nv) batch first and ``gamma`` (s, B) (:func:`jaxmech.curvature.closure_terms_world`)."""
    vals, gamma = _closure_values(mech, Re, pe, cols, V, Ab, B)
    return bl.dense_jacobian(mech, vals, B, Re.dtype), gamma


# ----------------------------------------------------------------------------- entry


def _tree_terms(mech: Mechanism, QT, VT):
    """Poses, columns, ``V``, ``Ab``, ``h`` (nv, B) and the world spatial inertias (nb, 6, 6, B)."""
    topo, dt = mech.topo, QT.dtype
    Re, pe = bl.world_poses(mech, *bl.local_poses(mech, QT))
    cols = bl.world_columns(mech, Re, pe, QT)  # (nv, 6, B)
    vJ = cols * VT[:, None]
    own = _per_body(mech, vJ)  # (nb, 6, B) each body's own joint twist
    V = _down(mech, own)  # world body twists
    beta = _ad(V, own)
    sd = _joint_bias_world(mech, Re, pe, QT, VT)
    if sd is not None:
        beta = beta + sd
    Ab = _down(mech, beta)
    mass, com, Ic = _world_inertia(mech, Re, pe)
    g = jnp.concatenate([jnp.zeros(3, dt), -mech.gravity.astype(dt)])[:, None]
    f = _momentum(mech, Re, mass, com, Ab + g) + _cross_force(V, _momentum(mech, Re, mass, com, V))
    h = jnp.sum(cols * _up(mech, f)[np.asarray(topo.v_body)], 1) + bl._c(mech.damping.astype(dt)) * VT
    return Re, pe, cols, V, Ab, h, _spatial_inertia(mass, com, Ic)


def terms(mech: Mechanism, QT, VT):
    """``(M, h, C, gamma)`` of the states ``QT`` (nq, B), ``VT`` (nv, B), batch first on output
    (B, nv, nv), (B, nv), (B, s, nv), (B, s): the mass matrix with armature, ``h = rnea(q, v, 0)``
    (no external wrenches), the closure Jacobian and curvature (as the per-state
    :func:`jaxmech.constrained._tree_and_closure_terms`)."""
    B = QT.shape[-1]
    Re, pe, cols, V, Ab, h, I_w = _tree_terms(mech, QT, VT)
    M = _mass_matrix(mech, I_w, cols, B)
    C, gamma = _closure(mech, Re, pe, cols, V, Ab, B)
    return M, h.T, C, gamma.T


def _block_targets(mech: Mechanism):
    """Static flat positions, in the block layout of :func:`jaxmech.constrained._to_blocks`, of the
    entries of ``M`` (:func:`_mass_values`' order) and of ``C`` (:func:`_closure_values`' order,
    couplings last), and the identity on padded slots of the ``M`` blocks; entries of padded path
    slots (zero values that may point outside their row's component) are dropped."""
    from .closure import _jacobian_targets
    from .constrained import block_structure

    st = block_structure(mech)
    cd, pad, nbc, bs = st.comp_dof, st.pad_dof, st.comp_dof.shape[1], st.bs
    where = {}  # dof -> (component, block slot, position)
    for c, j, i in zip(*np.nonzero(~pad), strict=True):
        where[int(cd[c, j, i])] = (c, j, i)
    rows_m, cols_m = _mass_pairs_all(mech)
    wm, wn = (np.array([where[int(x)] for x in a]).reshape(-1, 3) for a in (rows_m, cols_m))
    assert np.array_equal(wm[:, :2], wn[:, :2]), "M has an entry across the world's subtrees"
    m_flat = ((wm[:, 0] * nbc + wm[:, 1]) * bs + wm[:, 2]) * bs + wn[:, 2]
    eye = np.where(pad[..., :, None] | pad[..., None, :], np.eye(bs), 0.0)
    nc = len(mech.topo.coupling_names)
    rows, cols_ = _jacobian_targets(mech, list(mech.topo.groups), np.ones(nc, bool))
    row_at = {}  # raw row -> (component, position)
    for c, k in zip(*np.nonzero(~st.pad_row), strict=True):
        row_at[int(st.comp_rows[c, k])] = (c, k)
    rc = np.array([row_at[int(r)] for r in rows]).reshape(-1, 2)
    dc = np.array([where[int(x)] for x in cols_]).reshape(-1, 3)
    keep = rc[:, 0] == dc[:, 0]
    c_flat = ((rc[:, 0] * st.sc + rc[:, 1]) * nbc + dc[:, 1]) * bs + dc[:, 2]
    return m_flat, eye, c_flat, keep


def _mass_pairs_all(mech: Mechanism):
    """The (rows, cols) of :func:`_mass_values`' entries (static): each strict pair both ways, each
    same-body pair once and mirrored."""
    mu, nu, mb, nb_ = _mass_pairs(mech)
    off = mb != nb_
    return np.concatenate([mu, nu, mb, nb_[off]]), np.concatenate([nu, mu, nb_, mb[off]])


def block_terms(mech: Mechanism, QT, VT):
    """``(Mb, h, Cc, gc)`` batch first, in the block layout of
    :func:`jaxmech.constrained._to_blocks` (one block of ``M`` per subtree of the world and the rows
    of each independent component on its dofs), written from the non-zero entries directly: no
    dense ``M`` (nv, nv) or ``C`` (s, nv), so the cost grows with the number of components, not
    with its square."""
    from .constrained import block_structure

    st = block_structure(mech)
    B, dt = QT.shape[-1], QT.dtype
    nbc, bs = st.comp_dof.shape[1], st.bs
    Re, pe, cols, V, Ab, h, I_w = _tree_terms(mech, QT, VT)
    m_flat, eye, c_flat, keep = _block_targets(mech)
    _, _, mvals = _mass_values(mech, I_w, cols)
    Mb = jnp.zeros((B, st.ncomp * nbc * bs * bs), dt).at[:, m_flat].set(mvals.T, unique_indices=True)
    Mb = Mb.reshape(B, st.ncomp, nbc, bs, bs) + jnp.asarray(eye, dt)
    vals, gamma = _closure_values(mech, Re, pe, cols, V, Ab, B)
    nc = len(mech.topo.coupling_names)
    if nc:
        cq = mech.coupling_q[:, mech.topo.lin_q].astype(dt).reshape(-1)
        vals.append(jnp.broadcast_to(cq[:, None], (cq.size, B)))
    Cc = jnp.zeros((B, st.ncomp * st.sc * nbc * bs), dt)
    if vals:
        allv = jnp.concatenate(vals, 0)[np.nonzero(keep)[0]]
        Cc = Cc.at[:, c_flat[keep]].add(allv.T)
    Cc = Cc.reshape(B, st.ncomp, st.sc, nbc, bs)
    gc = jnp.concatenate([gamma, jnp.zeros((1, B), dt)], 0)[st.comp_rows]  # (c, sc, B)
    return Mb, h.T, Cc, jnp.moveaxis(gc, -1, 0)
