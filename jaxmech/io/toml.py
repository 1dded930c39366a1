"""Native TOML mechanism format (``configs/*.toml``).

Layout (every table checked for unknown keys, so a typo fails with file, element and key)::

    name = "four_bar"
    gravity = [0, 0, -9.81]

    [[body]]                      # mass kg, com m, inertia kg m^2 about the COM
    name = "crank"
    mass = 0.5
    com = [0.05, 0, 0]
    inertia = [1e-4, 1e-3, 1e-3]  # ixx iyy izz [ixy ixz iyz] or a 3x3 list
    frames = { tip = { xyz = [0.1, 0, 0], rpy = [0, 0, 0] } }

    [[joint]]
    name = "crank"
    type = "revolute"             # revolute prismatic cylindrical universal spherical free fixed
    parent = "world"
    child = "crank"
    axis = [0, 0, 1]              # universal: axis and axis2
    parent_xyz = [0, 0, 0]        # joint frame in the parent (parent_rpy / parent_quat)
    child_xyz = [0, 0, 0]         # joint frame in the child  (child_rpy / child_quat)
    lower = -3.2                  # per scalar coordinate (lists for two-coordinate joints)
    upper = 3.2
    actuated = true
    cut = true                    # pin as a cut (false: pin in the tree)
    q0 = 0.3                      # initial guess

    [[constraint]]                # point weld revolute cylindrical universal prismatic pose distance
    name = "tip_on_rail"
    type = "point"
    a = "crank"                   # body or named frame (default world)
    b = "rocker_tip"
    a_xyz = [0.1, 0, 0]           # extra offset in a / b (a_rpy, a_quat, b_...)
    axes = [true, true, true, true, true, true]   # pose only, angular first
    length = 0.3                  # distance only

    [[coupling]]
    name = "fingers"
    coeffs = { finger_joint1 = 1.0, finger_joint2 = -1.0 }
    offset = 0.0

    [[port]]
    name = "boom_cylinder"
    type = "distance"             # or "joint" with joint = "...", index = 0
    a = "boom_cyl_base"
    b = "boom_cyl_rod"

Side-car form: a TOML may start from a robot file and add what that format cannot say (loop
closures, couplings, named frames, actuation)::

    urdf = "example-robot-data:panda_description/urdf/panda.urdf"   # or sdf / mjcf / cmg
    floating = false              # URDF only: free joint world -> root link
    actuated = ["panda_joint1"]   # mark joints actuated
    [limits]                      # replace a joint's limits (inf allowed): [lower, upper]
    panda_joint1 = [-2.0, 2.0]
    [[frame]]                     # a named frame on an existing body
    name = "tool"
    body = "panda_hand"
    xyz = [0, 0, 0.1034]
    # ... plus any [[body]] / [[joint]] / [[constraint]] / [[coupling]] / [[port]] tables

A robot path is ``"package:relative/path"`` (a file installed by that Python distribution, found
through ``importlib.metadata``; e.g. the ``example-robot-data`` robots), or a path relative to
the TOML file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from ..graph import JOINT_TYPES, Graph, JointType, ModelError, _has_text, pose
from ._text import read_text

_TOP = {
    "name",
    "gravity",
    "body",
    "joint",
    "constraint",
    "coupling",
    "port",
    "description",
    "source",
    "root",
    "urdf",
    "sdf",
    "mjcf",
    "cmg",
    "floating",
    "frame",
    "actuated",
    "limits",
}
_BASE = ("urdf", "sdf", "mjcf", "cmg")
_FRAME_TABLE = {"name", "body", "xyz", "rpy", "quat"}
_BODY = {"name", "mass", "com", "inertia", "frames"}
_JOINT = {
    "name",
    "type",
    "parent",
    "child",
    "axis",
    "axis2",
    "parent_xyz",
    "parent_rpy",
    "parent_quat",
    "child_xyz",
    "child_rpy",
    "child_quat",
    "lower",
    "upper",
    "offset",
    "actuated",
    "cut",
    "q0",
    "armature",
    "damping",
}
_CONS = {"name", "type", "a", "b", "a_xyz", "a_rpy", "a_quat", "b_xyz", "b_rpy", "b_quat", "axes", "length"}
_COUP = {"name", "coeffs", "offset"}
_PORT = {"name", "type", "joint", "index", "a", "b", "gear"}
_FRAME = {"xyz", "rpy", "quat"}


def _check_keys(g: Graph, el: str, table: dict, allowed: set) -> None:
    if not isinstance(table, dict):
        raise g.error(el, f"expected a table, got {table!r}")
    bad = sorted(set(table) - allowed)
    if bad:
        raise g.error(el, f"unknown key(s) {bad} (allowed: {', '.join(sorted(allowed))})")


def _pose_from(g: Graph, el: str, t: dict, prefix: str) -> np.ndarray:
    xyz = t.get(f"{prefix}xyz", (0.0, 0.0, 0.0))
    rpy, quat = t.get(f"{prefix}rpy"), t.get(f"{prefix}quat")
    if rpy is not None and quat is not None:
        raise g.error(el, f"give {prefix}rpy or {prefix}quat, not both")
    for key, x in ((f"{prefix}xyz", xyz), (f"{prefix}rpy", rpy), (f"{prefix}quat", quat)):
        if x is not None and _has_text(x):
            raise g.error(el, f"{key} must be numbers, got {x!r}")
    try:
        return pose(xyz, rpy=rpy, quat=quat)
    except (ValueError, TypeError) as e:
        raise g.error(el, f"bad {prefix}xyz/{prefix}rpy/{prefix}quat ({xyz!r}, {rpy!r}, {quat!r}): {e}") from None


def _base_graph(data: dict, source: str | None) -> Graph | None:
    """The robot file a side-car TOML starts from (``urdf``/``sdf``/``mjcf``/``cmg`` key), or None."""
    keys = [k for k in _BASE if k in data]
    if not keys:
        if "floating" in data:
            raise ModelError(f"{source}: top level: 'floating' needs a 'urdf' robot file")
        return None
    if len(keys) > 1:
        raise ModelError(f"{source}: top level: give one robot file, got {keys}")
    from . import resolve_resource

    key = keys[0]
    base_dir = Path(source).parent if source else Path.cwd()
    path = resolve_resource(data[key], base_dir, f"{source}: top level: {key}")
    if key == "urdf":
        from .urdf import read_urdf

        return read_urdf(path, floating=bool(data.get("floating", False)))
    if "floating" in data:
        raise ModelError(f"{source}: top level: 'floating' applies to URDF files only")
    if key == "sdf":
        from .sdf import read_sdf

        return read_sdf(path)
    if key == "mjcf":
        from .mjcf import read_mjcf

        return read_mjcf(path)
    from .cmg import read_cmg

    return read_cmg(path)


def graph_from_dict(data: dict, source: str | None = None) -> Graph:
    """Build a :class:`Graph` from the parsed TOML document (a side-car starts from its robot file)."""
    g = _start_graph(data, source)
    _add_bodies(g, data.get("body", []))
    _add_joints(g, data.get("joint", []))
    _add_frame_tables(g, data.get("frame", []))
    for jn in data.get("actuated", []):
        if jn not in g.joints:
            raise g.error("top level: actuated", f"unknown joint '{jn}'")
        g.joints[jn].actuated = True
    for jn, lim in (data.get("limits") or {}).items():
        _set_limits(g, jn, lim)
    _add_constraints(g, data.get("constraint", []))
    _add_couplings(g, data.get("coupling", []))
    _add_ports(g, data.get("port", []))
    if not data.get("port"):
        _ports_from_actuated(g, data.get("joint", []))
    return g


def _el(kind: str, k: int, t: object) -> str:
    """The element name in messages: ``<kind> #<k+1> '<name>'`` (``'?'`` without a name)."""
    return f"{kind} #{k + 1} '{t.get('name', '?') if isinstance(t, dict) else '?'}'"


def _start_graph(data: dict, source: str | None) -> Graph:
    """Check the top-level keys; the side-car's robot file (or an empty graph) with the
    document's ``name`` and ``gravity`` [m/s^2] applied."""
    if not isinstance(data, dict):
        raise ModelError(f"{source}: expected a TOML document")
    bad = sorted(set(data) - _TOP)
    if bad:
        raise ModelError(f"{source}: top level: unknown key(s) {bad} (allowed: {', '.join(sorted(_TOP))})")
    g = _base_graph(data, source)
    if g is None:
        g = Graph(name=str(data.get("name", Path(source).stem if source else "mechanism")), source=source)
    else:
        g.source = source
        if "name" in data:
            g.name = str(data["name"])
    if "gravity" in data:
        g.gravity = g._vec("top level", "gravity", data["gravity"], 3)
    return g


def _add_bodies(g: Graph, bodies: list) -> None:
    """``[[body]]`` tables: mass [kg], com [m], inertia [kg m^2] about the COM, named frames."""
    for k, b in enumerate(bodies):
        el = _el("body", k, b)
        _check_keys(g, el, b, _BODY)
        if "name" not in b:
            raise g.error(el, "missing 'name'")
        frames = {}
        for fname, ft in (b.get("frames") or {}).items():
            _check_keys(g, f"frame '{fname}'", ft, _FRAME)
            frames[fname] = _pose_from(g, f"frame '{fname}'", ft, "")
        g.add_body(b["name"], b.get("mass", 0.0), b.get("com", (0, 0, 0)), b.get("inertia"), frames)


def _add_joints(g: Graph, joints: list) -> None:
    """``[[joint]]`` tables (joint frame in parent and child from ``parent_*``/``child_*``)."""
    for k, j in enumerate(joints):
        el = _el("joint", k, j)
        _check_keys(g, el, j, _JOINT)
        for req in ("name", "type", "parent", "child"):
            if req not in j:
                raise g.error(el, f"missing '{req}'")
        g.add_joint(
            j["name"],
            j["type"],
            j["parent"],
            j["child"],
            parent_pose=_pose_from(g, el, j, "parent_"),
            child_pose=_pose_from(g, el, j, "child_"),
            axis=j.get("axis", (0, 0, 1)),
            axis2=j.get("axis2", (0, 1, 0)),
            lower=j.get("lower"),
            upper=j.get("upper"),
            offset=j.get("offset", 0.0),
            actuated=j.get("actuated", False),
            cut=j.get("cut"),
            q0=j.get("q0"),
            armature=j.get("armature", 0.0),
            damping=j.get("damping", 0.0),
        )


def _add_frame_tables(g: Graph, frames: list) -> None:
    """Top-level ``[[frame]]`` tables: a named frame on an existing body."""
    for k, f in enumerate(frames):
        el = _el("frame", k, f)
        _check_keys(g, el, f, _FRAME_TABLE)
        for req in ("name", "body"):
            if req not in f:
                raise g.error(el, f"missing '{req}'")
        g.add_frame(f["body"], f["name"], _pose_from(g, el, f, ""))


def _set_limits(g: Graph, jn: str, lim: object) -> None:
    """``[limits] <jn> = [lower, upper]``: replace joint ``jn``'s limits (one number per scalar
    coordinate, or lists of them; +-inf allowed, NaN and lower > upper not)."""
    el = f"top level: limits.{jn}"
    if jn not in g.joints:
        raise g.error(el, f"unknown joint '{jn}'")
    j = g.joints[jn]
    n1 = 0 if j.lower is None else len(j.lower)
    if not n1:
        raise g.error(el, f"a {j.type} joint takes no limits")
    if not (isinstance(lim, list) and len(lim) == 2):
        raise g.error(el, f"expected [lower, upper], got {lim!r}")
    if _has_text(lim):
        raise g.error(el, f"limits must be numbers, got {lim!r}")
    try:  # +-inf allowed: an unbounded coordinate
        lo, hi = (np.asarray(x, dtype=float).reshape(n1) for x in lim)
    except (TypeError, ValueError):
        raise g.error(el, f"expected [lower, upper] with {n1} number(s) each, got {lim!r}") from None
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise g.error(el, f"limits must not be NaN, got {lim!r}")
    if np.any(lo > hi):
        raise g.error(el, f"lower limit {lo.tolist()} exceeds upper limit {hi.tolist()}")
    j.lower, j.upper = lo, hi


def _add_constraints(g: Graph, constraints: list) -> None:
    """``[[constraint]]`` tables between frames ``a`` and ``b`` (default world), with offsets."""
    for k, c in enumerate(constraints):
        el = _el("constraint", k, c)
        _check_keys(g, el, c, _CONS)
        for req in ("name", "type"):
            if req not in c:
                raise g.error(el, f"missing '{req}'")
        g.add_constraint(
            c["name"],
            c["type"],
            c.get("a", "world"),
            c.get("b", "world"),
            pose_a=_pose_from(g, el, c, "a_"),
            pose_b=_pose_from(g, el, c, "b_"),
            axes=c.get("axes"),
            length=c.get("length", 0.0),
        )


def _add_couplings(g: Graph, couplings: list) -> None:
    """``[[coupling]]`` tables: linear couplings ``sum(coeffs[j] * q_j) + offset = 0``."""
    for k, c in enumerate(couplings):
        el = _el("coupling", k, c)
        _check_keys(g, el, c, _COUP)
        g.add_coupling(c["name"], c.get("coeffs", {}), c.get("offset", 0.0))


def _add_ports(g: Graph, ports: list) -> None:
    """``[[port]]`` tables: joint ports (``joint``, ``index``) or distance ports (``a``, ``b``)."""
    for k, p in enumerate(ports):
        el = _el("port", k, p)
        _check_keys(g, el, p, _PORT)
        g.add_port(
            p["name"],
            p.get("type", "joint"),
            p.get("joint"),
            p.get("index", 0),
            p.get("a"),
            p.get("b"),
            p.get("gear", 1.0),
        )


def _ports_from_actuated(g: Graph, joints) -> None:
    """``actuated = true`` on a ``[[joint]]`` of a file without ``[[port]]`` tables creates a joint
    port per scalar coordinate (named after the joint; ``<joint>_<i>`` for two coordinates)."""
    for j in joints:
        if not j.get("actuated", False):
            continue
        name, typ = j["name"], j["type"]
        n1 = JointType(typ).nq if typ in JOINT_TYPES and JointType(typ).scalar else 0
        if n1 == 0:
            raise g.error(
                f"joint '{name}'",
                f"actuated = true on a {typ} joint creates no port; add a [[port]] table "
                f'(type = "joint" on a 1-D joint, or type = "distance" with frames a and b)',
            )
        for i in range(n1):
            g.add_port(name if n1 == 1 else f"{name}_{i}", "joint", name, i)


def read_toml(path) -> Graph:
    """Parse a TOML mechanism file into a :class:`Graph` (not yet compiled)."""
    path = Path(path)
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ModelError(f"{path}: TOML syntax error: {e}") from None
    try:
        return graph_from_dict(data, str(path))
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        # a value of the wrong kind that no element check caught (e.g. a table where a number
        # belongs): still a one-line ModelError naming the file, never a traceback
        msg = " ".join(str(e).split())
        raise ModelError(f"{path}: invalid value ({type(e).__name__}: {msg})") from None
