"""Level-parallel forward kinematics, frame poses and Jacobians, integrate / difference.

Every joint is evaluated by one generic, fully vectorized formula (no per-type Python branch):

    M(q) = G(p, quat) @ Rot(axis1, th1) @ Rot(axis2, th2) @ Trans(axis_t * d)

where each joint type fills some of (p, quat, th1, th2, d) from q and leaves the rest at the
identity (see ``Topology.q_index``). The 9 body-frame velocity columns of M are: 6 for the SE(3)
part G (free: all, spherical: angular), then th1, th2, d. The child's local transform is
``X = X_parent @ M @ X_child_inv``; world poses are composed depth level by depth level (MJX's
``scan.body_tree`` pattern): depth-many sequential steps, each a batched matmul.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import lie
from ._entry import entry
from .chunking import chunked
from .mechanism import Mechanism


def _q_ext(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    return jnp.concatenate([q, jnp.array([0.0, 1.0], dtype=q.dtype)])


# Helpers marked ``@jax.jit`` are nested programs: a library program that calls one many times
# (assembly evaluates the tree pass in its set-up, its Newton and chord steps and its checks)
# traces and lowers it once per argument shape instead of at every call, and XLA inlines the
# calls, so the compiled code is the same instruction for instruction. Stewart, ``jit(vmap(
# assemble))`` at batch 32: 3,642 top-level equations -> 670, tracing 3.4 -> 1.3-1.8 s,
# lowering 0.6-0.8 -> 0.5 s, same optimized HLO (benchmarks/PROFILE.md, session 33). They take
# a Mechanism (a pytree) and arrays only; ``joint_columns`` stays plain because batchlast calls
# it with a namespace standing in for the model.


@jax.jit
def joint_values(mech: Mechanism, q: jnp.ndarray):
    """Gathered generic joint coordinates: pos (nb, 3), quat (nb, 4), th1, th2, d (nb,)."""
    qe = _q_ext(mech, q)[mech.topo.q_index]
    return qe[:, 0:3], qe[:, 3:7], qe[:, 7] - mech.offset_th, qe[:, 8], qe[:, 9] - mech.offset_d


@jax.jit
def mv3(R, x):
    """``R x`` for (..., 3, 3), (..., 3), as a broadcast product and a sum (XLA's CPU backend runs a
    batched tiny ``dot`` several times slower). One product and one reduction instead of the three
    written-out terms: a third of the primitives, so programs with many frame products (gradients
    above all) trace and compile faster and run no slower (``benchmarks/PROFILE.md``, session 37)."""
    return (R * x[..., None, :]).sum(-1)


@jax.jit
def mtv3(R, x):
    """``R^T x`` for (..., 3, 3), (..., 3), as a broadcast product and a sum (see :func:`mv3`)."""
    return (R * x[..., :, None]).sum(-2)


@jax.jit
def mm3(A, B):
    """``A @ B`` for (..., 3, 3) matrices, as a broadcast product and a sum (see :func:`mv3`)."""
    return (A[..., :, :, None] * B[..., None, :, :]).sum(-2)


def materialize(*xs):
    """The arrays ``xs`` (same shape), computed once into one buffer before their uses.

    XLA:CPU fuses an elementwise producer into each consumer, and a consumer that broadcasts it
    (``sin(th)`` times a 3 x 3 matrix) recomputes it for every output element: 9 sines per hinge
    instead of one (sin and cos of 64 hinges, batch 1,024: 6.2 us per state fused, 1.6 written
    to a buffer). Writing them into one buffer with a spare slot (``dynamic_update_slice``, which
    XLA neither fuses away nor folds) makes the consumers read them instead."""
    buf = jnp.zeros((len(xs) + 1,) + xs[0].shape, xs[0].dtype)
    for k, x in enumerate(xs):
        buf = buf.at[k].set(x)
    return tuple(buf[k] for k in range(len(xs)))


@jax.jit
def rot_unit_axis(a, th):
    """Rotation about the unit axis ``a`` (..., 3) by ``th`` (...,): ``c 1 + s a^ + (1 - c) a a^T``."""
    c, s = materialize(jnp.cos(th), jnp.sin(th))
    c, s = c[..., None, None], s[..., None, None]
    return c * jnp.eye(3, dtype=a.dtype) + s * lie.hat(a) + (1.0 - c) * (a[..., :, None] * a[..., None, :])


def _motion(mech: Mechanism, th1, th2, d):
    """The factors after G: R1 (nb,3,3), R2, and translation td (nb, 3)."""
    R1 = rot_unit_axis(mech.axis1, th1)
    R2 = rot_unit_axis(mech.axis2, th2)
    td = mech.axis_t * d[:, None]
    return R1, R2, td


def _to_child(Rci, pci, w, v):
    """``Ad_{X_child} (w, v)`` with ``X_child_inv = (Rci, pci)``: (..., 6)."""
    return jnp.concatenate([mtv3(Rci, w), mtv3(Rci, v - jnp.cross(pci, w))], -1)


def joint_columns(mech: Mechanism, th1, th2, d) -> jnp.ndarray:
    """Body-frame motion columns of every joint in its child body frame, (nb, 6, 9).

    With ``H1 = R1 R2 Trans(d)``: the G columns are ``Ad_{(H1 X_child_inv)^-1} e_k``, the th1 column
    ``Ad_{X_child} (u, u x td)`` with ``u = R2^T axis1``, the th2 column ``Ad_{X_child} (axis2,
    axis2 x td)`` and the d column ``Ad_{X_child} (0, axis_t)``; all written elementwise."""
    R1, R2, td = _motion(mech, th1, th2, d)
    Rci, pci = mech.X_child_inv[:, :3, :3], mech.X_child_inv[:, :3, 3]
    R12 = mm3(R1, R2)
    RtT = jnp.swapaxes(mm3(R12, Rci), -1, -2)
    pt = mv3(R12, td + pci)
    BL = -mm3(RtT, lie.hat(pt))
    z3 = jnp.zeros_like(RtT)
    col_G = jnp.concatenate([jnp.concatenate([RtT, z3], -1), jnp.concatenate([BL, RtT], -1)], -2)
    u = mtv3(R2, mech.axis1)
    col_1 = _to_child(Rci, pci, u, jnp.cross(u, td))
    col_2 = _to_child(Rci, pci, mech.axis2, jnp.cross(mech.axis2, td))
    col_d = _to_child(Rci, pci, jnp.zeros_like(td), mech.axis_t)
    return jnp.concatenate([col_G, jnp.stack([col_1, col_2, col_d], -1)], -1)


def _pose_classes(mech: Mechanism):
    """Static split of the bodies by which generic slots their joint reads from ``q`` (built once
    per topology): ``hinge`` (th1 only: revolute joints), ``slide`` (d only: prismatic joints) and
    ``other``; plus the position of each body in the concatenation hinge + slide + other."""
    topo = mech.topo
    st = getattr(topo, "_pose_classes", None)
    if st is None:
        used = np.asarray(topo.q_index) < int(mech.nq)  # (nb, 10): pos(3) quat(4) th1 th2 d
        only = lambda cols: used[:, cols].all(1) & ~np.delete(used, cols, 1).any(1)  # noqa: E731
        hinge, slide = np.nonzero(only([7]))[0], np.nonzero(only([9]))[0]
        other = np.setdiff1d(np.arange(mech.nb), np.concatenate([hinge, slide]))
        st = (hinge, slide, other, np.argsort(np.concatenate([hinge, slide, other])))
        object.__setattr__(topo, "_pose_classes", st)
    return st


def _placements(mech: Mechanism, b: np.ndarray):
    """Joint placements of bodies ``b``: parent-side rotation (n, 3, 3) and translation (n, 3),
    then the child-side inverse's rotation and translation (``X_parent``, ``X_child_inv``)."""
    return mech.X_parent[b, :3, :3], mech.X_parent[b, :3, 3], mech.X_child_inv[b, :3, :3], mech.X_child_inv[b, :3, 3]


def _generic_local_poses(mech: Mechanism, q: jnp.ndarray, b: np.ndarray):
    """Parent-to-child rotations (n, 3, 3) and translations (n, 3) of bodies ``b``: the generic
    formula ``X_parent G(pos, quat) Rot(axis1, th1) Rot(axis2, th2) Trans(axis_t d) X_child_inv``."""
    pos, quat, th1, th2, d = (x[b] for x in joint_values(mech, q))
    R1, R2 = rot_unit_axis(mech.axis1[b], th1), rot_unit_axis(mech.axis2[b], th2)
    Rm = mm3(lie.quat_to_matrix(quat), mm3(R1, R2))
    pm = pos + mv3(Rm, mech.axis_t[b] * d[:, None])
    Rp, pp, Rc, pc = _placements(mech, b)
    RpRm = mm3(Rp, Rm)
    return mm3(RpRm, Rc), mv3(RpRm, pc) + mv3(Rp, pm) + pp


@jax.jit
def local_poses(mech: Mechanism, q: jnp.ndarray):
    """Parent-to-child rotations (nb, 3, 3) and translations (nb, 3) of all moving bodies.

    The generic formula (:func:`_generic_local_poses`) is specialized where a joint reads one slot
    of ``q``. For a hinge, ``Rot(a, th) = I + sin(th) a^ + (1 - cos(th)) a^2``, so
    ``R = A + sin(th) B + (1 - cos(th)) C`` with ``A = Rp Rc``, ``B = Rp a^ Rc``, ``C = Rp a^2 Rc``,
    and ``p`` likewise. For a slide, ``R = A Rc`` and ``p = A (pc + d a_t) + pp`` with ``A = Rp Rot(a_1, -offset)``. The
    coefficients depend on the model only, so under ``vmap`` they are computed once per call, not
    once per state. This takes ~50 flops per hinge against ~300 for the generic product."""
    hinge, slide, other, back = _pose_classes(mech)
    if not (hinge.size or slide.size):
        return _generic_local_poses(mech, q, other)
    qe = _q_ext(mech, q)
    Rs, ps = [], []
    if hinge.size:
        b = hinge
        Rp, pp, Rc, pc = _placements(mech, b)
        ah = lie.hat(mech.axis1[b])
        u = pc + mech.axis_t[b] * (qe[mech.topo.q_index[b, 9]] - mech.offset_d[b])[:, None]  # d: a constant here
        Rpa = mm3(Rp, ah)
        Rpa2 = mm3(Rpa, ah)
        th = qe[mech.topo.q_index[b, 7]] - mech.offset_th[b]
        s, c1 = materialize(jnp.sin(th), 1.0 - jnp.cos(th))
        s, c1 = s[:, None], c1[:, None]
        Rs.append(mm3(Rp, Rc) + s[..., None] * mm3(Rpa, Rc) + c1[..., None] * mm3(Rpa2, Rc))
        ps.append(mv3(Rp, u) + pp + s * mv3(Rpa, u) + c1 * mv3(Rpa2, u))
    if slide.size:
        b = slide
        Rp, pp, Rc, pc = _placements(mech, b)
        d = qe[mech.topo.q_index[b, 9]] - mech.offset_d[b]
        A = mm3(Rp, rot_unit_axis(mech.axis1[b], qe[mech.topo.q_index[b, 7]] - mech.offset_th[b]))  # a constant
        Rs.append(mm3(A, Rc))
        ps.append(mv3(A, pc) + pp + d[:, None] * mv3(A, mech.axis_t[b]))
    if other.size:
        R, p = _generic_local_poses(mech, q, other)
        Rs.append(R)
        ps.append(p)
    return jnp.concatenate(Rs, 0)[back], jnp.concatenate(ps, 0)[back]


def local_transforms(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """Parent-to-child transforms of all moving bodies, (nb, 4, 4).

    As 4 x 4 matrix products: the articulated-body pass (:func:`jaxmech.aba`) and the MJCF export
    take it; every world-frame pass uses :func:`local_poses` (rotation and translation apart)."""
    pos, quat, th1, th2, d = joint_values(mech, q)
    R12 = lie.rot_axis(mech.axis1, th1) @ lie.rot_axis(mech.axis2, th2)
    Rq = lie.quat_to_matrix(quat)
    td = mech.axis_t * d[:, None]
    M = lie.make_pose(Rq @ R12, pos + jnp.einsum("nij,nj->ni", Rq @ R12, td))
    return mech.X_parent @ M @ mech.X_child_inv


def _levels(mech: Mechanism):
    """Padded level table (n_levels, width) and the parent of each entry (same shape) for ``lax.scan`` sweeps.

    Slot ``nb`` is the world, slot ``nb + 1`` a scratch slot that absorbs the padding (its per-body
    data are zeros, its parent is itself), so every level is one fixed-shape gather / scatter and
    the traced program does not grow with the depth."""
    topo = mech.topo
    nb = len(topo.body_names)
    width = max((len(lv) for lv in topo.levels), default=1)
    tab = np.full((max(1, len(topo.levels)), width), nb + 1, dtype=np.int32)
    for i, lv in enumerate(topo.levels):
        tab[i, : len(lv)] = lv
    par = np.concatenate([np.where(topo.parent < 0, nb, topo.parent), [nb + 1, nb + 1]]).astype(np.int32)
    return tab, par[tab]


def _pad2(x: jnp.ndarray) -> jnp.ndarray:
    """Append two zero rows (world and scratch slots)."""
    return jnp.concatenate([x, jnp.zeros((2,) + x.shape[1:], x.dtype)], 0)


@jax.jit
def _world_poses(mech: Mechanism, Rl: jnp.ndarray, pl: jnp.ndarray):
    """World rotations (nb, 3, 3) and positions (nb, 3) from local rotations and translations: one
    ``lax.scan`` step per depth level (padded level table: the program does not grow with depth)."""
    nb, dt = mech.nb, Rl.dtype
    xs = _levels(mech)
    Rl, pl = _pad2(Rl), _pad2(pl)
    R0 = jnp.zeros((nb + 2, 3, 3), dt).at[nb].set(jnp.eye(3, dtype=dt))

    def down(carry, x):
        idx, pidx = x
        R, p = carry
        Rp = R[pidx]
        return (R.at[idx].set(mm3(Rp, Rl[idx])), p.at[idx].set(mv3(Rp, pl[idx]) + p[pidx])), None

    (R, p), _ = jax.lax.scan(down, (R0, jnp.zeros((nb + 2, 3), dt)), xs)
    return R[:nb], p[:nb]


def world_poses(mech: Mechanism, q: jnp.ndarray):
    """World rotations (nb, 3, 3) and positions (nb, 3) of all moving bodies."""
    return _world_poses(mech, *local_poses(mech, q))


def _mm4(A: jnp.ndarray, B: jnp.ndarray) -> jnp.ndarray:
    """``A @ B`` for (..., 4, 4) poses as an elementwise product and sum, not a dot: under a vmap
    nested in a vmap, XLA:CPU (jaxlib 0.10) emits a batched dot here whose layout fails its own HLO
    verifier ("Expected instruction to have shape equal to f32[7,9,4,4,4], actual
    f32[4,7,9,4,4]"), and on GPUs a float32 dot may run in TF32."""
    return jnp.sum(A[..., :, :, None] * B[..., None, :, :], axis=-2)


@entry()
@chunked
def forward_kinematics(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """World poses of all moving bodies, shape (nb, 4, 4), in ``mech.body_names`` order. Under
    ``vmap`` the batch-last kernels of :mod:`jaxmech.batchlast` run (same formulas)."""
    return _fk_batched()(mech, q)


def _fk_one(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    return lie.make_pose(*world_poses(mech, q))


@functools.cache
def _fk_batched():
    from . import batchlast

    return batchlast.batched(_fk_one, batchlast.forward_kinematics)


def _frame_slot(mech: Mechanism, name: str) -> tuple[int, int]:
    """``(body, slot)`` of a named frame, site or body: the body it moves with (-1 for the world)
    and its row in :func:`_frame_offsets` (its pose in that body; the last row, the identity, for a
    body's own frame and the world)."""
    topo = mech.topo
    if name in topo.frame_names:
        k = topo.frame_names.index(name)
        return int(topo.frame_body[k]), k
    if name in topo.body_names:
        return topo.body_names.index(name), len(topo.frame_names)
    if name == "world":
        return -1, len(topo.frame_names)
    raise KeyError(f"{mech.name}: unknown frame or body '{name}' (frames: {', '.join(topo.frame_names) or 'none'})")


def _frame_offsets(mech: Mechanism) -> jnp.ndarray:
    """(nf + 1, 4, 4): every named frame's pose in its body, then the identity."""
    fp = mech.frame_pose
    return jnp.concatenate([fp, jnp.eye(4, dtype=fp.dtype)[None]], 0)


def _frame_lookup(mech: Mechanism, name: str):
    """``(body, pose in that body)`` of a named frame, site or body (body -1: the world)."""
    b, k = _frame_slot(mech, name)
    return b, (mech.frame_pose[k] if k < len(mech.topo.frame_names) else jnp.eye(4))


def frame_pose(mech: Mechanism, q: jnp.ndarray, name: str) -> jnp.ndarray:
    """World pose (4, 4) of a named frame, site or body.

    The name is resolved here; the compiled program behind eager calls takes the body and frame
    indices as arguments, so every frame of a model shares one compilation."""
    b, k = _frame_slot(mech, name)
    if b < 0:
        return jnp.eye(4)
    return _frame_pose_at(mech, q, b, k)


@entry()
def _frame_pose_at(mech: Mechanism, q: jnp.ndarray, b, k) -> jnp.ndarray:
    """:func:`frame_pose` of body ``b`` and frame slot ``k`` (ints; traced in the eager program)."""
    return _mm4(forward_kinematics(mech, q)[b], _frame_offsets(mech)[k])


def twist_to_world(R, p, x):
    """``Ad_T x`` for the pose ``T = (R, p)``: a twist (..., 6) in the body frame to the world."""
    w = mv3(R, x[..., :3])
    return jnp.concatenate([w, mv3(R, x[..., 3:]) + jnp.cross(p, w)], -1)


def world_columns(mech: Mechanism, R, p, S) -> jnp.ndarray:
    """World spatial motion column ``Ad_T S`` (nv, 6) of every velocity coordinate, from world body
    poses ``R`` (nb, 3, 3), ``p`` (nb, 3) and the joint columns ``S`` (nb, 6, 9) of
    :func:`joint_columns` (the one implementation; :mod:`jaxmech.batchlast` has its batch-last form)."""
    topo = mech.topo
    return twist_to_world(R[topo.v_body], p[topo.v_body], S[topo.v_body, :, topo.v_col])


def _poses_and_columns(mech: Mechanism, q: jnp.ndarray):
    """World body poses ``R`` (nb, 3, 3), ``p`` (nb, 3) and world motion columns (nv, 6) of ``q``."""
    _, _, th1, th2, d = joint_values(mech, q)
    R, p = _world_poses(mech, *local_poses(mech, q))
    return R, p, world_columns(mech, R, p, joint_columns(mech, th1, th2, d))


def motion_columns(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """Body-frame motion subspace column of every velocity coordinate, (nv, 6) (its own body)."""
    _, _, th1, th2, d = joint_values(mech, q)
    S = joint_columns(mech, th1, th2, d)  # (nb, 6, 9)
    return S[mech.topo.v_body, :, mech.topo.v_col]


_REFERENCES = ("local", "world", "world_aligned")


def frame_jacobian(mech: Mechanism, q: jnp.ndarray, name: str, reference: str = "local") -> jnp.ndarray:
    """Jacobian (6, nv) of a named frame's twist, angular-first.

    ``reference="local"``: body twist of the frame (expressed in the frame);
    ``"world"``: spatial twist in the world frame; ``"world_aligned"``: the frame origin's
    angular and linear velocity in world axes (Pinocchio's LOCAL_WORLD_ALIGNED). As in
    :func:`frame_pose`, every frame of a model shares one compiled program per ``reference``."""
    if reference not in _REFERENCES:
        raise ValueError(f"reference must be 'local', 'world' or 'world_aligned', got {reference!r}")
    b, k = _frame_slot(mech, name)
    if b < 0:
        return jnp.zeros((6, mech.nv), jnp.asarray(q).dtype)
    return _frame_jacobian_at(mech, q, b, k, reference)


@entry(static_argnames=("reference",))
def _frame_jacobian_at(mech: Mechanism, q: jnp.ndarray, b, k, reference: str) -> jnp.ndarray:
    """:func:`frame_jacobian` of body ``b`` and frame slot ``k`` (ints; traced in the eager program)."""
    R, p, cols = _poses_and_columns(mech, q)  # world spatial twists of the coordinates
    cols = cols * jnp.asarray(mech.topo.ancestor, cols.dtype)[b][:, None]
    Jw = cols.T  # (6, nv) world spatial
    Tf = lie.make_pose(R[b], p[b]) @ _frame_offsets(mech)[k]
    if reference == "world":
        return Jw
    if reference == "local":
        return lie.adjoint(lie.se3_inv(Tf)) @ Jw
    p = Tf[:3, 3]  # "world_aligned"
    return jnp.concatenate([Jw[:3], Jw[3:] - lie.hat(p) @ Jw[:3]], 0)


# ----------------------------------------------------------------------------- integrate


@entry()
def integrate(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray, dt=1.0) -> jnp.ndarray:
    """``q (+) v dt``: additive for 1-D coordinates, ``quat * Exp(w dt)`` for spherical joints and
    ``T * Exp(xi dt)`` (SE(3) exponential of the body twist) for free joints. (nq,)."""
    t = mech.topo
    dv = v * dt
    out = q
    if t.lin_q.size:
        out = out.at[t.lin_q].add(dv[t.lin_v])
    if t.sph_q.size:
        qs = q[t.sph_q]
        out = out.at[t.sph_q].set(lie.quat_normalize(lie.quat_mul(qs, lie.quat_exp(dv[t.sph_v]))))
    if t.free_q.size:
        qf = q[t.free_q]
        T = lie.make_pose(lie.quat_to_matrix(qf[:, 3:]), qf[:, :3])
        xi = dv[t.free_v]
        Tn = T @ lie.se3_exp(xi)
        quat = lie.quat_normalize(lie.quat_mul(qf[:, 3:], lie.quat_exp(xi[:, :3])))
        out = out.at[t.free_q].set(jnp.concatenate([Tn[:, :3, 3], quat], -1))
    return out


@entry()
def difference(mech: Mechanism, q0: jnp.ndarray, q1: jnp.ndarray) -> jnp.ndarray:
    """Inverse of :func:`integrate` with dt = 1: v with ``integrate(q0, v) == q1``. (nv,)."""
    t = mech.topo
    v = jnp.zeros(mech.nv, q0.dtype)
    if t.lin_q.size:
        v = v.at[t.lin_v].set(q1[t.lin_q] - q0[t.lin_q])
    if t.sph_q.size:
        a, b = q0[t.sph_q], q1[t.sph_q]
        v = v.at[t.sph_v].set(lie.quat_log(lie.quat_mul(lie.quat_conj(a), b) / (jnp.sum(a * a, -1, keepdims=True))))
    if t.free_q.size:
        a, b = q0[t.free_q], q1[t.free_q]
        Ta = lie.make_pose(lie.quat_to_matrix(a[:, 3:]), a[:, :3])
        Tb = lie.make_pose(lie.quat_to_matrix(b[:, 3:]), b[:, :3])
        v = v.at[t.free_v].set(lie.se3_log(lie.se3_inv(Ta) @ Tb))
    return v


def normalize(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """Project quaternions back to unit norm."""
    t = mech.topo
    for idx in (t.sph_q, t.free_q[:, 3:] if t.free_q.size else t.free_q):
        if idx.size:
            q = q.at[idx].set(lie.quat_normalize(q[idx]))
    return q


@entry()
def random_configuration(mech: Mechanism, key, scale: float = 1.0) -> jnp.ndarray:
    """A random q: 1-D coordinates uniform within limits (or +-scale where unbounded),
    random unit quaternions, free-joint positions +-scale. For tests and benchmarks."""
    t = mech.topo
    k1, k2, k3 = jax.random.split(key, 3)
    q = jnp.array(mech.q0)
    if t.lin_q.size:
        lo = jnp.where(jnp.isfinite(mech.lower[t.lin_q]), mech.lower[t.lin_q], -scale)
        hi = jnp.where(jnp.isfinite(mech.upper[t.lin_q]), mech.upper[t.lin_q], scale)
        q = q.at[t.lin_q].set(jax.random.uniform(k1, (t.lin_q.size,), minval=lo, maxval=hi))
    quats = []
    if t.sph_q.size:
        quats.append(t.sph_q)
    if t.free_q.size:
        quats.append(t.free_q[:, 3:])
        q = q.at[t.free_q[:, :3]].set(jax.random.uniform(k3, t.free_q[:, :3].shape, minval=-scale, maxval=scale))
    for idx in quats:
        u = jax.random.normal(k2, idx.shape)
        q = q.at[idx].set(lie.quat_normalize(u))
    return q
