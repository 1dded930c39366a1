"""Constraint curvature ``gamma = Cdot v`` (paper 000: the ``Jdot qdot`` term), analytic.

With ``d/dt rho = C v`` and ``a = dv/dt`` (body-frame quantities for free / spherical joints,
integrated with :func:`jaxmech.integrate`) the closure acceleration is

    d^2/dt^2 rho = C a + gamma,        gamma = (d/dt C) v,

so accelerations consistent with the closure satisfy ``C a + gamma = 0``.

Derivation, per closure element, from one world-frame kinematics pass (:func:`jaxmech.kinematics`:
world body poses, world spatial columns ``s_n``, body twists ``V = sum_anc s_n v_n`` and their
velocity-product accelerations ``Ab``, the spatial acceleration at ``a = 0``):

* Joint bias: ``M = G R1(th1) R2(th2) Trans(d)`` has body-frame factor velocities ``c_0``
  (the whole SE(3) part G) ... ``c_3``; with ``v`` held fixed, ``d/dt (S v) = sum_{i<j} ad(c_i) c_j``
  (:func:`joint_bias`); ``Ab`` sums ``ad(V_b) (S_b v_b) + Ad_T (Sdot v)_b`` over ancestors.
* Mismatch rate in cut frame A (world poses ``T_A``, ``T_B`` of the cut frames; ``dDelta = w^ Delta``):
  ``w = Ad_{T_A^-1} (V_B - V_A)`` and its velocity-product part
  ``wb = Ad_{T_A^-1} (Ab_B - Ab_A - ad(V_A) (V_B - V_A))``; the Jacobian columns likewise,
  ``W = Ad_{T_A^-1} (J_B - J_A)``. The loop root's motion cancels in the differences, so this
  equals the cycle-local form of paper 000 (path products from the loop root).
* Rows (:meth:`jaxmech.constraint_types.RowType.bias`): Log rows ``rho = Log(Delta)``:
  ``gamma = J_l^-1(rho) wb + (d/dt J_l^-1(rho)) w`` with ``d rho/dt = J_l^-1 w`` (the derivative
  of the 6x6 operator is a forward-mode directional derivative of
  :func:`lie.se3_left_jacobian_inv`, a local closed form); point rows
  ``p'' = wb_v + wb_w x p + w_w x p'``; axis rows ``e_i . (wb_w x r + w_w x (w_w x r))`` with
  ``r = R e_k``; distance rows ``u . p''_bias + (|p'|^2 - (u . p')^2) / |p|``; couplings are
  linear in q, so their curvature is 0.

Vectorized over the loops of each type group (static masks, no per-loop Python code at run time).
:func:`closure_bias` evaluates all loops or the named ones; :func:`closure_terms_world` gives ``C``
and ``gamma`` together from a pass the caller already has (the forward dynamics).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._entry import entry
from .chunking import chunked
from .closure import _dense_jacobian, _rows, _select_groups, _world_group_terms, closure_jacobian
from .constraint_types import ROW_TYPES
from .kinpass import integrate, mtv3
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


def _rows_bias(mech: Mechanism, g: LoopGroup, Delta, w, wb) -> jnp.ndarray:
    """Curvature rows (n, r) of one group (its type's :meth:`jaxmech.constraint_types.RowType.bias`)."""
    return ROW_TYPES[g.type].bias(mech, g, Delta, w, wb)


@entry(static_argnames=("loops",))
@chunked
def closure_bias(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray, loops=None) -> jnp.ndarray:
    """Analytic constraint curvature ``gamma = (d/dt C) v``, shape (s,) (or the rows of ``loops``).

    ``q`` (nq,), ``v`` (nv,) (body-frame twists for free / spherical joints). Accelerations
    ``a`` (nv,) consistent with the closure satisfy ``C a + gamma = 0``. Units: the closure row
    units per second squared. Rows follow ``mech.topo.row_names``; coupling rows are 0. Computed
    from one world-frame kinematics pass (:func:`jaxmech.kinematics`), as in the forward dynamics;
    ``loops`` evaluates only the named loops' rows (the same formulas, a subset of the groups)."""
    from .dynamics import kinematics

    groups, coup = _select_groups(mech, loops)
    kin = kinematics(mech, q, v)
    Re, pe, Ve, Abe = _with_world(kin.R, kin.p, kin.V, kin.Ab)
    out = []
    for g in groups:
        Delta, _, (RA, pA), (ba, bb) = _world_group_terms(mech, Re, pe, None, g)
        out.append(_group_bias(mech, g, Delta, RA, pA, Ve[ba], Ve[bb], Abe[ba], Abe[bb]))
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


def _with_world(R, p, V=None, Ab=None):
    """World poses, twists and velocity-product accelerations with the world appended (slot nb)."""
    dt = R.dtype
    Re = jnp.concatenate([R, jnp.eye(3, dtype=dt)[None]], 0)
    pe = jnp.concatenate([p, jnp.zeros((1, 3), dt)], 0)
    if V is None:
        return Re, pe, None, None
    z = jnp.zeros((1, 6), dt)
    return Re, pe, jnp.concatenate([V, z], 0), jnp.concatenate([Ab, z], 0)


def _group_bias(mech: Mechanism, g: LoopGroup, Delta, RA, pA, VA, VB, AbA, AbB):
    """Curvature rows of one group (n * r,): the mismatch twist ``w = Ad_{T_A^-1} (V_B - V_A)`` and
    its velocity-product part ``wb = Ad_{T_A^-1} (Ab_B - Ab_A - ad(V_A) (V_B - V_A))`` (world twists
    of the bodies carrying the cut frames) into the type's bias rows."""
    dV = VB - VA
    w = _to_local(RA, pA, dV)
    wb = _to_local(RA, pA, AbB - AbA - _ad(VA, dV))
    return _rows_bias(mech, g, Delta, w, wb).reshape(-1)


def closure_terms_world(mech: Mechanism, R, p, cols, V=None, Ab=None):
    """``C`` (s, nv) and ``gamma`` (s,) from a world-frame tree pass (module docstring).

    ``R`` (nb, 3, 3), ``p`` (nb, 3) world body poses; ``cols`` (nv, 6) world spatial columns;
    ``V`` / ``Ab`` (nb, 6) world body velocities and velocity-product accelerations (omit both
    for ``C`` only; ``gamma`` is then None). Same row order and values as
    :func:`jaxmech.closure_jacobian` and :func:`closure_bias`."""
    topo, dt = mech.topo, cols.dtype
    with_bias = V is not None
    Re, pe, Ve, Abe = _with_world(R, p, V, Ab)
    jacs, gs = [], []
    for g in topo.groups:
        Delta, W, (RA, pA), (ba, bb) = _world_group_terms(mech, Re, pe, cols, g)
        jacs.append(_rows(mech, g, Delta, W)[1])  # (n, r, m) on the path dofs
        if with_bias:
            gs.append(_group_bias(mech, g, Delta, RA, pA, Ve[ba], Ve[bb], Abe[ba], Abe[bb]))
    nc = len(topo.coupling_names)
    C = _dense_jacobian(mech, list(topo.groups), jacs, np.ones(nc, bool), dt, mech.n_rows)
    if not with_bias:
        return C, None
    if nc:
        gs.append(jnp.zeros(nc, dt))  # couplings are linear in q
    return C, (jnp.concatenate(gs) if gs else jnp.zeros(0, dt))


def closure_terms(mech: Mechanism, kin):
    """``C`` (s, nv) and ``gamma`` (s,) (None when ``kin`` has no velocity) from one
    :func:`jaxmech.kinematics` pass: the same rows as :func:`jaxmech.closure_jacobian` and
    :func:`closure_bias`."""
    return closure_terms_world(mech, kin.R, kin.p, kin.cols, kin.V, kin.Ab)
