"""The compiled :class:`Mechanism`: static topology + differentiable array parameters.

Static topology lives in :class:`Topology` (numpy arrays and tuples, hashed by content once) so
the ``Mechanism`` can be passed straight through ``jax.jit`` / ``jax.vmap`` / ``jax.grad``; the
numbers a user may fit (placements, axes, inertias, cut frames, targets, limits) are JAX arrays.

Body indexing: moving bodies are ``0 .. nb-1`` in ``body_names`` order (a depth-first order of
the spanning tree that follows the file order); the world has index ``-1`` in parent arrays and
slot ``nb`` in internal "extended" arrays that append the world / identity.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .graph import JointType

#: Per-body generic joint columns: 6 for the SE(3) part (free / spherical), then th1, th2, d.
N_COLS = 9


@dataclass(frozen=True, eq=False)
class LoopGroup:
    """Closure elements of one constraint type, evaluated together (vmapped).

    Shapes: ``n`` loops, ``L`` padded path length, ``m`` padded dofs per loop, ``r`` rows.
    Path entries index the extended local-transform array (``nb`` = identity padding).
    """

    type: str
    names: tuple[str, ...]
    path_plus: np.ndarray  # (n, L) body indices from the loop root to body A (nb = pad)
    path_minus: np.ndarray  # (n, L)
    dof_v: np.ndarray  # (n, m) velocity index of each dof on either path (0 where padded)
    dof_pos: np.ndarray  # (n, m) position along its path (index into path arrays)
    dof_sign: np.ndarray  # (n, m) +1 on the minus path, -1 on the plus path, 0 pad
    dof_body: np.ndarray  # (n, m) body of the dof (nb for pad)
    dof_col: np.ndarray  # (n, m) generic joint column of the dof
    rows: np.ndarray  # (r,) which candidate rows this type keeps (see closure.py)
    row_offset: int  # first residual row of this group
    param_index: np.ndarray  # (n,) index into Mechanism.cut_pose_a / cut_pose_b / cut_length
    loop_id: np.ndarray  # (n,) global loop index (for subsets)


@dataclass(frozen=True, eq=False)
class Topology:
    """Static description of a compiled mechanism (hashable by content)."""

    name: str
    source: str | None
    body_names: tuple[str, ...]
    joint_names: tuple[str, ...]  # tree joints, in q / v order (one per moving body)
    joint_types: tuple[str, ...]
    joint_reversed: tuple[bool, ...]
    cut_names: tuple[str, ...]  # graph joints chosen as cuts
    loop_names: tuple[str, ...]  # all closure elements (cuts, then explicit constraints)
    loop_types: tuple[str, ...]
    loop_bodies: tuple[tuple[int, int], ...]  # (body A, body B), -1 = world
    parent: np.ndarray  # (nb,) parent body index, -1 = world
    depth: np.ndarray  # (nb,)
    levels: tuple[np.ndarray, ...]  # bodies grouped by depth
    q_index: np.ndarray  # (nb, 10): pos(3) quat(4) th1 th2 d into extended q (nq = 0, nq+1 = 1)
    v_index: np.ndarray  # (nb, N_COLS): velocity index of each generic column, -1 if unused
    v_body: np.ndarray  # (nv,) body of each velocity coordinate
    v_col: np.ndarray  # (nv,) generic column of each velocity coordinate
    q_start: np.ndarray  # (nb,) first q index of each joint
    v_start: np.ndarray  # (nb,)
    nq: int
    nv: int
    ancestor: np.ndarray  # (nb, nv) bool: velocity coordinate moves body
    groups: tuple[LoopGroup, ...]
    n_rows: int
    row_names: tuple[str, ...]
    coupling_names: tuple[str, ...]
    coupling_rows: int  # first residual row of the couplings (after the loop groups)
    frame_names: tuple[str, ...]
    frame_body: np.ndarray  # (nf,)
    actuated: tuple[str, ...]  # actuated joint names
    actuated_v: np.ndarray  # velocity indices of actuated coordinates
    port_names: tuple[str, ...]
    port_types: tuple[str, ...]
    port_v: np.ndarray  # (np,) velocity index of joint ports (-1 for distance ports)
    port_frames: np.ndarray  # (np, 2) frame indices of distance ports (-1 for joint ports)
    # integrate / difference groups (q and v indices)
    lin_q: np.ndarray
    lin_v: np.ndarray
    sph_q: np.ndarray  # (n, 4)
    sph_v: np.ndarray  # (n, 3)
    free_q: np.ndarray  # (n, 7)
    free_v: np.ndarray  # (n, 6)
    #: velocity indices some closure row depends on (loop paths and nonzero coupling
    #: coefficients), fixed at compile time so it is known even when the model is traced.
    touched_v: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    #: (np, nv) joint-port coefficients: port value = gear * sum_v coef[v] q(v) (one-hot for a
    #: single-joint port, several entries for a transmission); zero rows for distance ports.
    port_coef: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    _hash: str = field(default="", compare=False)

    def __post_init__(self):
        h = hashlib.sha1()
        for k, v in sorted(self.__dict__.items()):
            if k == "_hash":
                continue
            h.update(k.encode())
            h.update(repr(v if not isinstance(v, np.ndarray) else (v.shape, v.tobytes())).encode())
        object.__setattr__(self, "_hash", h.hexdigest())

    def __hash__(self) -> int:
        return hash(self._hash)

    def __eq__(self, other) -> bool:
        return isinstance(other, Topology) and self._hash == other._hash


class Mechanism(eqx.Module):
    """A compiled closed-chain mechanism. Build with :func:`jaxmech.compile` or
    :func:`jaxmech.load`. Every numerical function is ``f(mech, state...)``.

    Array leaves (all differentiable; shapes with nb moving bodies, nl loops, nf frames):
      ``X_parent`` (nb, 4, 4) joint frame in the parent body; ``X_child_inv`` (nb, 4, 4) inverse
      of the joint frame in the child; ``axis1``/``axis2``/``axis_t`` (nb, 3) unit axes;
      ``offset_th``/``offset_d`` (nb,); ``mass`` (nb,) kg; ``com`` (nb, 3) m; ``inertia``
      (nb, 3, 3) kg m^2 about the COM; ``frame_pose`` (nf, 4, 4); ``cut_pose_a``/``cut_pose_b``
      (nl, 4, 4); ``cut_length`` (nl,); ``coupling_q`` (nc, nq) and ``coupling_offset`` (nc,);
      ``q0`` (nq,); ``lower``/``upper`` (nq,); ``armature``/``damping`` (nv,); ``gravity`` (3,);
      ``port_gear`` (np,).
    """

    topo: Topology = eqx.field(static=True)
    X_parent: jnp.ndarray
    X_child_inv: jnp.ndarray
    axis1: jnp.ndarray
    axis2: jnp.ndarray
    axis_t: jnp.ndarray
    offset_th: jnp.ndarray
    offset_d: jnp.ndarray
    mass: jnp.ndarray
    com: jnp.ndarray
    inertia: jnp.ndarray
    frame_pose: jnp.ndarray
    cut_pose_a: jnp.ndarray
    cut_pose_b: jnp.ndarray
    cut_length: jnp.ndarray
    coupling_q: jnp.ndarray
    coupling_offset: jnp.ndarray
    q0: jnp.ndarray
    lower: jnp.ndarray
    upper: jnp.ndarray
    armature: jnp.ndarray
    damping: jnp.ndarray
    gravity: jnp.ndarray
    port_gear: jnp.ndarray
    frictionloss: jnp.ndarray | None = None  # (nv,) dry friction per velocity coordinate (N m or N)

    # ------------------------------------------------------------------ sizes and names
    @property
    def nq(self) -> int:
        return self.topo.nq

    @property
    def nv(self) -> int:
        return self.topo.nv

    @property
    def nb(self) -> int:
        return len(self.topo.body_names)

    @property
    def n_rows(self) -> int:
        """Number of raw closure residual rows ``s``."""
        return self.topo.n_rows

    @property
    def n_loops(self) -> int:
        return len(self.topo.loop_names)

    @property
    def name(self) -> str:
        return self.topo.name

    @property
    def body_names(self) -> tuple[str, ...]:
        return self.topo.body_names

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Tree joints in q / v order."""
        return self.topo.joint_names

    @property
    def loop_names(self) -> tuple[str, ...]:
        return self.topo.loop_names

    @property
    def frame_names(self) -> tuple[str, ...]:
        return self.topo.frame_names

    @property
    def actuated_joints(self) -> tuple[str, ...]:
        return self.topo.actuated

    def _joint(self, name: str) -> int:
        try:
            return self.topo.joint_names.index(name)
        except ValueError:
            cut = f" ('{name}' is a cut joint: it has no coordinates)" if name in self.topo.cut_names else ""
            raise KeyError(f"{self.name}: unknown tree joint '{name}'{cut}") from None

    def q_slice(self, name: str) -> slice:
        """Where joint ``name``'s coordinates sit in q."""
        i = self._joint(name)
        s = int(self.topo.q_start[i])
        return slice(s, s + JointType(self.topo.joint_types[i]).nq)

    def v_slice(self, name: str) -> slice:
        """Where joint ``name``'s velocity coordinates sit in v."""
        i = self._joint(name)
        s = int(self.topo.v_start[i])
        return slice(s, s + JointType(self.topo.joint_types[i]).nv)

    def v_indices(self, names) -> np.ndarray:
        """Velocity indices of a list of joint names (or 'joint:k' for one coordinate)."""
        out = []
        for n in names:
            if isinstance(n, (int, np.integer)):
                out.append(int(n))
                continue
            base, _, k = str(n).partition(":")
            sl = self.v_slice(base)
            idx = list(range(sl.start, sl.stop))
            out.extend(idx if not k else [idx[int(k)]])
        return np.asarray(out, dtype=int)

    def q_indices(self, names) -> np.ndarray:
        out = []
        for n in names:
            if isinstance(n, (int, np.integer)):
                out.append(int(n))
                continue
            base, _, k = str(n).partition(":")
            sl = self.q_slice(base)
            idx = list(range(sl.start, sl.stop))
            out.extend(idx if not k else [idx[int(k)]])
        return np.asarray(out, dtype=int)

    def __repr__(self) -> str:
        return (
            f"Mechanism('{self.name}', bodies={self.nb}, nq={self.nq}, nv={self.nv}, "
            f"loops={self.n_loops}, rows={self.n_rows})"
        )
