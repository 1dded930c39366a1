"""The loop closures and couplings of :func:`jaxmech.export_mjcf` as MuJoCo equalities: each
closure's sites at its two frames, ``<connect>`` / ``<weld>`` between them, the spatial tendons and
tendon equalities of distance closures and universal twist rows, and joint equalities for
couplings (the table in :mod:`jaxmech.io.export`)."""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET
from typing import NamedTuple

import numpy as np

from .mjcf_doc import MjcfDoc, fmt


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


def _end_names(loop: str, side: str) -> tuple[str, ...]:
    """The names an export gives the site at end ``side`` (``a`` / ``b``) of the closure that
    :func:`jaxmech.load` reads back as closure ``loop``: ``<loop>__<side>`` and, for ``<base>__<k>``
    (``k`` 0 / 1: one of the two connects of a revolute cut), ``<base>__<side><k>``, for
    ``<base>__twist`` (the twist row of a universal cut), ``<base>__ax`` / ``<base>__by``."""
    out = (f"{loop}__{side}",)
    base, _, tail = loop.rpartition("__")
    if base and tail in ("0", "1"):
        out += (f"{base}__{side}{tail}",)
    elif base and tail == "twist":
        out += (f"{base}__{'ax' if side == 'a' else 'by'}",)
    return out


def _end_site(doc: MjcfDoc, body: int, T: np.ndarray, names: tuple[str, ...]) -> str:
    """The site of a closure end on ``body`` at pose ``T`` (4, 4): the named frame's site already
    there if one is named after ``names`` (a model loaded from an exported MJCF keeps its closures'
    sites as named frames, so a re-export writes the same sites and names), else a new site
    ``names[0]`` (made unique)."""
    return doc.frame_site_at(body, T, names) or doc.site(body, names[0], T)


def _closure_kind(typ: str, rows: tuple[int, ...], revolute_cut: str) -> str | None:
    """How a closure of type ``typ`` is written: ``point`` / ``weld`` / ``universal`` /
    ``revolute`` / ``distance``, or ``None`` (or another type) when it is not exported. ``rows``:
    the constrained axes of a ``pose`` closure (0-2 rotations, 3-5 translations)."""
    kind = "point" if (typ == "revolute" and revolute_cut == "connect") else typ
    if typ == "pose":
        kind = "weld" if rows == (0, 1, 2, 3, 4, 5) else "point" if rows == (3, 4, 5) else None
    return kind


def emit_closures(mech, qr: np.ndarray, doc: MjcfDoc, revolute_span: float, revolute_cut: str) -> None:
    """The loop closures as equalities (see the table in :mod:`jaxmech.io.export`), in loop order;
    the sites at their frames go onto the bodies, the tendons of distance / universal closures into
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
            sa, sb = _end_site(doc, a, cut.A, _end_names(nm, "a")), _end_site(doc, b, cut.B, _end_names(nm, "b"))
            _length_equality(doc, nm, sa, sb, cut.value, Tw, a, b, cut.A, cut.B)
        else:
            warnings.warn(f"{t.name}: {typ} closure '{nm}' has no MuJoCo equality; not exported", stacklevel=3)


def _emit_site_equality(doc: MjcfDoc, cut: _Cut, kind: str, Tw: np.ndarray, revolute_span: float) -> None:
    """A ``point`` (connect), ``weld`` or ``universal`` closure between sites ``<loop>__a`` /
    ``<loop>__b``. A universal one adds the twist row ``x_A . y_B = c`` as a tendon equality
    between points ``revolute_span`` (m) along A's x and B's y axes. ``Tw`` (nb, 4, 4): body poses
    in the world at the reference configuration."""
    nm, a, b, A, B = cut.name, cut.a, cut.b, cut.A, cut.B
    sa, sb = _end_site(doc, a, A, _end_names(nm, "a")), _end_site(doc, b, B, _end_names(nm, "b"))
    ET.SubElement(doc.eq, "weld" if kind == "weld" else "connect", name=doc.unique("equality", nm), site1=sa, site2=sb)
    if kind == "universal":  # twist row x_A . y_B = c: |(p_A + s x_A) - (p_B + s y_B)| = s sqrt(2 - 2c)
        ex, ey = np.eye(4), np.eye(4)
        ex[0, 3] = ey[1, 3] = revolute_span
        sx, sy = _end_site(doc, a, A @ ex, (f"{nm}__ax",)), _end_site(doc, b, B @ ey, (f"{nm}__by",))
        target = revolute_span * np.sqrt(max(2.0 - 2.0 * cut.value, 0.0))
        _length_equality(doc, f"{nm}__twist", sx, sy, target, Tw, a, b, A @ ex, B @ ey)


def _emit_revolute_cut(doc: MjcfDoc, cut: _Cut, revolute_span: float) -> None:
    """A revolute cut as two connects: at the frame origins (sites ``<loop>__a0`` / ``__b0``) and
    at the points ``revolute_span`` (m) along their z axes (``__a1`` / ``__b1``)."""
    nm = cut.name
    off = np.eye(4)
    off[2, 3] = revolute_span
    for k, (TA, TB) in enumerate(((cut.A, cut.B), (cut.A @ off, cut.B @ off))):
        sa, sb = _end_site(doc, cut.a, TA, (f"{nm}__a{k}",)), _end_site(doc, cut.b, TB, (f"{nm}__b{k}",))
        ET.SubElement(doc.eq, "connect", name=doc.unique("equality", f"{nm}__{k}"), site1=sa, site2=sb)


def _length_equality(doc: MjcfDoc, nm, s1, s2, length, Tw, a, b, A, B) -> None:
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
    ET.SubElement(
        doc.eq, "tendon", name=doc.unique("equality", nm), tendon1=tn, polycoef=fmt([length - L0, 0, 0, 0, 0])
    )


def emit_couplings(mech, qr: np.ndarray, doc: MjcfDoc) -> None:
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
                polycoef=fmt([-co[k] / ca - qr[ia], 0, 0, 0, 0]),
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
                polycoef=fmt([c0, c1, 0, 0, 0]),
            )
