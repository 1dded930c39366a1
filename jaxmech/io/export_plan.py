"""Which of a mechanism's bodies become MuJoCo bodies in :func:`jaxmech.export_mjcf` (the first
export stage, before any XML): the NumPy arrays the tree is written from (:func:`tree_data`), the
massless moving bodies merged into their only child, the massless fixed leaves folded into their
parent and the last-resort tiny masses (:func:`plan_bodies`, rules in :mod:`jaxmech.io.export`),
and where a merged body ends up (:func:`merged_place`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

_MINVAL = 1e-15  # MuJoCo's mjMINVAL: the least mass / principal inertia of a moving body
_TINY_MASS = 1e-9  # kg, given to a massless moving body that cannot be merged (last resort)
# kg m^2, added on the diagonal of a singular inertia (last resort); above the 1e-8 under which
# jaxmech's model builder reads an inertia as zero (and rejects it with a mass), so the file re-imports
_TINY_INERTIA = 1e-7
_BAD = ("free", "spherical")  # joints MuJoCo cannot compose with another in one body


class TreeData(NamedTuple):
    """NumPy copies of the mechanism arrays the body tree is written from (at ``q_ref``)."""

    X: np.ndarray  # (nb, 4, 4) each body's pose in its parent's frame
    Xp: np.ndarray  # (nb, 4, 4) joint frame in the parent
    Xci: np.ndarray  # (nb, 4, 4) inverse of the joint frame in the child
    ax1: np.ndarray  # (nb, 3) first rotation axis
    ax2: np.ndarray  # (nb, 3) second rotation axis (universal)
    axt: np.ndarray  # (nb, 3) translation axis
    lower: np.ndarray  # (nq,) lower limits
    upper: np.ndarray  # (nq,) upper limits
    arm: np.ndarray  # (nv,) armature
    damp: np.ndarray  # (nv,) damping
    mass: np.ndarray  # (nb,) kg
    com: np.ndarray  # (nb, 3) m, in the body frame
    inertia: np.ndarray  # (nb, 3, 3) kg m^2, about the COM


def tree_data(mech, qr: np.ndarray) -> TreeData:
    """The arrays of :class:`TreeData`, with the local transforms evaluated at ``qr`` (nq,)."""
    from ..kinpass import local_transforms

    X = np.array(local_transforms(mech, qr))
    Xp, Xci = np.array(mech.X_parent), np.array(mech.X_child_inv)
    ax1, ax2, axt = np.array(mech.axis1), np.array(mech.axis2), np.array(mech.axis_t)
    lower, upper = np.array(mech.lower), np.array(mech.upper)
    arm, damp = np.array(mech.armature), np.array(mech.damping)
    mass, com, inertia = np.array(mech.mass), np.array(mech.com), np.array(mech.inertia)
    return TreeData(X, Xp, Xci, ax1, ax2, axt, lower, upper, arm, damp, mass, com, inertia)


def attached_bodies(mech) -> set[int]:
    """Bodies that carry a named frame, a loop end or a port frame (they must stay MuJoCo bodies)."""
    t = mech.topo
    out = {int(b) for b in np.asarray(t.frame_body, dtype=int).ravel()}
    out |= {int(b) for ab in t.loop_bodies for b in ab}
    return out


def merged_into_child(mech) -> set[int]:
    """Massless moving bodies merged into their only child: their joints go into the child's
    MuJoCo body, before the child's own (MuJoCo composes the joints of a body in order), so a
    universal joint written as two hinges through a massless body exports as two hinges in one
    body. A body qualifies when its mass is 0, its joint moves (not fixed), it has exactly one
    child, nothing attaches to it and neither it nor the child has a free or spherical joint."""
    t = mech.topo
    nb = len(t.body_names)
    mass = np.asarray(mech.mass, dtype=float)
    kids = {i: [c for c in range(nb) if int(t.parent[c]) == i] for i in range(nb)}
    att = attached_bodies(mech)
    out = set()
    for i in range(nb):
        ks = kids[i]
        if mass[i] > 0 or t.joint_types[i] == "fixed" or len(ks) != 1 or i in att:
            continue  # a massless welded body is fine in MuJoCo
        if t.joint_types[i] in _BAD or t.joint_types[ks[0]] in _BAD:
            continue
        out.add(i)
    return out


class Plan(NamedTuple):
    """How the bodies become MuJoCo bodies (:func:`plan_bodies`): ``child`` maps each body merged
    into its only child to that child, ``folded`` holds the massless fixed leaves merged into their
    parent, ``tiny`` maps a body to the ``(mass, inertia)`` written instead of its own."""

    child: dict[int, int]
    folded: set[int]
    tiny: dict[int, tuple[float, np.ndarray]]


@dataclass
class _Planner:
    """The working state of :func:`plan_bodies`: the tree (``par``, ``kids``, joint types ``jt``),
    the bodies that carry frames or loop ends (``att``), which bodies are massless (zero mass and
    inertia) and the :class:`Plan` so far (``child``, ``folded``, ``tiny``)."""

    d: TreeData
    par: list[int]
    kids: dict[int, list[int]]
    jt: tuple[str, ...]
    att: set[int]
    massless: list[bool]
    child: dict[int, int]
    folded: set[int] = field(default_factory=set)
    tiny: dict[int, tuple[float, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def start(cls, mech, d: TreeData) -> _Planner:
        """The tree of ``mech`` with the merges of :func:`merged_into_child` planned."""
        t = mech.topo
        nb = len(t.body_names)
        par = [int(p) for p in np.asarray(t.parent, dtype=int)]
        kids: dict[int, list[int]] = {i: [] for i in range(-1, nb)}
        for c in range(nb):
            kids[par[c]].append(c)
        massless = [float(d.mass[i]) == 0.0 and not np.any(d.inertia[i]) for i in range(nb)]
        child = {i: kids[i][0] for i in sorted(merged_into_child(mech))}
        return cls(d, par, kids, t.joint_types, attached_bodies(mech), massless, child)

    def gone(self, i: int) -> bool:
        return i in self.child or i in self.folded

    def mj_parent(self, i: int) -> int:
        p = self.par[i]
        while p >= 0 and self.gone(p):
            p = self.par[p]
        return p

    def moves(self, i: int) -> bool:
        """Whether the MuJoCo body of ``i`` has joints (its own or a merged parent's)."""
        out, p = self.jt[i] != "fixed", self.par[i]
        while p in self.child:
            out, p = out or self.jt[p] != "fixed", self.par[p]
        return out

    def valid(self, i: int) -> bool:
        m, inertia = self.tiny.get(i, (self.d.mass[i], self.d.inertia[i]))
        return float(m) >= _MINVAL and float(np.linalg.eigvalsh(np.asarray(inertia, dtype=float))[0]) >= _MINVAL

    def legal(self, i: int) -> bool:
        """MuJoCo's check: ``i``, or a body welded below it, has mass and inertia."""
        return self.valid(i) or any(
            not self.gone(k) and not self.moves(k) and self.mj_parent(k) == i and self.legal(k)
            for k in range(len(self.par))
        )

    def carries(self, i: int) -> bool:
        """Whether frames / loop ends must ride on ``i``'s host."""
        return (
            i in self.att
            or any(k in self.folded and self.carries(k) for k in self.kids[i])
            or (self.par[i] in self.child and self.carries(self.par[i]))
        )

    def first_illegal(self) -> int | None:
        """The first MuJoCo body (in index order) with joints that fails MuJoCo's mass check."""
        return next((i for i in range(len(self.par)) if not self.gone(i) and self.moves(i) and not self.legal(i)), None)

    def merge_into_child(self, b: int) -> bool:
        jt = self.jt
        ks = [k for k in self.kids[b] if k not in self.folded]
        if not self.massless[b] or b in self.tiny or jt[b] in _BAD or len(ks) != 1 or jt[ks[0]] in _BAD:
            return False
        if self.carries(b) and jt[ks[0]] != "fixed":
            return False  # what b carries would follow the child's joint
        self.child[b] = ks[0]
        return True

    def fold_leaves_then_merge(self, b: int) -> bool:
        leaves = {
            k
            for k in self.kids[b]
            if self.jt[k] == "fixed" and self.massless[k] and not self.kids[k] and not self.gone(k)
        }
        if not leaves:
            return False
        self.folded.update(leaves)
        if self.merge_into_child(b):
            return True
        self.folded.difference_update(leaves)
        return False

    def give_tiny(self, b: int) -> tuple[float, float]:
        """Give body ``b`` a tiny mass and / or inertia; returns what was added (kg, kg m^2)."""
        m, inertia = float(self.d.mass[b]), np.asarray(self.d.inertia[b], dtype=float)
        add_m = _TINY_MASS if m < _MINVAL else 0.0
        add_i = _TINY_INERTIA if np.linalg.eigvalsh(inertia)[0] < _MINVAL else 0.0
        self.tiny[b] = (m + add_m, inertia + add_i * np.eye(3))
        return add_m, add_i


def plan_bodies(mech, d: TreeData) -> Plan:
    """The merges of :func:`merged_into_child`, then, while a MuJoCo body with joints fails
    MuJoCo's mass check (it and the bodies welded below it all lack mass or principal inertia
    ``>= mjMINVAL``), the first such body (in index order) is merged into its only child, else
    merged into that child after folding its massless fixed leaf children into it, else given a
    tiny mass / inertia with a warning (see :mod:`jaxmech.io.export`). Models MuJoCo accepts as
    they are keep exactly the merges of :func:`merged_into_child`."""
    t = mech.topo
    p = _Planner.start(mech, d)
    while (b := p.first_illegal()) is not None:
        if p.merge_into_child(b) or p.fold_leaves_then_merge(b):
            continue
        add_m, add_i = p.give_tiny(b)
        # stacklevel 4: the caller of export_mjcf (via emit_tree)
        warnings.warn(
            f"{t.name}: body '{t.body_names[b]}' moves but has no mass or inertia MuJoCo accepts and "
            f"cannot be merged into another body: exported with {add_m:g} kg added to its mass and "
            f"{add_i:g} kg m^2 to its inertia's diagonal",
            stacklevel=4,
        )
    return Plan(p.child, p.folded, p.tiny)


def merged_place(t, k: int, X: np.ndarray, plan: Plan) -> tuple[int, np.ndarray]:
    """``(host, T)``: the MuJoCo body that body ``k`` ends up in and ``k``'s pose (4, 4) in the
    host's frame (at the reference configuration; :func:`plan_bodies` merges a body that carries
    frames only where it is rigid with its host)."""
    if k in plan.folded:
        host, T = int(t.parent[k]), X[k]
    elif k in plan.child:
        c = plan.child[k]
        host, T = c, np.linalg.inv(X[c])
    else:
        return k, np.eye(4)
    h, Th = merged_place(t, host, X, plan) if host >= 0 else (host, np.eye(4))
    return h, Th @ T
