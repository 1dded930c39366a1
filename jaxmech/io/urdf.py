"""URDF reader (through ``yourdfpy``; meshes are never loaded).

Mapping to the graph (URDF: ``T_child = T_parent @ origin @ M(q)``, axis in the joint = child frame):

* every ``<link>`` is a body; ``<inertial>`` with an ``<origin xyz rpy>`` becomes the COM and the
  inertia rotated into the link frame (``R I R^T``);
* joints: revolute / continuous (no limits) -> revolute, prismatic, fixed, floating -> free;
  ``planar`` (and anything else) raises :class:`ModelError`; ``parent_pose = origin``,
  ``child_pose = I``; limits, damping (``<dynamics>``);
* ``<mimic joint=m multiplier=k offset=o>`` on joint s -> coupling ``q_s - k q_m - o = 0``;
* the root link is welded to the world (a fixed joint ``<root>__weld``), or with
  ``floating=True`` attached by a free joint named ``root_joint`` (Pinocchio's name);
* loop closures, which URDF itself cannot express: the ``<loop_joint>`` proposal
  (``<loop_joint name type><link1 link xyz rpy/><link2 link xyz rpy/><axis xyz/></loop_joint>``,
  type revolute / continuous / prismatic / spherical / fixed / universal) becomes a cut joint,
  and ``<constraint name type><link1 .../><link2 .../></constraint>`` (our constraint types) an
  explicit constraint; or add them in a side-car TOML (``urdf = "..."``, see :mod:`.toml`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from ..graph import WORLD, Graph, ModelError, pose
from ._text import check_utf8

_TYPES = {
    "revolute": "revolute",
    "continuous": "revolute",
    "prismatic": "prismatic",
    "fixed": "fixed",
    "floating": "free",
}
_LOOP_TYPES = {**_TYPES, "spherical": "spherical", "ball": "spherical", "universal": "universal"}


def _floats(el, attr, default, n, g, where):
    s = el.get(attr) if el is not None else None
    if s is None:
        return np.array(default, dtype=float)
    try:
        a = np.array([float(x) for x in s.split()])
        assert a.shape == (n,)
        return a
    except (ValueError, AssertionError):
        raise g.error(where, f"attribute {attr}={s!r} must be {n} numbers") from None


def read_urdf(path, floating: bool = False) -> Graph:
    """Parse a URDF file into a :class:`Graph`. ``floating=True`` adds a free joint
    ``root_joint`` world -> root link (otherwise the root link is welded to the world)."""
    import yourdfpy

    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: file not found")
    check_utf8(path, xml=True)
    try:
        root_xml = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ModelError(f"{path}: malformed XML: {e}") from None
    g = Graph(name=root_xml.get("name") or path.stem, source=str(path))
    for j in root_xml.iter("joint"):
        t = j.get("type")
        if j.get("name") and t not in _TYPES:
            raise g.error(
                f"joint '{j.get('name')}'",
                f"unsupported URDF joint type '{t}' (supported: {', '.join(_TYPES)}; planar joints are not supported)",
            )
    try:
        urdf = yourdfpy.URDF.load(
            str(path),
            load_meshes=False,
            build_scene_graph=False,
            load_collision_meshes=False,
            build_collision_scene_graph=False,
        )
    except Exception as e:  # noqa: BLE001 - yourdfpy raises assorted types
        raise ModelError(f"{path}: could not parse URDF: {' '.join(str(e).split())}") from None
    robot = urdf.robot
    for link in robot.links:
        el = f"link '{link.name}'"
        if link.name == WORLD:
            continue  # a URDF 'world' link is our world
        ine = link.inertial
        if ine is None or ine.mass is None:
            g.add_body(link.name)
            continue
        T = np.eye(4) if ine.origin is None else np.asarray(ine.origin, dtype=float)
        I = np.zeros((3, 3)) if ine.inertia is None else np.asarray(ine.inertia, dtype=float)
        try:
            g.add_body(link.name, float(ine.mass), T[:3, 3], T[:3, :3] @ I @ T[:3, :3].T)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001
            raise g.error(el, f"bad inertial: {e}") from None
    children = {j.child for j in robot.joints}
    roots = [ln.name for ln in robot.links if ln.name not in children and ln.name != WORLD]
    for r in roots:
        if floating:
            g.add_joint("root_joint" if len(roots) == 1 else f"{r}__root_joint", "free", WORLD, r)
        else:
            g.add_joint(f"{r}__weld", "fixed", WORLD, r)
    for j in robot.joints:
        el = f"joint '{j.name}'"
        t = _TYPES.get(j.type)
        if t is None:
            raise g.error(el, f"unsupported URDF joint type '{j.type}'")
        lo = hi = None
        if j.type in ("revolute", "prismatic") and j.limit is not None:
            lo = None if j.limit.lower is None else float(j.limit.lower)
            hi = None if j.limit.upper is None else float(j.limit.upper)
            if lo is not None and hi is not None and lo == hi == 0.0 and j.type == "revolute":
                lo = hi = None
        damping = float(j.dynamics.damping) if j.dynamics is not None and j.dynamics.damping is not None else 0.0
        axis = np.array([1.0, 0, 0]) if j.axis is None else np.asarray(j.axis, dtype=float)
        g.add_joint(
            j.name,
            t,
            j.parent,
            j.child,
            parent_pose=np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=float),
            axis=axis,
            lower=lo,
            upper=hi,
            damping=damping,
        )
    for j in robot.joints:
        if j.mimic is not None:
            k = 1.0 if j.mimic.multiplier is None else float(j.mimic.multiplier)
            o = 0.0 if j.mimic.offset is None else float(j.mimic.offset)
            if j.mimic.joint not in g.joints:
                raise g.error(f"joint '{j.name}'", f"mimics unknown joint '{j.mimic.joint}'")
            g.add_coupling(f"{j.name}__mimic", {j.name: 1.0, j.mimic.joint: -k}, -o)
    _loop_elements(g, root_xml)
    return g


def _side(g: Graph, el_name: str, e, tag: str):
    s = e.find(tag)
    if s is None or not s.get("link"):
        raise g.error(el_name, f"missing <{tag} link=...>")
    link = s.get("link")
    if link not in g.bodies:
        raise g.error(el_name, f"<{tag}> names unknown link '{link}'")
    xyz = _floats(s, "xyz", (0, 0, 0), 3, g, el_name)
    rpy = _floats(s, "rpy", (0, 0, 0), 3, g, el_name)
    return link, pose(xyz, rpy=rpy)


def _loop_elements(g: Graph, root) -> None:
    """``<loop_joint>`` (cut joints) and ``<constraint>`` elements (explicit constraints)."""
    for e in root.iter("loop_joint"):
        name, t = e.get("name"), e.get("type")
        el = f"loop_joint '{name}'"
        if t not in _LOOP_TYPES or t == "floating":
            raise g.error(
                el,
                f"unsupported loop_joint type '{t}' (expected one of revolute, continuous, "
                "prismatic, spherical, universal, fixed)",
            )
        (l1, T1), (l2, T2) = _side(g, el, e, "link1"), _side(g, el, e, "link2")
        ax = e.find("axis")
        axis = _floats(ax, "xyz", (1, 0, 0), 3, g, el)
        axis2 = _floats(ax, "xyz2", (0, 1, 0), 3, g, el)
        g.add_joint(name, _LOOP_TYPES[t], l1, l2, parent_pose=T1, child_pose=T2, axis=axis, axis2=axis2, cut=True)
    for e in root.iter("constraint"):
        name, t = e.get("name"), e.get("type")
        el = f"constraint '{name}'"
        (l1, T1), (l2, T2) = _side(g, el, e, "link1"), _side(g, el, e, "link2")
        g.add_constraint(name, t, l1, l2, T1, T2, length=float(e.get("length", 0.0)))
