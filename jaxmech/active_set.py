"""Active / passive / held split of the velocity coordinates for assembly and tracking.

:func:`partition` resolves an ``active`` spec (None, joint names, ``'joint:k'``, or velocity
indices) into a static :class:`Partition`: the *active* coordinates are held at their given values,
the *passive* ones (every other coordinate some closure row touches) are solved for, and the
*held* ones (in no closure row) are kept as given. :func:`default_active` picks the actuated set,
or the best-conditioned valid set when actuation is redundant or singular at the model's ``q0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mechanism import Mechanism


@dataclass(frozen=True)
class Partition:
    """Static split of the velocity coordinates: ``active`` (held, prescribed), ``passive``
    (solved), ``held`` (in no closure row: kept as given). numpy index arrays into v; ``p_lin_q``
    / ``p_lin_v``: q / v indices of passive 1-dof coordinates (for bounds)."""

    active: tuple
    passive: tuple
    held: tuple
    p_lin_q: tuple
    p_lin_v: tuple
    a_lin_q: tuple


def involved_coordinates(mech: Mechanism) -> np.ndarray:
    """Velocity indices that appear in some closure row (structurally nonzero columns of C),
    recorded statically by the compiler (``topo.touched_v``), so it holds for traced models too."""
    return np.asarray(mech.topo.touched_v, dtype=int)


def default_active(mech: Mechanism) -> np.ndarray:
    """Default active (held) velocity coordinates: the actuated ones when they are a valid
    independent set at the model's projected ``q0``; otherwise (redundant actuation, or a
    singular actuated set) the valid, best-conditioned set of
    :func:`jaxmech.independent.reference_independent` (actuated first), restricted to
    coordinates a closure row touches or that are actuated. A traced model keeps the actuated set."""
    act = np.asarray(mech.topo.actuated_v, dtype=int)
    if not mech.n_rows:
        return act
    from .independent import reference_independent

    ind = reference_independent(mech)
    touched = set(np.asarray(mech.topo.touched_v, int).tolist())
    if ind is None or set(act.tolist()) & touched <= set(ind.tolist()):
        return act
    keep = touched | set(act.tolist())
    return np.asarray([i for i in ind.tolist() if i in keep], dtype=int)


def partition(mech: Mechanism, active=None) -> Partition:
    """Resolve an ``active`` spec (None: :func:`default_active`; joint names, ``'joint:k'`` for one
    coordinate, or integer v indices) into a static :class:`Partition`."""
    if active is None:
        a = default_active(mech)
    else:
        spec = [active] if isinstance(active, (str, int, np.integer)) else list(active)
        try:
            a = mech.v_indices(spec)
        except (KeyError, IndexError) as e:
            raise ValueError(f"{mech.name}: bad active coordinate in {spec!r}: {e}") from None
    a = np.asarray(a, dtype=int).reshape(-1)
    if a.size and (a.min() < 0 or a.max() >= mech.nv):
        raise ValueError(f"{mech.name}: active velocity index out of range 0..{mech.nv - 1}: {a.tolist()}")
    if len(set(a.tolist())) != a.size:
        raise ValueError(f"{mech.name}: active coordinates listed twice: {a.tolist()}")
    inv = involved_coordinates(mech)
    passive = np.array([i for i in inv if i not in set(a.tolist())], dtype=int)
    held = np.array([i for i in range(mech.nv) if i not in set(a.tolist()) and i not in set(passive.tolist())], int)
    t = mech.topo
    v2q = {int(v): int(q) for v, q in zip(t.lin_v, t.lin_q, strict=True)}
    p_lin_v = [int(i) for i in passive if int(i) in v2q]
    return Partition(
        tuple(a.tolist()),
        tuple(passive.tolist()),
        tuple(held.tolist()),
        tuple(v2q[i] for i in p_lin_v),
        tuple(p_lin_v),
        tuple(v2q[int(i)] for i in a if int(i) in v2q),
    )
