"""Validating mechanism-graph builder (plain Python and numpy: nothing here is traced).

A :class:`Graph` holds bodies, joints (an undirected body-joint graph that may contain loops),
named frames on bodies, explicit constraints and actuator ports. Loaders (``jaxmech.io``)
produce a ``Graph``; :func:`jaxmech.compile` turns it into a :class:`~jaxmech.Mechanism`.

Every check raises :class:`ModelError` naming the source file, the element and the offending
value, so a user's typo never surfaces as a traceback from inside JAX.

Joint kinematics (all types): the child body's pose is

    T_child = T_parent @ parent_pose @ M(q) @ inv(child_pose)

where ``parent_pose`` / ``child_pose`` are the joint frame J expressed in the parent / child body
and ``M(q)`` the joint motion in J:

==============  ====  ====  ==================================================================
type            nq    nv    M(q) and velocity
==============  ====  ====  ==================================================================
revolute        1     1     rotation about ``axis`` by ``q - offset``
prismatic       1     1     translation along ``axis`` by ``q - offset``
cylindrical     2     2     rotation about then translation along ``axis``: (angle, distance)
universal       2     2     Rot(axis, q1) @ Rot(axis2, q2)
spherical       4     3     rotation of the unit quaternion (w, x, y, z); v = body-frame omega
free            7     6     (position, quaternion wxyz); v = body-frame twist (omega, v)
fixed           0     0     identity
==============  ====  ====  ==================================================================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from .constraint_types import ROW_TYPES


class JointType(StrEnum):
    """The joint types (a ``str``: ``JointType.REVOLUTE == "revolute"``, as model files spell them),
    with their coordinate counts ``nq`` / ``nv`` (module docstring table)."""

    REVOLUTE = "revolute"
    PRISMATIC = "prismatic"
    CYLINDRICAL = "cylindrical"
    UNIVERSAL = "universal"
    SPHERICAL = "spherical"
    FREE = "free"
    FIXED = "fixed"

    @property
    def nq(self) -> int:
        """Configuration coordinates."""
        return _JOINT_DIMS[self][0]

    @property
    def nv(self) -> int:
        """Velocity coordinates."""
        return _JOINT_DIMS[self][1]

    @property
    def scalar(self) -> bool:
        """Whether the coordinates are plain scalars (angles / distances, with limits and an axis)."""
        return self in (JointType.REVOLUTE, JointType.PRISMATIC, JointType.CYLINDRICAL, JointType.UNIVERSAL)


_JOINT_DIMS = {"revolute": (1, 1), "prismatic": (1, 1), "cylindrical": (2, 2), "universal": (2, 2)}
_JOINT_DIMS |= {"spherical": (4, 3), "free": (7, 6), "fixed": (0, 0)}

JOINT_TYPES = tuple(t.value for t in JointType)
JOINT_NQ = {t.value: t.nq for t in JointType}
JOINT_NV = {t.value: t.nv for t in JointType}

#: Constraint types and the number of residual rows each contributes (``None``: chosen per element,
#: ``pose``); the rows themselves are :data:`jaxmech.constraint_types.ROW_TYPES`.
CONSTRAINT_ROWS = {name: rt.n_rows for name, rt in ROW_TYPES.items()}
#: Which constraint a joint becomes when it is chosen as a cut.
CUT_OF_JOINT = {
    "spherical": "point",
    "fixed": "weld",
    "revolute": "revolute",
    "universal": "universal",
    "prismatic": "prismatic",
    "cylindrical": "cylindrical",
}
WORLD = "world"


class ModelError(ValueError):
    """A user-facing model error: names the file, the element and the offending value."""


def _where(source: str | None) -> str:
    return f"{source}: " if source else ""


def pose(xyz=(0.0, 0.0, 0.0), rpy=None, quat=None, R=None) -> np.ndarray:
    """Homogeneous pose (4, 4) from a translation and one of roll-pitch-yaw (URDF order,
    R = Rz(yaw) Ry(pitch) Rx(roll)), a quaternion (w, x, y, z) or a rotation matrix."""
    T = np.eye(4)
    T[:3, 3] = np.asarray(xyz, dtype=float).reshape(3)
    if R is not None:
        T[:3, :3] = np.asarray(R, dtype=float).reshape(3, 3)
    elif quat is not None:
        w, x, y, z = np.asarray(quat, dtype=float) / np.linalg.norm(quat)
        T[:3, :3] = [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    elif rpy is not None:
        r, p, y = np.asarray(rpy, dtype=float)
        cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
        T[:3, :3] = [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    return T


@dataclass
class Body:
    """A rigid body. ``inertia`` is the rotational inertia about the COM in body axes (kg m^2)."""

    name: str
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))
    inertia: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))
    frames: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Joint:
    """A joint between two bodies (either may be the world). See the module table for types."""

    name: str
    type: str
    parent: str
    child: str
    parent_pose: np.ndarray = field(default_factory=lambda: np.eye(4))
    child_pose: np.ndarray = field(default_factory=lambda: np.eye(4))
    axis: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    axis2: np.ndarray = field(default_factory=lambda: np.array([0.0, 1.0, 0.0]))
    lower: np.ndarray | None = None  # per q coordinate of the 1-D coordinates (nv of 1-dof parts)
    upper: np.ndarray | None = None
    offset: float = 0.0  # MJCF ``ref``: M(q - offset)
    actuated: bool = False
    cut: bool | None = None  # True: must be a cut; False: must stay in the tree; None: automatic
    q0: np.ndarray | None = None  # initial guess of the joint coordinates (nq)
    armature: float = 0.0
    damping: float = 0.0
    frictionloss: float = 0.0  # dry friction (N m or N), carried for simulators / export


@dataclass
class Constraint:
    """An explicit closure / task constraint between frame A on ``body_a`` and frame B on
    ``body_b`` (``body_a`` may be the world, giving a frame-to-world target).

    ``axes`` (6 booleans, angular-first) selects the Log rows of a ``pose`` constraint.
    A ``coupling`` uses ``coeffs`` {joint name: c} and ``offset``: sum c q + offset = 0.
    A ``distance`` constraint keeps |p_B - p_A| = ``length``.
    """

    name: str
    type: str
    body_a: str = WORLD
    body_b: str = WORLD
    pose_a: np.ndarray = field(default_factory=lambda: np.eye(4))
    pose_b: np.ndarray = field(default_factory=lambda: np.eye(4))
    axes: tuple[bool, ...] = (True,) * 6
    coeffs: dict[str, float] = field(default_factory=dict)
    offset: float = 0.0
    length: float = 0.0


@dataclass
class Port:
    """An actuator port: a joint coordinate (``joint``, coordinate ``index``) or the distance
    between two frames (``frame_a``, ``frame_b``; a hydraulic cylinder). ``gear`` scales the
    port coordinate. ``coeffs`` {joint: c} (several one-coordinate joints) makes a transmission
    port ``gear * sum_j c_j q_j`` (one actuator driving several joints); ``joint`` is then the first."""

    name: str
    type: str  # "joint" | "distance"
    joint: str | None = None
    index: int = 0
    frame_a: str | None = None
    frame_b: str | None = None
    gear: float = 1.0
    coeffs: dict[str, float] | None = None


@dataclass
class Graph:
    """Mechanism graph under construction. Call the ``add_*`` methods, then ``jaxmech.compile``.

    ``source`` (a file name) prefixes every error message."""

    name: str = "mechanism"
    source: str | None = None
    gravity: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
    bodies: dict[str, Body] = field(default_factory=dict)
    joints: dict[str, Joint] = field(default_factory=dict)
    constraints: dict[str, Constraint] = field(default_factory=dict)
    ports: dict[str, Port] = field(default_factory=dict)
    root: str = WORLD

    def __post_init__(self):
        if WORLD not in self.bodies:
            self.bodies[WORLD] = Body(WORLD)

    # ------------------------------------------------------------------ helpers
    def error(self, element: str, msg: str) -> ModelError:
        return ModelError(" ".join(f"{_where(self.source)}{element}: {msg}".split()))  # one line (array reprs wrap)

    def _num(self, element: str, what: str, x) -> float:
        """One finite number (a string, bool or None is refused, not converted)."""
        if isinstance(x, (str, bytes, bool)) or x is None or _has_text(x):
            raise self.error(element, f"{what} must be a number, got {x!r}")
        try:
            v = float(x)
        except (TypeError, ValueError):
            raise self.error(element, f"{what} must be a number, got {x!r}") from None
        if not np.isfinite(v):
            raise self.error(element, f"{what} must be finite, got {x!r}")
        return v

    def _vec(self, element: str, what: str, x, n: int) -> np.ndarray:
        if _has_text(x):
            raise self.error(element, f"{what} must be {n} numbers, got {x!r}")
        try:
            a = np.asarray(x, dtype=float).reshape(n)
        except (TypeError, ValueError):
            raise self.error(element, f"{what} must be {n} numbers, got {x!r}") from None
        if not np.all(np.isfinite(a)):
            raise self.error(element, f"{what} must be finite, got {x!r}")
        return a

    def _pose(self, element: str, what: str, T) -> np.ndarray:
        if _has_text(T):
            raise self.error(element, f"{what} must be a 4x4 pose of numbers, got {T!r}")
        try:
            T = np.asarray(T, dtype=float).reshape(4, 4)
        except (TypeError, ValueError):
            raise self.error(element, f"{what} must be a 4x4 pose, got {T!r}") from None
        R = T[:3, :3]
        if not np.all(np.isfinite(T)) or np.abs(R @ R.T - np.eye(3)).max() > 1e-6 or np.linalg.det(R) < 0:
            raise self.error(element, f"{what} is not a rigid pose (rotation not orthonormal): {T.tolist()}")
        # Re-orthonormalize so rounding in files does not leak into residuals.
        U, _, Vt = np.linalg.svd(R)
        T[:3, :3] = U @ Vt
        return T

    def _unit(self, element: str, what: str, a) -> np.ndarray:
        a = self._vec(element, what, a, 3)
        n = np.linalg.norm(a)
        if n < 1e-12:
            raise self.error(element, f"{what} must be a non-zero vector, got {a.tolist()}")
        return a / n

    def _new_name(self, kind: str, name: str, table: dict) -> None:
        if not isinstance(name, str) or not name:
            raise self.error(f"{kind} {name!r}", "name must be a non-empty string")
        if name in table:
            raise self.error(f"{kind} '{name}'", "duplicate name")

    # ------------------------------------------------------------------ builders
    def add_body(self, name: str, mass: float = 0.0, com=(0.0, 0.0, 0.0), inertia=None, frames=None) -> Body:
        """Add a body. ``inertia``: 3x3, or (ixx, iyy, izz), or (ixx, iyy, izz, ixy, ixz, iyz),
        about the COM in body axes. ``frames``: {name: 4x4 pose in the body}."""
        el = f"body '{name}'"
        self._new_name("body", name, self.bodies)
        mass = self._num(el, "mass", mass)
        if mass < 0:
            raise self.error(el, f"mass must be finite and >= 0, got {mass}")
        com = self._vec(el, "com", com, 3)
        I = _inertia_matrix(self, el, inertia)
        if mass > 0 and not np.any(I):  # exact zeros: a small real body (1 g, I ~ 1e-10 kg m^2) is fine
            raise self.error(el, f"inertia must be positive definite for a body of mass {mass}, got zeros")
        body = Body(name, mass, com, I, {})
        self.bodies[name] = body
        for fname, T in (frames or {}).items():
            self.add_frame(name, fname, T)
        return body

    def add_frame(self, body: str, name: str, T=np.eye(4)) -> None:
        """Name a frame (site) on a body, pose ``T`` (4, 4) in the body frame."""
        if body not in self.bodies:
            raise self.error(f"frame '{name}'", f"unknown body '{body}'")
        if name in self.frame_owner():
            raise self.error(f"frame '{name}'", "duplicate frame name")
        self.bodies[body].frames[name] = self._pose(f"frame '{name}'", "pose", T)

    def frame_owner(self) -> dict[str, str]:
        """{frame name: body name} over all named frames."""
        return {f: b.name for b in self.bodies.values() for f in b.frames}

    def add_joint(
        self,
        name: str,
        type: str,
        parent: str,
        child: str,
        parent_pose=None,
        child_pose=None,
        axis=(0.0, 0.0, 1.0),
        axis2=(0.0, 1.0, 0.0),
        lower=None,
        upper=None,
        offset: float = 0.0,
        actuated: bool = False,
        cut: bool | None = None,
        q0=None,
        armature: float = 0.0,
        damping: float = 0.0,
        frictionloss: float = 0.0,
    ) -> Joint:
        el = f"joint '{name}'"
        self._new_name("joint", name, self.joints)
        if type not in JOINT_TYPES:
            raise self.error(el, f"unknown joint type '{type}' (expected one of {', '.join(JOINT_TYPES)})")
        for side, b in (("parent", parent), ("child", child)):
            if b not in self.bodies:
                raise self.error(el, f"{side} body '{b}' does not exist")
        if parent == child:
            raise self.error(el, f"parent and child are the same body '{parent}'")
        pp = self._pose(el, "parent_pose", np.eye(4) if parent_pose is None else parent_pose)
        cp = self._pose(el, "child_pose", np.eye(4) if child_pose is None else child_pose)
        jt = JointType(type)
        ax = self._unit(el, "axis", axis) if jt.scalar else np.array([0.0, 0, 1])
        ax2 = self._unit(el, "axis2", axis2) if type == "universal" else np.array([0.0, 1, 0])
        if type == "universal" and abs(ax @ ax2) > 1 - 1e-9:
            raise self.error(el, f"universal axes are parallel: {ax.tolist()} and {ax2.tolist()}")
        n1 = jt.nq if jt.scalar else 0  # scalar coordinates take limits
        lo = np.full(n1, -np.inf) if lower is None else self._vec(el, "lower limit", lower, n1) if n1 else np.zeros(0)
        hi = np.full(n1, np.inf) if upper is None else self._vec(el, "upper limit", upper, n1) if n1 else np.zeros(0)
        if lower is not None and n1 == 0 and np.size(lower):
            raise self.error(el, f"a {type} joint takes no limits, got {lower!r}")
        if np.any(lo > hi):
            raise self.error(el, f"lower limit {lo.tolist()} exceeds upper limit {hi.tolist()}")
        nq = jt.nq
        if q0 is not None:
            q0 = self._vec(el, "q0", q0, nq)
        j = Joint(
            name,
            type,
            parent,
            child,
            pp,
            cp,
            ax,
            ax2,
            lo,
            hi,
            self._num(el, "offset", offset),
            bool(actuated),
            cut,
            q0,
            self._num(el, "armature", armature),
            self._num(el, "damping", damping),
            self._num(el, "frictionloss", frictionloss),
        )
        if j.armature < 0 or j.damping < 0 or j.frictionloss < 0:
            raise self.error(
                el, f"armature, damping and frictionloss must be >= 0, got {armature}, {damping}, {frictionloss}"
            )
        self.joints[name] = j
        return j

    def add_constraint(
        self,
        name: str,
        type: str,
        body_a: str = WORLD,
        body_b: str = WORLD,
        pose_a=None,
        pose_b=None,
        axes=None,
        coeffs=None,
        offset: float = 0.0,
        length: float = 0.0,
    ) -> Constraint:
        """Add an explicit constraint (see :class:`Constraint`). Frames may also be given by
        name: pass a frame name as ``body_a``/``body_b`` and leave the pose None."""
        el = f"constraint '{name}'"
        self._new_name("constraint", name, self.constraints)
        if type not in CONSTRAINT_ROWS:
            raise self.error(el, f"unknown constraint type '{type}' (expected one of {', '.join(CONSTRAINT_ROWS)})")
        owners = self.frame_owner()
        resolved = []
        for side, b, T in (("a", body_a, pose_a), ("b", body_b, pose_b)):
            if b in self.bodies:
                resolved.append((b, self._pose(el, f"pose_{side}", np.eye(4) if T is None else T)))
            elif b in owners:
                Tf = self.bodies[owners[b]].frames[b]
                extra = np.eye(4) if T is None else self._pose(el, f"pose_{side}", T)
                resolved.append((owners[b], Tf @ extra))
            else:
                raise self.error(el, f"body_{side} '{b}' is neither a body nor a named frame")
        (ba, Ta), (bb, Tb) = resolved
        if type == "coupling":
            if not coeffs:
                raise self.error(el, "a coupling needs coeffs {joint: coefficient}")
            for jn, c in coeffs.items():
                if jn not in self.joints:
                    raise self.error(el, f"coupling names unknown joint '{jn}'")
                if JOINT_NQ[self.joints[jn].type] != 1:
                    raise self.error(el, f"coupling joint '{jn}' must have one coordinate, is {self.joints[jn].type}")
                self._num(el, f"coupling coefficient of '{jn}'", c)
        elif ba == bb:
            raise self.error(el, f"both sides are on the same body '{ba}'")
        ax = tuple(bool(x) for x in (axes if axes is not None else (True,) * 6))
        if len(ax) != 6 or (type == "pose" and not any(ax)):
            raise self.error(el, f"axes must be 6 booleans (angular-first) with at least one set, got {axes!r}")
        c = Constraint(
            name,
            type,
            ba,
            bb,
            Ta,
            Tb,
            ax,
            {k: float(v) for k, v in (coeffs or {}).items()},
            self._num(el, "offset", offset),
            self._num(el, "length", length),
        )
        self.constraints[name] = c
        return c

    def add_coupling(self, name: str, coeffs: dict[str, float], offset: float = 0.0) -> Constraint:
        """Linear coupling ``sum_j c_j q_j + offset = 0`` (e.g. equal finger displacements:
        ``{"finger1": 1, "finger2": -1}``; a URDF mimic ``slave = m master + o`` is
        ``{"slave": 1, "master": -m}``, offset ``-o``)."""
        return self.add_constraint(name, "coupling", coeffs=coeffs, offset=offset)

    def add_port(
        self,
        name: str,
        type: str = "joint",
        joint: str | None = None,
        index: int = 0,
        frame_a: str | None = None,
        frame_b: str | None = None,
        gear: float = 1.0,
        coeffs: dict[str, float] | None = None,
    ) -> Port:
        """Add an actuator port: a joint coordinate, a transmission ``coeffs`` {joint: c} over
        one-coordinate joints (value ``gear * sum c q``), or the distance between two frames."""
        el = f"port '{name}'"
        self._new_name("port", name, self.ports)
        if coeffs is not None:
            if type != "joint" or not isinstance(coeffs, dict) or not coeffs:
                raise self.error(el, f"a transmission port needs coeffs {{joint: coefficient}}, got {coeffs!r}")
            for jn in coeffs:
                if jn not in self.joints:
                    raise self.error(el, f"transmission names unknown joint '{jn}'")
                if JOINT_NQ[self.joints[jn].type] != 1:
                    raise self.error(
                        el, f"transmission joint '{jn}' must have one coordinate, is {self.joints[jn].type}"
                    )
            coeffs = {jn: self._num(el, f"transmission coefficient of '{jn}'", c) for jn, c in coeffs.items()}
            joint, index = next(iter(coeffs)), 0
        if type == "joint":
            if joint not in self.joints:
                raise self.error(el, f"unknown joint '{joint}'")
            jt = JointType(self.joints[joint].type)
            n1 = jt.nq if jt.scalar else 0
            if not 0 <= index < n1:
                raise self.error(el, f"joint '{joint}' ({self.joints[joint].type}) has no scalar coordinate {index}")
        elif type == "distance":
            owners = self.frame_owner()
            for f in (frame_a, frame_b):
                if f not in owners and f not in self.bodies:
                    raise self.error(el, f"unknown frame '{f}'")
        else:
            raise self.error(el, f"unknown port type '{type}' (expected 'joint' or 'distance')")
        p = Port(name, type, joint, int(index), frame_a, frame_b, self._num(el, "gear", gear), coeffs)
        self.ports[name] = p
        return p

    def copy(self) -> Graph:
        return dataclasses.replace(
            self,
            bodies={k: dataclasses.replace(v, frames=dict(v.frames)) for k, v in self.bodies.items()},
            joints=dict(self.joints),
            constraints=dict(self.constraints),
            ports=dict(self.ports),
        )


def _has_text(x) -> bool:
    """True if ``x`` (a number or nested lists) holds a string / bytes / bool / None anywhere
    (numpy would silently convert ``"1.5"`` or ``True`` to a float)."""
    if isinstance(x, (str, bytes, bool)) or x is None:
        return True
    if isinstance(x, (list, tuple)):
        return any(_has_text(e) for e in x)
    if isinstance(x, dict):
        return True
    return False


def _inertia_matrix(g: Graph, el: str, inertia) -> np.ndarray:
    if inertia is None:
        return np.zeros((3, 3))
    if _has_text(inertia):
        raise g.error(el, f"inertia must be numbers, got {inertia!r}")
    try:
        a = np.asarray(inertia, dtype=float)
    except (TypeError, ValueError):
        raise g.error(el, f"inertia must be 3x3, 3 or 6 numbers, got {inertia!r}") from None
    if a.shape == (3,):
        I = np.diag(a)
    elif a.shape == (6,):
        ixx, iyy, izz, ixy, ixz, iyz = a
        I = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    elif a.shape == (3, 3):
        I = a
    else:
        raise g.error(el, f"inertia must be 3x3, 3 or 6 numbers, got shape {a.shape}")
    if not np.all(np.isfinite(I)):
        raise g.error(el, f"inertia is not finite: {I.tolist()}")
    if np.abs(I - I.T).max() > 1e-9 * max(1.0, np.abs(I).max()):
        raise g.error(el, f"inertia is not symmetric: {I.tolist()}")
    I = 0.5 * (I + I.T)
    ev = np.linalg.eigvalsh(I)
    if ev.min() < -1e-12 * max(1.0, ev.max()):
        raise g.error(el, f"inertia is not positive semi-definite (eigenvalues {ev.tolist()})")
    # Triangle inequality of principal moments (physically realizable bodies).
    if ev.max() > 0 and ev[2] > ev[0] + ev[1] + 1e-9 * ev.max():
        raise g.error(el, f"principal moments {ev.tolist()} violate the triangle inequality")
    return I
