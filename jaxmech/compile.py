"""Graph -> Mechanism: spanning tree, automatic cut selection, loop paths, index tables.

Cut selection (paper 000, "automatic cut selection"): a maximum-weight spanning tree of the
body-joint graph (Kruskal) where a joint's weight says how much we want it in the tree:
pinned tree joints and free joints first, then actuated joints (so actuators keep a coordinate),
then the number of residual rows the joint would produce as a cut (cutting a spherical joint
gives 3 rows, a weld 6, so spherical joints are cut first). Ties keep file order. Joints the
user pins as cuts (``cut = true``) never enter the tree.

Each cut joint, and each explicit constraint, becomes one two-path closure element (paper 001
section 2.1): both paths start at the lowest common ancestor of the two bodies in the tree and
run down to the body carrying the cut frame. A module with N paths (loops sharing bodies) thus
gets N-1 elements automatically.

:func:`compile` runs in named stages (its docstring lists them); the index tables are built in
:mod:`jaxmech.compile_tables`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .compile_tables import (
    _actuated_v,
    _coordinates,
    _couplings,
    _frames_and_ports,
    _loop_groups,
    _touched,
    _warn_outside_limits,
)
from .graph import CONSTRAINT_ROWS, CUT_OF_JOINT, WORLD, Constraint, Graph, Joint
from .mechanism import Mechanism, Topology


def _align(axis: np.ndarray, to: int) -> np.ndarray:
    """A rotation R (3, 3) with R[:, to] = axis (the other columns completing a right frame)."""
    a = axis / np.linalg.norm(axis)
    h = np.array([1.0, 0, 0]) if abs(a[0]) < 0.9 else np.array([0, 1.0, 0])
    b = np.cross(a, h)
    b /= np.linalg.norm(b)
    c = np.cross(a, b)
    cols = [None, None, None]
    cols[to] = a
    cols[(to + 1) % 3] = b
    cols[(to + 2) % 3] = c
    return np.stack(cols, 1)


def _rot_pose(R):
    T = np.eye(4)
    T[:3, :3] = R
    return T


def _tree_weight(j: Joint, pinned_tree: set[str]) -> tuple:
    rows = CONSTRAINT_ROWS.get(CUT_OF_JOINT.get(j.type, ""), 0) or 0
    return (
        j.cut is False or j.name in pinned_tree,
        j.type == "free",
        j.actuated,
        rows,
    )


def _reverse(j: Joint) -> Joint:
    """The same joint walked from child to parent (README: swap placements, negate the axis)."""
    lo = j.lower.copy() if j.lower is not None else None
    hi = j.upper.copy() if j.upper is not None else None
    q0 = None if j.q0 is None else np.array(j.q0, dtype=float)
    ax, ax2 = -j.axis, j.axis2
    if j.type == "universal":
        ax, ax2 = -j.axis2, -j.axis
        lo, hi = lo[::-1].copy(), hi[::-1].copy()
        q0 = None if q0 is None else q0[::-1].copy()
    elif j.type == "spherical" and q0 is not None:
        q0 = q0 * np.array([1, -1, -1, -1])
    elif j.type == "free" and q0 is not None:
        from .graph import pose as _pose

        T = np.linalg.inv(_pose(q0[:3], quat=q0[3:]))
        from scipy.spatial.transform import Rotation

        x, y, z, w = Rotation.from_matrix(T[:3, :3]).as_quat()
        q0 = np.concatenate([T[:3, 3], [w, x, y, z]])
    return Joint(
        j.name,
        j.type,
        j.child,
        j.parent,
        j.child_pose,
        j.parent_pose,
        ax,
        ax2,
        lo,
        hi,
        j.offset,
        j.actuated,
        j.cut,
        q0,
        j.armature,
        j.damping,
        j.frictionloss,
    )


def compile(graph: Graph, cuts: list[str] | None = None, tree: list[str] | None = None) -> Mechanism:  # noqa: A001
    """Compile a :class:`~jaxmech.graph.Graph` into a :class:`Mechanism`.

    ``cuts`` / ``tree`` optionally pin joints as cuts / tree joints (in addition to the joints'
    own ``cut`` flags). Raises :class:`~jaxmech.graph.ModelError` for graphs that cannot be
    compiled (disconnected bodies, loops through fixed joints only, impossible pins).

    The stages, in the order data flows: :func:`_pins` -> :func:`_spanning_tree` (which joints
    are cut) -> :func:`_orient` (body order, parents, depth levels) -> :func:`_coordinates` (q/v
    index tables, joint placements, limits, drive data) -> :func:`_closure_elements` (one
    two-path element per cut joint or constraint) -> :func:`_loop_groups` (loop paths and their
    dofs, grouped by element type) -> :func:`_couplings` -> :func:`_frames_and_ports`."""
    g = graph
    cuts_, pinned = _pins(g, cuts, tree)
    tree_joints = _spanning_tree(g, cuts_, pinned)
    cut_joints = [j for j in g.joints.values() if j.name not in tree_joints]
    tr = _orient(g, tree_joints)
    co = _coordinates(tr)
    loops, couplings = _closure_elements(g, tr, cut_joints)
    groups, row_names = _loop_groups(tr, co, loops)
    coupling_rows = sum(len(grp.names) * len(grp.rows) for grp in groups)
    coupling_q, coupling_offset = _couplings(g, tr, co, couplings)
    row_names += [f"{c.name}:c" for c in couplings]
    fp = _frames_and_ports(g, tr, co)
    touched = _touched(co, groups, coupling_q)
    _warn_outside_limits(g, co, touched)
    nb = len(tr.body_order)
    topo = Topology(
        touched_v=np.nonzero(touched)[0],
        name=g.name,
        source=g.source,
        body_names=tuple(tr.body_order),
        joint_names=tr.joint_names,
        joint_types=tuple(tr.oriented[b].type for b in tr.body_order),
        joint_reversed=tuple(tr.oriented[b] is not g.joints[tr.oriented[b].name] for b in tr.body_order),
        cut_names=tuple(j.name for j in cut_joints),
        loop_names=tuple(lp.name for lp in loops),
        loop_types=tuple(lp.ctype for lp in loops),
        loop_bodies=tuple((lp.a, lp.b) for lp in loops),
        parent=tr.parent,
        depth=tr.depth,
        levels=tr.levels,
        q_index=co.q_index,
        v_index=co.v_index,
        v_body=co.v_body,
        v_col=co.v_col,
        q_start=co.q_start,
        v_start=co.v_start,
        nq=co.nq,
        nv=co.nv,
        ancestor=co.ancestor,
        groups=tuple(groups),
        n_rows=coupling_rows + len(couplings),
        row_names=tuple(row_names),
        coupling_names=tuple(c.name for c in couplings),
        coupling_rows=coupling_rows,
        frame_names=tuple(fp["frame_names"]),
        frame_body=np.array(fp["frame_body"], dtype=int),
        actuated=tuple(n for n in tr.joint_names if g.joints[n].actuated),
        actuated_v=_actuated_v(tr, co),
        port_names=tuple(fp["port_names"]),
        port_types=tuple(fp["port_types"]),
        port_v=np.array(fp["port_v"], dtype=int),
        port_frames=np.array(fp["port_frames"], dtype=int).reshape(-1, 2),
        port_coef=fp["port_coef"],
        lin_q=np.array(co.lin_q, dtype=int),
        lin_v=np.array(co.lin_v, dtype=int),
        sph_q=np.array(co.sph_q, dtype=int).reshape(-1, 4),
        sph_v=np.array(co.sph_v, dtype=int).reshape(-1, 3),
        free_q=np.array(co.free_q, dtype=int).reshape(-1, 7),
        free_v=np.array(co.free_v, dtype=int).reshape(-1, 6),
    )
    bodies = [g.bodies[b] for b in tr.body_order]
    f = lambda x: jnp.asarray(np.asarray(x, dtype=float))  # noqa: E731
    return Mechanism(
        topo=topo,
        X_parent=f(co.X_parent),
        X_child_inv=f(co.X_child_inv),
        axis1=f(co.axis1),
        axis2=f(co.axis2),
        axis_t=f(co.axis_t),
        offset_th=f(co.off_th),
        offset_d=f(co.off_d),
        mass=f(np.array([b.mass for b in bodies])),
        com=f(np.array([b.com for b in bodies]).reshape(nb, 3)),
        inertia=f(np.array([b.inertia for b in bodies]).reshape(nb, 3, 3)),
        frame_pose=f(np.array(fp["frame_pose"]).reshape(-1, 4, 4)),
        cut_pose_a=f(np.array([lp.pose_a for lp in loops]).reshape(-1, 4, 4)),
        cut_pose_b=f(np.array([lp.pose_b for lp in loops]).reshape(-1, 4, 4)),
        cut_length=f(np.array([lp.length for lp in loops])),
        coupling_q=f(coupling_q),
        coupling_offset=f(coupling_offset),
        q0=f(co.q0),
        lower=f(co.lower),
        upper=f(co.upper),
        armature=f(co.armature),
        damping=f(co.damping),
        gravity=f(g.gravity),
        port_gear=f(fp["port_gear"]),
        frictionloss=f(co.frictionloss),
    )


# ----------------------------------------------------------------------------- stages


def _pins(g: Graph, cuts, tree) -> tuple[set[str], set[str]]:
    """Joints pinned as cuts / in the tree; joints named by couplings or joint ports must keep
    their coordinate, so they are pinned in the tree too."""
    cuts = set(cuts or ())
    pinned_tree = set(tree or ())
    for n in cuts | pinned_tree:
        if n not in g.joints:
            raise g.error(f"joint '{n}'", "pinned as cut/tree joint but not in the graph")
    for c in g.constraints.values():
        if c.type == "coupling":
            pinned_tree.update(c.coeffs)
    for p in g.ports.values():
        if p.type == "joint":
            pinned_tree.update(p.coeffs or (p.joint,))
    for n in pinned_tree:
        if g.joints[n].cut is True or n in cuts:
            raise g.error(f"joint '{n}'", "is pinned as a cut but a coupling/port/pin needs it in the tree")
    return cuts, pinned_tree


def _spanning_tree(g: Graph, cuts: set[str], pinned_tree: set[str]) -> set[str]:
    """Names of the tree joints: maximum-weight spanning tree (Kruskal, :func:`_tree_weight`)."""
    names = list(g.bodies)
    bidx = {n: i for i, n in enumerate(names)}
    uf = list(range(len(names)))

    def find(i):
        while uf[i] != i:
            uf[i] = uf[uf[i]]
            i = uf[i]
        return i

    cand = [j for j in g.joints.values() if not (j.cut is True or j.name in cuts)]
    cand.sort(key=lambda j: _tree_weight(j, pinned_tree), reverse=True)  # stable: file order on ties
    tree_joints: set[str] = set()
    for j in cand:
        a, b = find(bidx[j.parent]), find(bidx[j.child])
        if a != b:
            uf[a] = b
            tree_joints.add(j.name)
        elif j.cut is False or j.name in pinned_tree:
            raise g.error(f"joint '{j.name}'", "pinned in the tree but it closes a loop with other pinned joints")
        if j.type == "free" and j.name not in tree_joints:
            raise g.error(f"joint '{j.name}'", "a free joint cannot close a loop")
    root = find(bidx[WORLD])
    for n in names:
        if find(bidx[n]) != root:
            raise g.error(f"body '{n}'", "is not connected to the world by any joint (disconnected body)")
    return tree_joints


@dataclass
class _Tree:
    """The oriented spanning tree: bodies in depth-first order from the world."""

    body_order: list[str]
    oriented: dict[str, Joint]  # child body -> its joint, walked parent -> child
    bi: dict[str, int]  # body name -> index (world -1)
    parent: np.ndarray  # (nb,) int, -1 for the world
    depth: np.ndarray  # (nb,) int
    levels: tuple  # body indices per depth

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(self.oriented[b].name for b in self.body_order)

    def chain(self, b: int) -> list[int]:
        """Body indices from the root of the tree down to ``b``."""
        out = []
        while b >= 0:
            out.append(b)
            b = self.parent[b]
        return out[::-1]

    def child_of(self, g: Graph, joint: str) -> int:
        """Index of the body whose coordinate ``joint`` is (a cut joint has none)."""
        for child, j in self.oriented.items():
            if j.name == joint:
                return self.body_order.index(child)
        raise g.error(f"joint '{joint}'", "is a cut joint; it has no coordinate to couple or actuate")

    def paths(self, a: int, b: int) -> tuple[list[int], list[int]]:
        """The two paths of a closure element: from the lowest common ancestor of bodies ``a``
        and ``b`` down to each of them (paper 001 section 2.1)."""
        ca, cb = self.chain(a), self.chain(b)
        common = 0
        while common < min(len(ca), len(cb)) and ca[common] == cb[common]:
            common += 1
        return ca[common:], cb[common:]


def _orient(g: Graph, tree_joints: set[str]) -> _Tree:
    """Depth-first walk from the world over the tree joints; a joint walked against its written
    direction is :func:`_reverse` d."""
    adj: dict[str, list[Joint]] = defaultdict(list)
    for j in g.joints.values():
        if j.name in tree_joints:
            adj[j.parent].append(j)
            adj[j.child].append(j)
    body_order: list[str] = []
    oriented: dict[str, Joint] = {}
    seen = {WORLD}
    stack = [(WORLD, iter(adj[WORLD]))]  # iterative DFS: the same order as the recursive walk
    while stack:
        b, it = stack[-1]
        j = next(it, None)
        if j is None:
            stack.pop()
            continue
        other = j.child if j.parent == b else j.parent
        if other in seen:
            continue
        seen.add(other)
        oriented[other] = j if j.parent == b else _reverse(j)
        body_order.append(other)
        stack.append((other, iter(adj[other])))
    nb = len(body_order)
    bi = {n: i for i, n in enumerate(body_order)}
    bi[WORLD] = -1
    parent = np.array([bi[oriented[b].parent] for b in body_order], dtype=int)
    depth = np.zeros(nb, dtype=int)
    for i in range(nb):
        depth[i] = 0 if parent[i] < 0 else depth[parent[i]] + 1
    levels = tuple(np.nonzero(depth == d)[0] for d in range(depth.max() + 1)) if nb else ()
    return _Tree(body_order, oriented, bi, parent, depth, levels)


class _Element(NamedTuple):
    """One two-path closure element (a cut joint or an explicit constraint)."""

    name: str
    ctype: str
    a: int  # body index carrying pose_a (-1: world)
    b: int
    pose_a: np.ndarray
    pose_b: np.ndarray
    axes: tuple
    length: float


def _closure_elements(g: Graph, tr: _Tree, cut_joints: list[Joint]) -> tuple[list[_Element], list[Constraint]]:
    """Closure elements of the cut joints then of the constraints, and the linear couplings."""
    loops: list[_Element] = []
    for j in cut_joints:
        ctype = CUT_OF_JOINT.get(j.type)
        if ctype is None:
            raise g.error(f"joint '{j.name}'", f"a {j.type} joint cannot be a cut")
        A, B = j.parent_pose.copy(), j.child_pose.copy()
        if ctype in ("revolute", "prismatic", "cylindrical"):
            R = _rot_pose(_align(j.axis, 2))
            A, B = A @ R, B @ R
        elif ctype == "universal":
            A = A @ _rot_pose(_align(j.axis, 0))
            B = B @ _rot_pose(_align(j.axis2, 1))
        # A universal cut keeps the angle between its axes: x_A . y_B = axis . axis2 (zero only for
        # perpendicular axes); the constant rides in cut_length (closure.py subtracts it).
        c0 = float(j.axis @ j.axis2) if ctype == "universal" else 0.0
        loops.append(_Element(j.name, ctype, tr.bi[j.parent], tr.bi[j.child], A, B, (True,) * 6, c0))
    couplings: list[Constraint] = []
    for c in g.constraints.values():
        if c.type == "coupling":
            couplings.append(c)
            continue
        loops.append(_Element(c.name, c.type, tr.bi[c.body_a], tr.bi[c.body_b], c.pose_a, c.pose_b, c.axes, c.length))
    # A loop that closes only through fixed joints has no motion to constrain.
    for lp in loops:
        if lp.name in g.joints and g.joints[lp.name].type == "fixed":
            pp, pm = tr.paths(lp.a, lp.b)
            if all(tr.oriented[tr.body_order[k]].type == "fixed" for k in pp + pm):
                raise g.error(f"joint '{lp.name}'", "closes a loop made only of fixed joints (no motion to constrain)")
    return loops, couplings
