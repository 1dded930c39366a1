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


def graph_from_mjmodel(m, source: str | None = None, name: str | None = None) -> Graph:
    """Build a :class:`Graph` from a compiled ``mujoco.MjModel`` (see the module doc)."""
    import mujoco

    O = mujoco.mjtObj
    g = Graph(name=name or (Path(source).stem if source else "mjcf"), source=source)
    g.gravity = np.array(m.opt.gravity, dtype=float)
    # ------------------------------------------------------------- actuators (need them first)
    actuated: dict[int, float] = {}
    ports: list[tuple] = []
    for a in range(m.nu):
        aname = _name(m, O.mjOBJ_ACTUATOR, a, f"actuator{a}")
        trn, tid = int(m.actuator_trntype[a]), int(m.actuator_trnid[a, 0])
        gear = float(m.actuator_gear[a, 0])
        if trn in (mujoco.mjtTrn.mjTRN_JOINT, mujoco.mjtTrn.mjTRN_JOINTINPARENT):
            if m.jnt_type[tid] in (2, 3):
                actuated[tid] = gear
                ports.append((aname, "joint", tid, gear))
            else:
                warnings.warn(f"{source}: actuator '{aname}' drives a ball/free joint: not a port", stacklevel=2)
        elif trn == mujoco.mjtTrn.mjTRN_TENDON:
            adr, num = int(m.tendon_adr[tid]), int(m.tendon_num[tid])
            types = [int(m.wrap_type[adr + k]) for k in range(num)]
            if num == 2 and all(t == mujoco.mjtWrap.mjWRAP_SITE for t in types):
                s1, s2 = int(m.wrap_objid[adr]), int(m.wrap_objid[adr + 1])
                ports.append((aname, "distance", (s1, s2), gear))
            else:
                warnings.warn(
                    f"{source}: actuator '{aname}': only two-site tendons become ports; skipped", stacklevel=2
                )
        else:
            warnings.warn(
                f"{source}: actuator '{aname}' (transmission type {trn}) is not a simple port; skipped", stacklevel=2
            )
    # ------------------------------------------------------------- bodies and joints
    bnames = ["world"] + [_name(m, O.mjOBJ_BODY, b, f"body{b}") for b in range(1, m.nbody)]
    if len(set(bnames)) != len(bnames):
        raise ModelError(f"{source}: duplicate body names")
    jnames = [_name(m, O.mjOBJ_JOINT, j, f"{bnames[m.jnt_bodyid[j]]}_joint{j}") for j in range(m.njnt)]
    qpos0 = np.array(m.qpos0, dtype=float)
    for b in range(1, m.nbody):
        bn = bnames[b]
        R = pose(quat=m.body_iquat[b])[:3, :3]
        mass = float(m.body_mass[b])
        inertia = R @ np.diag(m.body_inertia[b]) @ R.T
        g.add_body(bn, mass, m.body_ipos[b], inertia if mass > 0 or np.any(m.body_inertia[b]) else None)
        parent = bnames[m.body_parentid[b]]
        B = pose(m.body_pos[b], quat=m.body_quat[b])
        jids = list(range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b]))
        if not jids:
            g.add_joint(f"{bn}__weld", "fixed", parent, bn, parent_pose=B)
            continue
        prev, Pprev = parent, B
        for k, j in enumerate(jids):
            jt = _JNT[int(m.jnt_type[j])]
            el = f"joint '{jnames[j]}'"
            child = bn if k == len(jids) - 1 else f"{bn}__{jnames[j]}"
            if child != bn:
                g.add_body(child)
            qa = int(m.jnt_qposadr[j])
            if jt == "free":
                if parent != WORLD or k > 0:
                    raise g.error(el, f"a free joint must be the only joint of a top-level body (body '{bn}')")
                g.add_joint(jnames[j], "free", WORLD, child, q0=qpos0[qa : qa + 7])
            else:
                p = np.array(m.jnt_pos[j], dtype=float)
                lo = hi = None
                if jt in ("revolute", "prismatic") and m.jnt_limited[j]:
                    lo, hi = float(m.jnt_range[j, 0]), float(m.jnt_range[j, 1])
                da = int(m.jnt_dofadr[j])
                n = 1 if jt != "spherical" else 4
                g.add_joint(
                    jnames[j],
                    jt,
                    prev,
                    child,
                    parent_pose=Pprev @ pose(p),
                    child_pose=pose(p),
                    axis=m.jnt_axis[j],
                    lower=lo,
                    upper=hi,
                    offset=float(qpos0[qa]) if n == 1 else 0.0,
                    actuated=j in actuated,
                    q0=qpos0[qa : qa + n],
                    armature=float(m.dof_armature[da]),
                    damping=float(m.dof_damping[da]),
                )
            prev, Pprev = child, np.eye(4)
    # ------------------------------------------------------------- sites -> frames
    snames = [_name(m, O.mjOBJ_SITE, s, f"site{s}") for s in range(m.nsite)]
    for s in range(m.nsite):
        g.add_frame(bnames[m.site_bodyid[s]], snames[s], pose(m.site_pos[s], quat=m.site_quat[s]))
    for aname, kind, obj, gear in ports:
        if kind == "joint":
            g.add_port(aname, "joint", jnames[obj], 0, gear=gear)
        else:
            g.add_port(aname, "distance", frame_a=snames[obj[0]], frame_b=snames[obj[1]], gear=gear)
    # ------------------------------------------------------------- equalities
    for e in range(m.neq):
        ename = _name(m, O.mjOBJ_EQUALITY, e, f"equality{e}")
        el = f"equality '{ename}'"
        if not m.eq_active0[e]:
            warnings.warn(f"{source}: {el} is inactive at load (eq_active0 = 0); skipped", stacklevel=2)
            continue
        et, o1, o2 = int(m.eq_type[e]), int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
        data = np.array(m.eq_data[e], dtype=float)
        site = int(m.eq_objtype[e]) == int(O.mjOBJ_SITE)
        if et in (mujoco.mjtEq.mjEQ_CONNECT, mujoco.mjtEq.mjEQ_WELD):
            kind = "point" if et == mujoco.mjtEq.mjEQ_CONNECT else "weld"
            if site:
                g.add_constraint(ename, kind, snames[o1], snames[o2])
            elif kind == "point":
                # data[0:3]: anchor in body1; data[3:6]: the same point in body2 at qpos0 (mj_setConst)
                g.add_constraint(ename, "point", bnames[o1], bnames[o2], pose(data[0:3]), pose(data[3:6]))
            else:
                # data[0:3]: anchor in body2; data[3:6], data[6:10]: relative pose of the weld frame in body1
                g.add_constraint(
                    ename, "weld", bnames[o1], bnames[o2], pose(data[3:6], quat=data[6:10]), pose(data[0:3])
                )
        elif et == mujoco.mjtEq.mjEQ_JOINT:
            c = data[0:5]
            if np.any(np.abs(c[2:]) > 0):
                raise g.error(el, f"only linear joint equalities are supported, polycoef = {c.tolist()}")
            j1 = jnames[o1]
            r1 = float(qpos0[m.jnt_qposadr[o1]])
            if o2 < 0:  # q1 - ref1 = c0
                g.add_coupling(ename, {j1: 1.0}, -r1 - c[0])
            else:  # q1 - ref1 = c0 + c1 (q2 - ref2)
                r2 = float(qpos0[m.jnt_qposadr[o2]])
                g.add_coupling(
                    ename, {j1: 1.0, jnames[o2]: -c[1]} if o2 != o1 else {j1: 1.0 - c[1]}, -r1 - c[0] + c[1] * r2
                )
        elif et == mujoco.mjtEq.mjEQ_TENDON and o2 < 0 and not np.any(np.abs(data[1:5]) > 0):
            # L - L(qpos0) = c0 on a two-site spatial tendon -> distance constraint (export_mjcf writes these)
            adr, num = int(m.tendon_adr[o1]), int(m.tendon_num[o1])
            if num != 2 or any(int(m.wrap_type[adr + k]) != mujoco.mjtWrap.mjWRAP_SITE for k in range(2)):
                raise g.error(el, "only tendon equalities on a two-site spatial tendon are supported")
            s1, s2 = int(m.wrap_objid[adr]), int(m.wrap_objid[adr + 1])
            length = float(m.tendon_length0[o1]) + float(data[0])
            g.add_constraint(ename, "distance", snames[s1], snames[s2], length=length)
        else:
            warnings.warn(f"{source}: {el}: equality type {et} (tendon/flex) is not supported; skipped", stacklevel=2)
    return g
