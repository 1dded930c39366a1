"""Batch-last kernels: forward kinematics and the closure rows of many states at once.

Under ``jax.vmap`` the per-state code in :mod:`jaxmech.kinpass` and :mod:`jaxmech.closure` runs on
arrays whose batch axis comes first, ``(B, nb, 3, 3)``. Every elementwise 3 x 3 product then
strides over the tiny trailing axes, and XLA:CPU's fused loops vectorize over 3 entries at a time.
Here every array carries the batch as its **last** axis, ``(nb, 3, 3, B)``: each step of a product
is one contiguous, vectorized operation over the batch. The level sweep of Kangaroo's 78 bodies
(batch 1,024, one core) takes 5.3 us per state this way against 15.9 us batch-first
(``benchmarks/PROFILE.md``, session 28).

The formulas are those of the per-state code (same helpers, same order of the factors), written
with a trailing batch axis. Shapes below write ``B`` for that axis; model constants carry none and
broadcast. Joints that read several generic slots (free, spherical, universal, cylindrical), and
the log-based rows (weld, pose, prismatic), are rare: they run the per-state code vmapped with
the batch moved last, so every joint and loop type is covered by one implementation of its math.

:func:`jaxmech.closure.closure_residual_and_jacobian` and :func:`jaxmech.kinpass.forward_kinematics`
call these under ``vmap`` (a ``custom_vmap`` rule, see :func:`batched`); derivatives go through the
per-state code (``custom_jvp``), so gradients are unchanged.
"""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from . import kinpass as kp
from . import lie
from ._as_written import jvp_rule
from .constraint_types import ROW_TYPES
from .kinpass import materialize
from .mechanism import LoopGroup, Mechanism

# ----------------------------------------------------------------------------- 3-vectors, 3x3


@jax.jit
def mm3(A, B):
    """``A @ B`` for (..., 3, 3, B) matrices."""
    return (
        A[..., :, 0, None, :] * B[..., None, 0, :, :]
        + A[..., :, 1, None, :] * B[..., None, 1, :, :]
        + A[..., :, 2, None, :] * B[..., None, 2, :, :]
    )


@jax.jit
def mv3(A, x):
    """``A x`` for (..., 3, 3, B), (..., 3, B)."""
    return (
        A[..., :, 0, :] * x[..., 0, None, :]
        + A[..., :, 1, :] * x[..., 1, None, :]
        + A[..., :, 2, :] * x[..., 2, None, :]
    )


@jax.jit
def mtv3(A, x):
    """``A^T x`` for (..., 3, 3, B), (..., 3, B)."""
    return (
        A[..., 0, :, :] * x[..., 0, None, :]
        + A[..., 1, :, :] * x[..., 1, None, :]
        + A[..., 2, :, :] * x[..., 2, None, :]
    )


@jax.jit
def cross(a, b):
    """``a x b`` for (..., 3, B)."""
    a0, a1, a2 = a[..., 0, :], a[..., 1, :], a[..., 2, :]
    b0, b1, b2 = b[..., 0, :], b[..., 1, :], b[..., 2, :]
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -2)


def _t3(A):
    """Transpose of (..., 3, 3, B) matrices."""
    return jnp.swapaxes(A, -2, -3)


def _c(x):
    """A model constant broadcast over the batch axis."""
    return jnp.asarray(x)[..., None]


def _per_state(f, *xs):
    """``f`` of one state, run over batch-last arrays (batch moved last on every output)."""
    return jax.vmap(f, in_axes=-1, out_axes=-1)(*xs)


# ----------------------------------------------------------------------------- kinematics


def _q_ext(QT):
    """``q`` (nq, B) with the constant slots 0 and 1 appended (``kinpass._q_ext``)."""
    B, dt = QT.shape[-1], QT.dtype
    return jnp.concatenate([QT, jnp.zeros((1, B), dt), jnp.ones((1, B), dt)], 0)


def _slot(mech: Mechanism, b: np.ndarray, k: int):
    """Generic slot ``k`` of bodies ``b`` that read it from a constant: 0.0 or 1.0 (numpy, in the
    model's dtype: a float64 constant would promote a float32 model's poses to float64)."""
    return (np.asarray(mech.topo.q_index)[b, k] == mech.nq + 1).astype(np.dtype(mech.offset_d.dtype))


def local_poses(mech: Mechanism, QT):
    """Parent-to-child rotations (nb, 3, 3, B) and translations (nb, 3, B); ``QT`` (nq, B).

    The same split as :func:`jaxmech.kinpass.local_poses`: hinges ``R = A + sin B + (1 - cos) C``,
    slides ``R = A Rc``, ``p`` affine in d, the other joints by the generic formula."""
    hinge, slide, other, _ = kp._pose_classes(mech)
    qe, qi, dt = _q_ext(QT), np.asarray(mech.topo.q_index), QT.dtype
    Rs, ps = [], []
    if hinge.size:
        b = hinge
        Rp, pp, Rc, pc = kp._placements(mech, b)
        ah = lie.hat(mech.axis1[b])
        u = pc + mech.axis_t[b] * (_slot(mech, b, 9) - mech.offset_d[b])[:, None]
        Rpa = kp.mm3(Rp, ah)
        Rpa2 = kp.mm3(Rpa, ah)
        th = qe[qi[b, 7]] - _c(mech.offset_th[b])
        s, c1 = materialize(jnp.sin(th), 1.0 - jnp.cos(th))
        s, c1 = s[:, None], c1[:, None]
        Rs.append(_c(kp.mm3(Rp, Rc)) + s[:, None] * _c(kp.mm3(Rpa, Rc)) + c1[:, None] * _c(kp.mm3(Rpa2, Rc)))
        ps.append(_c(kp.mv3(Rp, u) + pp) + s * _c(kp.mv3(Rpa, u)) + c1 * _c(kp.mv3(Rpa2, u)))
    if slide.size:
        b = slide
        Rp, pp, Rc, pc = kp._placements(mech, b)
        d = qe[qi[b, 9]] - _c(mech.offset_d[b])
        A = kp.mm3(Rp, kp.rot_unit_axis(mech.axis1[b], _slot(mech, b, 7) - mech.offset_th[b]))
        Rs.append(jnp.broadcast_to(_c(kp.mm3(A, Rc)), (b.size, 3, 3, QT.shape[-1])).astype(dt))
        ps.append(_c(kp.mv3(A, pc) + pp) + d[:, None] * _c(kp.mv3(A, mech.axis_t[b])))
    free, rest = _split_other(mech, other)
    if free.size:
        R, p = _free_local_poses(mech, qe, free)
        Rs.append(R)
        ps.append(p)
    if rest.size:
        R, p = _per_state(lambda q: kp._generic_local_poses(mech, q, rest), QT)
        Rs.append(R)
        ps.append(p)
    order = np.concatenate([hinge, slide, free, rest])
    return jnp.concatenate(Rs, 0)[np.argsort(order)], jnp.concatenate(ps, 0)[np.argsort(order)]


def _split_other(mech: Mechanism, other: np.ndarray):
    """The generic-class bodies whose joint reads only position / quaternion slots (free,
    spherical, fixed), and the rest (universal, cylindrical: two of th1, th2, d)."""
    used = np.asarray(mech.topo.q_index)[other] < mech.nq
    moving = used[:, 7:].any(1)
    return other[~moving], other[moving]


def quat_to_matrix(quat):
    """:func:`jaxmech.lie.quat_to_matrix` for (n, 4, B): rotations (n, 3, 3, B)."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    (s,) = materialize(2.0 / (w * w + x * x + y * y + z * z))
    rows = [
        [1 - s * (y * y + z * z), s * (x * y - w * z), s * (x * z + w * y)],
        [s * (x * y + w * z), 1 - s * (x * x + z * z), s * (y * z - w * x)],
        [s * (x * z - w * y), s * (y * z + w * x), 1 - s * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(r, 1) for r in rows], 1)


def _free_local_poses(mech: Mechanism, qe, b: np.ndarray):
    """The generic formula of :func:`jaxmech.kinpass._generic_local_poses` for joints whose
    rotation and translation factors after ``G(pos, quat)`` are model constants."""
    qi = np.asarray(mech.topo.q_index)
    pos, quat = qe[qi[b, 0:3]], qe[qi[b, 3:7]]
    R12 = kp.mm3(
        kp.rot_unit_axis(mech.axis1[b], _slot(mech, b, 7) - mech.offset_th[b]),
        kp.rot_unit_axis(mech.axis2[b], _slot(mech, b, 8)),
    )
    td = mech.axis_t[b] * (_slot(mech, b, 9) - mech.offset_d[b])[:, None]
    Rm = mm3(quat_to_matrix(quat), _c(R12))
    pm = pos + mv3(Rm, _c(td))
    Rp, pp, Rc, pc = kp._placements(mech, b)
    RpRm = mm3(_c(Rp), Rm)
    return mm3(RpRm, _c(Rc)), mv3(RpRm, _c(pc)) + mv3(_c(Rp), pm) + _c(pp)


def world_poses(mech: Mechanism, Rl, pl):
    """World rotations (nb, 3, 3, B) and positions (nb, 3, B) from local ones: one step per depth
    level, unrolled, each with its own width and static parent indices.

    A body's parent is one level up, so level ``k`` reads only level ``k - 1``'s array. The padded
    ``lax.scan`` of :func:`jaxmech.kinpass._world_poses` (per-state code) would do Kangaroo's 78
    bodies as 9 levels of 20 (180 products) with dynamic gathers and scatters; unrolled, the program
    grows by one small block per level (``benchmarks/PROFILE.md``, session 31)."""
    levels, parent = mech.topo.levels, np.asarray(mech.topo.parent)
    if not levels:
        return Rl, pl
    Rs, ps, prev = [], [], None
    for lv in levels:
        lv = np.asarray(lv)
        if prev is None:  # roots: their parent is the world
            R, p = Rl[lv], pl[lv]
        else:
            at = np.searchsorted(prev, parent[lv])  # levels are sorted body indices
            Rp, pp = Rs[-1][at], ps[-1][at]
            R, p = mm3(Rp, Rl[lv]), mv3(Rp, pl[lv]) + pp
        Rs.append(R)
        ps.append(p)
        prev = lv
    inv = np.argsort(np.concatenate(levels))
    return jnp.concatenate(Rs, 0)[inv], jnp.concatenate(ps, 0)[inv]


def forward_kinematics(mech: Mechanism, QT):
    """World poses (B, nb, 4, 4) of the states ``QT`` (nq, B) (batch first, as ``vmap`` gives)."""
    R, p = world_poses(mech, *local_poses(mech, QT))
    B, dt, nb = QT.shape[-1], QT.dtype, mech.nb
    # the 16 entries of each pose in row-major order, then one 2-D transpose (nb * 16, B) -> (B, nb * 16):
    # 2.3 -> 1.15 us per state on the Stewart at batch 1,024 against moving the batch axis of a
    # (nb, 4, 4, B) concatenation, which XLA:CPU ran as a strided gather (benchmarks/PROFILE.md, session 35)
    z, o = jnp.zeros((nb, 3, B), dt), jnp.ones((nb, 1, B), dt)
    flat = jnp.concatenate([R[:, 0], p[:, 0:1], R[:, 1], p[:, 1:2], R[:, 2], p[:, 2:3], z, o], 1)
    return flat.reshape(-1, B).T.reshape(B, nb, 4, 4)


def _columns_body(mech: Mechanism, QT):
    """Body-frame motion column (nv, 6, B or 1) of every velocity coordinate. Hinge, slide, free,
    spherical and fixed columns are model constants (they depend on th1, th2, d only through the
    factors a joint does not move; evaluated once); universal and cylindrical ones per state."""
    hinge, slide, other, _ = kp._pose_classes(mech)
    other = _split_other(mech, other)[1]
    topo = mech.topo
    v_body, v_col = np.asarray(topo.v_body), np.asarray(topo.v_col)
    nb = mech.nb
    th1 = jnp.asarray(_slot(mech, np.arange(nb), 7)) - mech.offset_th
    th2 = jnp.asarray(_slot(mech, np.arange(nb), 8))
    d = jnp.asarray(_slot(mech, np.arange(nb), 9)) - mech.offset_d
    S = kp.joint_columns(
        mech, th1.astype(QT.dtype), th2.astype(QT.dtype), d.astype(QT.dtype)
    )  # valid for hinges/slides
    x = _c(S[v_body, :, v_col])  # (nv, 6, 1)
    var = np.nonzero(np.isin(v_body, other))[0]
    if not var.size:
        return x
    sub = SimpleNamespace(
        axis1=mech.axis1[other], axis2=mech.axis2[other], axis_t=mech.axis_t[other], X_child_inv=mech.X_child_inv[other]
    )
    pos = {b: k for k, b in enumerate(other)}

    def one(q):
        _, _, t1, t2, dd = kp.joint_values(mech, q)
        Sk = kp.joint_columns(sub, t1[other], t2[other], dd[other])
        return Sk[np.array([pos[b] for b in v_body[var]]), :, v_col[var]]

    xv = _per_state(one, QT)  # (len(var), 6, B)
    return jnp.broadcast_to(x, x.shape[:2] + (QT.shape[-1],)).at[var].set(xv)


def world_columns(mech: Mechanism, Re, pe, QT):
    """World motion columns (nv, 6, B), ``Ad_T S``, angular first (as in ``closure._evaluate``)."""
    topo = mech.topo
    x = _columns_body(mech, QT)
    Rv, pv = Re[topo.v_body], pe[topo.v_body]
    w = mv3(Rv, x[:, :3])
    return materialize(jnp.concatenate([w, mv3(Rv, x[:, 3:]) + cross(pv, w)], 1))[0]


# ----------------------------------------------------------------------------- closure rows


def _group_terms(mech: Mechanism, Re, pe, cols, g: LoopGroup, dinv=None):
    """Cut frames A, B in the world, ``Delta = A^-1 B`` as (R (n, 3, 3, B), p (n, 3, B)), and the
    signed world motion columns of each loop's path, ``x`` (n, m, 6, B) (None without ``cols``).
    ``dinv`` (n, 4, 4, B): assembly's defect, ``Delta dinv`` (``closure._evaluate``'s
    ``defect_inv``), applied as the constant offset ``B dinv`` of cut frame B on its body, so the
    world-frame Jacobian rows are those of that frame. Returns ``(DR, Dp, RA, pA, RB, pB, x)``."""
    topo, dt = mech.topo, Re.dtype
    from .closure import cut_bodies

    ba, bb = cut_bodies(mech, g)
    Ca, Cb = mech.cut_pose_a[g.param_index].astype(dt), mech.cut_pose_b[g.param_index].astype(dt)
    RA, pA = mm3(Re[ba], _c(Ca[:, :3, :3])), mv3(Re[ba], _c(Ca[:, :3, 3])) + pe[ba]
    RB, pB = mm3(Re[bb], _c(Cb[:, :3, :3])), mv3(Re[bb], _c(Cb[:, :3, 3])) + pe[bb]
    if dinv is not None:
        RB, pB = mm3(RB, dinv[:, :3, :3]), mv3(RB, dinv[:, :3, 3]) + pB
    DR, Dp = mm3(_t3(RA), RB), mtv3(RA, pB - pA)
    if cols is None:
        return DR, Dp, RA, pA, RB, pB, None
    anc = np.concatenate([topo.ancestor, np.zeros((1, mech.nv), bool)], 0).astype(float)
    n = ba.size
    sign = (anc[bb] - anc[ba])[np.arange(n)[:, None], g.dof_v] * (g.dof_sign != 0)  # (n, m) static
    return DR, Dp, RA, pA, RB, pB, cols[g.dof_v] * jnp.asarray(sign, dt)[:, :, None, None]


def _columns_in_a(RA, pA, x):
    """``W`` (n, m, 6, B): the signed world columns ``x`` as twists in cut frame A
    (``closure._world_group_terms``), for the log-based rows."""
    RA_, pA_ = RA[:, None], pA[:, None]
    w = mtv3(RA_, x[:, :, :3])
    lin = mtv3(RA_, x[:, :, 3:] - cross(pA_, x[:, :, :3]))
    return materialize(jnp.concatenate([w, lin], 2))[0]


def _log_rows(mech: Mechanism, g: LoopGroup, DR, Dp, W, with_jac: bool):
    """Weld, pose and prismatic rows: :func:`jaxmech.closure._rows` vmapped, batch moved last."""
    from .closure import _rows as rows_one

    Delta = lie.make_pose(jnp.moveaxis(DR, -1, 0), jnp.moveaxis(Dp, -1, 0))  # (B, n, 4, 4)
    if not with_jac:
        res, _ = jax.vmap(lambda D: rows_one(mech, g, D, jnp.zeros(D.shape[:1] + (6, 0), D.dtype), False))(Delta)
        return jnp.moveaxis(res, 0, -1), None
    Wf = jnp.moveaxis(jnp.swapaxes(W, 1, 2), -1, 0)  # (B, n, 6, m)
    res, jac = jax.vmap(lambda D, Wk: rows_one(mech, g, D, Wk, True))(Delta, Wf)
    return jnp.moveaxis(res, 0, -1), jnp.moveaxis(jac, 0, -1)


def _rows(mech: Mechanism, g: LoopGroup, terms, with_jac: bool):
    """Residual rows (n, r, B) and Jacobian rows (n, r, m, B) of one group: its type's
    :meth:`jaxmech.constraint_types.RowType.rows_world` (world-frame Jacobian rows, no path columns
    in frame A), or for the log-based types (weld, pose, prismatic) the per-state formulas vmapped."""
    rt = ROW_TYPES[g.type]
    if rt.rows_world is None:
        DR, Dp, RA, pA, _, _, x = terms
        return _log_rows(mech, g, DR, Dp, _columns_in_a(RA, pA, x) if with_jac else None, with_jac)
    return rt.rows_world(mech, g, terms, with_jac)


def with_world(Re, pe):
    """World poses with the world itself appended as slot ``nb`` (identity), for the cut frames."""
    B, dt = Re.shape[-1], Re.dtype
    eye = jnp.broadcast_to(jnp.eye(3, dtype=dt)[..., None], (1, 3, 3, B))
    return jnp.concatenate([Re, eye], 0), jnp.concatenate([pe, jnp.zeros((1, 3, B), dt)], 0)


def dense_jacobian(mech: Mechanism, vals, B: int, dt):
    """The dense closure Jacobian (B, s, nv), batch first, from the groups' Jacobian rows on their
    path dofs ``vals`` (one (n * r * m, B) array per group, in group order) and the couplings."""
    from .closure import _jacobian_targets

    topo, nc = mech.topo, len(mech.topo.coupling_names)
    rows, cols_ = _jacobian_targets(mech, list(topo.groups), np.ones(nc, bool))
    vals = list(vals)
    if nc:
        cq = mech.coupling_q[:, topo.lin_q].astype(dt).reshape(-1)
        vals.append(jnp.broadcast_to(cq[:, None], (cq.size, B)))
    J = jnp.zeros((B, mech.n_rows, mech.nv), dt)
    if not vals:
        return J
    # one scatter-add into the batch-first output (measured faster than a batch-last buffer and
    # a transpose: Kangaroo 18 against 26 us per state at 256 states; session 35: 7.1 against 46)
    return J.at[:, rows, cols_].add(jnp.concatenate(vals, 0).T)


def closure_residual_and_jacobian(mech: Mechanism, QT, with_jac: bool = True, defect_inv=None):
    """Residual (B, s) and, with ``with_jac``, Jacobian (B, s, nv) of the states ``QT`` (nq, B),
    batch first on output (as ``vmap`` returns them). All loops and couplings. ``defect_inv``: one
    (n, 4, 4, B) array per group, assembly's defect (see :func:`_group_terms`)."""
    topo, dt, B = mech.topo, QT.dtype, QT.shape[-1]
    Re, pe = world_poses(mech, *local_poses(mech, QT))
    cols = world_columns(mech, Re, pe, QT) if with_jac else None
    Re, pe = with_world(Re, pe)
    res, vals = [], []
    for k, g in enumerate(topo.groups):
        dinv = None if defect_inv is None else defect_inv[k]
        r, j = _rows(mech, g, _group_terms(mech, Re, pe, cols, g, dinv), with_jac)
        res.append(r.reshape(-1, B))
        if with_jac:
            vals.append(j.reshape(-1, B))
    if len(topo.coupling_names):
        res.append(mech.coupling_q.astype(dt) @ QT + _c(mech.coupling_offset.astype(dt)))
    r = jnp.concatenate(res, 0).T if res else jnp.zeros((B, 0), dt)
    return r, (dense_jacobian(mech, vals, B, dt) if with_jac else None)


# ----------------------------------------------------------------------------- dispatch


CHUNK_BUDGET = 1 << 17
"""Lanes x (bodies + speeds + rows) per batch-last call, for wide models: their larger batches run
in chunks of that many states (``jax.lax.map``), so a chunk's intermediates stay in the caches. 48
four-bars side by side (144 bodies, 528 wide: chunks of 128), forward dynamics at batch 1,024:
64 us per state (62x one four-bar) against 102 in chunks of 256; forward kinematics 17.3 in one
batch against 5.6. A model narrow enough for chunks of :data:`CHUNK_MIN_UNCHUNKED` or more states
is not chunked: the stacked outputs cost one more copy (the Stewart's closure rows at batch 4,096:
3.4 us per state in one batch, 4.9 in chunks of 2,048); ``benchmarks/PROFILE.md``, session 35."""

CHUNK_MIN_UNCHUNKED = 1024


def chunk_size(mech: Mechanism) -> int | None:
    """States per batch-last call for ``mech`` (a power of two, at least 64), or None when the
    model is narrow enough to run any batch at once (see :data:`CHUNK_BUDGET`)."""
    width = mech.nb + mech.nv + mech.n_rows
    lanes = 1 << int(np.log2(max(CHUNK_BUDGET // max(width, 1), 1)))
    return max(64, lanes) if lanes < CHUNK_MIN_UNCHUNKED else None


def batched(ref, fast):
    """``ref(mech, *xs)`` for one state; under ``vmap`` over every ``x`` (model unbatched) it runs
    ``fast(mech, *xsT)`` on the whole batch at once, each ``x`` with its batch axis moved last
    (``(B, n)`` -> ``(n, B)``). A batched model, or an ``x`` shared by the batch, takes ``ref``
    vmapped. Derivatives are those of ``ref`` (``custom_jvp``: ``custom_vmap`` has no reverse mode),
    so gradients do not change."""

    @custom_vmap
    def one(mech, *xs):
        return ref(mech, *xs)

    @one.def_vmap
    def _rule(axis_size, in_batched, mech, *xs):
        mech_b, xs_b = in_batched[0], in_batched[1:]
        if any(jax.tree.leaves(mech_b)) or not all(xs_b):  # the per-state code, vmapped
            axes = (jax.tree.map(lambda b: 0 if b else None, mech_b),) + tuple(0 if b else None for b in xs_b)
            out = jax.vmap(ref, in_axes=axes, axis_size=axis_size)(mech, *xs)
        elif chunk_size(mech) is not None and axis_size > chunk_size(mech):  # chunks: each comes back here
            out = jax.lax.map(lambda x: one(mech, *x), xs, batch_size=chunk_size(mech))
        else:
            out = fast(mech, *(jnp.moveaxis(x, 0, -1) for x in xs))
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def f(mech, *xs):
        return one(mech, *xs)

    f.defjvp(jvp_rule(ref), symbolic_zeros=True)  # ref as written, perturbed leaves only
    return f
