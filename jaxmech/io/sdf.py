"""SDFormat reader (a small ElementTree reader for the kinematic/inertial subset).

No well-kept SDFormat parser installs from PyPI here (the ``sdformat`` bindings are conda/apt
only, and Pinocchio's PyPI wheel is built without SDF), so this reads the subset jaxmech needs:

* one ``<model>`` (the first, or ``model=`` by name) of an ``<sdf>`` file; nested models and
  ``<include>`` raise :class:`ModelError`;
* ``<link>``: ``<pose>`` and ``<inertial>`` (pose, mass, inertia, all about the COM);
* ``<joint>``: revolute / continuous -> revolute, prismatic, ball -> spherical, universal and
  revolute2 -> universal (``axis`` then ``axis2``), fixed; ``<axis><xyz>`` with ``<limit>`` and
  ``<dynamics><damping>``; screw/gearbox raise;
* ``<frame>`` (SDF 1.7+) -> named frames on the link they are (transitively) attached to.

Pose semantics (SDF 1.6 and 1.7+): ``<pose>x y z roll pitch yaw</pose>`` (URDF rpy;
``degrees="true"`` and ``rotation_format="quat_xyzw"`` honoured). A link's pose is relative to
the model frame, a joint's to its child link, a frame's to its ``attached_to`` frame, unless
``relative_to`` (1.7+) or the 1.6 ``frame`` attribute names another frame. The joint axis is
expressed in the joint frame, or in the model frame with 1.6 ``<use_parent_model_frame>``, or in
the frame named by ``<xyz expressed_in=...>`` (1.7+). A joint's placement in its parent is
computed from these model-frame poses, so the file's poses are our zero configuration.

Loops are allowed (SDFormat permits them): joints that close loops become cuts in
:func:`jaxmech.compile`. A model not attached to the world (no joint with parent ``world`` and
not ``<static>``) gets a free joint ``root_joint`` world -> canonical link (``canonical_link``
or the first link) with ``q0`` = that link's pose in the file.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..graph import WORLD, Graph, ModelError, pose
from ._text import check_utf8

_JT = {
    "revolute": "revolute",
    "continuous": "revolute",
    "prismatic": "prismatic",
    "ball": "spherical",
    "universal": "universal",
    "revolute2": "universal",
    "fixed": "fixed",
}
_MODEL = ("__model__", "")


def _text_floats(g: Graph, el: str, e, n: int, what: str):
    try:
        a = np.array([float(x) for x in (e.text or "").split()])
    except ValueError:
        raise g.error(el, f"<{what}> must hold numbers, got {e.text!r}") from None
    if a.shape != (n,):
        raise g.error(el, f"<{what}> must hold {n} numbers, got {e.text!r}")
    return a


def _pose_el(g: Graph, el: str, e):
    """(pose 4x4, relative_to name or None) of a ``<pose>`` child of ``e``."""
    p = e.find("pose")
    if p is None:
        return np.eye(4), None
    rel = p.get("relative_to", p.get("frame"))
    rel = rel if rel else None
    fmt = p.get("rotation_format", "euler_rpy")
    if fmt == "quat_xyzw":
        a = _text_floats(g, el, p, 7, "pose")
        return pose(a[:3], quat=[a[6], a[3], a[4], a[5]]), rel
    a = _text_floats(g, el, p, 6, "pose")
    rpy = np.deg2rad(a[3:]) if p.get("degrees", "false").lower() in ("true", "1") else a[3:]
    return pose(a[:3], rpy=rpy), rel


def _f(e, tag, default):
    s = e.find(tag) if e is not None else None
    return float(s.text) if s is not None and s.text and s.text.strip() else default


def read_sdf(path, model: str | None = None) -> Graph:
    """Parse an SDFormat file into a :class:`Graph` (see the module doc)."""
    path = Path(path)
    m = _index_model(_find_model(path, model), path)
    _add_links(m)
    _attach_to_world(m)
    for name, e in m.joints.items():
        _add_joint(m, name, e)
    _add_frames(m)
    return m.g


@dataclass
class _Model:
    """Working state of one ``<model>``: the graph being built, its elements by name, and the
    model-frame poses (4x4) resolved so far."""

    g: Graph
    M: ET.Element
    links: dict[str, ET.Element]
    joints: dict[str, ET.Element]
    frames: dict[str, ET.Element]
    cache: dict[str, np.ndarray] = field(default_factory=dict)

    def world(self, name: str, stack: tuple[str, ...] = ()) -> np.ndarray:
        """Pose (4x4) of a frame (link, joint, frame, model) in the model frame."""
        g = self.g
        if name in _MODEL or name == WORLD:
            return np.eye(4)
        if name in self.cache:
            return self.cache[name]
        if name in stack:
            raise g.error(f"frame '{name}'", f"cyclic pose graph: {' -> '.join(stack + (name,))}")
        st = stack + (name,)
        if name in self.links:
            X, rel = _pose_el(g, f"link '{name}'", self.links[name])
            T = self.world(rel, st) @ X if rel else X
        elif name in self.joints:
            e = self.joints[name]
            X, rel = _pose_el(g, f"joint '{name}'", e)
            child = (e.findtext("child") or "").strip()
            T = self.world(rel or child, st) @ X
        elif name in self.frames:
            e = self.frames[name]
            X, rel = _pose_el(g, f"frame '{name}'", e)
            T = self.world(rel or e.get("attached_to") or "__model__", st) @ X
        else:
            raise g.error(f"frame '{stack[-1] if stack else name}'", f"refers to unknown frame '{name}'")
        self.cache[name] = T
        return T

    def owner(self, name: str, stack: tuple[str, ...] = ()) -> str | None:
        """The link a frame is attached to."""
        if name in self.links or name == WORLD:
            return name
        if name in self.joints:
            return (self.joints[name].findtext("child") or "").strip()
        if name in self.frames and name not in stack:
            return self.owner(self.frames[name].get("attached_to") or "__model__", stack + (name,))
        canon = self.M.get("canonical_link") or next(iter(self.links), None)
        return canon


def _find_model(path: Path, model: str | None) -> ET.Element:
    """The ``<model>`` element to read: the first one (top level, then in ``<world>``s), or the
    one named ``model``."""
    if not path.exists():
        raise ModelError(f"{path}: file not found")
    check_utf8(path, xml=True)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ModelError(f"{path}: malformed XML: {e}") from None
    models = root.findall("model") + [m for w in root.findall("world") for m in w.findall("model")]
    if model is not None:
        models = [m for m in models if m.get("name") == model]
    if not models:
        raise ModelError(f"{path}: no <model>{f' named {model!r}' if model else ''} in the file")
    return models[0]


def _index_model(M: ET.Element, path: Path) -> _Model:
    """An empty :class:`Graph` for ``M`` and its links, joints and frames by name (nested
    ``<model>``/``<include>`` and unnamed elements raise)."""
    g = Graph(name=M.get("name") or path.stem, source=str(path))
    for bad in ("model", "include"):
        if M.find(bad) is not None:
            raise g.error(f"model '{g.name}'", f"nested <{bad}> elements are not supported")
    links = {e.get("name"): e for e in M.findall("link")}
    joints = {e.get("name"): e for e in M.findall("joint")}
    frames = {e.get("name"): e for e in M.findall("frame")}
    for kind, d in (("link", links), ("joint", joints), ("frame", frames)):
        if None in d:
            raise g.error(f"<{kind}>", "missing 'name' attribute")
    return _Model(g, M, links, joints, frames)


def _add_links(m: _Model) -> None:
    """A body per ``<link>``: mass [kg], COM [m] and inertia [kg m^2] about the COM, in the link
    frame (an ``<inertial>`` pose relative to another frame is re-expressed in the link frame;
    no ``<inertial>``: a massless body)."""
    g = m.g
    for name, e in m.links.items():
        el = f"link '{name}'"
        ine = e.find("inertial")
        if ine is None:
            g.add_body(name)
            continue
        X, rel = _pose_el(g, el, ine)
        if rel and rel != name:
            X = np.linalg.inv(m.world(name)) @ m.world(rel) @ X
        mass = _f(ine, "mass", 1.0)
        I = ine.find("inertia")
        vals = (
            [_f(I, k, 0.0) for k in ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")] if I is not None else [1, 1, 1, 0, 0, 0]
        )
        ixx, iyy, izz, ixy, ixz, iyz = vals
        Ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        g.add_body(name, mass, X[:3, 3], X[:3, :3] @ Ic @ X[:3, :3].T)


def _attach_to_world(m: _Model) -> None:
    """A free ``root_joint`` world -> canonical link (``q0`` = its file pose, quaternion wxyz) for
    a model not attached to the world; a fixed ``<link>__static`` joint per link of a
    ``<static>`` model."""
    g, M, links = m.g, m.M, m.links
    fixed_to_world = M.findtext("static", "false").strip().lower() in ("true", "1") or any(
        (e.findtext("parent") or "").strip() == WORLD for e in m.joints.values()
    )
    if not fixed_to_world and links:
        canon = M.get("canonical_link") or next(iter(links))
        if canon not in links:
            raise g.error(f"model '{g.name}'", f"canonical_link '{canon}' is not a link")
        T = m.world(canon)
        from scipy.spatial.transform import Rotation

        x, y, z, w = Rotation.from_matrix(T[:3, :3]).as_quat()
        g.add_joint("root_joint", "free", WORLD, canon, q0=np.concatenate([T[:3, 3], [w, x, y, z]]))
    elif M.findtext("static", "false").strip().lower() in ("true", "1"):
        for name in links:
            g.add_joint(f"{name}__static", "fixed", WORLD, name, parent_pose=m.world(name))


def _joint_axes(m: _Model, el: str, e: ET.Element, J: np.ndarray) -> tuple[list, list, float]:
    """``(axes, limits, damping)`` of a ``<joint>`` whose frame has model-frame pose ``J`` (4x4):
    per ``<axis>``/``<axis2>`` the unit-free direction (3,) in the joint frame (None if absent)
    and ``(lower, upper)`` (None where unbounded, continuous, or lower > upper); the damping of
    ``<axis>``."""
    g = m.g
    axes, lims, damping = [], [], 0.0
    for tag in ("axis", "axis2"):
        a = e.find(tag)
        if a is None:
            axes.append(None)
            lims.append((None, None))
            continue
        xyz = a.find("xyz")
        v = _text_floats(g, el, xyz, 3, f"{tag}/xyz") if xyz is not None else np.array([0.0, 0, 1])
        frame = xyz.get("expressed_in") if xyz is not None else None
        if frame is None and a.findtext("use_parent_model_frame", "false").strip().lower() in ("true", "1"):
            frame = "__model__"
        if frame is not None:
            v = J[:3, :3].T @ m.world(frame)[:3, :3] @ v
        axes.append(v)
        lim = a.find("limit")
        lo, hi = _f(lim, "lower", None), _f(lim, "upper", None)
        if e.get("type") == "continuous" or (lo is not None and hi is not None and lo > hi):
            lo = hi = None
        lims.append((lo, hi))
        if tag == "axis":
            damping = _f(a.find("dynamics"), "damping", 0.0)
    return axes, lims, damping


def _add_joint(m: _Model, name: str, e: ET.Element) -> None:
    """Add one ``<joint>``, placed in its parent and child from the file's model-frame poses."""
    g = m.g
    el = f"joint '{name}'"
    t = _JT.get(e.get("type"))
    if t is None:
        raise g.error(el, f"unsupported SDF joint type '{e.get('type')}' (supported: {', '.join(_JT)})")
    parent, child = (e.findtext("parent") or "").strip(), (e.findtext("child") or "").strip()
    for side, b in (("parent", parent), ("child", child)):
        if b not in m.links and not (side == "parent" and b == WORLD):
            raise g.error(el, f"<{side}> names unknown link '{b}'")
    J = m.world(name)
    P = np.eye(4) if parent == WORLD else m.world(parent)
    C = m.world(child)
    axes, lims, damping = _joint_axes(m, el, e, J)
    kw = {}
    if t in ("revolute", "prismatic"):
        if axes[0] is None:
            raise g.error(el, f"a {e.get('type')} joint needs <axis><xyz>")
        kw = dict(axis=axes[0], lower=lims[0][0], upper=lims[0][1])
    elif t == "universal":
        if axes[0] is None or axes[1] is None:
            raise g.error(el, f"a {e.get('type')} joint needs <axis> and <axis2>")
        lo = None if None in (lims[0][0], lims[1][0]) else [lims[0][0], lims[1][0]]
        hi = None if None in (lims[0][1], lims[1][1]) else [lims[0][1], lims[1][1]]
        kw = dict(axis=axes[0], axis2=axes[1], lower=lo, upper=hi)
    g.add_joint(
        name,
        t,
        parent,
        child,
        parent_pose=np.linalg.inv(P) @ J,
        child_pose=np.linalg.inv(C) @ J,
        damping=damping,
        **kw,
    )


def _add_frames(m: _Model) -> None:
    """A named frame per ``<frame>``, on the link it is (transitively) attached to."""
    g = m.g
    for name in m.frames:
        b = m.owner(name)
        if b not in g.bodies:
            raise g.error(f"frame '{name}'", f"is attached to unknown frame '{b}'")
        g.add_frame(b, name, np.linalg.inv(m.world(b)) @ m.world(name) if b != WORLD else m.world(name))
