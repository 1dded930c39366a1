"""Eager calls of public functions run as one compiled program.

Called outside ``jit``, a JAX function runs primitive by primitive and XLA compiles every new
primitive/shape pair on its own: the first eager ``jm.closure_residual`` of the four-bar cost
137 small compilations (3.1 s), an eager ``jm.assemble`` 104 (5.3 s). :func:`entry` makes such a
call go through one cached ``jax.jit`` of the function with the model as an argument, so it costs
one compilation per topology, argument shapes and static options (0.2-1 s) and afterwards one
dispatch. An eager ``jax.vmap(jm.f, (None, 0))(mech, Q)`` (batched arrays, one model) takes the
same path, so it compiles one batched program instead of every primitive. Inside ``jit`` or
``grad``, for a batched model, or when a static option is not hashable, the function runs as
written, so results and gradients are the same either way.

The wrapper computes the model's static mobility first (:func:`jaxmech.independent.mobility`,
cached per model) when asked to, because inside the compiled call the model is traced and only
the value cached for its topology is visible.
"""

from __future__ import annotations

import functools
import inspect

import jax
import numpy as np

from ._jit import jit

_TRACER_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _traced(tree) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def _eager_vmap(tree) -> bool:
    """True when every traced leaf is a ``vmap`` tracer over concrete values (an eager
    ``jax.vmap(jm.f)``, no ``jit`` around it): the compiled path then batches as one program."""
    from jax._src.interpreters.batching import BatchTracer

    for x in jax.tree_util.tree_leaves(tree):
        while isinstance(x, BatchTracer):
            x = x.val
        if isinstance(x, jax.core.Tracer):
            return False
    return True


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def entry(static_argnames: tuple[str, ...] = (), prime_mobility: bool = False, eager_if=None, prepare=None):
    """Decorator: run eager calls of ``fn(mech, ...)`` through one cached ``jax.jit``.

    ``static_argnames``: the options that select code (strings, names, ints); lists given for
    them, and 1-D numpy arrays of indices or names, are passed as tuples (an unhashable option
    would run the body eagerly, one compilation per primitive). ``eager_if(bound_arguments) ->
    bool``: calls that must run as written (e.g. options whose meaning depends on concrete
    values). ``prepare(bound_arguments)``:
    fills in, from the concrete arguments, options the compiled call needs (it edits the dict in
    place), before the static options are read."""

    def deco(fn):
        sig = inspect.signature(fn)
        jitted = jit(fn, static_argnames=static_argnames)
        refused: set = set()  # static keys whose body needs concrete values

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if _traced((args, kwargs)) and not (_eager_vmap((args, kwargs)) and not _traced(args[:1])):
                return fn(*args, **kwargs)  # inside jit/grad, or a batched model: run as written
            bound = sig.bind(*args, **kwargs)
            if prepare is not None:
                prepare(bound.arguments)
            for name in static_argnames:
                opt = bound.arguments.get(name)
                if isinstance(opt, list):
                    bound.arguments[name] = tuple(opt)
                elif isinstance(opt, np.ndarray) and opt.ndim == 1 and opt.dtype.kind in "iuU":
                    bound.arguments[name] = tuple(opt.tolist())  # indices / names: hashable, compiled
            statics = tuple(bound.arguments.get(n) for n in static_argnames)
            if not all(_hashable(s) for s in statics) or (eager_if is not None and eager_if(bound.arguments)):
                return fn(*args, **kwargs)
            key = statics
            if key in refused:
                return fn(*args, **kwargs)
            if prime_mobility:
                from .independent import mobility

                mobility(bound.arguments["mech"])
            try:
                return jitted(*bound.args, **bound.kwargs)
            except _TRACER_ERRORS:
                refused.add(key)
                return fn(*args, **kwargs)

        wrapper.eager = fn  # the function as written (no compilation)
        wrapper.jitted = jitted  # the compiled path eager calls take
        return wrapper

    return deco
