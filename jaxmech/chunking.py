"""Large CPU batches in cache-sized slices: ``jax.vmap`` of a public function runs in chunks.

Under ``jax.vmap`` a function's every intermediate holds the whole batch. At 4,096 Stewart states
the forward dynamics' intermediates (spatial inertias, mass matrices, KKT blocks: tens of kB per
state) are hundreds of MB, so every stage streams from memory instead of the caches, and the
per-state cost grows with the batch (``benchmarks/PROFILE.md``, session 47; one core, float64,
us per state):

==========================  =============  ==============  ==================================
Stewart, batch 4,096        one ``vmap``   chunks of 64    chunks of 32 / 128 / 256 / 1,024
==========================  =============  ==============  ==================================
``forward_dynamics``        43.7           17.7            17.1 / 18.0 / 20.7 / 31.4
``rnea``                    18.7           6.1             6.3 / 6.2 / 6.7 / 8.1
``forward_kinematics``      1.44           0.71            0.77 / 0.67 / 0.83 / 1.26
==========================  =============  ==============  ==================================

The four-bar (3 speeds) gains too (forward dynamics 1.12 -> 0.69 us); at batch 1,024 the Stewart's
forward dynamics goes 27.3 -> 17.8 us and a 10-step rollout 43.8 -> 34.4 us per state-step; at
128 states and below there is no gain. So :func:`chunked` gives a public function a
``custom_vmap`` rule: on the CPU, a ``vmap`` axis of :data:`MIN_BATCH` states or more runs as a
``lax.map`` over slices of about :data:`CHUNK` states, each slice vmapped (so the batch-last
kernels and the chunked LAPACK calls inside see 64 lanes). Results are those of one ``vmap``: the
same per-state operations, sliced. Derivatives are those of the function as written (a
``custom_jvp``, because ``custom_vmap`` has no reverse mode), so ``grad`` and ``jvp`` do not change.

Not chunked: other platforms (a GPU wants the whole batch in one launch), several local devices (a
sharded batch axis stays as ``jax.sharding`` placed it), and batches below :data:`MIN_BATCH`.
Arguments that are not arrays (strings, ints, ``None``) are static: they select the compiled code.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from ._as_written import jvp_rule

CHUNK = 64
"""States per slice (a divisor of the batch between ``CHUNK / 2`` and ``2 * CHUNK`` when there is
one, else ``CHUNK`` with the last slice padded by repeating the last state)."""

WIDE = 256
"""Models wider than this (bodies + speeds + closure rows) take slices of ``CHUNK // 2``: 48
four-bars side by side (width 528), forward dynamics at batch 1,024, one core: 37.1 us per
state in slices of 32, 43.4 in slices of 64, 39.4 in slices of 16."""

MIN_BATCH = 512
"""Smallest ``vmap`` axis that is chunked (at 256 states forward dynamics gains 13 % but the closure
rows lose 30 %; at 128 nothing gains)."""


def slice_size(axis_size: int, width: int = 0) -> int | None:
    """States per slice for a ``vmap`` axis of ``axis_size`` traced now, for a model of ``width``
    (bodies + speeds + rows), or None for one ``vmap``."""
    if axis_size < MIN_BATCH or jax.default_backend() != "cpu" or jax.local_device_count() > 1:
        return None
    c = CHUNK // 2 if width > WIDE else CHUNK
    if axis_size % c == 0:
        return c
    divisors = [d for d in range(c // 2, 2 * c + 1) if axis_size % d == 0]
    return min(divisors, key=lambda d: abs(d - c)) if divisors else c


def map_in_slices(f: Callable, size: int, args: tuple, batched: tuple, width: int = 0):
    """``vmap(f)`` over the leading axis (``size``) of the leaves of ``args`` flagged in
    ``batched`` (a tree of bools like ``args``), in slices of :func:`slice_size` states."""
    c = slice_size(size, width) or size
    leaves, tree = jax.tree.flatten(args)
    flags = tree.flatten_up_to(batched)
    n = -(-size // c)
    pad = n * c - size

    def split(x):
        if pad:
            x = jnp.concatenate([x, jnp.repeat(x[-1:], pad, 0)])
        return x.reshape((n, c) + x.shape[1:])

    axes = tree.unflatten([0 if b else None for b in flags])

    def one_slice(xs):
        it = iter(xs)
        return jax.vmap(f, in_axes=axes)(
            *tree.unflatten([next(it) if b else x for x, b in zip(leaves, flags, strict=True)])
        )

    out = jax.lax.map(one_slice, [split(x) for x, b in zip(leaves, flags, strict=True) if b])
    return jax.tree.map(lambda y: y.reshape((n * c,) + y.shape[2:])[:size], out)


def _is_dynamic(x) -> bool:
    """An argument that may be traced: a non-empty pytree whose leaves are all JAX arrays (host
    ``numpy`` arrays, strings and numbers are options: they stay Python values)."""
    leaves = jax.tree.leaves(x)
    return bool(leaves) and all(isinstance(v, jax.Array) for v in leaves)


def _custom(fn: Callable, names: tuple, kw: dict) -> Callable:
    """``fn`` of the dynamic arguments ``names`` (the options ``kw`` bound), with the chunking rule.
    Built at each traced call: the enclosing ``jit`` caches the program, not this function."""

    def ref(*xs):
        return fn(**dict(zip(names, xs, strict=True)), **kw)

    @custom_vmap
    def one(*xs):
        return ref(*xs)

    @one.def_vmap
    def _rule(axis_size, in_batched, *xs):
        mech = dict(zip(names, xs, strict=True)).get("mech", kw.get("mech"))
        width = mech.nb + mech.nv + mech.n_rows if hasattr(mech, "n_rows") else 0
        if slice_size(axis_size, width) is None:
            axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
            out = jax.vmap(ref, in_axes=axes, axis_size=axis_size)(*xs)
        else:
            out = map_in_slices(ref, axis_size, xs, tuple(in_batched), width)
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def f(*xs):
        return one(*xs)

    f.defjvp(jvp_rule(ref), symbolic_zeros=True)  # the function as written, perturbed leaves only
    return f


def chunked(fn: Callable) -> Callable:
    """Decorator: ``fn(mech, ...)`` runs in slices under a large CPU ``vmap`` (module docstring).
    Outside any trace (concrete arguments) the function runs as written."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
            return fn(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        names = tuple(k for k, v in bound.arguments.items() if _is_dynamic(v))
        options = {k: v for k, v in bound.arguments.items() if k not in names}
        return _custom(fn, names, options)(*(bound.arguments[k] for k in names))

    return wrapper
