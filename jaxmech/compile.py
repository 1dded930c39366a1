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
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import jax.numpy as jnp
import numpy as np

from .graph import CONSTRAINT_ROWS, CUT_OF_JOINT, JOINT_NQ, JOINT_NV, WORLD, Constraint, Graph, Joint
from .mechanism import N_COLS, LoopGroup, Mechanism, Topology

_ROW_LABELS = {
    "point": ("x", "y", "z"),
    "weld": ("rx", "ry", "rz", "x", "y", "z"),
    "revolute": ("x", "y", "z", "zx", "zy"),
    "cylindrical": ("x", "y", "zx", "zy"),
    "universal": ("x", "y", "z", "xy"),
    "prismatic": ("rx", "ry", "rz", "x", "y"),
    "distance": ("d",),
}


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
    compiled (disconnected bodies, loops through fixed joints only, impossible pins)."""
    g = graph
    cuts = set(cuts or ())
    pinned_tree = set(tree or ())
    for n in cuts | pinned_tree:
        if n not in g.joints:
            raise g.error(f"joint '{n}'", "pinned as cut/tree joint but not in the graph")
    # Joints named by couplings or ports must keep their coordinate.
    for c in g.constraints.values():
        if c.type == "coupling":
            pinned_tree.update(c.coeffs)
    for p in g.ports.values():
        if p.type == "joint":
            pinned_tree.update(p.coeffs or (p.joint,))
    for n in pinned_tree:
        if g.joints[n].cut is True or n in cuts:
            raise g.error(f"joint '{n}'", "is pinned as a cut but a coupling/port/pin needs it in the tree")

    # ---------------------------------------------------------------- spanning tree (Kruskal)
    names = list(g.bodies)
    bidx = {n: i for i, n in enumerate(names)}
    uf = list(range(len(names)))

    def find(i):
        while uf[i] != i:
            uf[i] = uf[uf[i]]
            i = uf[i]
        return i

    order = list(g.joints.values())
    cand = [j for j in order if not (j.cut is True or j.name in cuts)]
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
    cut_joints = [j for j in order if j.name not in tree_joints]

    # ---------------------------------------------------------------- orient and order (DFS)
    adj: dict[str, list[Joint]] = defaultdict(list)
    for j in order:
        if j.name in tree_joints:
            adj[j.parent].append(j)
            adj[j.child].append(j)
    body_order: list[str] = []
    oriented: dict[str, Joint] = {}  # child body -> oriented joint
    seen = {WORLD}

    def visit(b):
        for j in adj[b]:
            other = j.child if j.parent == b else j.parent
            if other in seen:
                continue
            seen.add(other)
            oj = j if j.parent == b else _reverse(j)
            oriented[other] = oj
            body_order.append(other)
            visit(other)

    import sys

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    visit(WORLD)
    nb = len(body_order)
    bi = {n: i for i, n in enumerate(body_order)}
    bi[WORLD] = -1
    parent = np.array([bi[oriented[b].parent] for b in body_order], dtype=int)
    depth = np.zeros(nb, dtype=int)
    for i in range(nb):
        depth[i] = 0 if parent[i] < 0 else depth[parent[i]] + 1
    levels = tuple(np.nonzero(depth == d)[0] for d in range(depth.max() + 1)) if nb else ()

    # ---------------------------------------------------------------- coordinates
    q_index = np.zeros((nb, 10), dtype=int)
    v_index = -np.ones((nb, N_COLS), dtype=int)
    q_start = np.zeros(nb, dtype=int)
    v_start = np.zeros(nb, dtype=int)
    nq = nv = 0
    for i, b in enumerate(body_order):
        q_start[i], v_start[i] = nq, nv
        t = oriented[b].type
        nq += JOINT_NQ[t]
        nv += JOINT_NV[t]
    ZERO, ONE = nq, nq + 1
    X_parent = np.zeros((nb, 4, 4))
    X_child_inv = np.zeros((nb, 4, 4))
    axis1 = np.zeros((nb, 3))
    axis2 = np.zeros((nb, 3))
    axis_t = np.zeros((nb, 3))
    off_th = np.zeros(nb)
    off_d = np.zeros(nb)
    q0 = np.zeros(nq)
    outside: list = []  # (v start, n, text) of joints whose reference position violates their limits
    lower = np.full(nq, -np.inf)
    upper = np.full(nq, np.inf)
    armature = np.zeros(nv)
    damping = np.zeros(nv)
    frictionloss = np.zeros(nv)
    lin_q, lin_v, sph_q, sph_v, free_q, free_v = [], [], [], [], [], []
    for i, b in enumerate(body_order):
        j = oriented[b]
        qs, vs = q_start[i], v_start[i]
        X_parent[i] = j.parent_pose
        X_child_inv[i] = np.linalg.inv(j.child_pose)
        axis1[i], axis2[i], axis_t[i] = j.axis, j.axis2, j.axis
        qi = [ZERO, ZERO, ZERO, ONE, ZERO, ZERO, ZERO, ZERO, ZERO, ZERO]
        t = j.type
        if t == "revolute":
            qi[7] = qs
            v_index[i, 6] = vs
            off_th[i] = j.offset
        elif t == "prismatic":
            qi[9] = qs
            v_index[i, 8] = vs
            off_d[i] = j.offset
        elif t == "cylindrical":
            qi[7], qi[9] = qs, qs + 1
            v_index[i, 6], v_index[i, 8] = vs, vs + 1
        elif t == "universal":
            qi[7], qi[8] = qs, qs + 1
            v_index[i, 6], v_index[i, 7] = vs, vs + 1
        elif t == "spherical":
            qi[3:7] = range(qs, qs + 4)
            v_index[i, 0:3] = range(vs, vs + 3)
            sph_q.append(list(range(qs, qs + 4)))
            sph_v.append(list(range(vs, vs + 3)))
            q0[qs] = 1.0
        elif t == "free":
            qi[0:3] = range(qs, qs + 3)
            qi[3:7] = range(qs + 3, qs + 7)
            v_index[i, 0:6] = range(vs, vs + 6)
            free_q.append(list(range(qs, qs + 7)))
            free_v.append(list(range(vs, vs + 6)))
            q0[qs + 3] = 1.0
        if t in ("revolute", "prismatic", "cylindrical", "universal"):
            n1 = JOINT_NQ[t]
            lin_q.extend(range(qs, qs + n1))
            lin_v.extend(range(vs, vs + n1))
            lower[qs : qs + n1] = j.lower
            upper[qs : qs + n1] = j.upper
        if j.q0 is not None:
            q0[qs : qs + JOINT_NQ[t]] = j.q0
        if t in ("revolute", "prismatic", "cylindrical", "universal"):
            x = q0[qs : qs + n1]
            if np.any((x < j.lower) | (x > j.upper)):

                def fmt(a):
                    return f"{a[0]:g}" if len(a) == 1 else str(a.tolist())

                outside.append((vs, n1, f"'{j.name}' {fmt(x)} not in [{fmt(j.lower)}, {fmt(j.upper)}]"))
        armature[vs : vs + JOINT_NV[t]] = j.armature
        damping[vs : vs + JOINT_NV[t]] = j.damping
        frictionloss[vs : vs + JOINT_NV[t]] = j.frictionloss
        q_index[i] = qi
    v_body = np.zeros(nv, dtype=int)
    v_col = np.zeros(nv, dtype=int)
    for i in range(nb):
        for c in range(N_COLS):
            if v_index[i, c] >= 0:
                v_body[v_index[i, c]], v_col[v_index[i, c]] = i, c
    ancestor = np.zeros((nb, nv), dtype=bool)
    for i in range(nb):
        k = i
        while k >= 0:
            ancestor[i, v_index[k][v_index[k] >= 0]] = True
            k = parent[k]

    def chain(b: int) -> list[int]:
        out = []
        while b >= 0:
            out.append(b)
            b = parent[b]
        return out[::-1]

    # ---------------------------------------------------------------- closure elements
    loops: list[tuple[str, str, int, int, np.ndarray, np.ndarray, tuple, float]] = []
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
        loops.append((j.name, ctype, bi[j.parent], bi[j.child], A, B, (True,) * 6, c0))
    couplings: list[Constraint] = []
    for c in g.constraints.values():
        if c.type == "coupling":
            couplings.append(c)
            continue
        loops.append((c.name, c.type, bi[c.body_a], bi[c.body_b], c.pose_a, c.pose_b, c.axes, c.length))

    # A loop that closes only through fixed joints has no motion to constrain.
    for name, _ctype, a, b, *_ in loops:
        if name in g.joints and g.joints[name].type == "fixed":
            ca, cb = chain(a), chain(b)
            common = len([1 for x, y in zip(ca, cb, strict=False) if x == y])
            path = ca[common:] + cb[common:]
            if all(oriented[body_order[k]].type == "fixed" for k in path):
                raise g.error(f"joint '{name}'", "closes a loop made only of fixed joints (no motion to constrain)")

    groups_def: dict[tuple, list[int]] = {}
    for li, (_name, ctype, *_rest) in enumerate(loops):
        key = (ctype, loops[li][6] if ctype == "pose" else None)
        groups_def.setdefault(key, []).append(li)
    groups = []
    row = 0
    row_names: list[str] = []
    for (ctype, axes), members in groups_def.items():
        paths_p, paths_m, dofs = [], [], []
        for li in members:
            _, _, a, b, *_ = loops[li]
            ca, cb = chain(a), chain(b)
            common = 0
            while common < min(len(ca), len(cb)) and ca[common] == cb[common]:
                common += 1
            pp, pm = ca[common:], cb[common:]
            d = []
            for sign, path in ((-1, pp), (1, pm)):
                for k, body in enumerate(path):
                    for c in range(N_COLS):
                        if v_index[body, c] >= 0:
                            d.append((v_index[body, c], k, sign, body, c))
            paths_p.append(pp)
            paths_m.append(pm)
            dofs.append(d)
        L = max(1, max(len(p) for p in paths_p + paths_m))
        m = max(1, max(len(d) for d in dofs))
        n = len(members)
        P = np.full((n, L), nb, dtype=int)
        Mn = np.full((n, L), nb, dtype=int)
        dv = np.zeros((n, m), dtype=int)
        dp = np.zeros((n, m), dtype=int)
        ds = np.zeros((n, m))
        db = np.full((n, m), nb, dtype=int)
        dc = np.zeros((n, m), dtype=int)
        for r_, (pp, pm, d) in enumerate(zip(paths_p, paths_m, dofs, strict=False)):
            P[r_, : len(pp)] = pp
            Mn[r_, : len(pm)] = pm
            for k_, (v, k, s, body, c) in enumerate(d):
                dv[r_, k_], dp[r_, k_], ds[r_, k_], db[r_, k_], dc[r_, k_] = v, k, s, body, c
        if ctype == "pose":
            rows = np.nonzero(np.array(axes))[0]
            labels = tuple(np.array(_ROW_LABELS["weld"])[rows])
        else:
            rows = np.arange(CONSTRAINT_ROWS[ctype])
            labels = _ROW_LABELS[ctype]
        for li in members:
            row_names.extend(f"{loops[li][0]}:{lab}" for lab in labels)
        groups.append(
            LoopGroup(
                ctype,
                tuple(loops[li][0] for li in members),
                P,
                Mn,
                dv,
                dp,
                ds,
                db,
                dc,
                rows,
                row,
                np.array(members),
                np.array(members),
            )
        )
        row += n * len(rows)
    coupling_rows = row
    coupling_q = np.zeros((len(couplings), nq))
    coupling_offset = np.zeros(len(couplings))
    for k, c in enumerate(couplings):
        for jn, coef in c.coeffs.items():
            bj = body_order.index(_child_of(g, oriented, jn))
            coupling_q[k, q_start[bj]] = coef  # reversal keeps a 1-dof joint's q (README)
        coupling_offset[k] = c.offset
        row_names.append(f"{c.name}:c")
    n_rows = row + len(couplings)

    # ---------------------------------------------------------------- frames and ports
    frame_names, frame_body, frame_pose = [], [], []
    for b in g.bodies.values():
        for fname, T in b.frames.items():
            frame_names.append(fname)
            frame_body.append(bi[b.name])
            frame_pose.append(T)
    fidx = {f: k for k, f in enumerate(frame_names)}
    port_names, port_types, port_v, port_frames, port_gear = [], [], [], [], []
    port_coef = np.zeros((len(g.ports), nv))
    for k, p in enumerate(g.ports.values()):
        port_names.append(p.name)
        port_types.append(p.type)
        port_gear.append(p.gear)
        if p.type == "joint":
            for jn, c in (p.coeffs or {p.joint: 1.0}).items():  # a 1-dof joint keeps its q when reversed
                bj = body_order.index(_child_of(g, oriented, jn))
                port_coef[k, v_start[bj] + (p.index if p.coeffs is None else 0)] += c
            bj = body_order.index(_child_of(g, oriented, p.joint))
            port_v.append(v_start[bj] + p.index)
            port_frames.append((-1, -1))
        else:
            port_v.append(-1)
            port_frames.append(
                tuple(
                    _frame_or_body(g, frame_names, frame_body, frame_pose, fidx, bi, f) for f in (p.frame_a, p.frame_b)
                )
            )
    joint_names = tuple(oriented[b].name for b in body_order)
    actuated = tuple(n for n in joint_names if g.joints[n].actuated)
    actuated_v = np.array(
        [
            v
            for i, b in enumerate(body_order)
            if oriented[b].actuated
            for v in range(v_start[i], v_start[i] + JOINT_NV[oriented[b].type])
        ],
        dtype=int,
    )

    touched = np.zeros(nv, bool)
    for grp in groups:
        touched[grp.dof_v[grp.dof_sign != 0]] = True
    if len(couplings):
        touched[np.asarray(lin_v, dtype=int)[np.abs(coupling_q[:, np.asarray(lin_q, dtype=int)]).sum(0) > 0]] = True
    # Only loop coordinates matter here: jm.assemble checks them against their limits (a serial
    # robot's zero pose outside its limits, as in most URDFs, is not worth a warning).
    bad = [t for v0, n, t in outside if touched[v0 : v0 + n].any()]
    if bad:
        warnings.warn(
            f"{g.source or g.name}: reference position of loop joints outside their limits: {'; '.join(bad)}. "
            "jm.assemble reports 'out of bounds' for guesses there (a side-car TOML's [limits] table can "
            "replace limits)",
            stacklevel=3,
        )
    topo = Topology(
        touched_v=np.nonzero(touched)[0],
        name=g.name,
        source=g.source,
        body_names=tuple(body_order),
        joint_names=joint_names,
        joint_types=tuple(oriented[b].type for b in body_order),
        joint_reversed=tuple(oriented[b] is not g.joints[oriented[b].name] for b in body_order),
        cut_names=tuple(j.name for j in cut_joints),
        loop_names=tuple(lp[0] for lp in loops),
        loop_types=tuple(lp[1] for lp in loops),
        loop_bodies=tuple((lp[2], lp[3]) for lp in loops),
        parent=parent,
        depth=depth,
        levels=levels,
        q_index=q_index,
        v_index=v_index,
        v_body=v_body,
        v_col=v_col,
        q_start=q_start,
        v_start=v_start,
        nq=nq,
        nv=nv,
        ancestor=ancestor,
        groups=tuple(groups),
        n_rows=n_rows,
        row_names=tuple(row_names),
        coupling_names=tuple(c.name for c in couplings),
        coupling_rows=coupling_rows,
        frame_names=tuple(frame_names),
        frame_body=np.array(frame_body, dtype=int),
        actuated=actuated,
        actuated_v=actuated_v,
        port_names=tuple(port_names),
        port_types=tuple(port_types),
        port_v=np.array(port_v, dtype=int),
        port_frames=np.array(port_frames, dtype=int).reshape(-1, 2),
        port_coef=port_coef,
        lin_q=np.array(lin_q, dtype=int),
        lin_v=np.array(lin_v, dtype=int),
        sph_q=np.array(sph_q, dtype=int).reshape(-1, 4),
        sph_v=np.array(sph_v, dtype=int).reshape(-1, 3),
        free_q=np.array(free_q, dtype=int).reshape(-1, 7),
        free_v=np.array(free_v, dtype=int).reshape(-1, 6),
    )
    mass = np.array([g.bodies[b].mass for b in body_order])
    com = np.array([g.bodies[b].com for b in body_order]).reshape(nb, 3)
    inertia = np.array([g.bodies[b].inertia for b in body_order]).reshape(nb, 3, 3)
    f = lambda x: jnp.asarray(np.asarray(x, dtype=float))  # noqa: E731
    return Mechanism(
        topo=topo,
        X_parent=f(X_parent),
        X_child_inv=f(X_child_inv),
        axis1=f(axis1),
        axis2=f(axis2),
        axis_t=f(axis_t),
        offset_th=f(off_th),
        offset_d=f(off_d),
        mass=f(mass),
        com=f(com),
        inertia=f(inertia),
        frame_pose=f(np.array(frame_pose).reshape(-1, 4, 4)),
        cut_pose_a=f(np.array([lp[4] for lp in loops]).reshape(-1, 4, 4)),
        cut_pose_b=f(np.array([lp[5] for lp in loops]).reshape(-1, 4, 4)),
        cut_length=f(np.array([lp[7] for lp in loops])),
        coupling_q=f(coupling_q),
        coupling_offset=f(coupling_offset),
        q0=f(q0),
        lower=f(lower),
        upper=f(upper),
        armature=f(armature),
        damping=f(damping),
        gravity=f(g.gravity),
        port_gear=f(port_gear),
        frictionloss=f(frictionloss),
    )


def _child_of(g: Graph, oriented: dict, joint: str) -> str:
    for child, j in oriented.items():
        if j.name == joint:
            return child
    raise g.error(f"joint '{joint}'", "is a cut joint; it has no coordinate to couple or actuate")


def _frame_or_body(g, frame_names, frame_body, frame_pose, fidx, bi, f) -> int:
    """Index of a named frame; a body name becomes a new frame at the body origin."""
    if f in fidx:
        return fidx[f]
    frame_names.append(f)
    frame_body.append(bi[f])
    frame_pose.append(np.eye(4))
    fidx[f] = len(frame_names) - 1
    return fidx[f]
