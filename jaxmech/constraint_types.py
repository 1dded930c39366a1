"""Constraint types: one object per type gives its row count, row labels, and its residual,
Jacobian and curvature (bias) rows.

Every closure element of a compiled mechanism belongs to one :class:`ConstraintType`; the rows of a
group of elements of that type are produced by ``ROW_TYPES[type]``:

* :meth:`RowType.rows` -- residual rows (n, r) and Jacobian rows (n, r, m) of one group from the
  mismatch ``Delta = T_A^-1 T_B`` (n, 4, 4) and its rate columns in frame A, ``W`` (n, 6, m)
  (:mod:`jaxmech.closure`);
* :meth:`RowType.bias` -- curvature rows ``gamma`` (n, r) from ``Delta``, the mismatch twist ``w``
  (n, 6) and its velocity-product part ``wb`` (n, 6) (:mod:`jaxmech.curvature`);
* :meth:`RowType.rows_world` -- the same residual and Jacobian rows for many states at once,
  batch last, from world-frame quantities (:mod:`jaxmech.batchlast`); ``None`` for the log-based
  types, which run :meth:`RowType.rows` vmapped there.

The formulas (angular-first twists; ``R``, ``p`` the rotation and translation of ``Delta``;
``Wa``, ``Wl`` the angular and linear parts of ``W``; ``dp = Wl - p^ Wa``):

==============  ====  ====================================  ======================================
type            rows  residual                              Jacobian
==============  ====  ====================================  ======================================
point           3     ``p``                                 ``dp``
revolute        5     ``p``, ``R[0,2]``, ``R[1,2]``         ``dp``, ``-e_i^T (R e_k)^ Wa``
cylindrical     4     ``p[:2]``, ``R[0,2]``, ``R[1,2]``     ``dp[:2]``, axis rates
universal       4     ``p``, ``R[0,1] - cos``               ``dp``, axis rate
prismatic       5     ``log(R)``, ``p[:2]``                 ``J_l^-1(phi) Wa``, ``dp[:2]``
weld            6     ``Log(Delta)``                        ``J_l^-1(rho) W``
pose            <=6   ``Log(Delta)`` on selected axes       same rows of ``J_l^-1(rho) W``
distance        1     ``|p| - length``                      ``u^T dp``, ``u = p / |p|``
coupling        1     ``sum c q + offset`` (linear in q; evaluated by :mod:`jaxmech.closure`)
==============  ====  ====================================  ======================================

The curvature of a row is the time derivative of its Jacobian row times ``v`` (see
:mod:`jaxmech.curvature` for the derivation): point rows ``p'' = wb_v + wb_w x p + w_w x p'``,
axis rows ``e_i . (wb_w x r + w_w x (w_w x r))`` with ``r = R e_k``, log rows
``J_l^-1 wb + (d/dt J_l^-1) w``, distance rows ``u . p'' + (|p'|^2 - (u . p')^2) / |p|``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from . import lie

if TYPE_CHECKING:
    from .mechanism import LoopGroup, Mechanism


class ConstraintType(StrEnum):
    """The closure constraint types (a ``str``: ``ConstraintType.POINT == "point"``, as model files
    and :attr:`jaxmech.mechanism.LoopGroup.type` spell them)."""

    POINT = "point"  # the two frame origins coincide (spherical cut)
    WELD = "weld"  # the two frames coincide
    REVOLUTE = "revolute"  # origins coincide, z axes aligned
    CYLINDRICAL = "cylindrical"  # z axes aligned, B's origin on A's z axis
    UNIVERSAL = "universal"  # origins coincide, A's x axis at a fixed angle to B's y axis
    PRISMATIC = "prismatic"  # orientations equal, B's origin on A's z axis
    POSE = "pose"  # Log(Delta) rows on selected axes (angular-first mask of 6)
    DISTANCE = "distance"  # |p_B - p_A| = length
    COUPLING = "coupling"  # sum_i c_i q_i + offset = 0 over one-coordinate joints


# ----------------------------------------------------------------------------- shared pieces


def _cut_length(mech: Mechanism, g: LoopGroup):
    return mech.cut_length[g.param_index]


def _point_rates(w, p):
    """``p'`` and the velocity-product part of ``p''`` of the mismatch translation (n, 3) each."""
    om = w[:, :3]
    return w[:, 3:] + jnp.cross(om, p)


def _point_bias(w, wb, p):
    om, omb = w[:, :3], wb[:, :3]
    return wb[:, 3:] + jnp.cross(omb, p) + jnp.cross(om, _point_rates(w, p))


def _log_rate_bias(jinv, x, w, wb):
    """``J wb + (d/dt J) w`` with ``J = jinv(x)`` and ``dx/dt = J w``, vmapped over loops."""
    J = jinv(x)
    xdot = jnp.einsum("nij,nj->ni", J, w)
    dJ = jax.vmap(lambda a, b: jax.jvp(jinv, (a,), (b,))[1])(x, xdot)
    return jnp.einsum("nij,nj->ni", J, wb) + jnp.einsum("nij,nj->ni", dJ, w)


class RowType:
    """One constraint type: ``name``, ``labels`` (its row names, ``n_rows`` of them; ``None`` for
    ``pose``, whose rows are chosen per element) and its row formulas (module docstring)."""

    name: ConstraintType
    labels: tuple[str, ...] | None

    @property
    def n_rows(self) -> int | None:
        return None if self.labels is None else len(self.labels)

    def rows(self, mech: Mechanism, g: LoopGroup, Delta, W, with_jac: bool = True):
        """Residual rows (n, r) and Jacobian rows (n, r, m) (None without ``with_jac``)."""
        raise NotImplementedError(f"{self.name} rows are evaluated by jaxmech.closure")

    def bias(self, mech: Mechanism, g: LoopGroup, Delta, w, wb):
        """Curvature rows (n, r)."""
        raise NotImplementedError(f"{self.name} rows have no curvature term")

    rows_world = None
    """Batch-last residual / Jacobian rows from world quantities, or None (see the module docstring)."""

    def __repr__(self) -> str:
        return f"RowType({self.name!r}, rows={self.n_rows})"


class _AxisRows(RowType):
    """Translation rows ``p[:k]`` plus axis rows ``e_i . R e_k`` for ``(i, k)`` in ``pairs`` (the
    universal's minus ``cut_length``, the cosine of the angle between its axes): point, revolute,
    cylindrical and universal."""

    def __init__(self, name, labels, k: int, pairs, offset: bool = False):
        self.name, self.labels, self.k, self.pairs, self.offset = ConstraintType(name), labels, k, pairs, offset

    def rows(self, mech, g, Delta, W, with_jac=True):
        R, p = Delta[:, :3, :3], Delta[:, :3, 3]
        vals = [p[:, : self.k]] + [R[:, i, kk][:, None] for i, kk in self.pairs]
        if self.offset:
            vals[-1] = vals[-1] - _cut_length(mech, g)[:, None]
        res = jnp.concatenate(vals, -1)
        if not with_jac:
            return res, None
        Wa, Wl = W[:, :3], W[:, 3:]
        dp = (Wl - lie.hat(p) @ Wa)[:, : self.k]
        rates = [-(lie.hat(R[:, :, kk]) @ Wa)[:, i][:, None] for i, kk in self.pairs]
        return res, jnp.concatenate([dp] + rates, 1)

    def bias(self, mech, g, Delta, w, wb):
        R, p = Delta[:, :3, :3], Delta[:, :3, 3]
        om, omb = w[:, :3], wb[:, :3]
        out = [_point_bias(w, wb, p)[:, : self.k]]
        for i, kk in self.pairs:
            r = R[:, :, kk]
            out.append((jnp.cross(omb, r) + jnp.cross(om, jnp.cross(om, r)))[:, i][:, None])
        return jnp.concatenate(out, -1)

    def rows_world(self, mech, g, terms, with_jac):
        """Batch-last rows: residuals as :meth:`rows`; Jacobian rows in the world frame (no path
        columns in frame A). With the signed world column ``x_j = (w_j, l_j)`` of path coordinate
        ``j`` (angular first, linear part at the world origin),
        ``d/dt [R_A^T (p_B - p_A)] = R_A^T (l_j + w_j x p_B)`` and
        ``d/dt [(R_A e_i) . (R_B e_k)] = w_j . ((R_B e_k) x (R_A e_i))``: the frame-A forms rotated
        to the world, about half the flops. ``terms`` as :func:`jaxmech.batchlast._group_terms`."""
        from . import batchlast as bl

        DR, Dp, RA, _pA, RB, pB, x = terms
        vals = [Dp[:, : self.k]] + [DR[:, i, kk][:, None] for i, kk in self.pairs]
        if self.offset:
            vals[-1] = vals[-1] - bl._c(_cut_length(mech, g))[:, None]
        res = jnp.concatenate(vals, 1) if len(vals) > 1 else vals[0]
        if not with_jac:
            return res, None
        w = x[:, :, :3]
        vel = x[:, :, 3:] + bl.cross(w, pB[:, None])  # (n, m, 3, B) world velocity of p_B's point
        dp = jnp.swapaxes(bl.mtv3(RA[:, None], vel), 1, 2)[:, : self.k]  # (n, k, m, B)
        rates = [jnp.sum(w * bl.cross(RB[:, :, kk], RA[:, :, i])[:, None], 2)[:, None] for i, kk in self.pairs]
        return res, jnp.concatenate([dp] + rates, 1) if rates else dp


class _Distance(RowType):
    """``|p| - length`` (one row); rate ``u^T dp`` with ``u = p / |p|`` (0 where ``p = 0``)."""

    name, labels = ConstraintType.DISTANCE, ("d",)

    @staticmethod
    def _unit(p):
        n2 = jnp.sum(p * p, -1)
        safe = n2 > 0
        nrm = jnp.sqrt(jnp.where(safe, n2, 1.0))
        return safe, nrm, jnp.where(safe[:, None], p / nrm[:, None], 0.0)

    def rows(self, mech, g, Delta, W, with_jac=True):
        p = Delta[:, :3, 3]
        safe, nrm, u = self._unit(p)
        res = (jnp.where(safe, nrm, 0.0) - _cut_length(mech, g))[:, None]
        if not with_jac:
            return res, None
        return res, jnp.einsum("ni,nim->nm", u, W[:, 3:])[:, None]

    def bias(self, mech, g, Delta, w, wb):
        p = Delta[:, :3, 3]
        safe, nrm, u = self._unit(p)
        pdot = _point_rates(w, p)
        ud = jnp.sum(u * pdot, -1)
        curv = jnp.where(safe, (jnp.sum(pdot * pdot, -1) - ud * ud) / nrm, 0.0)
        return (jnp.sum(u * _point_bias(w, wb, p), -1) + curv)[:, None]

    def rows_world(self, mech, g, terms, with_jac):
        """Batch-last: ``d/dt |p_B - p_A| = u . (l_j + w_j x p_B)`` with ``u`` in the world."""
        from . import batchlast as bl

        _DR, Dp, _RA, pA, _RB, pB, x = terms
        n2 = jnp.sum(Dp * Dp, 1)
        safe = n2 > 0
        nrm = jnp.sqrt(jnp.where(safe, n2, 1.0))
        res = (jnp.where(safe, nrm, 0.0) - bl._c(_cut_length(mech, g)))[:, None]
        if not with_jac:
            return res, None
        u = jnp.where(safe[:, None], (pB - pA) / nrm[:, None], 0.0)[:, None]  # (n, 1, 3, B) world
        vel = x[:, :, 3:] + bl.cross(x[:, :, :3], pB[:, None])
        return res, jnp.sum(u * vel, 2)[:, None]


class _Log(RowType):
    """``Log(Delta)`` rows with ``J_l^-1(rho) W`` (weld; pose keeps its element's axes)."""

    def __init__(self, name, labels, select: bool):
        self.name, self.labels, self.select = ConstraintType(name), labels, select

    def rows(self, mech, g, Delta, W, with_jac=True):
        rho = lie.se3_log(Delta)
        jac = lie.se3_left_jacobian_inv(rho) @ W if with_jac else None
        if self.select:
            return rho[:, g.rows], (jac[:, g.rows] if with_jac else None)
        return rho, jac

    def bias(self, mech, g, Delta, w, wb):
        out = _log_rate_bias(lie.se3_left_jacobian_inv, lie.se3_log(Delta), w, wb)
        return out[:, g.rows] if self.select else out


class _Prismatic(RowType):
    """``log(R)`` rows with ``J_l^-1_SO3(phi) Wa``, plus the two transverse translation rows."""

    name, labels = ConstraintType.PRISMATIC, ("rx", "ry", "rz", "x", "y")

    def rows(self, mech, g, Delta, W, with_jac=True):
        R, p = Delta[:, :3, :3], Delta[:, :3, 3]
        phi = lie.so3_log(R)
        res = jnp.concatenate([phi, p[:, :2]], -1)
        if not with_jac:
            return res, None
        Wa, Wl = W[:, :3], W[:, 3:]
        dp = (Wl - lie.hat(p) @ Wa)[:, :2]
        return res, jnp.concatenate([lie.so3_left_jacobian_inv(phi) @ Wa, dp], 1)

    def bias(self, mech, g, Delta, w, wb):
        R, p = Delta[:, :3, :3], Delta[:, :3, 3]
        rot = _log_rate_bias(lie.so3_left_jacobian_inv, lie.so3_log(R), w[:, :3], wb[:, :3])
        return jnp.concatenate([rot, _point_bias(w, wb, p)[:, :2]], -1)


class _Coupling(RowType):
    name, labels = ConstraintType.COUPLING, ("c",)


ROW_TYPES: dict[str, RowType] = {
    t.name.value: t
    for t in (
        _AxisRows("point", ("x", "y", "z"), 3, ()),
        _Log("weld", ("rx", "ry", "rz", "x", "y", "z"), select=False),
        _AxisRows("revolute", ("x", "y", "z", "zx", "zy"), 3, ((0, 2), (1, 2))),
        _AxisRows("cylindrical", ("x", "y", "zx", "zy"), 2, ((0, 2), (1, 2))),
        _AxisRows("universal", ("x", "y", "z", "xy"), 3, ((0, 1),), offset=True),
        _Prismatic(),
        _Log("pose", None, select=True),
        _Distance(),
        _Coupling(),
    )
}
"""Every :class:`ConstraintType` -> its :class:`RowType` (keys are the plain strings)."""


def row_type(name: str) -> RowType:
    """The :class:`RowType` of a constraint type name; ``ValueError`` naming the known types."""
    try:
        return ROW_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown constraint type {name!r} (expected one of {', '.join(ROW_TYPES)})") from None
