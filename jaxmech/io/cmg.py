"""Mechanism-graph JSON reader (RoboCompiler "CMG" physical joint graphs, ``*.json``).

The family (paper 000; the five robots in ``configs/*_physical_graph.json``) shares one core:

* ``bodies[]``: ``id``, ``mass_kg``, ``com_m`` (3), ``inertia_kg_m2`` or ``inertia_com_kg_m2``
  (3x3 about the COM);
* ``joints[]``: ``id``, ``type`` (fixed, revolute, prismatic, spherical; also universal with
  ``axis2``, cylindrical, free), ``body_a``, ``body_b``, ``T_AJ``/``T_BJ`` (4x4 joint frame in A
  and in B: ``T_B = T_A T_AJ M(axis, q) T_BJ^-1``, i.e. our ``parent_pose``/``child_pose``),
  ``axis``, ``limits`` {lower, upper} (or null), optional drive fields ``armature``, ``damping``,
  ``frictionloss``, ``stiffness``. For spherical joints only the translations of T_AJ/T_BJ count.
  Edges are undirected and may form cycles: :func:`jaxmech.compile` picks the tree and the cuts
  (walking an edge B -> A swaps T_AJ/T_BJ and negates the axis; a 1-dof joint keeps its q).

Which variant a document is comes from its ``schema`` (table :data:`~jaxmech.io.cmg_schema.VARIANTS`;
a missing or unknown schema is read with the union of all). Per variant:

* ground: ``root_body`` / ``ground`` / ``root`` (may be absent from ``bodies``; becomes ``world``),
  or ``floating_root`` (that body gets a free joint ``floating_root`` from the world);
* ``loop_cuts[]``: ``point_coincidence`` -> point constraint (``point1_m`` on ``body1`` meets
  ``point2_m`` on ``body2``, 3 rows); ``universal`` -> universal constraint between the frames
  (``frame1_R`` at ``point1_m``) and (``frame2_R`` at ``point2_m``): first axis frame 1's x, second
  frame 2's y (4 rows);
* ``affine_couplings[]`` {master, slave, multiplier, offset}: ``slave = multiplier master + offset``;
* ``point_sites[]`` {id, body, point_m}: named frames; ``sole_sites[]`` {id, body,
  ``frame_translation_m``, ``frame_rotation``}: named sole frames (support modes weld them, see
  :func:`jaxmech.reduction.add_support_points`); radius / corners are not mechanics;
* ``seed``: joint values -> ``q0`` (``{joints: {...}}``, a flat ``{id: q}``, or with ``base_pose``
  [x y z, intrinsic ZYX angles] for the floating root). A one-coordinate joint without a seed whose
  zero lies outside its limits starts at the middle of its limits (a guess inside the box);
* ``actuators[]``: ``{joint_id, gear}`` -> a port on that joint, or ``{transmission: {joint: c}}``
  -> one port ``sum c q`` over several joints (the joint with the largest ``|c|`` is marked
  actuated: one actuator, one input coordinate; ``input_status: unconnected`` keeps the port but
  marks nothing); port name = actuator ``id`` (else the joint);
* ``tool`` {body, T_body_tool}: a named frame ``tool`` (the task frame of a 6-D target);
* ``partition_requests`` {name: [joint ids]} (the file's candidate independent sets): those joints
  stay in the spanning tree, so each set can be passed to ``jm.assemble(..., active=...)``;
* ``drive`` {joint: {armature, damping, frictionloss}} -> the model's armature/damping/frictionloss;
* ``gravity_m_s2`` (3).

Every number is checked (a string, NaN or a value beyond 1e9 is a :class:`ModelError` naming
the file, the element and the value). Keys no table names are reported in one warning; keys
holding generated structure (``tree``, ``cuts``, ``closures``, ``jacobian``, ``paths``, ...) are refused.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from ..graph import WORLD, Graph, JointType, ModelError, pose
from . import cmg_schema as S
from ._text import read_text

_BIG = 1e9  # no coordinate, mass or inertia of these robots comes near this: a larger value is a typo


def read_cmg(path) -> Graph:
    """Parse a CMG mechanism-graph JSON file into a :class:`Graph` (see the module doc)."""
    path = Path(path)
    text = read_text(path)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ModelError(f"{path}: malformed JSON: {e}") from None
    return graph_from_cmg(data, str(path))


# ----------------------------------------------------------------------------- field access
class _Reader:
    """Reads elements through the schema tables; collects unknown keys for one warning."""

    def __init__(self, g: Graph):
        self.g = g
        self.unknown: list[str] = []

    def fields(self, el: str, where: str, obj, table: dict, info=frozenset(), required=()) -> dict:
        """{canonical field: value} of ``obj`` through ``table`` (aliases); unknown keys recorded."""
        if not isinstance(obj, dict):
            raise self.g.error(el, f"expected an object {{...}}, got {_short(obj)}")
        out, used = {}, set()
        for canon, aliases in table.items():
            for a in aliases:
                if a in obj:
                    out[canon] = obj[a]
                    used.add(a)
                    break
        for k in obj:
            if k in S.GENERATED:
                raise self.g.error(
                    el, f"field '{k}' holds generated structure; a physical graph names only bodies and joints"
                )
            if k not in used and k not in info and not any(k in al for al in table.values()):
                self.unknown.append(f"{where}.{k}")
        for r in required:
            if out.get(r) is None:
                names = " or ".join(f"'{a}'" for a in table[r])
                raise self.g.error(el, f"missing {names}")
        return out

    def name(self, el: str, x) -> str:
        if not isinstance(x, str) or not x:
            raise self.g.error(el, f"a name must be a non-empty string, got {_short(x)}")
        return x

    def arr(self, el: str, what: str, x, shape) -> np.ndarray:
        """A finite float array of ``shape`` (strings, booleans, NaN and |x| > 1e9 refused)."""
        if _bad_type(x):
            raise self.g.error(el, f"{what} must be numbers, got {_short(x)}")
        try:
            a = np.asarray(x, dtype=float)
        except (TypeError, ValueError, OverflowError):
            raise self.g.error(el, f"{what} must be numbers, got {_short(x)}") from None
        if a.size != int(np.prod(shape)):
            raise self.g.error(el, f"{what} must have shape {shape}, got {_short(x)}")
        if not np.all(np.isfinite(a)) or np.abs(a).max(initial=0.0) > _BIG:
            raise self.g.error(el, f"{what} must be finite numbers below 1e9 in size, got {_short(x)}")
        return a.reshape(shape)

    def num(self, el: str, what: str, x) -> float:
        return float(self.arr(el, what, x, ()))

    def rot(self, el: str, what: str, x) -> np.ndarray:
        R = self.arr(el, what, x, (3, 3))
        err = np.abs(R @ R.T - np.eye(3)).max()
        if err > 1e-6 or np.linalg.det(R) < 0:
            raise self.g.error(
                el, f"{what} is not a rotation (|R R^T - I| = {err:.3g}, det = {np.linalg.det(R):.3g}): {R.tolist()}"
            )
        return R

    def tf(self, el: str, what: str, x) -> np.ndarray:
        T = self.arr(el, what, x, (4, 4))
        if np.abs(T[3] - [0, 0, 0, 1]).max() > 1e-9:
            raise self.g.error(el, f"{what} must end with the row [0, 0, 0, 1], got {T[3].tolist()}")
        self.rot(el, f"{what} rotation", T[:3, :3])
        return T


def _bad_type(x) -> bool:
    if isinstance(x, (str, bytes, bool, dict)) or x is None:
        return True
    if isinstance(x, (list, tuple)):
        return any(_bad_type(e) for e in x)
    return False


def _short(x, n: int = 80) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."


def _section(rd: _Reader, data: dict, key: str, kind=list):
    v = data.get(key)
    if v is None:
        return kind()
    if not isinstance(v, kind):
        raise rd.g.error(key, f"expected a {'list [...]' if kind is list else 'object {...}'}, got {_short(v)}")
    return v


# ----------------------------------------------------------------------------- the document
def graph_from_cmg(data, source: str | None = None) -> Graph:
    """Build a :class:`Graph` from a parsed CMG document (see the module doc)."""
    where = source or "cmg"
    if not isinstance(data, dict) or "joints" not in data:
        raise ModelError(f"{where}: top level: not a mechanism graph (no 'joints' list)")
    gen = sorted(k for k in data if k in S.GENERATED)
    if gen:
        raise ModelError(
            f"{where}: top level: field(s) {gen} hold generated structure (a pre-computed tree, cuts or "
            "closures); jaxmech reads physical joint graphs (undirected joints, no tree or cuts) and builds them itself"
        )
    schema = data.get("schema")
    var = S.VARIANTS.get(schema, S.GENERIC) if isinstance(schema, str) else S.GENERIC
    name = data.get("id")
    g = Graph(name=name if isinstance(name, str) and name else (Path(source).stem if source else "cmg"), source=source)
    rd = _Reader(g)
    foreign = []
    for k in data:
        if k in ("bodies", "joints") or k in var.sections or k in var.info:
            continue
        if k in S.ALL_SECTIONS or k in S.ALL_INFO:
            foreign.append(k)  # another variant's key: read (sections) or kept as information
        else:
            rd.unknown.append(k)
    ground, floating = _roots(rd, data, var)
    alias = {ground: WORLD} if ground not in (None, WORLD) else {}
    if "gravity_m_s2" in data:
        g.gravity = rd.arr("gravity_m_s2", "gravity_m_s2", data["gravity_m_s2"], 3)
    _bodies(rd, data, {ground, WORLD})
    if floating is not None:
        if floating not in g.bodies or floating == WORLD:
            raise g.error("floating_root", f"'{floating}' is not a body")
        g.add_joint("floating_root", "free", WORLD, floating)

    def body(el, b):
        b = alias.get(rd.name(el, b), b)
        if b not in g.bodies:
            raise g.error(el, f"unknown body '{b}'")
        return b

    seeds, base_pose = _seed(rd, data, var)
    drive = _section(rd, data, "drive", dict)
    _joints(rd, data, body, seeds, drive)
    for jn in list(seeds) + list(drive):
        if jn not in g.joints:
            raise g.error("seed" if jn in seeds else "drive", f"names unknown joint '{jn}'")
    if base_pose is not None:
        if floating is None:
            raise g.error("seed.base_pose", "given but the graph has no floating_root")
        g.joints["floating_root"].q0 = base_pose
    _actuators(rd, data, var)
    _partitions(rd, data)
    _loop_cuts(rd, data, body)
    _couplings(rd, data)
    _sites(rd, data, body)
    if foreign or rd.unknown:
        parts = []
        if rd.unknown:
            parts.append(f"unknown key(s) ignored: {', '.join(sorted(set(rd.unknown)))}")
        if foreign:
            parts.append(f"key(s) of other CMG variants read anyway: {', '.join(sorted(foreign))}")
        warnings.warn(f"{where}: schema {schema!r}: {'; '.join(parts)}", stacklevel=4)
    return g


def _roots(rd: _Reader, data: dict, var: S.Variant):
    """(ground name or None, floating body or None) as the variant declares them."""
    keys = var.ground + tuple(k for k in S.GENERIC.ground if k not in var.ground)  # declared first, then the family's
    ground = next((data[k] for k in keys if data.get(k) is not None), None)
    if ground is not None:
        ground = rd.name("top level: ground", ground)
    fr = data.get("floating_root") if (var.floating or "floating_root" in data) else None
    floating = None
    if isinstance(fr, str):
        floating = fr
    elif isinstance(fr, dict):
        floating = rd.name("floating_root", fr.get("body", fr.get("id")))
    elif fr is True:
        floating = ground
    elif fr not in (None, False):
        raise rd.g.error("floating_root", f"expected a body name, got {_short(fr)}")
    if var.floating and floating is None and var is not S.GENERIC:
        raise rd.g.error("top level", f"schema {var.schema} needs 'floating_root' (the floating base body)")
    if floating is not None and floating == ground:
        ground = None
    return ground, floating


def _bodies(rd: _Reader, data: dict, grounds: set) -> None:
    g = rd.g
    for k, b in enumerate(_section(rd, data, "bodies")):
        el = f"body #{k + 1} '{b.get('id', '?') if isinstance(b, dict) else '?'}'"
        f = rd.fields(el, "bodies[]", b, S.BODY, S.BODY_INFO, ("id",))
        bid = rd.name(el, f["id"])
        if bid in grounds:
            continue  # the fixed ground, listed as a (massless) body in some variants
        g.add_body(
            bid,
            rd.num(el, "mass_kg", f.get("mass", 0.0)),
            rd.arr(el, "com_m", f.get("com", (0, 0, 0)), 3),
            None if f.get("inertia") is None else rd.arr(el, "inertia", f["inertia"], (3, 3)),
        )


def _seed(rd: _Reader, data: dict, var: S.Variant):
    """({joint: value}, base pose q (7,) or None) in the variant's seed form."""
    seed = data.get("seed")
    if seed is None:
        return {}, None
    el = "seed"
    if not isinstance(seed, dict):
        raise rd.g.error(el, f"expected an object, got {_short(seed)}")
    nested = var.seed in ("joints", "pose_joints") or (var.seed == "any" and ("joints" in seed or "base_pose" in seed))
    if nested:
        f = rd.fields(el, "seed", seed, S.SEED)
        joints = f.get("joints", {})
        if not isinstance(joints, dict):
            raise rd.g.error("seed.joints", f"expected {{joint id: value}}, got {_short(joints)}")
    else:
        joints, f = seed, {}
    base = None
    if f.get("base_pose") is not None:
        bp = rd.arr("seed.base_pose", "base_pose", f["base_pose"], 6)
        T = pose(bp[:3], rpy=(bp[5], bp[4], bp[3]))  # intrinsic Z-Y-X angles: R = Rz Ry Rx
        base = np.concatenate([bp[:3], _quat_wxyz(T[:3, :3])])
    return dict(joints), base


def _quat_wxyz(R: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(R).as_quat()
    return np.array([w, x, y, z])


def _joints(rd: _Reader, data: dict, body, seeds: dict, drive: dict) -> None:
    g = rd.g
    joints = data["joints"]
    if not isinstance(joints, list):
        raise g.error("joints", f"expected a list, got {_short(joints)}")
    for k, j in enumerate(joints):
        el = f"joint #{k + 1} '{j.get('id', '?') if isinstance(j, dict) else '?'}'"
        f = rd.fields(el, "joints[]", j, S.JOINT, S.JOINT_INFO, S.JOINT_REQUIRED)
        jid = rd.name(el, f["id"])
        t = S.JOINT_TYPES.get(str(f["type"]).lower())
        if t is None:
            raise g.error(el, f"unknown joint type '{f['type']}' (expected one of {', '.join(sorted(S.JOINT_TYPES))})")
        A = rd.tf(el, "T_AJ", f.get("T_AJ", np.eye(4)))
        B = rd.tf(el, "T_BJ", f.get("T_BJ", np.eye(4)))
        if t == "spherical":
            A, B = pose(A[:3, 3]), pose(B[:3, 3])
        lo = hi = None
        lim = f.get("limits")
        if lim is not None and t in ("revolute", "prismatic"):
            if not isinstance(lim, dict):
                raise g.error(el, f"limits must be {{lower, upper}}, got {_short(lim)}")
            lo = None if lim.get("lower") is None else rd.num(el, "limits.lower", lim["lower"])
            hi = None if lim.get("upper") is None else rd.num(el, "limits.upper", lim["upper"])
        dr = dict(drive.get(jid) or {}) if isinstance(drive, dict) else {}
        if not isinstance(drive.get(jid, {}), dict):
            raise g.error(f"drive '{jid}'", f"expected {{armature, damping, frictionloss}}, got {_short(drive[jid])}")
        own = f.get("drive") or {}
        if not isinstance(own, dict):
            raise g.error(el, f"drive must be {{armature, damping, frictionloss}}, got {_short(own)}")
        for key in S.DRIVE:  # per-joint fields, then the joint's own drive object, then the top-level drive
            if f.get(key) is not None:
                dr.setdefault(key, f[key])
            if own.get(key) is not None:
                dr.setdefault(key, own[key])
        dr.update({k: v for k, v in own.items() if k not in S.DRIVE})
        bad = sorted(set(dr) - set(S.DRIVE))
        if bad:
            rd.unknown.extend(f"drive.{jid}.{b}" for b in bad)
        stiff = rd.num(el, "stiffness", dr.get("stiffness", 0.0))
        if stiff != 0.0:
            rd.unknown.append(f"joints[{jid}].stiffness (nonzero spring, not modelled)")
        q0 = _joint_seed(rd, el, t, seeds.get(jid, f.get("seed")), lo, hi)
        g.add_joint(
            jid,
            t,
            body(el, f["body_a"]),
            body(el, f["body_b"]),
            parent_pose=A,
            child_pose=B,
            axis=rd.arr(el, "axis", f.get("axis", (0, 0, 1)), 3),
            axis2=rd.arr(el, "axis2", f.get("axis2", (0, 1, 0)), 3),
            lower=lo,
            upper=hi,
            q0=q0,
            armature=rd.num(el, "armature", dr.get("armature", 0.0)),
            damping=rd.num(el, "damping", dr.get("damping", 0.0)),
            frictionloss=rd.num(el, "frictionloss", dr.get("frictionloss", 0.0)),
        )


def _joint_seed(rd: _Reader, el: str, t: str, s, lo, hi):
    """q0 of one joint: its seed, or (1-dof joints) the point of its limits nearest the middle
    when zero is outside them (a seedless file must not start outside its own limits)."""
    nq = JointType(t).nq
    if s is not None:
        if nq == 0:
            return None
        return rd.arr(el, "seed", s, nq)
    if t in ("revolute", "prismatic"):
        a = -np.inf if lo is None else lo
        b = np.inf if hi is None else hi
        if not a <= 0.0 <= b:
            mid = 0.5 * (a + b) if np.isfinite(a) and np.isfinite(b) else (a if np.isfinite(a) else b)
            return np.array([mid])
    return None


def _actuators(rd: _Reader, data: dict, var: S.Variant) -> None:
    g = rd.g
    need = {"joint": ("joint",), "transmission": ("transmission",)}.get(var.actuators, ())
    for k, a in enumerate(_section(rd, data, "actuators")):
        el = f"actuator #{k + 1} '{a.get('id', '?') if isinstance(a, dict) else '?'}'"
        f = rd.fields(el, "actuators[]", a, S.ACTUATOR, S.ACTUATOR_INFO, need)
        if f.get("transmission") is not None:
            tr = f["transmission"]
            if not isinstance(tr, dict) or not tr:
                raise g.error(el, f"transmission must be {{joint id: coefficient}}, got {_short(tr)}")
            coeffs = {rd.name(el, jn): rd.num(el, f"transmission['{jn}']", c) for jn, c in tr.items()}
        elif f.get("joint") is not None:
            coeffs = {rd.name(el, f["joint"]): 1.0}
        else:
            raise g.error(el, "missing 'joint_id' or 'transmission'")
        for jn in coeffs:
            if jn not in g.joints:
                raise g.error(el, f"names unknown joint '{jn}'")
        main = max(coeffs, key=lambda n: abs(coeffs[n]))  # first of the largest |c|
        status = f.get("status", "connected")
        if status not in ("connected", "unconnected"):
            raise g.error(el, f"input_status must be 'connected' or 'unconnected', got {_short(status)}")
        if status == "connected":  # an unconnected actuator keeps its port but is no input coordinate
            g.joints[main].actuated = True
        pname = rd.name(el, f["id"]) if f.get("id") is not None else (main if len(coeffs) == 1 else f"actuator{k + 1}")
        gear = rd.num(el, "gear", f.get("gear", 1.0))
        if len(coeffs) == 1 and coeffs[main] == 1.0:
            g.add_port(pname, "joint", main, 0, gear=gear)
        else:
            g.add_port(pname, "joint", gear=gear, coeffs=coeffs)


def _partitions(rd: _Reader, data: dict) -> None:
    """``partition_requests`` {name: [joint ids]}: the file's candidate independent sets. Their
    joints are kept in the spanning tree (``cut=False``) so each set can be passed as ``active``."""
    for name, joints in _section(rd, data, "partition_requests", dict).items():
        el = f"partition_requests.{name}"
        if not isinstance(joints, list):
            raise rd.g.error(el, f"expected a list of joint ids, got {_short(joints)}")
        for jn in joints:
            if not isinstance(jn, str) or jn not in rd.g.joints:
                raise rd.g.error(el, f"names unknown joint {_short(jn)}")
            rd.g.joints[jn].cut = False


def _loop_cuts(rd: _Reader, data: dict, body) -> None:
    g = rd.g
    for k, c in enumerate(_section(rd, data, "loop_cuts")):
        el = f"loop_cut #{k + 1} '{c.get('id', '?') if isinstance(c, dict) else '?'}'"
        f = rd.fields(el, "loop_cuts[]", c, S.LOOP_CUT, (), S.LOOP_CUT_REQUIRED)
        name = rd.name(el, f.get("id", f"loop_cut{k + 1}"))
        t = S.LOOP_CUT_TYPES.get(f["type"]) if isinstance(f["type"], str) else None
        if t is None:
            raise g.error(el, f"unknown loop cut type {_short(f['type'])} (expected {', '.join(S.LOOP_CUT_TYPES)})")
        b1, b2 = body(f"{el} body1", f["body1"]), body(f"{el} body2", f["body2"])
        p1 = rd.arr(el, "point1_m", f.get("point1", (0, 0, 0)), 3)
        p2 = rd.arr(el, "point2_m", f.get("point2", (0, 0, 0)), 3)
        if t == "universal":
            for key in ("frame1_R", "frame2_R"):
                if f.get(key) is None:
                    raise g.error(el, f"a universal cut needs '{key}'")
            R1, R2 = rd.rot(el, "frame1_R", f["frame1_R"]), rd.rot(el, "frame2_R", f["frame2_R"])
            g.add_constraint(name, "universal", b1, b2, pose(p1, R=R1), pose(p2, R=R2))
        else:
            g.add_constraint(name, "point", b1, b2, pose(p1), pose(p2))


def _couplings(rd: _Reader, data: dict) -> None:
    g = rd.g
    for k, c in enumerate(_section(rd, data, "affine_couplings")):
        el = f"affine_coupling #{k + 1} '{c.get('id', '?') if isinstance(c, dict) else '?'}'"
        f = rd.fields(el, "affine_couplings[]", c, S.COUPLING, (), S.COUPLING_REQUIRED)
        m = rd.num(el, "multiplier", f.get("multiplier", 1.0))
        o = rd.num(el, "offset", f.get("offset", 0.0))
        slave, master = rd.name(el, f["slave"]), rd.name(el, f["master"])
        for jn in (slave, master):
            if jn not in g.joints:
                raise g.error(el, f"names unknown joint '{jn}'")
        if slave == master:
            raise g.error(el, f"master and slave are the same joint '{slave}'")
        g.add_coupling(rd.name(el, f.get("id", f"{slave}__mimic")), {slave: 1.0, master: -m}, -o)


def _sites(rd: _Reader, data: dict, body) -> None:
    g = rd.g
    for k, s in enumerate(_section(rd, data, "point_sites")):
        el = f"point_site #{k + 1} '{s.get('id', '?') if isinstance(s, dict) else '?'}'"
        f = rd.fields(el, "point_sites[]", s, S.POINT_SITE, (), S.POINT_SITE_REQUIRED)
        if f.get("radius") is not None:
            rd.num(el, "radius_m", f["radius"])
        g.add_frame(body(el, f["body"]), rd.name(el, f["id"]), pose(rd.arr(el, "point_m", f["point"], 3)))
    tool = _section(rd, data, "tool", dict)
    if tool:
        f = rd.fields("tool", "tool", tool, S.TOOL, S.TOOL_INFO, ("body",))
        T = rd.tf("tool", "T_body_tool", f.get("T", np.eye(4)))
        g.add_frame(body("tool", f["body"]), rd.name("tool", f.get("id", "tool")), T)
    for k, s in enumerate(_section(rd, data, "sole_sites")):
        el = f"sole_site #{k + 1} '{s.get('id', '?') if isinstance(s, dict) else '?'}'"
        f = rd.fields(el, "sole_sites[]", s, S.SOLE_SITE, (), S.SOLE_SITE_REQUIRED[:2])
        if f.get("translation") is None or f.get("rotation") is None:
            raise g.error(el, "a sole site needs its frame: 'frame_translation_m' (3) and 'frame_rotation' (3x3)")
        R = rd.rot(el, "frame_rotation", f["rotation"])
        p = rd.arr(el, "frame_translation_m", f["translation"], 3)
        c = f.get("corners")
        if c is not None:
            if not isinstance(c, list) or not c:
                raise g.error(el, f"corners_m must be a list of points, got {_short(c)}")
            rd.arr(el, "corners_m", c, (len(c), 3))
        g.add_frame(body(el, f["body"]), rd.name(el, f["id"]), pose(p, R=R))
