"""Constraint curvature ``gamma = Cdot v`` (paper 000: the ``Jdot qdot`` term), analytic.

With ``d/dt rho = C v`` and ``a = dv/dt`` (body-frame quantities for free / spherical joints,
integrated with :func:`jaxmech.integrate`) the closure acceleration is

    d^2/dt^2 rho = C a + gamma,        gamma = (d/dt C) v,

so accelerations consistent with the closure satisfy ``C a + gamma = 0``.

Derivation, per closure element (same cycle-local paths as ``closure.py``; everything is
relative to the loop root, which is exact because ``Delta`` does not depend on the root motion):

* Path velocity in the root frame ``V = sum_j eta_j v_j``; with ``P_k`` the prefix pose of path
  body ``k`` and ``b_k`` its joint's body-frame bias, the velocity-product ("bias") part of
  ``dV/dt`` is ``sum_j ad(V_before_j) eta_j v_j + sum_k Ad_{P_k} b_k`` (``V_before_j``: the
  velocity contributed by dofs strictly above dof j on the same path).
* Joint bias: ``M = G R1(th1) R2(th2) Trans(d)`` has body-frame factor velocities ``c_0``
  (the whole SE(3) part G) ... ``c_3``; with ``v`` held fixed, ``d/dt (S v) = sum_{i<j} ad(c_i) c_j``.
* Mismatch rate in frame A: ``w = Ad_{inv(T+)} (V- - V+)`` (``dDelta = w^ Delta``) and its bias
  ``wb = Ad_{inv(T+)} (bias- - bias+ - ad(V+) (V- - V+))``.
* Rows: Log rows ``rho = Log(Delta)``: ``gamma = J_l^-1(rho) wb + (d/dt J_l^-1(rho)) w`` with
  ``d rho/dt = J_l^-1 w`` (the derivative of the 6x6 operator is a forward-mode directional
  derivative of :func:`lie.se3_left_jacobian_inv`, a local closed form); point rows
  ``p'' = wb_v + wb_w x p + w_w x p'``; axis rows ``e_i . (wb_w x r + w_w x (w_w x r))`` with
  ``r = R e_k``; distance rows ``u . p''_bias + (|p'|^2 - (u . p')^2) / |p|``; couplings are
  linear in q, so their curvature is 0.

Vectorized over the loops of each type group (static masks, no per-loop Python code at run time).

:func:`closure_terms_world` gives ``C`` and ``gamma`` together from a whole-tree world-frame pass
(world poses, world spatial columns, body velocities and velocity-product accelerations, as the
forward dynamics computes them anyway): with ``T_A``, ``T_B`` the world poses of the cut frames,
``W = Ad_{T_A^-1} (J_B - J_A)``, ``w = Ad_{T_A^-1} (V_B - V_A)`` and
``wb = Ad_{T_A^-1} (Ab_B - Ab_A - ad(V_A) (V_B - V_A))``, the same rows as above (the loop root's
motion cancels in the differences, so this equals the cycle-local form).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import lie
from ._entry import entry
from .closure import _group_parts, _rows, _scatter_rows, _select_groups, _world_group_terms, closure_jacobian
from .constraint_types import ROW_TYPES
from .kinpass import integrate, joint_columns, joint_values, local_transforms_ext, mtv3
from .mechanism import LoopGroup, Mechanism


def _ad(x: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
    """Spatial cross product ``ad_x y`` for (..., 6) twists, angular-first."""
    wx, vx, wy, vy = x[..., :3], x[..., 3:], y[..., :3], y[..., 3:]
    return jnp.concatenate([jnp.cross(wx, wy), jnp.cross(vx, wy) + jnp.cross(wx, vy)], -1)


def joint_bias(mech: Mechanism, S: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
    """Body-frame velocity-product acceleration of every joint, (nb, 6) in the child frame.

    ``S`` (nb, 6, 9) from :func:`kinematics.joint_columns`. Zero for one-axis joints, free and
    spherical joints; non-zero for universal joints (and any factor product that moves its axes)."""
    vcol = jnp.concatenate([v, jnp.zeros(1, v.dtype)])[mech.topo.v_index]  # (nb, 9), -1 -> 0
    c0 = jnp.einsum("nik,nk->ni", S[:, :, :6], vcol[:, :6])
    c1, c2, c3 = (S[:, :, k] * vcol[:, k : k + 1] for k in (6, 7, 8))
    return _ad(c0, c1 + c2 + c3) + _ad(c1, c2 + c3) + _ad(c2, c3)


def _pair_mask(g: LoopGroup) -> np.ndarray:
    """(n, m, m): dof l lies strictly above dof j on the same path (both real dofs)."""
    s, p = g.dof_sign, g.dof_pos
    same = (s[:, :, None] == s[:, None, :]) & (s[:, :, None] != 0)
    return (same & (p[:, None, :] < p[:, :, None])).astype(float)


def _group_rate_bias(mech: Mechanism, X, S, bias_ext, g: LoopGroup, v):
    """Delta (n, 4, 4), mismatch rate w (n, 6) and its velocity-product part wb (n, 6)."""
    parts = _group_parts(mech, X, S, g)
    eta, Tpi = parts["eta"], parts["Tpi"]
    sign = jnp.asarray(g.dof_sign, eta.dtype)
    e = eta * v[g.dof_v][..., None]  # (n, m, 6) unsigned velocity contributions
    V_before = jnp.einsum("njl,nli->nji", jnp.asarray(_pair_mask(g), eta.dtype), e)
    pair = jnp.einsum("nj,nji->ni", sign, _ad(V_before, e))  # minus-path bias - plus-path bias
    Vp = -jnp.einsum("nj,nji->ni", jnp.minimum(sign, 0.0), e)  # V+ (plus dofs carry sign -1)
    Dv = jnp.einsum("nj,nji->ni", sign, e)  # V- - V+
    # joint biases of the path bodies, moved to the root frame (pads: body nb -> zero)
    bp = jnp.einsum("nkij,nkj->ni", lie.adjoint(parts["Pp"]), bias_ext[g.path_plus])
    bm = jnp.einsum("nkij,nkj->ni", lie.adjoint(parts["Pm"]), bias_ext[g.path_minus])
    Ai = lie.adjoint(Tpi)
    w = jnp.einsum("nij,nj->ni", Ai, Dv)
    wb = jnp.einsum("nij,nj->ni", Ai, pair + bm - bp - _ad(Vp, Dv))
    return parts["Delta"], w, wb


def _rows_bias(mech: Mechanism, g: LoopGroup, Delta, w, wb) -> jnp.ndarray:
    """Curvature rows (n, r) of one group (its type's :meth:`jaxmech.constraint_types.RowType.bias`)."""
    return ROW_TYPES[g.type].bias(mech, g, Delta, w, wb)


@entry(static_argnames=("loops",))
def closure_bias(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray, loops=None) -> jnp.ndarray:
    """Analytic constraint curvature ``gamma = (d/dt C) v``, shape (s,) (or the rows of ``loops``).

    ``q`` (nq,), ``v`` (nv,) (body-frame twists for free / spherical joints). Accelerations
    ``a`` (nv,) consistent with the closure satisfy ``C a + gamma = 0``. Units: the closure row
    units per second squared. Rows follow ``mech.topo.row_names``; coupling rows are 0."""
    groups, coup = _select_groups(mech, loops)
    X = local_transforms_ext(mech, q)
    _, _, th1, th2, d = joint_values(mech, q)
    S = joint_columns(mech, th1, th2, d)
    bias = joint_bias(mech, S, v)
    bias_ext = jnp.concatenate([bias, jnp.zeros((1, 6), bias.dtype)], 0)
    out = []
    for g in groups:
        Delta, w, wb = _group_rate_bias(mech, X, S, bias_ext, g, v)
        out.append(_rows_bias(mech, g, Delta, w, wb).reshape(-1))
    nc = len(mech.topo.coupling_names)
    if coup and nc:
        names = None if loops is None else ([loops] if isinstance(loops, str) else list(loops))
        out.append(jnp.zeros(sum(names is None or n in names for n in mech.topo.coupling_names), q.dtype))
    return jnp.concatenate(out) if out else jnp.zeros(0, q.dtype)


def closure_bias_autodiff(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray, loops=None) -> jnp.ndarray:
    """Reference curvature: ``jax.jvp`` of ``C(q (+) v t) v`` at t = 0. Shape (s,)."""

    def Cv(t):
        return closure_jacobian(mech, integrate(mech, q, v, t), loops) @ v

    return jax.jvp(Cv, (jnp.zeros((), q.dtype),), (jnp.ones((), q.dtype),))[1]


def _to_local(R, p, x, axis=-1):
    """``Ad_{T^-1} x`` for world twists ``x`` with the 6 components on ``axis`` (-1 or -2)."""
    if axis == -2:  # (n, 6, m): columns
        R, p = R[:, None], p[:, None]
        x = jnp.swapaxes(x, -1, -2)
        return jnp.swapaxes(_to_local(R, p, x), -1, -2)
    return jnp.concatenate([mtv3(R, x[..., :3]), mtv3(R, x[..., 3:] - jnp.cross(p, x[..., :3]))], -1)


def closure_terms_world(mech: Mechanism, R, p, cols, V=None, Ab=None):
    """``C`` (s, nv) and ``gamma`` (s,) from a world-frame tree pass (module docstring).

    ``R`` (nb, 3, 3), ``p`` (nb, 3) world body poses; ``cols`` (nv, 6) world spatial columns;
    ``V`` / ``Ab`` (nb, 6) world body velocities and velocity-product accelerations (omit both
    for ``C`` only; ``gamma`` is then None). Same row order and values as
    :func:`jaxmech.closure_jacobian` and :func:`closure_bias`."""
    topo = mech.topo
    nv, dt = mech.nv, cols.dtype
    Re = jnp.concatenate([R, jnp.eye(3, dtype=dt)[None]], 0)  # slot nb: the world
    pe = jnp.concatenate([p, jnp.zeros((1, 3), dt)], 0)
    with_bias = V is not None
    if with_bias:
        Ve = jnp.concatenate([V, jnp.zeros((1, 6), dt)], 0)
        Abe = jnp.concatenate([Ab, jnp.zeros((1, 6), dt)], 0)
    Cs, gs = [], []
    for g in topo.groups:
        Delta, W, (RA, pA), (ba, bb) = _world_group_terms(mech, Re, pe, cols, g)
        _, jac = _rows(mech, g, Delta, W)  # (n, r, m) on the path dofs
        Cs.append(_scatter_rows(mech, g, jac))
        if with_bias:
            dV = Ve[bb] - Ve[ba]
            w = _to_local(RA, pA, dV)
            wb = _to_local(RA, pA, Abe[bb] - Abe[ba] - _ad(Ve[ba], dV))
            gs.append(_rows_bias(mech, g, Delta, w, wb).reshape(-1))
    nc = len(topo.coupling_names)
    if nc:
        Cs.append(jnp.zeros((nc, nv), dt).at[:, topo.lin_v].set(mech.coupling_q[:, topo.lin_q].astype(dt)))
        gs.append(jnp.zeros(nc, dt))
    C = jnp.concatenate(Cs, 0) if Cs else jnp.zeros((0, nv), dt)
    if not with_bias:
        return C, None
    return C, (jnp.concatenate(gs) if gs else jnp.zeros(0, dt))


def closure_terms(mech: Mechanism, kin):
    """``C`` (s, nv) and ``gamma`` (s,) (None when ``kin`` has no velocity) from one
    :func:`jaxmech.kinematics` pass: the same rows as :func:`jaxmech.closure_jacobian` and
    :func:`closure_bias`."""
    return closure_terms_world(mech, kin.R, kin.p, kin.cols, kin.V, kin.Ab)
