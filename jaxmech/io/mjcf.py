"""MJCF reader: MuJoCo's own compiler builds the model; we read the compiled ``MjModel``.

Defaults, classes, ``childclass``, ``<include>``, ``<frame>`` and every other MJCF convenience
therefore behave exactly as in MuJoCo. What is read (geometry and meshes are ignored; a missing
mesh file never fails the load, see :func:`_spec_without_meshes`):

* bodies (``body_parentid``, ``body_pos``/``body_quat``), masses and inertias
  (``body_mass``, ``body_ipos``, ``body_iquat``, ``body_inertia``); several root bodies;
* joints: hinge -> revolute, slide -> prismatic, ball -> spherical, free -> free; a body without
  joints is welded to its parent (a ``fixed`` joint named ``<body>__weld``). Several joints in one
  body are composed in order, as MuJoCo does, through massless intermediate bodies named
  ``<body>__<joint>``. Joint ``ref`` becomes our joint ``offset``; limits, armature, damping;
* sites -> named frames; actuators with a joint transmission -> actuated joint plus a joint port
  (``gear``); a spatial tendon between exactly two sites -> a distance port;
* ``<equality>``: connect (body-anchor and site forms) -> point constraint, weld -> weld
  constraint, joint -> coupling (linear part of ``polycoef``; nonlinear terms raise), a linear
  tendon equality on a two-site spatial tendon -> distance constraint, other tendon
  equalities are skipped with a warning; only equalities active at load (``eq_active0``) are read;
* gravity from ``<option gravity>``.

**Configuration.** ``q`` *is* MuJoCo's ``qpos`` (same order, same meaning: hinge/slide values,
ball wxyz quaternion, free position + wxyz quaternion in the world), and ``mech.q0 == qpos0``.
Velocities differ only for free joints (ours: body twist (omega, v_body); MuJoCo: (world linear
velocity, body angular velocity)); convert with :mod:`jaxmech.io.mujoco_convert`.

**Equality anchors.** Connect / weld anchors on body2 are the ones MuJoCo itself uses: its
compiler (``mj_setConst``) computes them at the reference configuration ``qpos0`` and stores them
in ``eq_data``; we read them from there, never recompute them from the XML.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..graph import WORLD, Graph, ModelError, pose
from ._text import check_utf8

_JNT = {0: "free", 1: "spherical", 2: "prismatic", 3: "revolute"}


def _name(m, objtype, i: int, fallback: str) -> str:
    import mujoco

    n = mujoco.mj_id2name(m, objtype, i)
    return n if n else fallback


def _spec_without_meshes(path: Path):
    """Compile ``path`` with MuJoCo; on a missing mesh/texture/heightfield, drop those assets
    (geometry is ignored by jaxmech) and compile again."""
    import mujoco

    try:
        return mujoco.MjModel.from_xml_path(str(path))
    except ValueError as e:
        msg = str(e)
        first = msg
    if not any(w in first.lower() for w in ("mesh", "resource", "file", "texture", "hfield", "stl", "obj")):
        raise ModelError(f"{path}: MuJoCo rejected the model: {' '.join(first.split())}") from None
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - MuJoCo raises several types
        raise ModelError(f"{path}: MuJoCo could not parse the model: {' '.join(str(e).split())}") from None
    # Geometry is irrelevant here: turn mesh geoms into massless spheres and delete the assets.
    # A body whose inertia MuJoCo would have computed from a missing mesh cannot be exact: warn.
    affected = set()
    for g in spec.geoms:
        if g.type in (mujoco.mjtGeom.mjGEOM_MESH, mujoco.mjtGeom.mjGEOM_SDF, mujoco.mjtGeom.mjGEOM_HFIELD):
            g.type = mujoco.mjtGeom.mjGEOM_SPHERE
            g.size = [0.01, 0, 0]
            g.meshname = ""
            g.hfieldname = ""
            g.density, g.mass = 0.0, 0.0
            affected.add(g.parent.name if hasattr(g, "parent") else "?")
    for coll in (spec.meshes, spec.hfields, spec.textures, spec.skins):
        for a in list(coll):
            spec.delete(a)
    for mat in spec.materials:
        mat.textures = [""] * len(mat.textures)
    warnings.warn(
        f"{path}: {first.strip()}: mesh geometry ignored (geoms of bodies {sorted(affected)} count as "
        "massless; bodies without an explicit <inertial> may get a wrong inertia)",
        stacklevel=3,
    )
    try:
        return spec.compile()
    except Exception as e:  # noqa: BLE001
        again = " ".join(str(e).split())
        raise ModelError(
            f"{path}: MuJoCo rejected the model: {' '.join(first.split())} (also without meshes: {again})"
        ) from None


def read_mjcf(path) -> Graph:
    """Parse an MJCF file (through MuJoCo's compiler) into a :class:`Graph`. See the module doc."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: file not found")
    check_utf8(path, xml=True)
    m = _spec_without_meshes(path)
    return graph_from_mjmodel(m, source=str(path))


class _Ctx(NamedTuple):
    """Shared state while reading a compiled model: the ``MjModel``, the :class:`Graph` being
    built, the load source (for messages), body / joint / site names by MuJoCo id (body 0 is
    ``world``) and ``qpos0`` (nq,)."""

    m: Any
    g: Graph
    source: str | None
    bnames: list[str]
    jnames: list[str]
    snames: list[str]
    qpos0: np.ndarray


def graph_from_mjmodel(m, source: str | None = None, name: str | None = None) -> Graph:
    """Build a :class:`Graph` from a compiled ``mujoco.MjModel`` (see the module doc)."""
    g = Graph(name=name or (Path(source).stem if source else "mjcf"), source=source)
    g.gravity = np.array(m.opt.gravity, dtype=float)
    actuated, ports = _read_actuators(m, source)  # needed first: joints carry their actuation
    cx = _context(m, g, source)
    for b in range(1, m.nbody):
        _add_body(cx, b, actuated)
    for s in range(m.nsite):
        g.add_frame(cx.bnames[m.site_bodyid[s]], cx.snames[s], pose(m.site_pos[s], quat=m.site_quat[s]))
    for aname, kind, obj, gear in ports:
        if kind == "joint":
            g.add_port(aname, "joint", cx.jnames[obj], 0, gear=gear)
        else:
            g.add_port(aname, "distance", frame_a=cx.snames[obj[0]], frame_b=cx.snames[obj[1]], gear=gear)
    for e in range(m.neq):
        _add_equality(cx, e)
    return g


def _read_actuators(m, source: str | None) -> tuple[dict[int, float], list[tuple]]:
    """The actuators that become ports: ``(actuated, ports)`` with ``actuated`` the gear of each
    actuated hinge / slide joint by joint id, and ``ports`` ``(name, "joint", joint id, gear)`` or
    ``(name, "distance", (site id, site id), gear)`` in actuator order; others are skipped with a
    warning."""
    import mujoco

    actuated: dict[int, float] = {}
    ports: list[tuple] = []
    for a in range(m.nu):
        aname = _name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a, f"actuator{a}")
        trn, tid = int(m.actuator_trntype[a]), int(m.actuator_trnid[a, 0])
        gear = float(m.actuator_gear[a, 0])
        if trn in (mujoco.mjtTrn.mjTRN_JOINT, mujoco.mjtTrn.mjTRN_JOINTINPARENT):
            if m.jnt_type[tid] in (2, 3):
                actuated[tid] = gear
                ports.append((aname, "joint", tid, gear))
            else:
                warnings.warn(f"{source}: actuator '{aname}' drives a ball/free joint: not a port", stacklevel=3)
        elif trn == mujoco.mjtTrn.mjTRN_TENDON:
            adr, num = int(m.tendon_adr[tid]), int(m.tendon_num[tid])
            types = [int(m.wrap_type[adr + k]) for k in range(num)]
            if num == 2 and all(t == mujoco.mjtWrap.mjWRAP_SITE for t in types):
                s1, s2 = int(m.wrap_objid[adr]), int(m.wrap_objid[adr + 1])
                ports.append((aname, "distance", (s1, s2), gear))
            else:
                warnings.warn(
                    f"{source}: actuator '{aname}': only two-site tendons become ports; skipped", stacklevel=3
                )
        else:
            warnings.warn(
                f"{source}: actuator '{aname}' (transmission type {trn}) is not a simple port; skipped", stacklevel=3
            )
    return actuated, ports


def _context(m, g: Graph, source: str | None) -> _Ctx:
    """The names of bodies (unique, else :class:`ModelError`), joints and sites, and ``qpos0``."""
    import mujoco

    O = mujoco.mjtObj
    bnames = ["world"] + [_name(m, O.mjOBJ_BODY, b, f"body{b}") for b in range(1, m.nbody)]
    if len(set(bnames)) != len(bnames):
        raise ModelError(f"{source}: duplicate body names")
    jnames = [_name(m, O.mjOBJ_JOINT, j, f"{bnames[m.jnt_bodyid[j]]}_joint{j}") for j in range(m.njnt)]
    snames = [_name(m, O.mjOBJ_SITE, s, f"site{s}") for s in range(m.nsite)]
    return _Ctx(m, g, source, bnames, jnames, snames, np.array(m.qpos0, dtype=float))


def _add_body(cx: _Ctx, b: int, actuated: dict[int, float]) -> None:
    """Body ``b`` (mass, COM, inertia rotated into the body frame) and the joints that attach it to
    its parent: a ``<body>__weld`` fixed joint when it has none, else its joints composed in order
    through massless bodies ``<body>__<joint>``. ``actuated``: joint id -> gear."""
    m, g = cx.m, cx.g
    bn = cx.bnames[b]
    R = pose(quat=m.body_iquat[b])[:3, :3]
    mass = float(m.body_mass[b])
    inertia = R @ np.diag(m.body_inertia[b]) @ R.T
    g.add_body(bn, mass, m.body_ipos[b], inertia if mass > 0 or np.any(m.body_inertia[b]) else None)
    parent = cx.bnames[m.body_parentid[b]]
    B = pose(m.body_pos[b], quat=m.body_quat[b])
    jids = list(range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b]))
    if not jids:
        g.add_joint(f"{bn}__weld", "fixed", parent, bn, parent_pose=B)
        return
    prev, Pprev = parent, B
    for k, j in enumerate(jids):
        child = bn if k == len(jids) - 1 else f"{bn}__{cx.jnames[j]}"
        if child != bn:
            g.add_body(child)
        if _JNT[int(m.jnt_type[j])] == "free":
            if parent != WORLD or k > 0:
                raise g.error(
                    f"joint '{cx.jnames[j]}'", f"a free joint must be the only joint of a top-level body (body '{bn}')"
                )
            qa = int(m.jnt_qposadr[j])
            g.add_joint(cx.jnames[j], "free", WORLD, child, q0=cx.qpos0[qa : qa + 7])
        else:
            _add_moving_joint(cx, j, prev, child, Pprev, j in actuated)
        prev, Pprev = child, np.eye(4)


def _add_moving_joint(cx: _Ctx, j: int, prev: str, child: str, Pprev: np.ndarray, actuated: bool) -> None:
    """Hinge / slide / ball joint ``j`` from body ``prev`` to ``child``; ``Pprev`` (4, 4): the pose
    of ``child``'s body frame in ``prev`` before the joint (the body pose for the first joint of a
    body, identity after). Limits only for limited hinges / slides; ``ref`` becomes the offset."""
    m = cx.m
    jt = _JNT[int(m.jnt_type[j])]
    qa = int(m.jnt_qposadr[j])
    p = np.array(m.jnt_pos[j], dtype=float)
    lo = hi = None
    if jt in ("revolute", "prismatic") and m.jnt_limited[j]:
        lo, hi = float(m.jnt_range[j, 0]), float(m.jnt_range[j, 1])
    da = int(m.jnt_dofadr[j])
    n = 1 if jt != "spherical" else 4
    cx.g.add_joint(
        cx.jnames[j],
        jt,
        prev,
        child,
        parent_pose=Pprev @ pose(p),
        child_pose=pose(p),
        axis=m.jnt_axis[j],
        lower=lo,
        upper=hi,
        offset=float(cx.qpos0[qa]) if n == 1 else 0.0,
        actuated=actuated,
        q0=cx.qpos0[qa : qa + n],
        armature=float(m.dof_armature[da]),
        damping=float(m.dof_damping[da]),
    )


def _add_equality(cx: _Ctx, e: int) -> None:
    """Equality ``e`` if active at load: connect -> point, weld -> weld (anchors from ``eq_data``,
    as ``mj_setConst`` computed them at ``qpos0``), joint -> coupling, linear two-site tendon
    equality -> distance; other types are skipped with a warning."""
    import mujoco

    m, g, snames, bnames = cx.m, cx.g, cx.snames, cx.bnames
    ename = _name(m, mujoco.mjtObj.mjOBJ_EQUALITY, e, f"equality{e}")
    el = f"equality '{ename}'"
    if not m.eq_active0[e]:
        warnings.warn(f"{cx.source}: {el} is inactive at load (eq_active0 = 0); skipped", stacklevel=3)
        return
    et, o1, o2 = int(m.eq_type[e]), int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
    data = np.array(m.eq_data[e], dtype=float)
    site = int(m.eq_objtype[e]) == int(mujoco.mjtObj.mjOBJ_SITE)
    if et in (mujoco.mjtEq.mjEQ_CONNECT, mujoco.mjtEq.mjEQ_WELD):
        kind = "point" if et == mujoco.mjtEq.mjEQ_CONNECT else "weld"
        if site:
            g.add_constraint(ename, kind, snames[o1], snames[o2])
        elif kind == "point":
            # data[0:3]: anchor in body1; data[3:6]: the same point in body2 at qpos0 (mj_setConst)
            g.add_constraint(ename, "point", bnames[o1], bnames[o2], pose(data[0:3]), pose(data[3:6]))
        else:
            # data[0:3]: anchor in body2; data[3:6], data[6:10]: relative pose of the weld frame in body1
            g.add_constraint(ename, "weld", bnames[o1], bnames[o2], pose(data[3:6], quat=data[6:10]), pose(data[0:3]))
    elif et == mujoco.mjtEq.mjEQ_JOINT:
        _add_joint_equality(cx, ename, o1, o2, data[0:5])
    elif et == mujoco.mjtEq.mjEQ_TENDON and o2 < 0 and not np.any(np.abs(data[1:5]) > 0):
        _add_tendon_equality(cx, ename, o1, float(data[0]))
    else:
        warnings.warn(f"{cx.source}: {el}: equality type {et} (tendon/flex) is not supported; skipped", stacklevel=3)


def _add_joint_equality(cx: _Ctx, ename: str, o1: int, o2: int, c: np.ndarray) -> None:
    """Joint equality ``ename`` between joints ``o1`` and ``o2`` (``-1``: none), ``polycoef`` ``c``
    (5,), as a coupling; the offset folds in the joints' ``ref`` (``qpos0``). Only linear ones."""
    if np.any(np.abs(c[2:]) > 0):
        raise cx.g.error(f"equality '{ename}'", f"only linear joint equalities are supported, polycoef = {c.tolist()}")
    m = cx.m
    j1 = cx.jnames[o1]
    r1 = float(cx.qpos0[m.jnt_qposadr[o1]])
    if o2 < 0:  # q1 - ref1 = c0
        cx.g.add_coupling(ename, {j1: 1.0}, -r1 - c[0])
    else:  # q1 - ref1 = c0 + c1 (q2 - ref2)
        r2 = float(cx.qpos0[m.jnt_qposadr[o2]])
        cx.g.add_coupling(
            ename, {j1: 1.0, cx.jnames[o2]: -c[1]} if o2 != o1 else {j1: 1.0 - c[1]}, -r1 - c[0] + c[1] * r2
        )


def _add_tendon_equality(cx: _Ctx, ename: str, tendon: int, c0: float) -> None:
    """``L - L(qpos0) = c0`` (m) on a two-site spatial tendon -> distance constraint between the
    sites' frames of length ``L(qpos0) + c0`` (export_mjcf writes these)."""
    import mujoco

    m = cx.m
    adr, num = int(m.tendon_adr[tendon]), int(m.tendon_num[tendon])
    if num != 2 or any(int(m.wrap_type[adr + k]) != mujoco.mjtWrap.mjWRAP_SITE for k in range(2)):
        raise cx.g.error(f"equality '{ename}'", "only tendon equalities on a two-site spatial tendon are supported")
    s1, s2 = int(m.wrap_objid[adr]), int(m.wrap_objid[adr + 1])
    length = float(m.tendon_length0[tendon]) + c0
    cx.g.add_constraint(ename, "distance", cx.snames[s1], cx.snames[s2], length=length)
