"""Velocity and acceleration reduction, task Jacobians and actuator port maps (paper 000).

Notation (paper 000, Table II): ``C = D rho N`` (s, nv) the closure Jacobian (``d/dt rho = C v``),
``r`` its rank, ``d = nv - r`` the mobility, ``u`` (d,) independent speeds and the lift
``v = E u`` with ``C E = 0``; the curvature ``gamma = (d/dt C) v`` (:mod:`.curvature`) and the
acceleration lift ``a = E udot + a_gamma`` with ``C a + gamma = 0``.

Construction of ``E`` for independent coordinates ``I`` and dependent ``D``: pick ``|D|``
independent rows of ``C_D = C[:, D]`` by column-pivoted QR (:func:`rank.select_rows`), solve
``C_D[rows] v_D = -C_I[rows] u``, so ``E[I] = 1`` and ``E[D] = -C_D[rows]^-1 C_I[rows]``. If the
named speeds do not parametrize the motion the selected block is singular (status
``SINGULAR``) or the remaining rows are violated (status ``INCONSISTENT``); ``E`` then stays
finite but is not a valid lift.

Tree speeds: paper 000 lifts tree speeds ``v_T = E_T u`` out of an augmented configuration that
also carries cut-joint coordinates. Our ``v`` *is* the tree speed vector (cut joints have no
coordinates), so ``E_T = E``; :func:`tree_speed_lift` returns the rows of ``E`` for chosen tree
joints (e.g. the actuated or base coordinates).

Actuator ports: joint ports ``p = gear * q_j`` (``pdot = gear * v_j``) and distance ports
``p = gear * |p_B - p_A|`` between two frames (a cylinder), ``pdot = gear * u^T (pdot_B - pdot_A)``
with ``u`` the unit vector A -> B and world-aligned point velocities. Effort map ``tau = P^T f``
(virtual work ``f^T pdot = tau^T v``).

All functions act on one state; batch with ``jax.vmap(f, in_axes=(None, 0, ...))``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import lapack, lie, rank
from ._entry import entry
from .closure import closure_jacobian
from .curvature import closure_bias
from .graph import WORLD, Graph, pose
from .independent import choose_independent, coordinate_names, mobility
from .kinpass import _poses_and_columns, frame_jacobian, frame_pose
from .mechanism import Mechanism
from .status import Status, messages

#: Status codes of :class:`TangentMap`: those of :mod:`jaxmech.status`, one numbering for every result.
OK, SINGULAR, INCONSISTENT = Status.OK, Status.SINGULAR, Status.INCONSISTENT
STATUS_MESSAGES = messages(
    {
        OK: "ok",
        SINGULAR: "singular: the independent speeds do not parametrize the motion (dependent block rank-deficient)",
        INCONSISTENT: "inconsistent: C E != 0 (more speeds named than the mobility, or redundant rows disagree)",
    }
)


class TangentMap(eqx.Module):
    """Result of :func:`tangent_map_status`.

    ``E`` (nv, d) lift ``v = E u``; ``independent`` (d,) and ``dependent`` (nv - d,) velocity
    indices; ``rows`` (nv - d,) selected closure rows; ``rcond`` reciprocal condition of the
    selected dependent block; ``residual`` ``|C E|_inf``; ``status`` int (``OK``, ``SINGULAR``,
    ``INCONSISTENT``, see ``STATUS_MESSAGES``)."""

    E: jnp.ndarray
    independent: jnp.ndarray
    dependent: jnp.ndarray
    rows: jnp.ndarray
    rcond: jnp.ndarray
    residual: jnp.ndarray
    status: jnp.ndarray


def touched_v(mech: Mechanism) -> np.ndarray:
    """Velocity indices that some closure row depends on (loop paths, nonzero coupling
    coefficients): the compiler's static ``topo.touched_v`` (one definition, shared with assembly)."""
    return np.asarray(mech.topo.touched_v, dtype=int)


def default_independent(mech: Mechanism) -> np.ndarray:
    """Static preferred independent speeds: the actuated coordinates plus every coordinate that
    no closure row touches (e.g. an unconstrained floating base), sorted. The default of
    :func:`tangent_map` starts from this preference but keeps it only where it is a valid set at
    the state (:func:`jaxmech.independent.select_independent`)."""
    t = mech.topo
    free = np.setdiff1d(np.arange(t.nv), touched_v(mech))
    return np.unique(np.concatenate([np.asarray(t.actuated_v, int), free])).astype(int)


def _resolve(mech: Mechanism, independent) -> np.ndarray:
    if independent is None:
        return default_independent(mech)
    if isinstance(independent, (str, int, np.integer)):
        independent = [independent]
    idx = mech.v_indices(list(independent))
    if len(set(idx.tolist())) != len(idx) or (idx.size and (idx.min() < 0 or idx.max() >= mech.nv)):
        raise ValueError(f"{mech.name}: independent speeds {independent!r} give invalid/duplicate indices {idx}")
    return np.sort(idx)


def _solve_block(C, I, D, nD: int, extra=None, rcond_tol: float = 1e-10):
    """Rows, rcond and the solve ``X = -C_D[rows]^-1 [C_I[rows], extra[rows]]`` (finite always)."""
    CD = C[:, D]
    rows, rc = rank.select_rows(CD, nD)
    B = CD[rows]
    rhs = C[rows][:, I]
    if extra is not None:
        rhs = jnp.concatenate([rhs, extra[rows][:, None]], 1)
    ok = rc >= rcond_tol
    B = jnp.where(ok, B, jnp.eye(nD, dtype=C.dtype))  # where-shim: no inf/NaN on singular states
    X = -lapack.solve(B, rhs)
    return rows, rc, X


def _auto_rank_from_q(args) -> bool:
    """``independent='auto'`` without ``d`` takes the rank from the concrete ``q``: run as written
    (left only where :func:`_auto_d_from_q` could not fill ``d`` in, e.g. an eager ``vmap``)."""
    return isinstance(args.get("independent"), str) and args["independent"] == "auto" and args.get("d") is None


def _auto_d_from_q(args) -> None:
    """For ``independent='auto'`` at a concrete ``q`` without ``d``: ``d = nv - rank C(q)`` (the
    SVD rank of :func:`jaxmech.rank.numerical_rank`, here in numpy on the compiled ``C``), so the
    call then runs as one compiled program instead of primitive by primitive."""
    if not _auto_rank_from_q(args):
        return
    mech, q = args["mech"], args["q"]
    if not _concrete_model(mech) or isinstance(q, jax.core.Tracer) or not mech.n_rows:
        return
    C = np.asarray(closure_jacobian(mech, q))
    sv = np.linalg.svd(C, compute_uv=False)
    r = int(np.sum((sv > 1e-9 * sv[0]) & (sv > np.finfo(C.dtype).tiny))) if sv.size else 0
    args["d"] = mech.nv - r


def _concrete_model(mech: Mechanism) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(mech))


def _nonzero_sorted(mask, size):
    return jnp.nonzero(mask, size=size, fill_value=0)[0].astype(jnp.int32)


def _choose(mech: Mechanism, q, C, independent, d):
    """(I, D, d, rc_sel): index arrays (static numpy or traced), d, and the selection's condition
    estimate (None for a named set)."""
    nv = mech.nv
    if independent is None:
        I, D, rc_sel, d = choose_independent(mech, C, d)
        return I, D, d, rc_sel
    if isinstance(independent, str) and independent == "auto":
        if d is None and isinstance(q, jax.core.Tracer) and _concrete_model(mech):
            d = mobility(mech)
        if d is None:
            if isinstance(q, jax.core.Tracer):
                raise ValueError(
                    "tangent_map(independent='auto') needs a static mobility when the model is traced: pass d= "
                    "(e.g. d = jm.mobility(mech) outside the traced function)"
                )
            d = nv - int(rank.numerical_rank(C))
        d = int(d)
        cols, _ = rank.select_columns(jax.lax.stop_gradient(C), nv - d)
        mask = jnp.zeros(nv, bool).at[cols].set(True)
        return _nonzero_sorted(~mask, d), _nonzero_sorted(mask, nv - d), d, None
    I = _resolve(mech, independent)
    if d is not None and int(d) != I.size:
        raise ValueError(f"{mech.name}: d={d} but {I.size} independent speeds were named")
    D = np.setdiff1d(np.arange(nv), I)
    if D.size > C.shape[0]:
        raise ValueError(
            f"{mech.name}: {I.size} independent speeds named but the closure has only {C.shape[0]} rows; "
            f"at least nv - s = {nv - C.shape[0]} are needed"
        )
    return I, D, I.size, None


@entry(
    static_argnames=("independent", "d", "rcond_tol", "tol"),
    prime_mobility=True,
    eager_if=_auto_rank_from_q,
    prepare=_auto_d_from_q,
)
def tangent_map_status(
    mech: Mechanism,
    q: jnp.ndarray,
    independent=None,
    d: int | None = None,
    rcond_tol: float = 1e-10,
    tol: float = 1e-8,
) -> TangentMap:
    """Tangent map ``E`` (nv, d) with ``C(q) E = 0`` and a status.

    ``independent``: None (default: a valid, best-conditioned set of ``d`` speeds chosen at ``q``
    by :func:`jaxmech.independent.select_independent`, actuated coordinates first, then those no
    closure row touches, then passive ones; ``d`` defaults to the model's mobility
    :func:`jaxmech.independent.mobility`; the choice is ``result.independent``, named by
    :func:`independent_names`), a list of joint names / ``'joint:k'`` / velocity indices (see
    ``mech.v_indices``), ``"auto"`` (column-pivoted QR of ``C`` picks the best-conditioned
    dependent set; ``d``: the SVD rank at a concrete ``q``, :func:`jaxmech.independent.mobility`
    of a concrete model under jit/vmap, else pass ``d=``), or ``"ports"`` (see :func:`port_tangent_map`).
    ``status`` is ``SINGULAR`` when the selected block's rcond < ``rcond_tol`` and
    ``INCONSISTENT`` when ``|C E|_inf > tol * max(1, |C|_inf |E|_inf)`` (``tol`` floored at 1000 eps
    of the dtype: 1.2e-4 in float32)."""
    if isinstance(independent, str) and independent == "ports":
        return port_tangent_map_status(mech, q, rcond_tol=rcond_tol, tol=tol)
    C = closure_jacobian(mech, q)
    I, D, d, rc_sel = _choose(mech, q, C, independent, d)
    nv, nD = mech.nv, mech.nv - d
    rows, rc, X = _solve_block(C, I, D, nD, rcond_tol=rcond_tol)
    if rc_sel is not None:  # no valid set of this size: the selection's own estimate says so
        rc = jnp.where(rc_sel > 0, rc, 0.0)
    E = jnp.zeros((nv, d), C.dtype).at[I, jnp.arange(d)].set(1.0)
    if nD:
        E = E.at[D].set(X)
    return _finish(C, E, jnp.asarray(I, jnp.int32), jnp.asarray(D, jnp.int32), rows, rc, rcond_tol, tol)


def _tol(tol: float, dtype) -> float:
    """``tol`` floored at 1000 machine epsilons of ``dtype`` (1e-8 stays 1e-8 in float64; float32
    round-off of ``C E`` is ~1e-6, so there the floor 1.2e-4 applies)."""
    return max(float(tol), 1000.0 * float(jnp.finfo(dtype).eps))


def _finish(C, E, I, D, rows, rc, rcond_tol, tol):
    tol = _tol(tol, E.dtype)
    res = jnp.max(jnp.abs(C @ E)) if C.size and E.size else jnp.zeros((), E.dtype)
    scale = jnp.maximum(1.0, (jnp.max(jnp.abs(C)) if C.size else 0.0) * (jnp.max(jnp.abs(E)) if E.size else 0.0))
    status = jnp.where(rc < rcond_tol, SINGULAR, jnp.where(res > tol * scale, INCONSISTENT, OK)).astype(jnp.int32)
    return TangentMap(E, I, D, jnp.asarray(rows, jnp.int32), rc, res, status)


class ReductionError(ValueError):
    """Raised by the plain :func:`tangent_map` / :func:`acceleration_lift` when the lift is not
    valid (``C E != 0`` or ``C a + gamma != 0``); the ``*_status`` variants return the status."""


def check_status(status, out, what: str):
    """Return ``out`` if ``status`` is ``OK``; otherwise raise :class:`ReductionError` eagerly, or
    through ``eqx.error_if`` when ``status`` is traced (jit / vmap)."""
    if isinstance(status, jax.core.Tracer):
        return eqx.error_if(out, status != OK, f"{what}: invalid lift (C E != 0 or singular; use the *_status variant)")
    s = np.asarray(status).ravel()
    bad = s[s != OK]
    if bad.size:
        raise ReductionError(f"{what}: {STATUS_MESSAGES[int(bad[0])]} ({bad.size} of {s.size} states)")
    return out


def tangent_map(mech: Mechanism, q: jnp.ndarray, independent=None, d: int | None = None) -> jnp.ndarray:
    """Tangent map ``E`` (nv, d), ``C E = 0``; see :func:`tangent_map_status` for the options.
    Raises :class:`ReductionError` (eagerly, or via ``eqx.error_if`` under jit/vmap) unless the
    status is ``OK``: it never returns an invalid map silently."""
    tm = tangent_map_status(mech, q, independent, d)
    return check_status(tm.status, tm.E, f"{mech.name}: tangent_map")


def independent_names(mech: Mechanism, tm: TangentMap) -> list[str]:
    """Names of the independent speeds a (single-state) :class:`TangentMap` chose, in column order
    of ``E`` (``'joint'`` or ``'joint:k'``)."""
    names = coordinate_names(mech)
    return [names[int(i)] for i in np.asarray(tm.independent).ravel()]


def tree_speed_lift(mech: Mechanism, E: jnp.ndarray, joints=None) -> jnp.ndarray:
    """Rows of the lift for tree speeds: ``v_T = E_T u``. Our ``v`` already is the tree-speed
    vector, so ``E_T = E``; ``joints`` (names / 'joint:k' / indices) restricts to those
    coordinates (e.g. actuated or base joints, paper 000 Table II). (n_sel, d)."""
    return E if joints is None else E[mech.v_indices(list(joints))]


@entry(
    static_argnames=("independent", "d", "rcond_tol", "tol"),
    prime_mobility=True,
    eager_if=_auto_rank_from_q,
    prepare=_auto_d_from_q,
)
def acceleration_lift_status(
    mech: Mechanism,
    q: jnp.ndarray,
    v: jnp.ndarray,
    udot: jnp.ndarray,
    independent=None,
    d: int | None = None,
    rcond_tol: float = 1e-10,
    tol: float = 1e-8,
):
    """Consistent acceleration ``a = E udot + a_gamma`` (nv,) with ``C a + gamma = 0``, and the
    :class:`TangentMap` ``tm`` of ``E`` whose status also covers ``C a + gamma`` (``INCONSISTENT``
    when ``|C a + gamma|_inf > tol * max(1, |C| |a|, |gamma|)``).

    ``a_gamma`` is the particular solution that is zero on the independent coordinates
    (``a[I] = udot``) and solves the selected rows on the dependent ones:
    ``a_gamma[D] = -C_D[rows]^-1 gamma[rows]``. Same ``independent`` / ``d`` options as
    :func:`tangent_map_status` (not ``"ports"``). Returns ``(a, tm)``."""
    if isinstance(independent, str) and independent == "ports":
        raise ValueError("acceleration_lift: independent='ports' is not supported; lift with joint speeds")
    C = closure_jacobian(mech, q)
    gam = closure_bias(mech, q, v)
    I, D, d, rc_sel = _choose(mech, q, C, independent, d)
    nD = mech.nv - d
    E = jnp.zeros((mech.nv, d), C.dtype).at[I, jnp.arange(d)].set(1.0)
    a = jnp.zeros(mech.nv, C.dtype).at[I].set(udot)
    rows, rc = jnp.zeros(0, jnp.int32), jnp.ones((), C.dtype)
    if nD:
        rows, rc, X = _solve_block(C, I, D, nD, extra=gam, rcond_tol=rcond_tol)
        E = E.at[D].set(X[:, :d])
        a = a.at[D].set(X[:, :d] @ udot + X[:, d])
    if rc_sel is not None:
        rc = jnp.where(rc_sel > 0, rc, 0.0)
    tm = _finish(C, E, jnp.asarray(I, jnp.int32), jnp.asarray(D, jnp.int32), rows, rc, rcond_tol, tol)
    if C.size:
        err = jnp.max(jnp.abs(C @ a + gam))
        scale = jnp.maximum(1.0, jnp.maximum(jnp.max(jnp.abs(C)) * jnp.max(jnp.abs(a)), jnp.max(jnp.abs(gam))))
        status = jnp.where((tm.status == OK) & (err > _tol(tol, a.dtype) * scale), INCONSISTENT, tm.status)
        status = status.astype(jnp.int32)
        tm = TangentMap(tm.E, tm.independent, tm.dependent, tm.rows, tm.rcond, jnp.maximum(tm.residual, err), status)
    return a, tm


def acceleration_lift(
    mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray, udot: jnp.ndarray, independent=None, d: int | None = None
):
    """Consistent acceleration ``a`` (nv,) with ``C a + gamma = 0`` and the lift ``E`` (nv, d);
    see :func:`acceleration_lift_status`. Returns ``(a, E)``; raises :class:`ReductionError`
    (eagerly or via ``eqx.error_if``) when ``C E != 0`` or ``C a + gamma != 0``."""
    a, tm = acceleration_lift_status(mech, q, v, udot, independent, d)
    return check_status(tm.status, (a, tm.E), f"{mech.name}: acceleration_lift")


# ----------------------------------------------------------------------------- task maps


def task_jacobian(mech: Mechanism, q: jnp.ndarray, frame: str, E: jnp.ndarray, reference: str = "local"):
    """Reduced task Jacobian ``J_x E`` (6, d) of a named frame (``reference`` as in
    :func:`jaxmech.frame_jacobian`, whose one compiled program per model serves every frame)."""
    return frame_jacobian(mech, q, frame, reference) @ E


def add_support_points(
    graph: Graph, mech: Mechanism, q, frames, prefix: str = "support", kind: str = "point"
) -> list[str]:
    """Task-induced support constraints: each named foot frame/body stays where it is at ``q``.

    ``kind="point"``: its origin stays at its world position (``point`` world <-> frame, 3 rows,
    multipliers = support force on the robot in world axes). ``kind="weld"``: the whole frame
    stays at its world pose (``weld``, 6 rows angular-first; multipliers = support wrench on the
    robot in the frame's axes at ``q``: moment, then force). ``mech``/``q`` give the poses
    (compile ``graph`` before adding). Returns the constraint names ``{prefix}_{frame}``."""
    if kind not in ("point", "weld"):
        raise ValueError(f"add_support_points: kind must be 'point' or 'weld', got {kind!r}")
    names = []
    for f in [frames] if isinstance(frames, str) else frames:
        T = np.array(frame_pose(mech, q, f), dtype=float)
        n = f"{prefix}_{f}"
        if kind == "point":
            graph.add_constraint(n, "point", body_a=WORLD, body_b=f, pose_a=pose(T[:3, 3]))
        else:
            graph.add_constraint(n, "weld", body_a=WORLD, body_b=f, pose_a=T)
        names.append(n)
    return names


def add_tool_target(graph: Graph, frame: str, target, name: str = "tool_target", axes=None) -> str:
    """Task-induced 6-D (or ``axes``-selected) target: frame ``frame`` at world pose ``target``
    (4, 4) (``weld``, or ``pose`` with selected Log rows)."""
    T = np.array(target, dtype=float)  # a writable copy (graph validation normalizes in place)
    if axes is None:
        graph.add_constraint(name, "weld", body_a=WORLD, body_b=frame, pose_a=T)
    else:
        graph.add_constraint(name, "pose", body_a=WORLD, body_b=frame, pose_a=T, axes=axes)
    return name


def add_equal_coupling(graph: Graph, joint_a: str, joint_b: str, name: str | None = None, ratio: float = 1.0):
    """Linear coupling ``q_a - ratio q_b = 0`` (equal finger displacements for ratio 1)."""
    name = name or f"couple_{joint_a}_{joint_b}"
    graph.add_coupling(name, {joint_a: 1.0, joint_b: -float(ratio)})
    return name


# ----------------------------------------------------------------------------- ports


def _port_geometry(mech: Mechanism, q):
    """World positions (np, 2, 3) and world-aligned point Jacobians (np, 2, 3, nv) of the two
    frames of every port (zeros for joint ports / world frames)."""
    t = mech.topo
    fr = t.port_frames
    npt = fr.shape[0]
    R, p, cols = _poses_and_columns(mech, q)  # cols: (nv, 6) world spatial
    T = lie.make_pose(R, p)
    fb = np.where(fr >= 0, t.frame_body[np.maximum(fr, 0)], -1) if t.frame_body.size else -np.ones_like(fr)
    Tf = jnp.concatenate([T, jnp.eye(4, dtype=T.dtype)[None]], 0)[np.where(fb >= 0, fb, mech.nb)]
    Xf = mech.frame_pose[np.maximum(fr, 0)] if t.frame_body.size else jnp.broadcast_to(jnp.eye(4), (npt, 2, 4, 4))
    pos = (Tf @ Xf)[..., :3, 3]  # (np, 2, 3)
    anc = np.where((fb >= 0)[..., None], t.ancestor[np.maximum(fb, 0)], False)  # (np, 2, nv)
    ang, lin = cols[:, :3].T, cols[:, 3:].T  # (3, nv)
    Jp = lin[None, None] - jnp.einsum("abij,jn->abin", lie.hat(pos), ang)  # v0 + w x p
    Jp = Jp * jnp.asarray(anc, Jp.dtype)[:, :, None, :]
    return pos, Jp


@entry()
def port_values(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """Port coordinates (n_ports,): ``gear * q_j`` (rad or m) or ``gear * |p_B - p_A|`` (m)."""
    t = mech.topo
    if not t.port_names:
        return jnp.zeros(0, q.dtype)
    v2q = np.zeros(t.nv, int)
    v2q[t.lin_v] = t.lin_q
    is_j = np.asarray([pt == "joint" for pt in t.port_types])
    qj = q[v2q[np.maximum(t.port_v, 0)]]
    if t.port_coef.shape == (len(t.port_names), t.nv):  # transmissions: sum_j c_j q_j
        qj = jnp.asarray(t.port_coef[:, t.lin_v], q.dtype) @ q[t.lin_q]
    pos, _ = _port_geometry(mech, q)
    dist = jnp.linalg.norm(pos[:, 1] - pos[:, 0], axis=-1)
    return mech.port_gear * jnp.where(is_j, qj, dist)


@entry()
def port_jacobian(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """Port velocity map ``P`` (n_ports, nv): ``pdot = P v``."""
    t = mech.topo
    npt = len(t.port_names)
    if not npt:
        return jnp.zeros((0, mech.nv), q.dtype)
    is_j = np.asarray([pt == "joint" for pt in t.port_types])
    Pj = jnp.zeros((npt, mech.nv), q.dtype).at[np.arange(npt), np.maximum(t.port_v, 0)].set(1.0)
    if t.port_coef.shape == (npt, mech.nv):  # transmissions: several joints per port
        Pj = jnp.asarray(t.port_coef, q.dtype)
    pos, Jp = _port_geometry(mech, q)
    dp = pos[:, 1] - pos[:, 0]
    n2 = jnp.sum(dp * dp, -1)
    safe = n2 > 0
    u = jnp.where(safe[:, None], dp / jnp.sqrt(jnp.where(safe, n2, 1.0))[:, None], 0.0)
    Pd = jnp.einsum("ai,ain->an", u, Jp[:, 1] - Jp[:, 0])
    return mech.port_gear[:, None] * jnp.where(is_j[:, None], Pj, Pd)


def port_effort(mech: Mechanism, q: jnp.ndarray, f: jnp.ndarray) -> jnp.ndarray:
    """Generalized force of port efforts ``tau = P^T f`` (nv,) (virtual work ``f.pdot = tau.v``);
    ``f`` (n_ports,) in N m (joint) or N (distance) per unit gear."""
    return port_jacobian(mech, q).T @ f


def _port_index(mech: Mechanism, ports) -> np.ndarray:
    names = mech.topo.port_names
    if ports is None:
        return np.arange(len(names))
    out = []
    for p in [ports] if isinstance(ports, (str, int)) else ports:
        if isinstance(p, (int, np.integer)):
            out.append(int(p))
        elif p in names:
            out.append(names.index(p))
        else:
            raise KeyError(f"{mech.name}: unknown port '{p}' (ports: {', '.join(names) or 'none'})")
    return np.asarray(out, int)


def port_tangent_map_status(
    mech: Mechanism, q: jnp.ndarray, ports=None, rcond_tol: float = 1e-10, tol: float = 1e-8
) -> TangentMap:
    """Port-space lift ``v = E_p pdot`` (nv, n_sel): ``C E_p = 0`` and ``P_sel E_p = I``.

    ``ports``: names or indices of the ports used as independent speeds (default: all; their
    number must equal the mobility). Built as ``E_p = E (P_sel E)^-1`` from an automatic
    tangent map with ``d = n_sel``. Status ``SINGULAR`` when the ports do not parametrize the
    motion (``P_sel E`` ill-conditioned), ``INCONSISTENT`` when the mobility is smaller than the
    number of ports. ``independent`` of the result lists the selected port indices.

    The names are resolved here, in Python: an eager call compiles one program per model and
    number of ports, whichever ports they are."""
    return _port_tangent_map_at(mech, q, _port_index(mech, ports).astype(np.int32), rcond_tol, tol)


@entry(static_argnames=("rcond_tol", "tol"))
def _port_tangent_map_at(mech: Mechanism, q, sel, rcond_tol: float, tol: float) -> TangentMap:
    """:func:`port_tangent_map_status` for port indices ``sel`` (n_sel,) int32."""
    npt = sel.shape[0]
    tm = tangent_map_status(mech, q, "auto", d=npt, rcond_tol=rcond_tol, tol=tol)
    PE = port_jacobian(mech, q)[sel] @ tm.E
    rc = rank.rcond(PE)
    eye = jnp.eye(npt, dtype=PE.dtype)
    Ep = tm.E @ lapack.solve(jnp.where(rc >= rcond_tol, PE, eye), eye)
    C = closure_jacobian(mech, q)
    rcm = jnp.minimum(rc, tm.rcond)
    return _finish(C, Ep, jnp.asarray(sel, jnp.int32), tm.dependent, tm.rows, rcm, rcond_tol, tol)


def port_tangent_map(mech: Mechanism, q: jnp.ndarray, ports=None) -> jnp.ndarray:
    """``E_p`` (nv, n_sel) with ``v = E_p pdot`` (drive a mechanism by its port speeds)."""
    return port_tangent_map_status(mech, q, ports).E
