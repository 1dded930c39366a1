"""The spanning tree of :func:`jaxmech.export_mjcf`: one ``<body>`` per MuJoCo body (as
:func:`.export_plan.plan_bodies` decided) with its ``<inertial>`` and joints (hinge, slide, ball,
free; limits, armature, damping, ``ref`` at the reference configuration), and the named frames'
sites. Joint rules are in :mod:`jaxmech.io.export`."""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET

import numpy as np

from ..graph import ModelError
from .export_plan import TreeData, merged_place, plan_bodies, tree_data
from .mjcf_doc import MjcfDoc, fmt, quat_wxyz


def _rot(axis, angle) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_rotvec(np.asarray(axis) * angle).as_matrix()


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
    attrs = dict(name=sp["name"], type=sp["type"], pos=fmt(sp["pos"]))
    if sp["type"] != "ball":
        attrs.update(axis=fmt(sp["axis"]), ref=f"{sp['ref']:.17g}")
        qi = sp["q"]
        if np.isfinite(lower[qi]) and np.isfinite(upper[qi]):
            attrs["range"] = fmt([lower[qi], upper[qi]])
        elif np.isfinite(lower[qi]) or np.isfinite(upper[qi]):
            # stacklevel 4: the caller of export_mjcf (via emit_tree)
            warnings.warn(f"{model}: joint '{sp['name']}': one-sided limit not exported", stacklevel=4)
    attrs.update(armature=f"{sp['arm']:.17g}", damping=f"{sp['damp']:.17g}")
    ET.SubElement(body, "joint", **attrs)


def emit_tree(mech, qr: np.ndarray, doc: MjcfDoc) -> None:
    """Write the spanning tree into the worldbody (``doc.elems[-1]``): one ``<body>`` per body in
    index order (bodies merged into their child by :func:`.export_plan.plan_bodies` hand their
    joints on to it, folded ones are left out), its inertial and its joints; fill ``doc.elems``,
    ``doc.place``, ``doc.v_joint`` and ``doc.q_joint``."""
    t = mech.topo
    d = tree_data(mech, qr)
    plan = plan_bodies(mech, d)
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
        doc.place[k] = merged_place(t, k, d.X, plan)


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


def _emit_body(mech, d: TreeData, doc: MjcfDoc, parent: int, i: int, Xi: np.ndarray, tiny=None) -> ET.Element:
    """The ``<body>`` of body ``i`` under body ``parent`` (index, ``-1`` world) at pose ``Xi`` (4, 4)
    in ``parent``'s frame, with its ``<inertial>`` (if it has mass; ``tiny``: the ``(mass,
    inertia)`` written instead of its own, see :func:`.export_plan.plan_bodies`) and its
    ``<freejoint>`` (for a free joint, which must join the world to a root body with identity joint
    frames)."""
    t = mech.topo
    name, jt, jn = t.body_names[i], t.joint_types[i], t.joint_names[i]
    b = ET.SubElement(doc.elems[parent], "body", name=name, pos=fmt(Xi[:3, 3]), quat=fmt(quat_wxyz(Xi[:3, :3])))
    mass, I = (d.mass[i], d.inertia[i]) if tiny is None else tiny
    if mass > 0:
        ET.SubElement(
            b,
            "inertial",
            pos=fmt(d.com[i]),
            mass=f"{mass:.17g}",
            fullinertia=fmt([I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]]),
        )
    if jt == "free":
        if t.parent[i] != -1 or not (np.allclose(d.Xp[i], np.eye(4)) and np.allclose(d.Xci[i], np.eye(4))):
            raise ModelError(
                f"{t.name}: joint '{jn}': MuJoCo free joints must join the world to a root body "
                "with identity joint frames"
            )
        ET.SubElement(b, "freejoint", name=doc.unique("joint", jn))
    return b


def emit_frames(mech, doc: MjcfDoc) -> None:
    """Each named frame as a site on its body (pose from ``mech.frame_pose``, (nframes, 4, 4)); its
    name goes into ``doc.frame_site``, its body and pose into ``doc.frame_at``. Written before any
    generated site, so the frames keep their names."""
    t = mech.topo
    fpose = np.array(mech.frame_pose)
    for k, f in enumerate(t.frame_names):
        body = int(t.frame_body[k])
        doc.frame_site[k] = site = doc.site(body, f, fpose[k])
        doc.frame_at[site] = (body, fpose[k])
