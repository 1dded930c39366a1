"""One set of status codes for every jaxmech result.

Assembly and tracking (:class:`~jaxmech.assembly.AssemblyResult`), the velocity reduction
(:class:`~jaxmech.reduction.TangentMap`) and the constrained dynamics
(:class:`~jaxmech.constrained.ConstrainedDynamics`, :class:`~jaxmech.constrained.InverseDynamics`)
all report a ``status`` int32 from this one numbering, so a code means the same thing wherever it
appears (``SINGULAR`` is 2 everywhere) and results can be pooled (``jnp.max`` over statuses of one
batch, counts per code). ``0`` is success everywhere. Each module keeps its own message table
(``STATUS_MESSAGES``) that explains a code in that module's terms; :data:`MESSAGES` holds the
generic wording.
"""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """Status codes (int32 in results; compare with ``==``, they are plain ints)."""

    OK = 0  #: success (assembly: converged)
    MAX_ITERATIONS = 1  #: an iteration limit was reached
    SINGULAR = 2  #: a block that must be invertible is rank deficient or ill-conditioned
    OUT_OF_BOUNDS = 3  #: blocked by a joint limit
    STEP_TOO_SMALL = 4  #: continuation could not advance
    NONFINITE_INPUT = 5  #: NaN / inf in the input
    OVERDETERMINED = 6  #: more independent constraints than unknowns
    UNDERDETERMINED = 7  #: fewer independent constraints than unknowns
    INCONSISTENT = 8  #: the result violates a constraint it should satisfy (C E != 0, C a + gamma != 0)
    NONFINITE = 9  #: NaN / inf in the result


MESSAGES = {
    Status.OK: "ok",
    Status.MAX_ITERATIONS: "maximum number of iterations reached",
    Status.SINGULAR: "singular: a block that must be invertible is rank deficient or ill-conditioned",
    Status.OUT_OF_BOUNDS: "out of bounds: blocked by a joint limit",
    Status.STEP_TOO_SMALL: "step too small: continuation could not advance",
    Status.NONFINITE_INPUT: "non-finite input",
    Status.OVERDETERMINED: "over-determined",
    Status.UNDERDETERMINED: "under-determined",
    Status.INCONSISTENT: "inconsistent: the result violates a constraint it should satisfy",
    Status.NONFINITE: "non-finite result",
}
"""Generic wording per code; the modules' ``STATUS_MESSAGES`` say it in their own terms."""


def messages(specific: dict) -> dict[int, str]:
    """:data:`MESSAGES` with a module's own wording for some codes (a full table keyed by int)."""
    return {int(k): specific.get(k, v) for k, v in MESSAGES.items()}
