"""Spread a batch over devices and hosts with JAX's own runtime (``jax.sharding``, ``jax.distributed``).

A batch of states (any pytree whose array leaves share a leading batch axis: ``q`` (B, nq), a
:class:`jaxmech.SimState`, an RL ``EnvState``) is split along that axis over a one-axis device mesh
named ``"batch"`` with a :class:`jax.sharding.NamedSharding`. ``jax.jit`` of a vmapped jaxmech
function then runs each device's slice on that device and returns outputs sharded the same way:
nothing is gathered onto one device. The model (:class:`jaxmech.Mechanism`) is small and is
replicated on every device (:func:`replicate`, or let ``jit`` place it).

Several local devices (GPUs, or CPU devices forced with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``, set before JAX starts)::

    states = jm.shard(states)                      # over all local devices
    out = jax.jit(jax.vmap(f, in_axes=(None, 0)))(mech, states)   # out is sharded too

Several hosts: call :func:`initialize` (``jax.distributed.initialize``) in every process first;
then :func:`batch_mesh` spans the devices of all processes and :func:`shard` takes each
process's copy of the *global* batch and places only the rows that process's devices hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"


def initialize(coordinator: str, num_processes: int, process_id: int) -> None:
    """Join a multi-process JAX run (``jax.distributed.initialize``); call before any JAX
    computation. ``coordinator`` is ``HOST:PORT`` of process 0. On CPU the cross-process
    collectives are gloo (JAX's default CPU implementation)."""
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"process id {process_id} out of range for {num_processes} processes")
    if jax.distributed.is_initialized():
        return
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


def batch_mesh(devices: int | Sequence | None = None) -> Mesh:
    """A one-axis mesh named ``"batch"``: over all devices (of all processes) when ``devices``
    is None, over the first ``devices`` of them when it is an int, or over the given devices."""
    all_devs = jax.devices()
    if devices is None:
        devs = all_devs
    elif isinstance(devices, int):
        if not 1 <= devices <= len(all_devs):
            raise ValueError(f"devices must be between 1 and {len(all_devs)} (the device count), got {devices}")
        devs = all_devs[:devices]
    else:
        devs = list(devices)
    return Mesh(np.asarray(devs), (AXIS,))


def _put(x, sharding: NamedSharding):
    """``x`` placed with ``sharding``; in a multi-process run each process supplies its copy of
    the global value and only the slices its own devices hold are transferred."""
    if jax.process_count() == 1 or sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def shard(tree, mesh: Mesh | None = None):
    """Place a batch on the devices of ``mesh`` (default: :func:`batch_mesh` over all devices),
    split along the leading axis of every array leaf (``NamedSharding(mesh, P("batch"))``).

    Args:
      tree: a pytree of arrays with a common leading batch axis B (e.g. ``q`` (B, nq), a batched
        ``SimState`` or RL ``EnvState``); 0-d arrays are replicated, other leaves are kept as is.
        B must be a multiple of the mesh size (pad the batch otherwise).
      mesh: a mesh with a ``"batch"`` axis.

    Returns the same pytree with sharded ``jax.Array`` leaves. In a multi-process run every process
    passes the same global batch and keeps only its own rows on its devices.
    """
    mesh = batch_mesh() if mesh is None else mesh
    if AXIS not in mesh.axis_names:
        raise ValueError(f"mesh has axes {mesh.axis_names}; jm.shard needs a {AXIS!r} axis")
    n = mesh.shape[AXIS]
    split, whole = NamedSharding(mesh, PartitionSpec(AXIS)), NamedSharding(mesh, PartitionSpec())

    def place(x):
        if not _is_array(x):
            return x
        if x.ndim == 0:
            return _put(x, whole)
        if x.shape[0] % n:
            raise ValueError(
                f"batch of {x.shape[0]} does not split evenly over {n} devices (leaf of shape {x.shape}): "
                f"pad it to a multiple of {n}"
            )
        return _put(x, split)

    return jax.tree_util.tree_map(place, tree)


def replicate(tree, mesh: Mesh | None = None):
    """Every array leaf of ``tree`` (e.g. a Mechanism) copied to all devices of ``mesh``."""
    mesh = batch_mesh() if mesh is None else mesh
    whole = NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map(lambda x: _put(x, whole) if _is_array(x) else x, tree)


def padded_size(batch: int, mesh: Mesh) -> int:
    """The smallest multiple of the mesh size that holds ``batch`` states."""
    n = mesh.shape[AXIS]
    return max(n, math.ceil(batch / n) * n)


def gather(tree):
    """A sharded pytree copied to host numpy arrays on every process (for checks and saving;
    in a multi-process run this is a collective: every process must call it)."""
    if jax.process_count() == 1:
        return jax.tree_util.tree_map(lambda x: np.asarray(x) if _is_array(x) else x, tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)
