"""Declared tables of the RoboCompiler "CMG" mechanism-graph JSON family (read by :mod:`jaxmech.io.cmg`).

One :class:`Variant` per schema string says which name the fixed ground has, whether the root
floats, the form of the actuators and of the seed, and which sections and information-only keys
the variant has. The element tables (``BODY``, ``JOINT``, ...) give the field names and their
aliases, shared by the family. :func:`jaxmech.io.cmg.graph_from_cmg` reads a document through
these tables only: a key no table names is reported in one warning; a key that holds generated
structure (``GENERATED``) is refused.

Field-by-field description of the variants: the module doc of :mod:`jaxmech.io.cmg` and
``configs/paper_robots.md`` (the authors' README, field by field).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One schema of the family.

    ``ground``: top-level keys naming the fixed ground body (the first present wins);
    ``floating``: the document names a ``floating_root`` body (free joint from the world);
    ``actuators``: "joint" ({joint_id, gear}) or "transmission" ({transmission: {joint: c}});
    ``seed``: "none", "joints" ({joints: {id: q}}), "flat" ({id: q}) or "pose_joints"
    ({base_pose: [x y z, intrinsic ZYX angles], joints: {id: q}});
    ``sections``: optional element sections the variant has (loop_cuts, sites, ...);
    ``info``: top-level keys kept for information only (not mechanics)."""

    schema: str
    robot: str
    ground: tuple[str, ...]
    floating: bool
    actuators: str
    seed: str
    sections: frozenset[str]
    info: frozenset[str]


_COMMON_INFO = frozenset({"schema", "id", "name", "units", "provenance", "source", "note", "_comment", "description"})

VARIANTS: dict[str, Variant] = {
    v.schema: v
    for v in (
        Variant(
            "cmg.physical-joint-graph/1.0",
            "Stewart platform (six-UPS)",
            ("root_body",),
            False,
            "joint",
            "none",
            frozenset({"actuators", "gravity_m_s2"}),
            _COMMON_INFO | {"root_body", "task_body"},
        ),
        Variant(
            "cmg.physical-closed-chain/1.0",
            "excavator arm",
            ("ground",),
            False,
            "joint",
            "joints",
            frozenset({"actuators", "gravity_m_s2", "seed", "partition_requests"}),
            _COMMON_INFO | {"ground", "branch_window"},
        ),
        Variant(
            "cmg.physical-floating-point-tree/1.0",
            "floating tree with point sites (Go2)",
            (),
            True,
            "joint",
            "pose_joints",
            frozenset({"actuators", "gravity_m_s2", "seed", "point_sites"}),
            _COMMON_INFO | {"floating_root", "base_chart"},
        ),
        Variant(
            "cmg.physical-floating-loop-graph/1.0",
            "floating tree with declared loop cuts and soles (Kangaroo)",
            (),
            True,
            "joint",
            "joints",
            frozenset({"actuators", "gravity_m_s2", "seed", "loop_cuts", "drive", "sole_sites"}),
            _COMMON_INFO | {"floating_root"},
        ),
        Variant(
            "physical-franka-input/1.0",
            "serial arm with coupled gripper (Panda)",
            ("root",),
            False,
            "transmission",
            "flat",
            frozenset({"actuators", "gravity_m_s2", "seed", "affine_couplings", "tool"}),
            _COMMON_INFO | {"root", "redundancy_joint", "target_reference_rotation"},
        ),
    )
}

#: Sections any member of the family may carry (a document with an unknown or missing schema is
#: read with all of them; a known schema carrying another variant's section gets it read and named
#: in the one warning).
ALL_SECTIONS = frozenset().union(*(v.sections for v in VARIANTS.values()))
ALL_INFO = frozenset().union(*(v.info for v in VARIANTS.values())) | {"task_body"}
GENERIC = Variant(
    "(unknown schema)",
    "generic CMG graph",
    ("root_body", "ground", "root"),
    True,
    "either",
    "any",
    ALL_SECTIONS,
    ALL_INFO,
)

#: Keys holding generated structure (a compiler's output, never physical input): refused.
GENERATED = frozenset(
    {
        "tree",
        "spanning_tree",
        "parent",
        "parents",
        "parent_of",
        "cuts",
        "cut_joints",
        "closures",
        "closure_rows",
        "jacobian",
        "jacobians",
        "paths",
        "loops",
        "modules",
        "coordinate_order",
        "partition",
        "independent_set",
    }
)

# --------------------------------------------------------------------------- element tables
# {canonical field: (aliases in order of preference)}; REQUIRED fields must be present.
BODY = {
    "id": ("id",),
    "mass": ("mass_kg",),
    "com": ("com_m",),
    "inertia": ("inertia_kg_m2", "inertia_com_kg_m2"),
}
BODY_INFO = frozenset({"name", "kind", "inertia_source", "source_inertial_attributes", "frame"})

JOINT = {
    "id": ("id",),
    "type": ("type",),
    "body_a": ("body_a",),
    "body_b": ("body_b",),
    "T_AJ": ("T_AJ",),
    "T_BJ": ("T_BJ",),
    "axis": ("axis",),
    "axis2": ("axis2",),
    "limits": ("limits",),
    "armature": ("armature",),
    "damping": ("damping",),
    "frictionloss": ("frictionloss",),
    "stiffness": ("stiffness",),
    "drive": ("drive",),
    "seed": ("seed", "q0"),
}
JOINT_REQUIRED = ("id", "type", "body_a", "body_b")
JOINT_INFO = frozenset({"name"})
JOINT_TYPES = {
    "revolute": "revolute",
    "hinge": "revolute",
    "prismatic": "prismatic",
    "slide": "prismatic",
    "spherical": "spherical",
    "ball": "spherical",
    "fixed": "fixed",
    "universal": "universal",
    "free": "free",
    "floating": "free",
    "cylindrical": "cylindrical",
}
DRIVE = ("armature", "damping", "frictionloss", "stiffness")

LOOP_CUT = {
    "id": ("id",),
    "type": ("type",),
    "body1": ("body1",),
    "body2": ("body2",),
    "point1": ("point1_m",),
    "point2": ("point2_m",),
    "frame1_R": ("frame1_R",),
    "frame2_R": ("frame2_R",),
}
LOOP_CUT_REQUIRED = ("type", "body1", "body2")
LOOP_CUT_TYPES = {"point_coincidence": "point", "universal": "universal"}

COUPLING = {
    "id": ("id",),
    "master": ("master",),
    "slave": ("slave",),
    "multiplier": ("multiplier",),
    "offset": ("offset",),
}
COUPLING_REQUIRED = ("master", "slave")

POINT_SITE = {
    "id": ("id", "name"),
    "body": ("body",),
    "point": ("point_m", "position_m", "pos_m"),
    "radius": ("radius_m",),
}
POINT_SITE_REQUIRED = ("id", "body", "point")
SOLE_SITE = {
    "id": ("id", "name"),
    "body": ("body",),
    "translation": ("frame_translation_m", "position_m", "point_m"),
    "rotation": ("frame_rotation", "frame_R", "R"),
    "corners": ("corners_m",),
}
SOLE_SITE_REQUIRED = ("id", "body", "translation")

ACTUATOR = {
    "id": ("id", "name"),
    "joint": ("joint_id",),
    "transmission": ("transmission",),
    "gear": ("gear",),
    "status": ("input_status",),
}
ACTUATOR_INFO = frozenset({"effort_type", "unit", "type", "limits", "force_bounds_N", "force_range", "ctrl_range"})

TOOL = {"id": ("id", "name"), "body": ("body",), "T": ("T_body_tool",)}
TOOL_INFO = frozenset({"convention"})

SEED = {"joints": ("joints", "q"), "base_pose": ("base_pose",)}
