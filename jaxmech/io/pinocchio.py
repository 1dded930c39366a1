"""Export a compiled :class:`~jaxmech.Mechanism` to Pinocchio (``pin`` >= 3).

``to_pinocchio(mech)`` returns ``(model, constraint_models)``: a ``pin.Model`` with the same
spanning tree, joint placements, inertias, armature, damping, limits and gravity, and one
``pin.RigidConstraintModel`` per closure element Pinocchio can express:

==================================  ====================================================
jaxmech loop type                   Pinocchio constraint
==================================  ====================================================
``point`` (spherical cut)           ``CONTACT_3D`` (frame origins coincide)
``weld`` (fixed cut)                ``CONTACT_6D`` (frames coincide)
``pose`` with all six axes          ``CONTACT_6D``
``pose`` with exactly x, y, z       ``CONTACT_3D``
==================================  ====================================================

Unsupported (``unsupported="raise"`` raises :class:`~jaxmech.ModelError`, ``"skip"`` leaves them
out): revolute / universal / prismatic / cylindrical cuts, other ``pose`` axis sets,
``distance`` constraints and linear couplings (Pinocchio has no rigid constraint of those kinds).

Joint mapping: revolute -> ``RevoluteUnaligned``, prismatic -> ``PrismaticUnaligned``,
cylindrical / universal -> ``JointModelComposite`` of two unaligned joints, spherical ->
``Spherical``, free -> ``FreeFlyer``; fixed joints are merged into their parent (their inertia is
appended to the parent joint), so Pinocchio's ``nq``/``nv`` and coordinate order equal ours.
Joint offsets (MJCF ``ref``) are folded into the joint placement.

Coordinates differ at the boundary only in two places (use :func:`q_to_pinocchio` etc.):
quaternions are (w, x, y, z) here and (x, y, z, w) in Pinocchio; the free joint's velocity is
the body twist angular-first ``(omega, v)`` here and linear-first ``(v, omega)`` there (same
body-frame quantities; accelerations and generalized forces permute the same way). Damping is
copied to ``model.damping`` but Pinocchio's dynamics algorithms ignore it.
"""

from __future__ import annotations

import numpy as np

from ..graph import JointType, ModelError
from ..mechanism import Mechanism


def _rot(axis, angle) -> np.ndarray:
    a = np.asarray(axis, float)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _pose(R=None, p=None) -> np.ndarray:
    T = np.eye(4)
    if R is not None:
        T[:3, :3] = R
    if p is not None:
        T[:3, 3] = p
    return T


def pinocchio_permutations(mech: Mechanism) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays ``(perm_q, perm_v)`` with ``q_pin = q[perm_q]`` and ``v_pin = v[perm_v]``."""
    t = mech.topo
    pq = np.arange(mech.nq)
    pv = np.arange(mech.nv)
    for idx in list(t.sph_q) + [f[3:] for f in t.free_q]:
        pq[idx] = idx[[1, 2, 3, 0]]
    for idx in t.free_v:
        pv[idx] = idx[[3, 4, 5, 0, 1, 2]]
    return pq, pv


def q_to_pinocchio(mech: Mechanism, q):
    """Our q (..., nq) (wxyz quaternions) -> Pinocchio's (xyzw)."""
    return q[..., pinocchio_permutations(mech)[0]]


def q_from_pinocchio(mech: Mechanism, q_pin):
    """Pinocchio q (..., nq) -> ours."""
    return q_pin[..., np.argsort(pinocchio_permutations(mech)[0])]


def v_to_pinocchio(mech: Mechanism, v):
    """Our v, a or tau (..., nv) (free joint angular-first) -> Pinocchio's (linear-first)."""
    return v[..., pinocchio_permutations(mech)[1]]


def v_from_pinocchio(mech: Mechanism, v_pin):
    """Pinocchio v, a or tau (..., nv) -> ours."""
    return v_pin[..., np.argsort(pinocchio_permutations(mech)[1])]


def to_pinocchio(mech: Mechanism, unsupported: str = "raise"):
    """Build ``(pin.Model, pin.StdVec_RigidConstraintModel)`` reproducing ``mech`` (see module
    docstring); the constraint vector goes straight into ``pin.initConstraintDynamics`` /
    ``pin.constraintDynamics`` (datas: ``pin.StdVec_RigidConstraintData([c.createData() for c in
    constraints])``). Pinocchio frames named after our bodies (``BODY`` frames) are added too."""
    import pinocchio as pin

    if unsupported not in ("raise", "skip"):
        raise ValueError(f"unsupported must be 'raise' or 'skip', got {unsupported!r}")
    t = mech.topo
    g = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    Xp, Xci = g(mech.X_parent), g(mech.X_child_inv)
    ax1, ax2, axt = g(mech.axis1), g(mech.axis2), g(mech.axis_t)
    oth, od = g(mech.offset_th), g(mech.offset_d)
    mass, com, inertia = g(mech.mass), g(mech.com), g(mech.inertia)
    arm, damp, lo, hi = g(mech.armature), g(mech.damping), g(mech.lower), g(mech.upper)

    model = pin.Model()
    model.name = t.name
    model.gravity = pin.Motion(np.concatenate([g(mech.gravity), np.zeros(3)]))
    jid = np.zeros(mech.nb, dtype=int)  # Pinocchio joint carrying each body
    T_jb = np.zeros((mech.nb, 4, 4))  # body frame in that joint's frame
    for i, name in enumerate(t.body_names):
        p = int(t.parent[i])
        pj, T_pj = (0, np.eye(4)) if p < 0 else (int(jid[p]), T_jb[p])
        typ = t.joint_types[i]
        if typ == "fixed":
            jid[i], T_jb[i] = pj, T_pj @ Xp[i] @ Xci[i]
        else:
            place = T_pj @ Xp[i]
            if typ == "revolute":
                jm = pin.JointModelRevoluteUnaligned(ax1[i])
                place = place @ _pose(R=_rot(ax1[i], -oth[i]))
            elif typ == "prismatic":
                jm = pin.JointModelPrismaticUnaligned(axt[i])
                place = place @ _pose(p=-axt[i] * od[i])
            elif typ == "cylindrical":
                jm = pin.JointModelComposite(pin.JointModelRevoluteUnaligned(ax1[i]))
                jm.addJoint(pin.JointModelPrismaticUnaligned(axt[i]))
                place = place @ _pose(R=_rot(ax1[i], -oth[i]), p=-axt[i] * od[i])
            elif typ == "universal":
                jm = pin.JointModelComposite(pin.JointModelRevoluteUnaligned(ax1[i]))
                jm.addJoint(pin.JointModelRevoluteUnaligned(ax2[i]))
                place = place @ _pose(R=_rot(ax1[i], -oth[i]))
            elif typ == "spherical":
                jm = pin.JointModelSpherical()
            elif typ == "free":
                jm = pin.JointModelFreeFlyer()
            else:  # pragma: no cover - compile() only creates known types
                raise ModelError(f"{t.name}: joint '{t.joint_names[i]}' of type {typ} has no Pinocchio equivalent")
            jid[i] = model.addJoint(pj, jm, pin.SE3(place), t.joint_names[i])
            T_jb[i] = Xci[i]
            j = model.joints[int(jid[i])]
            if JointType(typ).scalar:  # plain scalar coordinates carry limits
                qs = slice(int(t.q_start[i]), int(t.q_start[i]) + j.nq)
                model.lowerPositionLimit[j.idx_q : j.idx_q + j.nq] = np.maximum(lo[qs], -1e10)
                model.upperPositionLimit[j.idx_q : j.idx_q + j.nq] = np.minimum(hi[qs], 1e10)
        Y = pin.Inertia(float(mass[i]), com[i], inertia[i])
        model.appendBodyToJoint(int(jid[i]), Y, pin.SE3(T_jb[i]))
        model.addFrame(pin.Frame(name, int(jid[i]), 0, pin.SE3(T_jb[i]), pin.FrameType.BODY))

    perm_v = pinocchio_permutations(mech)[1]  # Pinocchio's v order is ours, free joints linear-first
    model.armature[:] = arm[perm_v]
    model.damping[:] = damp[perm_v]

    constraints = pin.StdVec_RigidConstraintModel()
    cpa, cpb = g(mech.cut_pose_a), g(mech.cut_pose_b)
    groups = {n: gr for gr in t.groups for n in gr.names}
    for li, (name, typ) in enumerate(zip(t.loop_names, t.loop_types, strict=True)):
        ctype = None
        if typ == "point":
            ctype = pin.ContactType.CONTACT_3D
        elif typ == "weld":
            ctype = pin.ContactType.CONTACT_6D
        elif typ == "pose":
            rows = tuple(groups[name].rows.tolist())
            ctype = {(0, 1, 2, 3, 4, 5): pin.ContactType.CONTACT_6D, (3, 4, 5): pin.ContactType.CONTACT_3D}.get(rows)
        if ctype is None:
            if unsupported == "raise":
                raise ModelError(
                    f"{t.name}: loop '{name}' of type {typ} has no Pinocchio rigid constraint "
                    "(supported: point, weld, pose on all axes or on x, y, z); pass unsupported='skip'"
                )
            continue
        sides = []
        for b, T in zip(t.loop_bodies[li], (cpa[li], cpb[li]), strict=True):
            sides.append((0, T) if b < 0 else (int(jid[b]), T_jb[b] @ T))
        (j1, P1), (j2, P2) = sides
        cm = pin.RigidConstraintModel(ctype, model, j1, pin.SE3(P1), j2, pin.SE3(P2), pin.ReferenceFrame.LOCAL)
        cm.name = name
        constraints.append(cm)
    if t.coupling_names and unsupported == "raise":
        raise ModelError(
            f"{t.name}: linear couplings {list(t.coupling_names)} have no Pinocchio rigid constraint; "
            "pass unsupported='skip'"
        )
    return model, constraints


def pinocchio_tree_efforts(mech: Mechanism, q, v, a) -> np.ndarray:
    """Generalized forces ``tau`` (N, nv) of ``mech``'s spanning tree by Pinocchio's ``rnea``, one
    state at a time, in our coordinates. ``q`` (N, nq), ``v`` and ``a`` (N, nv); SI units (N, N m).

    The loop cuts are left out, so ``tau`` lacks the constraint forces ``C^T lambda`` that a closed
    mechanism's measured efforts contain. The port lift of
    :func:`jaxmech.sysid.Dataset.from_measurements` removes that term, so ``tau`` serves as
    measured data for system identification that jaxmech's own dynamics did not make."""
    import pinocchio as pin

    model, _ = to_pinocchio(mech, unsupported="skip")
    data = model.createData()
    qp = np.asarray(q_to_pinocchio(mech, np.asarray(q)), float)
    vp = np.asarray(v_to_pinocchio(mech, np.asarray(v)), float)
    ap = np.asarray(v_to_pinocchio(mech, np.asarray(a)), float)
    tau = np.stack([pin.rnea(model, data, qi, vi, ai) for qi, vi, ai in zip(qp, vp, ap, strict=True)])
    return np.asarray(v_from_pinocchio(mech, tau))
