"""Export a compiled :class:`~jaxmech.Mechanism` to MJCF (:func:`export_mjcf`).

The MJCF reproduces the spanning tree, the inertias, the joints, limits, armature and damping,
named frames (as sites), actuators and the loop closures, placed at a reference configuration
``q_ref`` (default ``mech.q0``): the XML body poses are the bodies' poses at ``q_ref`` and each
hinge/slide gets ``ref = q_ref``, so MuJoCo's ``qpos0 == q_ref`` and a MuJoCo ``qpos`` means the
same as our ``q`` (same order and size; free-joint ``qvel`` differs, see
:mod:`jaxmech.io.mujoco_convert`). If ``q_ref`` is assembled, MuJoCo's reference configuration
is closed.

Joints: revolute -> hinge, prismatic -> slide, cylindrical -> hinge + slide on the same axis,
universal -> two hinges in the same body (named ``<joint>__1``, ``<joint>__2``; MuJoCo composes
them in order, which is our ``Rot(axis1, q1) Rot(axis2, q2)``); spherical -> ball (its reference
is the identity quaternion: a ball's ``qpos`` is measured from the XML pose, so spherical
coordinates of ``q_ref`` are reset to identity to keep the meaning of ``q``), free -> free joint
(only at the root with identity joint frames, as every loader produces), fixed -> no joint.

Massless moving bodies: MuJoCo rejects a body with joints unless it, or a body welded below it
(no joint in between), has mass and principal inertia of at least ``mjMINVAL`` (1e-15). Export
makes every such body legal, preferring, in order:

1. merging it into its only child (its joints go first into the child's body, where MuJoCo
   composes them in order). A massless moving body with one child and nothing attached (a
   universal joint written as two revolutes through a massless body) is always merged; another
   body MuJoCo would reject is merged when it is massless (zero mass and inertia), has one child
   (after step 2), neither has a free or spherical joint and, if it carries frames or loop ends,
   the child's joint is fixed (they then ride rigidly on the child);
2. merging its massless fixed leaf children (frame-only links) into it, when that leaves it one
   child to merge into;
3. as a last resort (a massless leaf that moves, a body with several moving children, a point
   mass): giving it a tiny mass (``1e-9`` kg) and / or inertia (``1e-7`` kg m^2 added on the
   diagonal) with a warning naming the body and the values. This changes the dynamics
   negligibly (the body moves nothing else) but does change MuJoCo's total mass by that much.

Frames and loop ends carried by a merged body keep their world poses: they are written on its
host body, re-expressed in the host's frame (closures and distance ports follow their sites).

Loop closures (each cut joint / explicit constraint, sites ``<loop>__a`` / ``<loop>__b`` at its
two frames):

=============  ================================================================================
point          ``<connect site1 site2>`` (exact, 3 rows)
weld           ``<weld site1 site2>`` (exact, 6 rows)
pose           weld if all 6 axes, connect if exactly the 3 translations, otherwise skipped
revolute       two connects: the frame origins and the points 0.1 m along z (6 rows, rank 5);
               ``revolute_cut="connect"``: one connect (planar loops)
universal      connect plus a tendon equality between points ``revolute_span`` along A's x and B's
               y axes (length ``span sqrt(2 - 2c)`` holds ``x_A . y_B = c``: 4 rows, exact)
distance       spatial tendon between the two sites + tendon equality (length held)
cylindrical,   skipped with a warning (no MuJoCo equality expresses them)
prismatic
coupling       joint equality (one or two joints; ``polycoef`` from the linear relation)
=============  ================================================================================

Names: MuJoCo wants the names of each kind (joint, site, tendon, equality, actuator) unique. The
named frames' sites are written first, under their own names; a generated name (closure sites,
tendons, equalities, actuators, the ``__1`` / ``__2`` joints) already taken by an element of the
same kind gets the first free suffix ``_1``, ``_2``, ... (a model loaded from MJCF keeps its
closures' sites, e.g. ``<loop>__a``, as named frames). Names that do not collide are unchanged.

Actuators: when the mechanism has ports, they are its actuators: a ``motor`` per joint port (its
gear) and a spatial tendon between the two frames with a tendon ``motor`` per distance port
(a hydraulic cylinder). Without ports, a ``motor`` (gear 1) per actuated coordinate.
"""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..graph import ModelError

_MINVAL = 1e-15  # MuJoCo's mjMINVAL: the least mass / principal inertia of a moving body
_TINY_MASS = 1e-9  # kg, given to a massless moving body that cannot be merged (last resort)
# kg m^2, added on the diagonal of a singular inertia (last resort); above the 1e-8 under which
# jaxmech's model builder reads an inertia as zero (and rejects it with a mass), so the file re-imports
_TINY_INERTIA = 1e-7


def _s(x) -> str:
    return " ".join(f"{float(v):.17g}" for v in np.ravel(x))


def _quat(R) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(np.asarray(R)).as_quat()
    return np.array([w, x, y, z])


def _rot(axis, angle) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_rotvec(np.asarray(axis) * angle).as_matrix()


def _attached_bodies(mech) -> set[int]:
    """Bodies that carry a named frame, a loop end or a port frame (they must stay MuJoCo bodies)."""
    t = mech.topo
    out = {int(b) for b in np.asarray(t.frame_body, dtype=int).ravel()}
    out |= {int(b) for ab in t.loop_bodies for b in ab}
    return out


def _merged_into_child(mech) -> set[int]:
    """Massless moving bodies merged into their only child: their joints go into the child's
    MuJoCo body, before the child's own (MuJoCo composes the joints of a body in order), so a
    universal joint written as two hinges through a massless body exports as two hinges in one
    body. A body qualifies when its mass is 0, its joint moves (not fixed), it has exactly one
    child, nothing attaches to it and neither it nor the child has a free or spherical joint."""
    t = mech.topo
    nb = len(t.body_names)
    mass = np.asarray(mech.mass, dtype=float)
    kids = {i: [c for c in range(nb) if int(t.parent[c]) == i] for i in range(nb)}
    att = _attached_bodies(mech)
    bad = ("free", "spherical")
    out = set()
    for i in range(nb):
        ks = kids[i]
        if mass[i] > 0 or t.joint_types[i] == "fixed" or len(ks) != 1 or i in att:
            continue  # a massless welded body is fine in MuJoCo
        if t.joint_types[i] in bad or t.joint_types[ks[0]] in bad:
            continue
        out.add(i)
    return out


class _Plan(NamedTuple):
    """How the bodies become MuJoCo bodies (:func:`_plan`): ``child`` maps each body merged into
    its only child to that child, ``folded`` holds the massless fixed leaves merged into their
    parent, ``tiny`` maps a body to the ``(mass, inertia)`` written instead of its own."""

    child: dict[int, int]
    folded: set[int]
    tiny: dict[int, tuple[float, np.ndarray]]


def _plan(mech, d: _TreeData) -> _Plan:
    """The merges of :func:`_merged_into_child`, then, while a MuJoCo body with joints fails
    MuJoCo's mass check (it and the bodies welded below it all lack mass or principal inertia
    ``>= mjMINVAL``), the first such body (in index order) is merged into its only child, else
    merged into that child after folding its massless fixed leaf children into it, else given a
    tiny mass / inertia with a warning (see the module doc). Models MuJoCo accepts as they are
    keep exactly the merges of :func:`_merged_into_child`."""
    t = mech.topo
    nb = len(t.body_names)
    par = [int(p) for p in np.asarray(t.parent, dtype=int)]
    kids: dict[int, list[int]] = {i: [] for i in range(-1, nb)}
    for c in range(nb):
        kids[par[c]].append(c)
    att = _attached_bodies(mech)
    jt = t.joint_types
    bad = ("free", "spherical")
    massless = [float(d.mass[i]) == 0.0 and not np.any(d.inertia[i]) for i in range(nb)]
    child = {i: kids[i][0] for i in sorted(_merged_into_child(mech))}
    folded: set[int] = set()
    tiny: dict[int, tuple[float, np.ndarray]] = {}

    def gone(i: int) -> bool:
        return i in child or i in folded

    def mj_parent(i: int) -> int:
        p = par[i]
        while p >= 0 and gone(p):
            p = par[p]
        return p

    def moves(i: int) -> bool:  # the MuJoCo body of i has joints (its own or a merged parent's)
        out, p = jt[i] != "fixed", par[i]
        while p in child:
            out, p = out or jt[p] != "fixed", par[p]
        return out

    def valid(i: int) -> bool:
        m, inertia = tiny.get(i, (d.mass[i], d.inertia[i]))
        return float(m) >= _MINVAL and float(np.linalg.eigvalsh(np.asarray(inertia, dtype=float))[0]) >= _MINVAL

    def legal(i: int) -> bool:  # MuJoCo's check: i, or a body welded below it, has mass and inertia
        return valid(i) or any(not gone(k) and not moves(k) and mj_parent(k) == i and legal(k) for k in range(nb))

    def carries(i: int) -> bool:  # frames / loop ends that must ride on i's host
        return i in att or any(k in folded and carries(k) for k in kids[i]) or (par[i] in child and carries(par[i]))

    def merge_into_child(b: int) -> bool:
        ks = [k for k in kids[b] if k not in folded]
        if not massless[b] or b in tiny or jt[b] in bad or len(ks) != 1 or jt[ks[0]] in bad:
            return False
        if carries(b) and jt[ks[0]] != "fixed":
            return False  # what b carries would follow the child's joint
        child[b] = ks[0]
        return True

    def fold_leaves_then_merge(b: int) -> bool:
        leaves = {k for k in kids[b] if jt[k] == "fixed" and massless[k] and not kids[k] and not gone(k)}
        if not leaves:
            return False
        folded.update(leaves)
        if merge_into_child(b):
            return True
        folded.difference_update(leaves)
        return False

    while True:
        b = next((i for i in range(nb) if not gone(i) and moves(i) and not legal(i)), None)
        if b is None:
            return _Plan(child, folded, tiny)
        if merge_into_child(b) or fold_leaves_then_merge(b):
            continue
        m, inertia = float(d.mass[b]), np.asarray(d.inertia[b], dtype=float)
        add_m = _TINY_MASS if m < _MINVAL else 0.0
        add_i = _TINY_INERTIA if np.linalg.eigvalsh(inertia)[0] < _MINVAL else 0.0
        tiny[b] = (m + add_m, inertia + add_i * np.eye(3))
        # stacklevel 4: the caller of export_mjcf (via _emit_tree)
        warnings.warn(
            f"{t.name}: body '{t.body_names[b]}' moves but has no mass or inertia MuJoCo accepts and "
            f"cannot be merged into another body: exported with {add_m:g} kg added to its mass and "
            f"{add_i:g} kg m^2 to its inertia's diagonal",
            stacklevel=4,
        )


def _joint_specs(mech, i, qr, ax1, ax2, axt, Xci, arm, damp) -> list[dict]:
    """MuJoCo joint specs of tree joint ``i``: name, type, axis and anchor in the child body's
    frame, q / v index, armature, damping (``ball`` for spherical; none for fixed / free)."""
    t = mech.topo
    jt, jn = t.joint_types[i], t.joint_names[i]
    C = np.linalg.inv(Xci[i])
    qs, vs = int(t.q_start[i]), int(t.v_start[i])
    subs = []  # (mj name, type, axis in body, q index)
    if jt == "revolute":
        subs = [(jn, "hinge", C[:3, :3] @ ax1[i], qs)]
    elif jt == "prismatic":
        subs = [(jn, "slide", C[:3, :3] @ axt[i], qs)]
    elif jt == "cylindrical":
        subs = [(f"{jn}__1", "hinge", C[:3, :3] @ ax1[i], qs), (f"{jn}__2", "slide", C[:3, :3] @ axt[i], qs + 1)]
    elif jt == "universal":
        b1 = _rot(ax2[i], qr[qs + 1]).T @ ax1[i]
        subs = [(f"{jn}__1", "hinge", C[:3, :3] @ b1, qs), (f"{jn}__2", "hinge", C[:3, :3] @ ax2[i], qs + 1)]
    elif jt == "spherical":
        subs = [(jn, "ball", np.array([0.0, 0.0, 1.0]), qs)]
    return [
        dict(name=n, type=ty, axis=ax, pos=C[:3, 3], q=qi, v=vs + k, ref=qr[qi], arm=arm[vs + k], damp=damp[vs + k])
        for k, (n, ty, ax, qi) in enumerate(subs)
    ]


def _move_spec(sp: dict, T) -> dict:
    """A joint spec expressed in a child frame whose pose in the spec's frame is ``T`` (4, 4)."""
    R, p = T[:3, :3], T[:3, 3]
    return {**sp, "axis": R.T @ sp["axis"], "pos": R.T @ (sp["pos"] - p)}


def _emit_joint(body, sp: dict, model: str, lower, upper) -> None:
    """The ``<joint>`` of spec ``sp`` in ``body``; ``lower`` / ``upper`` (nq,) give its range."""
    attrs = dict(name=sp["name"], type=sp["type"], pos=_s(sp["pos"]))
    if sp["type"] != "ball":
        attrs.update(axis=_s(sp["axis"]), ref=f"{sp['ref']:.17g}")
        qi = sp["q"]
        if np.isfinite(lower[qi]) and np.isfinite(upper[qi]):
            attrs["range"] = _s([lower[qi], upper[qi]])
        elif np.isfinite(lower[qi]) or np.isfinite(upper[qi]):
            # stacklevel 4: the caller of export_mjcf (via _emit_tree)
            warnings.warn(f"{model}: joint '{sp['name']}': one-sided limit not exported", stacklevel=4)
    attrs.update(armature=f"{sp['arm']:.17g}", damping=f"{sp['damp']:.17g}")
    ET.SubElement(body, "joint", **attrs)


def _length_equality(doc: _Doc, nm, s1, s2, length, Tw, a, b, A, B) -> None:
    """A two-site spatial tendon ``nm`` and a tendon equality ``nm`` holding its length at
    ``length`` (m) (MuJoCo's form ``L - L(qpos0) = c0``; ``A`` / ``B`` the poses of sites ``s1`` /
    ``s2`` on bodies ``a`` / ``b``)."""
    tn = doc.unique("tendon", nm)
    sp = ET.SubElement(doc.tendon, "spatial", name=tn)
    ET.SubElement(sp, "site", site=s1)
    ET.SubElement(sp, "site", site=s2)
    pa = (Tw[a] if a >= 0 else np.eye(4)) @ A
    pb = (Tw[b] if b >= 0 else np.eye(4)) @ B
    L0 = np.linalg.norm(pb[:3, 3] - pa[:3, 3])
    ET.SubElement(doc.eq, "tendon", name=doc.unique("equality", nm), tendon1=tn, polycoef=_s([length - L0, 0, 0, 0, 0]))


@dataclass
class _Doc:
    """The MJCF under construction: the element of each body index written as a MuJoCo body
    (``-1`` the worldbody), the host and pose (4, 4) in the host's frame of each body merged into
    another (``place``), the ``<equality>``, ``<tendon>`` and ``<actuator>`` sections, the
    MuJoCo joint name of each velocity / coordinate index it wrote (hinge and slide joints only),
    the site name of each named frame and the names used so far, by kind (``joint``, ``site``,
    ``tendon``, ``equality``, ``actuator``)."""

    elems: dict[int, ET.Element]
    eq: ET.Element
    tendon: ET.Element
    act: ET.Element
    v_joint: dict[int, str] = field(default_factory=dict)
    q_joint: dict[int, str] = field(default_factory=dict)
    frame_site: dict[int, str] = field(default_factory=dict)
    used: dict[str, set[str]] = field(default_factory=dict)
    place: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)

    def unique(self, kind: str, nm: str) -> str:
        """``nm``, or ``nm_<k>`` with the smallest ``k >= 1`` that is free, if a ``kind`` element of
        that name was already written (MuJoCo wants names unique per kind); the name is taken."""
        used = self.used.setdefault(kind, set())
        out, k = nm, 0
        while out in used:
            k += 1
            out = f"{nm}_{k}"
        used.add(out)
        return out

    def site(self, body: int, nm: str, T: np.ndarray) -> str:
        """A site named ``nm`` (made unique) on ``body`` (index, ``-1`` world) at pose ``T`` (4, 4) in
        the body's frame (a merged body's sites go on its host, re-expressed); returns its name."""
        nm = self.unique("site", nm)
        body = int(body)
        if body in self.place:
            body, Tb = self.place[body]
            T = Tb @ T
        ET.SubElement(self.elems[body], "site", name=nm, pos=_s(T[:3, 3]), quat=_s(_quat(T[:3, :3])))
        return nm


class _TreeData(NamedTuple):
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


class _Cut(NamedTuple):
    """One loop closure: its name, the bodies ``a`` / ``b`` (index, ``-1`` world) carrying its two
    frames, the frames' poses ``A`` / ``B`` (4, 4) in those bodies, and ``value`` (the length in m
    of a distance closure, the cosine ``x_A . y_B`` of a universal one)."""

    name: str
    a: int
    b: int
    A: np.ndarray
    B: np.ndarray
    value: float


def export_mjcf(
    mech, path=None, q=None, revolute_span: float = 0.1, revolute_cut: str = "two_connects", comment: str | None = None
) -> str:
    """Write ``mech`` as MJCF (see the module doc) to ``path`` (if given); return the XML text.

    ``q`` (nq,): the reference configuration (default ``mech.q0``); give an assembled one so
    MuJoCo's ``qpos0`` is closed. ``revolute_span`` (m): distance between the two connect points
    that stand in for a revolute cut. ``revolute_cut="connect"`` exports a revolute cut as a single
    connect at its origin instead (exact for planar loops whose other joints keep the axes
    parallel, e.g. a four-bar). ``comment``: text put at the top of the file."""
    if revolute_cut not in ("two_connects", "connect"):
        raise ValueError(f"revolute_cut must be 'two_connects' or 'connect', got {revolute_cut!r}")
    t = mech.topo
    qr = np.array(mech.q0 if q is None else q, dtype=float).reshape(t.nq)
    for idx in t.sph_q:
        qr[idx] = [1.0, 0, 0, 0]

    root = ET.Element("mujoco", model=t.name)
    if comment:
        root.append(ET.Comment(f" {comment.strip()} "))
    ET.SubElement(root, "compiler", angle="radian", autolimits="true")
    ET.SubElement(root, "option", gravity=_s(mech.gravity))
    world = ET.SubElement(root, "worldbody")
    doc = _Doc({-1: world}, ET.Element("equality"), ET.Element("tendon"), ET.Element("actuator"))
    _emit_tree(mech, qr, doc)
    _emit_frames(mech, doc)
    _emit_closures(mech, qr, doc, revolute_span, revolute_cut)
    _emit_couplings(mech, qr, doc)
    _emit_actuators(mech, doc)
    for el in (doc.tendon, doc.eq, doc.act):
        if len(el):
            root.append(el)
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode") + "\n"
    if path is not None:
        Path(path).write_text(text)
    return text


def _tree_data(mech, qr: np.ndarray) -> _TreeData:
    """The arrays of :class:`_TreeData`, with the local transforms evaluated at ``qr`` (nq,)."""
    from ..kinpass import local_transforms

    X = np.array(local_transforms(mech, qr))
    Xp, Xci = np.array(mech.X_parent), np.array(mech.X_child_inv)
    ax1, ax2, axt = np.array(mech.axis1), np.array(mech.axis2), np.array(mech.axis_t)
    lower, upper = np.array(mech.lower), np.array(mech.upper)
    arm, damp = np.array(mech.armature), np.array(mech.damping)
    mass, com, inertia = np.array(mech.mass), np.array(mech.com), np.array(mech.inertia)
    return _TreeData(X, Xp, Xci, ax1, ax2, axt, lower, upper, arm, damp, mass, com, inertia)


def _emit_tree(mech, qr: np.ndarray, doc: _Doc) -> None:
    """Write the spanning tree into the worldbody (``doc.elems[-1]``): one ``<body>`` per body in
    index order (bodies merged into their child by :func:`_plan` hand their joints on to it,
    folded ones are left out), its inertial and its joints; fill ``doc.elems``, ``doc.place``,
    ``doc.v_joint`` and ``doc.q_joint``."""
    t = mech.topo
    d = _tree_data(mech, qr)
    plan = _plan(mech, d)
    pending: dict[int, tuple] = {}  # merged body -> (pose in its host parent's frame, joint specs in its frame)
    for i in range(len(t.body_names)):
        if i in plan.folded:
            continue
        par, Xi, specs = _host_placement(t, i, d.X, pending)
        specs += _joint_specs(mech, i, qr, d.ax1, d.ax2, d.axt, d.Xci, d.arm, d.damp)
        if i in plan.child:
            pending[i] = (Xi, specs)
            continue
        b = _emit_body(mech, d, doc, par, i, Xi, plan.tiny.get(i))
        doc.elems[i] = b
        for sp in specs:
            sp = {**sp, "name": doc.unique("joint", sp["name"])}
            _emit_joint(b, sp, t.name, d.lower, d.upper)
            if sp["type"] != "ball":
                doc.v_joint[sp["v"]] = sp["name"]
                doc.q_joint[sp["q"]] = sp["name"]
    for k in (*plan.child, *plan.folded):
        doc.place[k] = _merged_place(t, k, d.X, plan)


def _merged_place(t, k: int, X: np.ndarray, plan: _Plan) -> tuple[int, np.ndarray]:
    """``(host, T)``: the MuJoCo body that body ``k`` ends up in and ``k``'s pose (4, 4) in the
    host's frame (at the reference configuration; :func:`_plan` merges a body that carries
    frames only where it is rigid with its host)."""
    if k in plan.folded:
        host, T = int(t.parent[k]), X[k]
    elif k in plan.child:
        c = plan.child[k]
        host, T = c, np.linalg.inv(X[c])
    else:
        return k, np.eye(4)
    h, Th = _merged_place(t, host, X, plan) if host >= 0 else (host, np.eye(4))
    return h, Th @ T


def _host_placement(t, i: int, X: np.ndarray, pending: dict[int, tuple]) -> tuple[int, np.ndarray, list[dict]]:
    """Where body ``i`` goes in the MJCF tree: ``(host, Xi, specs)`` with ``host`` the nearest
    ancestor not merged away (``-1`` world), ``Xi`` (4, 4) the body's pose in the host's frame and
    ``specs`` the joint specs inherited from a merged parent (``pending``), moved into the body's
    frame (they go before the body's own joints)."""
    par = int(t.parent[i])
    Xi, specs = X[i], []
    if par in pending:  # the parent is massless: its joints move into this body, before ours
        Xp_acc, pspecs = pending[par]
        Xi = Xp_acc @ X[i]
        specs = [_move_spec(sp, X[i]) for sp in pspecs]
        while par in pending:
            par = int(t.parent[par])
    return par, Xi, specs


def _emit_body(mech, d: _TreeData, doc: _Doc, parent: int, i: int, Xi: np.ndarray, tiny=None) -> ET.Element:
    """The ``<body>`` of body ``i`` under body ``parent`` (index, ``-1`` world) at pose ``Xi`` (4, 4)
    in ``parent``'s frame, with its ``<inertial>`` (if it has mass; ``tiny``: the ``(mass,
    inertia)`` written instead of its own, see :func:`_plan`) and its ``<freejoint>`` (for a free
    joint, which must join the world to a root body with identity joint frames)."""
    t = mech.topo
    name, jt, jn = t.body_names[i], t.joint_types[i], t.joint_names[i]
    b = ET.SubElement(doc.elems[parent], "body", name=name, pos=_s(Xi[:3, 3]), quat=_s(_quat(Xi[:3, :3])))
    mass, I = (d.mass[i], d.inertia[i]) if tiny is None else tiny
    if mass > 0:
        ET.SubElement(
            b,
            "inertial",
            pos=_s(d.com[i]),
            mass=f"{mass:.17g}",
            fullinertia=_s([I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]]),
        )
    if jt == "free":
        if t.parent[i] != -1 or not (np.allclose(d.Xp[i], np.eye(4)) and np.allclose(d.Xci[i], np.eye(4))):
            raise ModelError(
                f"{t.name}: joint '{jn}': MuJoCo free joints must join the world to a root body "
                "with identity joint frames"
            )
        ET.SubElement(b, "freejoint", name=doc.unique("joint", jn))
    return b


def _emit_frames(mech, doc: _Doc) -> None:
    """Each named frame as a site on its body (pose from ``mech.frame_pose``, (nframes, 4, 4)); its
    name goes into ``doc.frame_site``. Written before any generated site, so the frames keep their
    names."""
    t = mech.topo
    fpose = np.array(mech.frame_pose)
    for k, f in enumerate(t.frame_names):
        doc.frame_site[k] = doc.site(int(t.frame_body[k]), f, fpose[k])


def _closure_kind(typ: str, rows: tuple[int, ...], revolute_cut: str) -> str | None:
    """How a closure of type ``typ`` is written: ``point`` / ``weld`` / ``universal`` /
    ``revolute`` / ``distance``, or ``None`` (or another type) when it is not exported. ``rows``:
    the constrained axes of a ``pose`` closure (0-2 rotations, 3-5 translations)."""
    kind = "point" if (typ == "revolute" and revolute_cut == "connect") else typ
    if typ == "pose":
        kind = "weld" if rows == (0, 1, 2, 3, 4, 5) else "point" if rows == (3, 4, 5) else None
    return kind


def _emit_closures(mech, qr: np.ndarray, doc: _Doc, revolute_span: float, revolute_cut: str) -> None:
    """The loop closures as equalities (see the module doc's table), in loop order; the sites at
    their frames go onto the bodies, the tendons of distance / universal closures into
    ``doc.tendon``. Lengths are held relative to the bodies' poses at ``qr`` (MuJoCo's qpos0)."""
    from ..kinpass import forward_kinematics

    t = mech.topo
    Ta, Tb, lengths = np.array(mech.cut_pose_a), np.array(mech.cut_pose_b), np.array(mech.cut_length)
    axes_of = {}
    for gr in t.groups:
        for nm in gr.names:
            axes_of[nm] = gr.rows
    Tw = np.array(forward_kinematics(mech, qr))
    for li, (nm, typ) in enumerate(zip(t.loop_names, t.loop_types, strict=True)):
        a, b = t.loop_bodies[li]
        cut = _Cut(nm, a, b, Ta[li], Tb[li], float(lengths[li]))
        kind = _closure_kind(typ, tuple(int(r) for r in axes_of.get(nm, ())), revolute_cut)
        if kind in ("point", "weld", "universal"):
            _emit_site_equality(doc, cut, kind, Tw, revolute_span)
        elif kind == "revolute":
            _emit_revolute_cut(doc, cut, revolute_span)
        elif kind == "distance":
            sa, sb = doc.site(a, f"{nm}__a", cut.A), doc.site(b, f"{nm}__b", cut.B)
            _length_equality(doc, nm, sa, sb, cut.value, Tw, a, b, cut.A, cut.B)
        else:
            warnings.warn(f"{t.name}: {typ} closure '{nm}' has no MuJoCo equality; not exported", stacklevel=3)


def _emit_site_equality(doc: _Doc, cut: _Cut, kind: str, Tw: np.ndarray, revolute_span: float) -> None:
    """A ``point`` (connect), ``weld`` or ``universal`` closure between sites ``<loop>__a`` /
    ``<loop>__b``. A universal one adds the twist row ``x_A . y_B = c`` as a tendon equality
    between points ``revolute_span`` (m) along A's x and B's y axes. ``Tw`` (nb, 4, 4): body poses
    in the world at the reference configuration."""
    nm, a, b, A, B = cut.name, cut.a, cut.b, cut.A, cut.B
    sa, sb = doc.site(a, f"{nm}__a", A), doc.site(b, f"{nm}__b", B)
    ET.SubElement(doc.eq, "weld" if kind == "weld" else "connect", name=doc.unique("equality", nm), site1=sa, site2=sb)
    if kind == "universal":  # twist row x_A . y_B = c: |(p_A + s x_A) - (p_B + s y_B)| = s sqrt(2 - 2c)
        ex, ey = np.eye(4), np.eye(4)
        ex[0, 3] = ey[1, 3] = revolute_span
        sx, sy = doc.site(a, f"{nm}__ax", A @ ex), doc.site(b, f"{nm}__by", B @ ey)
        target = revolute_span * np.sqrt(max(2.0 - 2.0 * cut.value, 0.0))
        _length_equality(doc, f"{nm}__twist", sx, sy, target, Tw, a, b, A @ ex, B @ ey)


def _emit_revolute_cut(doc: _Doc, cut: _Cut, revolute_span: float) -> None:
    """A revolute cut as two connects: at the frame origins (sites ``<loop>__a0`` / ``__b0``) and
    at the points ``revolute_span`` (m) along their z axes (``__a1`` / ``__b1``)."""
    nm = cut.name
    off = np.eye(4)
    off[2, 3] = revolute_span
    for k, (TA, TB) in enumerate(((cut.A, cut.B), (cut.A @ off, cut.B @ off))):
        sa, sb = doc.site(cut.a, f"{nm}__a{k}", TA), doc.site(cut.b, f"{nm}__b{k}", TB)
        ET.SubElement(doc.eq, "connect", name=doc.unique("equality", f"{nm}__{k}"), site1=sa, site2=sb)


def _emit_couplings(mech, qr: np.ndarray, doc: _Doc) -> None:
    """Each coupling over one or two exported hinge / slide coordinates as a joint equality
    (``polycoef`` from the linear relation, relative to MuJoCo's ``ref = qr``); others are skipped
    with a warning."""
    t = mech.topo
    cq, co = np.array(mech.coupling_q), np.array(mech.coupling_offset)
    for k, nm in enumerate(t.coupling_names):
        idx = np.nonzero(cq[k])[0]
        if len(idx) not in (1, 2) or any(i not in doc.q_joint for i in idx):
            warnings.warn(f"{t.name}: coupling '{nm}' (over {len(idx)} coordinates) not exported", stacklevel=3)
            continue
        # joint1 = the coordinate with coefficient +1 if any (a mimic's slave), else the first
        ones = [i for i in idx if cq[k, i] == 1.0]
        ia = ones[0] if ones else idx[0]
        idx = [ia] + [i for i in idx if i != ia]
        ca = cq[k, ia]
        j1 = doc.q_joint[ia]
        if len(idx) == 1:
            ET.SubElement(
                doc.eq,
                "joint",
                name=doc.unique("equality", nm),
                joint1=j1,
                polycoef=_s([-co[k] / ca - qr[ia], 0, 0, 0, 0]),
            )
        else:
            ib = idx[1]
            c1 = -cq[k, ib] / ca
            c0 = -co[k] / ca - qr[ia] + c1 * qr[ib]
            ET.SubElement(
                doc.eq,
                "joint",
                name=doc.unique("equality", nm),
                joint1=j1,
                joint2=doc.q_joint[ib],
                polycoef=_s([c0, c1, 0, 0, 0]),
            )


def _emit_actuators(mech, doc: _Doc) -> None:
    """The actuators: with ports, a ``motor`` per joint port (its gear) and a two-site spatial
    tendon with a tendon ``motor`` per distance port; without, a ``motor`` (gear 1) per actuated
    exported coordinate."""
    t = mech.topo
    driven = set()
    for k, pn in enumerate(t.port_names):
        gear = float(np.array(mech.port_gear)[k])
        if t.port_types[k] == "joint":
            vi = int(t.port_v[k])
            if vi in doc.v_joint:
                ET.SubElement(
                    doc.act, "motor", name=doc.unique("actuator", pn), joint=doc.v_joint[vi], gear=f"{gear:.17g}"
                )
                driven.add(vi)
        else:
            fa, fb = (int(x) for x in t.port_frames[k])
            tn = doc.unique("tendon", f"{pn}__tendon")
            sp = ET.SubElement(doc.tendon, "spatial", name=tn)
            ET.SubElement(sp, "site", site=doc.frame_site[fa])
            ET.SubElement(sp, "site", site=doc.frame_site[fb])
            ET.SubElement(doc.act, "motor", name=doc.unique("actuator", pn), tendon=tn, gear=f"{gear:.17g}")
    for vi in np.asarray(t.actuated_v, dtype=int) if not t.port_names else ():
        if int(vi) in doc.v_joint and int(vi) not in driven:
            jn = doc.v_joint[int(vi)]
            ET.SubElement(doc.act, "motor", name=doc.unique("actuator", f"{jn}__motor"), joint=jn)
