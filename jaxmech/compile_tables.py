"""Index tables of a compiled mechanism: the q/v layout, loop paths and their dofs, couplings,
frames and ports (the later stages of :func:`jaxmech.compile.compile`, which documents the order).

Every function here takes the oriented spanning tree (``compile._Tree``) and returns numpy arrays
that :class:`jaxmech.mechanism.Topology` and the model leaves hold.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .constraint_types import ROW_TYPES
from .graph import JOINT_NQ, JOINT_NV, Constraint, Graph, Joint, JointType
from .mechanism import N_COLS, LoopGroup

if TYPE_CHECKING:
    from .compile import _Element, _Tree


@dataclass
class _Coords:
    """Coordinate index tables and per-joint data, in body order (see :class:`Topology`)."""

    nq: int
    nv: int
    q_start: np.ndarray  # (nb,)
    v_start: np.ndarray  # (nb,)
    q_index: np.ndarray  # (nb, 10): where each generic joint slot reads q (ZERO / ONE pads)
    v_index: np.ndarray  # (nb, N_COLS): velocity index of each motion column, -1 if none
    X_parent: np.ndarray
    X_child_inv: np.ndarray
    axis1: np.ndarray
    axis2: np.ndarray
    axis_t: np.ndarray
    off_th: np.ndarray
    off_d: np.ndarray
    q0: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    armature: np.ndarray
    damping: np.ndarray
    frictionloss: np.ndarray
    outside: list = field(default_factory=list)  # (v start, n, text): reference position outside limits
    lin_q: list = field(default_factory=list)
    lin_v: list = field(default_factory=list)
    sph_q: list = field(default_factory=list)
    sph_v: list = field(default_factory=list)
    free_q: list = field(default_factory=list)
    free_v: list = field(default_factory=list)
    v_body: np.ndarray | None = None
    v_col: np.ndarray | None = None
    ancestor: np.ndarray | None = None  # (nb, nv) bool: v moves body i


def _coordinates(tr: _Tree) -> _Coords:
    """q/v layout in body order, each joint's placement, axes, offsets, limits and drive data."""
    nb = len(tr.body_order)
    types = [tr.oriented[b].type for b in tr.body_order]
    q_start = np.concatenate([[0], np.cumsum([JOINT_NQ[t] for t in types])]).astype(int)
    v_start = np.concatenate([[0], np.cumsum([JOINT_NV[t] for t in types])]).astype(int)
    nq, nv = int(q_start[-1]), int(v_start[-1])
    z3, z4 = np.zeros((nb, 3)), np.zeros((nb, 4, 4))
    co = _Coords(
        nq, nv, q_start[:-1], v_start[:-1], np.zeros((nb, 10), dtype=int), -np.ones((nb, N_COLS), dtype=int),
        z4.copy(), z4.copy(), z3.copy(), z3.copy(), z3.copy(), np.zeros(nb), np.zeros(nb), np.zeros(nq),
        np.full(nq, -np.inf), np.full(nq, np.inf), np.zeros(nv), np.zeros(nv), np.zeros(nv),
    )  # fmt: skip
    for i, b in enumerate(tr.body_order):
        _fill_joint(co, i, tr.oriented[b])
    co.v_body = np.zeros(nv, dtype=int)
    co.v_col = np.zeros(nv, dtype=int)
    for i in range(nb):
        for c in range(N_COLS):
            if co.v_index[i, c] >= 0:
                co.v_body[co.v_index[i, c]], co.v_col[co.v_index[i, c]] = i, c
    co.ancestor = np.zeros((nb, nv), dtype=bool)
    for i in range(nb):
        for k in tr.chain(i):
            co.ancestor[i, co.v_index[k][co.v_index[k] >= 0]] = True
    return co


def _fill_joint(co: _Coords, i: int, j: Joint) -> None:
    """Body ``i``'s joint ``j`` into the tables of ``co`` (one generic formula per joint type,
    kinpass.py: q slots are pos 0:3, quat 3:7, th1 7, th2 8, d 9)."""
    qs, vs, t = co.q_start[i], co.v_start[i], j.type
    ZERO, ONE = co.nq, co.nq + 1
    co.X_parent[i] = j.parent_pose
    co.X_child_inv[i] = np.linalg.inv(j.child_pose)
    co.axis1[i], co.axis2[i], co.axis_t[i] = j.axis, j.axis2, j.axis
    qi = [ZERO, ZERO, ZERO, ONE, ZERO, ZERO, ZERO, ZERO, ZERO, ZERO]
    if t == "revolute":
        qi[7], co.v_index[i, 6], co.off_th[i] = qs, vs, j.offset
    elif t == "prismatic":
        qi[9], co.v_index[i, 8], co.off_d[i] = qs, vs, j.offset
    elif t == "cylindrical":
        qi[7], qi[9] = qs, qs + 1
        co.v_index[i, 6], co.v_index[i, 8] = vs, vs + 1
    elif t == "universal":
        qi[7], qi[8] = qs, qs + 1
        co.v_index[i, 6], co.v_index[i, 7] = vs, vs + 1
    elif t == "spherical":
        qi[3:7] = range(qs, qs + 4)
        co.v_index[i, 0:3] = range(vs, vs + 3)
        co.sph_q.append(list(range(qs, qs + 4)))
        co.sph_v.append(list(range(vs, vs + 3)))
        co.q0[qs] = 1.0
    elif t == "free":
        qi[0:7] = range(qs, qs + 7)
        co.v_index[i, 0:6] = range(vs, vs + 6)
        co.free_q.append(list(range(qs, qs + 7)))
        co.free_v.append(list(range(vs, vs + 6)))
        co.q0[qs + 3] = 1.0
    co.q_index[i] = qi
    n1 = JOINT_NQ[t]
    if JointType(t).scalar:
        co.lin_q.extend(range(qs, qs + n1))
        co.lin_v.extend(range(vs, vs + n1))
        co.lower[qs : qs + n1] = j.lower
        co.upper[qs : qs + n1] = j.upper
    if j.q0 is not None:
        co.q0[qs : qs + n1] = j.q0
    if JointType(t).scalar:
        x = co.q0[qs : qs + n1]
        if np.any((x < j.lower) | (x > j.upper)):

            def fmt(a):
                return f"{a[0]:g}" if len(a) == 1 else str(a.tolist())

            co.outside.append((vs, n1, f"'{j.name}' {fmt(x)} not in [{fmt(j.lower)}, {fmt(j.upper)}]"))
    nvj = JOINT_NV[t]
    co.armature[vs : vs + nvj] = j.armature
    co.damping[vs : vs + nvj] = j.damping
    co.frictionloss[vs : vs + nvj] = j.frictionloss


def _loop_groups(tr: _Tree, co: _Coords, loops: list[_Element]) -> tuple[list[LoopGroup], list[str]]:
    """Elements grouped by type (pose elements also by their axes), each group with padded path
    and dof tables (:class:`LoopGroup`), rows numbered group by group; and the row names."""
    nb = len(tr.body_order)
    members_of: dict[tuple, list[int]] = {}
    for li, lp in enumerate(loops):
        members_of.setdefault((lp.ctype, lp.axes if lp.ctype == "pose" else None), []).append(li)
    groups, row_names, row = [], [], 0
    for (ctype, axes), members in members_of.items():
        paths = [tr.paths(loops[li].a, loops[li].b) for li in members]
        dofs = [
            [
                (co.v_index[body, c], k, sign, body, c)
                for sign, path in ((-1, pp), (1, pm))
                for k, body in enumerate(path)
                for c in range(N_COLS)
                if co.v_index[body, c] >= 0
            ]
            for pp, pm in paths
        ]
        L = max(1, max(len(p) for pair in paths for p in pair))
        m = max(1, max(len(d) for d in dofs))
        n = len(members)
        P, Mn = np.full((n, L), nb, dtype=int), np.full((n, L), nb, dtype=int)
        dv, dp, dc = np.zeros((n, m), dtype=int), np.zeros((n, m), dtype=int), np.zeros((n, m), dtype=int)
        ds, db = np.zeros((n, m)), np.full((n, m), nb, dtype=int)
        for r_, ((pp, pm), d) in enumerate(zip(paths, dofs, strict=True)):
            P[r_, : len(pp)] = pp
            Mn[r_, : len(pm)] = pm
            for k_, (v, k, s, body, c) in enumerate(d):
                dv[r_, k_], dp[r_, k_], ds[r_, k_], db[r_, k_], dc[r_, k_] = v, k, s, body, c
        if ctype == "pose":
            rows = np.nonzero(np.array(axes))[0]
            labels = tuple(np.array(ROW_TYPES["weld"].labels)[rows])
        else:
            labels = ROW_TYPES[ctype].labels
            rows = np.arange(len(labels))
        for li in members:
            row_names.extend(f"{loops[li].name}:{lab}" for lab in labels)
        names = tuple(loops[li].name for li in members)
        mem = np.array(members)
        groups.append(LoopGroup(ctype, names, P, Mn, dv, dp, ds, db, dc, rows, row, mem, mem.copy()))
        row += n * len(rows)
    return groups, row_names


def _couplings(g: Graph, tr: _Tree, co: _Coords, couplings: list[Constraint]) -> tuple[np.ndarray, np.ndarray]:
    """Linear coupling rows ``coupling_q @ q + coupling_offset`` (nc, nq), (nc,)."""
    coupling_q = np.zeros((len(couplings), co.nq))
    coupling_offset = np.zeros(len(couplings))
    for k, c in enumerate(couplings):
        for jn, coef in c.coeffs.items():
            coupling_q[k, co.q_start[tr.child_of(g, jn)]] = coef  # reversal keeps a 1-dof joint's q (README)
        coupling_offset[k] = c.offset
    return coupling_q, coupling_offset


def _frames_and_ports(g: Graph, tr: _Tree, co: _Coords) -> dict:
    """Named frames (body index, pose in the body) and ports (joint coefficients or frame pairs)."""
    frame_names, frame_body, frame_pose = [], [], []
    for b in g.bodies.values():
        for fname, T in b.frames.items():
            frame_names.append(fname)
            frame_body.append(tr.bi[b.name])
            frame_pose.append(T)
    fidx = {f: k for k, f in enumerate(frame_names)}
    port_names, port_types, port_v, port_frames, port_gear = [], [], [], [], []
    port_coef = np.zeros((len(g.ports), co.nv))
    for k, p in enumerate(g.ports.values()):
        port_names.append(p.name)
        port_types.append(p.type)
        port_gear.append(p.gear)
        if p.type == "joint":
            for jn, c in (p.coeffs or {p.joint: 1.0}).items():  # a 1-dof joint keeps its q when reversed
                port_coef[k, co.v_start[tr.child_of(g, jn)] + (p.index if p.coeffs is None else 0)] += c
            port_v.append(co.v_start[tr.child_of(g, p.joint)] + p.index)
            port_frames.append((-1, -1))
        else:
            port_v.append(-1)
            port_frames.append(
                tuple(
                    _frame_or_body(g, frame_names, frame_body, frame_pose, fidx, tr.bi, f)
                    for f in (p.frame_a, p.frame_b)
                )
            )
    return dict(
        frame_names=frame_names,
        frame_body=frame_body,
        frame_pose=frame_pose,
        port_names=port_names,
        port_types=port_types,
        port_v=port_v,
        port_frames=port_frames,
        port_gear=port_gear,
        port_coef=port_coef,
    )


def _actuated_v(tr: _Tree, co: _Coords) -> np.ndarray:
    """Velocity indices of the actuated tree joints."""
    return np.array(
        [
            v
            for i, b in enumerate(tr.body_order)
            if tr.oriented[b].actuated
            for v in range(co.v_start[i], co.v_start[i] + JOINT_NV[tr.oriented[b].type])
        ],
        dtype=int,
    )


def _touched(co: _Coords, groups: list[LoopGroup], coupling_q: np.ndarray) -> np.ndarray:
    """(nv,) bool: speeds some closure row involves (a loop path dof or a coupled coordinate)."""
    touched = np.zeros(co.nv, bool)
    for grp in groups:
        touched[grp.dof_v[grp.dof_sign != 0]] = True
    if len(coupling_q):
        lin_q, lin_v = np.asarray(co.lin_q, dtype=int), np.asarray(co.lin_v, dtype=int)
        touched[lin_v[np.abs(coupling_q[:, lin_q]).sum(0) > 0]] = True
    return touched


def _frame_or_body(g, frame_names, frame_body, frame_pose, fidx, bi, f) -> int:
    """Index of a named frame; a body name becomes a new frame at the body origin."""
    if f in fidx:
        return fidx[f]
    frame_names.append(f)
    frame_body.append(bi[f])
    frame_pose.append(np.eye(4))
    fidx[f] = len(frame_names) - 1
    return fidx[f]


def _warn_outside_limits(g: Graph, co: _Coords, touched: np.ndarray) -> None:
    """Warn about loop joints whose reference position lies outside their limits. Only loop
    coordinates matter here: jm.assemble checks them against their limits (a serial robot's zero
    pose outside its limits, as in most URDFs, is not worth a warning)."""
    bad = [t for v0, n, t in co.outside if touched[v0 : v0 + n].any()]
    if bad:
        warnings.warn(
            f"{g.source or g.name}: reference position of loop joints outside their limits: {'; '.join(bad)}. "
            "jm.assemble reports 'out of bounds' for guesses there (a side-car TOML's [limits] table can "
            "replace limits)",
            stacklevel=4,
        )
