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
same kind gets the first free suffix ``_1``, ``_2``, ... Names that do not collide are unchanged.
A model loaded from an exported MJCF keeps its closures' sites as named frames (``<loop>__a``;
a revolute cut's ``<loop>__a0`` / ``__a1`` for its closures ``<loop>__0`` / ``__1``; a universal
cut's ``<loop>__ax`` / ``__by`` for its twist closure ``<loop>__twist``): a closure end at such a
frame (same body, same pose) uses the frame's site instead of writing another one, so exporting
it again writes the same names.

Actuators: when the mechanism has ports, they are its actuators: a ``motor`` per joint port (its
gear) and a spatial tendon between the two frames with a tendon ``motor`` per distance port
(a hydraulic cylinder). Without ports, a ``motor`` (gear 1) per actuated coordinate.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .export_actuators import emit_actuators
from .export_closures import emit_closures, emit_couplings
from .export_tree import emit_frames, emit_tree
from .mjcf_doc import MjcfDoc, fmt

# The stages, in the order they write (names are made unique in that order, so the named frames
# keep theirs): export_plan (which bodies become MuJoCo bodies) and export_tree (bodies, inertials,
# joints), the named frames' sites, export_closures (loop closures, couplings), export_actuators.


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
    ET.SubElement(root, "option", gravity=fmt(mech.gravity))
    world = ET.SubElement(root, "worldbody")
    doc = MjcfDoc({-1: world}, ET.Element("equality"), ET.Element("tendon"), ET.Element("actuator"))
    emit_tree(mech, qr, doc)
    emit_frames(mech, doc)
    emit_closures(mech, qr, doc, revolute_span, revolute_cut)
    emit_couplings(mech, qr, doc)
    emit_actuators(mech, doc)
    for el in (doc.tendon, doc.eq, doc.act):
        if len(el):
            root.append(el)
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode") + "\n"
    if path is not None:
        Path(path).write_text(text)
    return text
