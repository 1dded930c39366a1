"""jaxmech: closed-chain robot mechanics in JAX.

Compile a mechanism graph once; then jitted, vmapped, differentiable functions give closure
residuals with analytic Jacobians, assembly, velocity/acceleration reduction, actuator port maps
and constrained dynamics. See docs/design.md for conventions (angular-first twists, wxyz quaternions).
"""

from . import envs, lie, rank, sysid  # noqa: F401  (jm.envs, jm.sysid as attributes)
from ._jit import compilation_cache, jit
from .allocator import reuse_host_buffers
from .assembly import STATUS_MESSAGES, AssemblyError, AssemblyResult, assemble
from .closure import (
    check_jacobian,
    closure_jacobian,
    closure_jacobian_autodiff,
    closure_residual,
    closure_residual_and_jacobian,
    closure_rows,
)
from .compile import compile
from .constrained import (
    ConstrainedDynamics,
    DynamicsOptions,
    InverseDynamics,
    forward_dynamics,
    inverse_dynamics,
    support_mask,
)
from .constraint_types import ConstraintType
from .curvature import closure_bias, closure_bias_autodiff, closure_terms
from .dynamics import (
    Kinematics,
    aba,
    bias_forces,
    crba,
    external_wrenches,
    gravity_torques,
    kinematics,
    mass_matrix,
    nonlinear_effects,
    rnea,
    spatial_inertia,
)
from .graph import Graph, JointType, ModelError, pose
from .independent import distribute_effort, independent_choice, mobility, reduced_effort, select_independent
from .io import load, read_graph
from .io.export import export_mjcf
from .io.mujoco_convert import mujoco_qvel_to_v, v_to_mujoco_qvel
from .io.pinocchio import q_from_pinocchio, q_to_pinocchio, to_pinocchio, v_from_pinocchio, v_to_pinocchio
from .kinpass import (
    difference,
    forward_kinematics,
    frame_jacobian,
    frame_pose,
    integrate,
    normalize,
    random_configuration,
)
from .mechanism import Mechanism
from .reduction import (
    ReductionError,
    TangentMap,
    acceleration_lift,
    acceleration_lift_status,
    independent_names,
    port_effort,
    port_jacobian,
    port_tangent_map,
    port_values,
    tangent_map,
    tangent_map_status,
    task_jacobian,
    tree_speed_lift,
)
from .sharding import shard
from .simulate import SimState, StepInfo, control_size, rollout, rollout_batch, step, step_with_info
from .status import Status
from .straggler import assemble_batch
from .tracking import TrackResult, track

__all__ = [
    "jit",
    "compilation_cache",
    "reuse_host_buffers",
    "Kinematics",
    "kinematics",
    "mass_matrix",
    "bias_forces",
    "closure_terms",
    "ConstrainedDynamics",
    "DynamicsOptions",
    "ConstraintType",
    "JointType",
    "InverseDynamics",
    "aba",
    "crba",
    "external_wrenches",
    "forward_dynamics",
    "gravity_torques",
    "inverse_dynamics",
    "nonlinear_effects",
    "q_from_pinocchio",
    "q_to_pinocchio",
    "rnea",
    "spatial_inertia",
    "support_mask",
    "to_pinocchio",
    "v_from_pinocchio",
    "v_to_pinocchio",
    "STATUS_MESSAGES",
    "Status",
    "AssemblyError",
    "AssemblyResult",
    "assemble",
    "assemble_batch",
    "track",
    "TrackResult",
    "rank",
    "Graph",
    "Mechanism",
    "ModelError",
    "check_jacobian",
    "closure_bias",
    "closure_bias_autodiff",
    "closure_jacobian",
    "closure_jacobian_autodiff",
    "closure_residual",
    "closure_residual_and_jacobian",
    "closure_rows",
    "compile",
    "difference",
    "export_mjcf",
    "forward_kinematics",
    "frame_jacobian",
    "frame_pose",
    "integrate",
    "lie",
    "load",
    "mujoco_qvel_to_v",
    "normalize",
    "pose",
    "random_configuration",
    "read_graph",
    "v_to_mujoco_qvel",
    "ReductionError",
    "TangentMap",
    "acceleration_lift",
    "acceleration_lift_status",
    "independent_choice",
    "independent_names",
    "distribute_effort",
    "mobility",
    "reduced_effort",
    "select_independent",
    "port_effort",
    "port_jacobian",
    "port_tangent_map",
    "port_values",
    "tangent_map",
    "tangent_map_status",
    "task_jacobian",
    "tree_speed_lift",
    "shard",
    "SimState",
    "control_size",
    "StepInfo",
    "rollout",
    "rollout_batch",
    "step",
    "step_with_info",
]
