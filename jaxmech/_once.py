"""Work that a vmapped batch runs only where some state needs it.

Under ``jax.vmap`` a ``lax.cond`` on a batched predicate becomes a ``select`` that runs both
branches for every state. A ``lax.while_loop`` of at most one pass runs its body only while some
state's predicate holds, and keeps the others' carry: costly, rarely needed work (a pivoted QR
where a cheap certificate failed, an inverse where a verdict reads it, a homotopy fallback) then
costs the batch nothing at calls where no state needs it.

The loop must not let XLA hoist the work out of it: the body's operands pass through a ``where``
on the carried pass counter, which the pass changes, so they are not loop-invariant.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def where_needed(need, fn: Callable, default, *operands):
    """``fn(*operands)`` where ``need`` (a bool scalar, batched like the operands under ``vmap``),
    else ``default`` (a pytree of the same structure, shapes and dtypes as ``fn``'s output).

    Not reverse-differentiable (a ``while_loop``): use it for decisions and for values that pass
    through ``stop_gradient``."""

    def body(c):
        k, _, ops = c
        ops = jax.tree.map(lambda x: jnp.where(k == 0, x, jnp.zeros_like(x)), ops)
        return k + 1, fn(*ops), c[2]

    init = (jnp.zeros((), jnp.int32), default, operands)
    return jax.lax.while_loop(lambda c: need & (c[0] == 0), body, init)[1]
