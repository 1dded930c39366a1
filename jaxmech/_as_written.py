"""Forward mode of a function as written, for ``custom_jvp`` rules whose primal runs another path.

Several batched functions here have a faster primal than their plain code (a ``custom_vmap`` rule
that slices the batch or lays it out batch-last, a certificate that skips a factorization, ...) and
differentiate the plain code instead. :func:`jvp_rule` is that rule, with ``symbolic_zeros``: only
the perturbed inputs get tangent work (a model gradient of the Stewart's forward dynamics over 64
states pushed tangents through ``q`` and ``v`` too when the zeros were instantiated: 2.16 against
1.45 ms, ``benchmarks/PROFILE.md``, session 47).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.custom_derivatives import SymbolicZero


def jvp_rule(ref: Callable) -> Callable:
    """A rule for ``f.defjvp(rule, symbolic_zeros=True)``: ``jax.jvp(ref, ...)`` over the leaves of
    the arguments whose tangents are not symbolic zeros (the others enter ``ref`` as constants)."""

    def rule(primals, tangents):
        flat, tree = jax.tree.flatten(primals)
        dflat = tree.flatten_up_to(tangents)
        live = [not isinstance(t, SymbolicZero) for t in dflat]

        def g(*xs):
            it = iter(xs)
            return ref(*tree.unflatten([next(it) if on else x for x, on in zip(flat, live, strict=True)]))

        pick = lambda ys: [y for y, on in zip(ys, live, strict=True) if on]  # noqa: E731
        return jax.jvp(g, pick(flat), pick(dflat))

    return rule
