"""Closure residuals and their analytic Jacobians (paper 001 section 2).

For a closure element with paths T+ (root -> frame A) and T- (root -> frame B) the mismatch is
``Delta = inv(T+) @ T-`` (paper 001 eq. (5)). With the right-trivialized path derivatives
``eta_j = sum_k Ad_{A_k} xi_{k,j}`` (eq. (11)) the right-trivialized mismatch rate in frame A is

    W_j = Ad_{inv(T+)} (eta-_j - eta+_j)                                  (eq. (12), before J_l^-1)

and each cut type turns ``Delta`` and ``W`` into its rows:

* weld / pose: ``rho = Log(Delta)``, rows ``J_l^-1(rho) W`` (selected axes for ``pose``);
* point: ``p = translation(Delta)``, rows ``[-p^, I] W``;
* revolute / cylindrical / universal: ``p`` rows plus axis rows ``e_i . R e_k`` (universal minus
  ``cut_length`` = cos of the angle between its axes) with rate
  ``-e_i^T (R e_k)^ omega``;
* prismatic: ``log(R)`` rows ``J_l^-1_SO3 omega`` plus the two transverse ``p`` rows;
* distance: ``|p| - length`` with rate ``p^T v / |p|``;
* couplings: ``sum c q + offset`` (linear).

The public functions evaluate ``Delta`` and ``W`` from one world-frame tree pass: world body
poses by depth level (``T+ = T_A``, ``T- = T_B`` from the common root), and ``W`` from the world
columns of the dofs on the two paths (``Ad_{T_A^-1}`` of their signed sum), vectorized over the
loops of each type. That shares the path products between loops (1.7-2x faster than one path
product per loop; ``benchmarks/PROFILE.md``, session 17). Assembly's defect
homotopy evaluates the same pass with its defect applied to each ``Delta`` (``defect_inv``). Rows touch
only their loop's path dofs, so the Jacobian is block-sparse, and a subset of loops can be
evaluated alone (``loops=``).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

from . import batchlast, lie
from ._entry import entry
from .chunking import chunked
from .constraint_types import ROW_TYPES
from .kinpass import (
    _world_poses,
    integrate,
    joint_columns,
    joint_values,
    local_poses,
    mm3,
    mtv3,
    mv3,
    world_columns,
)
from .mechanism import LoopGroup, Mechanism


def _rows(mech: Mechanism, g: LoopGroup, Delta: jnp.ndarray, W: jnp.ndarray, with_jac: bool = True):
    """Residual rows (n, r) and Jacobian rows (n, r, m) of one group (its type's
    :meth:`jaxmech.constraint_types.RowType.rows`)."""
    return ROW_TYPES[g.type].rows(mech, g, Delta, W, with_jac)


def _select_groups(mech: Mechanism, loops) -> tuple[list[LoopGroup], bool]:
    """Groups restricted to the named loops (static), and whether couplings are included."""
    if loops is None:
        return list(mech.topo.groups), True
    names = [loops] if isinstance(loops, str) else list(loops)
    unknown = [n for n in names if n not in mech.topo.loop_names and n not in mech.topo.coupling_names]
    if unknown:
        raise KeyError(f"{mech.name}: unknown loops {unknown} (loops: {', '.join(mech.topo.loop_names)})")
    out = []
    for g in mech.topo.groups:
        keep = np.array([n in names for n in g.names])
        if keep.any():
            r = len(g.rows)
            out.append(
                replace(
                    g,
                    names=tuple(np.array(g.names)[keep]),
                    path_plus=g.path_plus[keep],
                    path_minus=g.path_minus[keep],
                    dof_v=g.dof_v[keep],
                    dof_pos=g.dof_pos[keep],
                    dof_sign=g.dof_sign[keep],
                    dof_body=g.dof_body[keep],
                    dof_col=g.dof_col[keep],
                    param_index=g.param_index[keep],
                    loop_id=g.loop_id[keep],
                    row_offset=g.row_offset,
                )
            )
            object.__setattr__(
                out[-1], "_rows_index", (g.row_offset + np.nonzero(keep)[0][:, None] * r + np.arange(r)).ravel()
            )
    return out, any(n in mech.topo.coupling_names for n in names)


def _world_frame(mech: Mechanism, q: jnp.ndarray):
    """World body rotations (nb + 1, 3, 3) and positions (nb + 1, 3), the world appended last."""
    dt = q.dtype
    R, p = _world_poses(mech, *local_poses(mech, q))
    return jnp.concatenate([R, jnp.eye(3, dtype=dt)[None]], 0), jnp.concatenate([p, jnp.zeros((1, 3), dt)], 0)


def group_mismatches(mech: Mechanism, q: jnp.ndarray) -> tuple:
    """``Delta`` (n, 4, 4) of every loop group (``mech.topo.groups`` order), from one tree pass."""
    Re, pe = _world_frame(mech, q)
    return tuple(_world_group_terms(mech, Re, pe, None, g)[0] for g in mech.topo.groups)


def _evaluate(mech: Mechanism, q: jnp.ndarray, loops, with_jac: bool, defect_inv=None):
    """Residual (s,) and, with ``with_jac``, Jacobian (s, nv) from one world-frame tree pass
    (poses by depth level, world columns of the path dofs): 1.7-2x faster than a path product per
    loop (benchmarks/PROFILE.md). ``defect_inv``: per group (n, 4, 4) constant transforms that
    right-multiply ``Delta`` (assembly's defect homotopy; ``loops`` must be None); the Jacobian
    rows keep ``W``, since a constant right factor leaves the right-trivialized rate unchanged."""
    groups, coup = _select_groups(mech, loops)
    topo, dt = mech.topo, q.dtype
    Re, pe = _world_frame(mech, q)
    cols = None
    if with_jac:
        _, _, th1, th2, d = joint_values(mech, q)
        cols = world_columns(mech, Re[:-1], pe[:-1], joint_columns(mech, th1, th2, d))  # (nv, 6) Ad_T S
    res, jacs = [], []
    for k, g in enumerate(groups):
        Delta, W, _, _ = _world_group_terms(mech, Re, pe, cols, g)
        if defect_inv is not None:
            Delta = Delta @ defect_inv[k]
        r, j = _rows(mech, g, Delta, W, with_jac)
        res.append(r.reshape(-1))
        if with_jac:
            jacs.append(j)
    nc = len(topo.coupling_names)
    sel = np.zeros(0, bool)
    if coup and nc:
        names = None if loops is None else ([loops] if isinstance(loops, str) else list(loops))
        sel = np.array([names is None or n in names for n in topo.coupling_names])
        res.append((mech.coupling_q @ q + mech.coupling_offset)[sel])
    r = jnp.concatenate(res) if res else jnp.zeros(0, dt)
    J = _dense_jacobian(mech, groups, jacs, sel, dt, r.shape[0]) if with_jac else None
    return r, J


def _jacobian_targets(mech: Mechanism, groups, sel) -> tuple[np.ndarray, np.ndarray]:
    """Static (row, column) of every entry of the flat list of the groups' path-column blocks
    (n, r, m) each, in order, then of the selected couplings' ``coupling_q[:, lin_q]`` entries.
    Padded path slots (``dof_sign == 0``) carry zeros and point at their placeholder column."""
    rows, cols = [], []
    row0 = 0
    for g in groups:
        n, m = g.dof_v.shape
        nr = len(g.rows)
        i, rr, mm = np.meshgrid(np.arange(n), np.arange(nr), np.arange(m), indexing="ij")
        rows.append((row0 + i * nr + rr).ravel())
        cols.append(g.dof_v[i, mm].ravel())
        row0 += n * nr
    lin_v = np.asarray(mech.topo.lin_v)
    for _ in np.nonzero(sel)[0]:
        rows.append(np.full(lin_v.size, row0))
        cols.append(lin_v)
        row0 += 1
    return (np.concatenate(rows), np.concatenate(cols)) if rows else (np.zeros(0, int), np.zeros(0, int))


def _dense_jacobian(mech: Mechanism, groups, jacs, sel, dt, n_rows: int):
    """The dense Jacobian (n_rows, nv) from the groups' path-column blocks ``jacs`` (n, r, m) each
    and the selected coupling rows, by one scatter-add into one zero buffer. (It was a zero block
    per group, then a concatenation of the dense blocks: on Kangaroo's 80 x 82 Jacobian those
    copies cost 10-17 % of residual + Jacobian.)"""
    rows, cols = _jacobian_targets(mech, groups, sel)
    vals = [j.reshape(-1) for j in jacs]
    if sel.any():
        vals.append(mech.coupling_q[np.nonzero(sel)[0]][:, mech.topo.lin_q].astype(dt).reshape(-1))
    out = jnp.zeros((n_rows, mech.nv), dt)
    return out.at[rows, cols].add(jnp.concatenate(vals)) if vals else out


def closure_rows(mech: Mechanism, loops=None) -> np.ndarray:
    """Indices, in the full residual, of the rows of the named loops (all rows if None)."""
    if loops is None:
        return np.arange(mech.n_rows)
    groups, coup = _select_groups(mech, loops)
    idx = [g._rows_index for g in groups]  # type: ignore[attr-defined]
    names = [loops] if isinstance(loops, str) else list(loops)
    if coup:
        idx.append(
            np.array([mech.topo.coupling_rows + k for k, n in enumerate(mech.topo.coupling_names) if n in names])
        )
    return np.concatenate(idx) if idx else np.zeros(0, dtype=int)


def cut_bodies(mech: Mechanism, g: LoopGroup) -> tuple[np.ndarray, np.ndarray]:
    """Static body slots (n,) carrying cut frames A and B of a group's loops (``nb``: the world)."""
    nb = mech.nb
    lb = np.array([mech.topo.loop_bodies[li] for li in g.loop_id], dtype=int).reshape(-1, 2)
    return np.where(lb[:, 0] < 0, nb, lb[:, 0]), np.where(lb[:, 1] < 0, nb, lb[:, 1])


def _world_group_terms(mech: Mechanism, Re, pe, cols, g: LoopGroup):
    """``(Delta, W, (RA, pA), (ba, bb))`` of a loop group from one world-frame tree pass.

    ``Delta`` (n, 4, 4) cut pose B in cut frame A; ``W`` (n, 6, m) the path columns in cut frame
    A (with world columns ``cols`` (nv, 6); (n, 6, 0) when ``cols`` is None); ``RA`` (n, 3, 3),
    ``pA`` (n, 3) world pose of cut frame A; ``ba``, ``bb`` (n,) static body slots. ``Re`` /
    ``pe``: world body poses with the world appended (slot nb). Same values as
    a path product per loop, with one tree pass shared by all loops."""
    topo = mech.topo
    dt = Re.dtype
    ba, bb = cut_bodies(mech, g)
    Ca, Cb = mech.cut_pose_a[g.param_index].astype(dt), mech.cut_pose_b[g.param_index].astype(dt)
    RA, pA = mm3(Re[ba], Ca[:, :3, :3]), mv3(Re[ba], Ca[:, :3, 3]) + pe[ba]
    RB, pB = mm3(Re[bb], Cb[:, :3, :3]), mv3(Re[bb], Cb[:, :3, 3]) + pe[bb]
    Delta = lie.make_pose(mm3(jnp.swapaxes(RA, -1, -2), RB), mtv3(RA, pB - pA))
    if cols is None:  # residual only: no columns (an empty block keeps _rows' shapes)
        return Delta, jnp.zeros((ba.size, 6, 0), dt), (RA, pA), (ba, bb)
    anc = np.concatenate([topo.ancestor, np.zeros((1, mech.nv), bool)], 0).astype(float)
    n = ba.size
    sign = (anc[bb] - anc[ba])[np.arange(n)[:, None], g.dof_v] * (g.dof_sign != 0)  # (n, m) static
    x = cols[g.dof_v] * jnp.asarray(sign, dt)[..., None]  # (n, m, 6) world columns on the paths
    RA_, pA_ = RA[:, None], pA[:, None]
    w = mtv3(RA_, x[..., :3])
    lin = mtv3(RA_, x[..., 3:] - jnp.cross(pA_, x[..., :3]))
    return Delta, jnp.swapaxes(jnp.concatenate([w, lin], -1), -1, -2), (RA, pA), (ba, bb)


@entry(static_argnames=("loops",))
@chunked
def closure_residual(mech: Mechanism, q: jnp.ndarray, loops=None) -> jnp.ndarray:
    """Raw closure residual rows, shape (s,) (or the rows of the named ``loops`` only).

    Row meaning: ``mech.topo.row_names``. Units: metres for position rows, radians for
    rotation-log rows, dimensionless for axis rows, the joint units for couplings."""
    if loops is None:
        return _all_rows(False)(mech, q)[0]
    return _evaluate(mech, q, loops, with_jac=False)[0]


@entry(static_argnames=("loops",))
@chunked
def closure_jacobian(mech: Mechanism, q: jnp.ndarray, loops=None) -> jnp.ndarray:
    """Analytic closure Jacobian in velocity coordinates, ``C = D rho N``, shape (s, nv):
    ``d/dt rho(q) = C v``. Built from right-trivialized path derivatives and the inverse left
    Jacobian (paper 001 eq. (11)-(12))."""
    if loops is None:
        return _all_rows(True)(mech, q)[1]
    return _evaluate(mech, q, loops, with_jac=True)[1]


@entry(static_argnames=("loops",))
@chunked
def closure_residual_and_jacobian(mech: Mechanism, q: jnp.ndarray, loops=None):
    """Both at once (shares the path products): ((s,), (s, nv))."""
    if loops is None:
        return _all_rows(True)(mech, q)
    return _evaluate(mech, q, loops, with_jac=True)


@functools.cache
def _all_rows(with_jac: bool):
    """All rows (and the Jacobian) of one state; under ``vmap`` the batch-last kernels of
    :mod:`jaxmech.batchlast` (same formulas, 2-3x faster on CPU; derivatives from this code).
    Without the Jacobian the second output is None. Extra arguments after ``q`` are the defect's
    per-group transforms (n, 4, 4) of :func:`_evaluate` (assembly's defected closure, all rows)."""

    def ref(mech, q, *defect_inv):
        r, J = _evaluate(mech, q, None, with_jac, defect_inv or None)
        return (r, J) if with_jac else (r,)

    def fast(mech, QT, *defect_inv):
        r, J = batchlast.closure_residual_and_jacobian(mech, QT, with_jac, defect_inv or None)
        return (r, J) if with_jac else (r,)

    f = batchlast.batched(ref, fast)
    return f if with_jac else (lambda mech, q, *d: (f(mech, q, *d)[0], None))


def closure_jacobian_autodiff(mech: Mechanism, q: jnp.ndarray, loops=None) -> jnp.ndarray:
    """Reference Jacobian: ``jax.jacfwd`` of the residual along ``integrate`` at v = 0. (s, nv)."""
    f = lambda v: closure_residual(mech, integrate(mech, q, v), loops)  # noqa: E731
    return jax.jacfwd(f)(jnp.zeros(mech.nv, q.dtype))


def check_jacobian(mech: Mechanism, q: jnp.ndarray, loops=None) -> dict:
    """Compare the analytic Jacobian with :func:`closure_jacobian_autodiff`.

    Returns ``{"max_abs": ..., "max_rel": ...}`` where the relative error divides by
    ``max(1, |J|_max)`` (so tiny entries do not blow it up)."""
    Ja = closure_jacobian(mech, q, loops)
    Jd = closure_jacobian_autodiff(mech, q, loops)
    err = jnp.max(jnp.abs(Ja - Jd)) if Ja.size else jnp.zeros(())
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(Jd))) if Jd.size else 1.0
    return {"max_abs": err, "max_rel": err / scale}
