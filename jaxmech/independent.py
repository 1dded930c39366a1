"""Valid, best-conditioned independent coordinates and redundant actuation (issue 10, part 3).

A set ``I`` of ``d`` velocity coordinates is a valid independent set at ``q`` when the remaining
(dependent) columns ``C[:, D]`` of the closure Jacobian (s, nv) have full column rank
``r = nv - d`` (``d`` the mobility): then ``C_D v_D = -C_I u`` fixes ``v_D`` and ``v = E u`` with
``C E = 0``. The actuated coordinates are not always such a set: a redundantly actuated machine
(the excavator: 8 actuators, mobility 7) has more, and at a singular state a square actuated set
stops parametrizing the motion.

:func:`select_independent` is the one selection (kept in one function so a batched factorization
can replace it): a column-pivoted Gram-Schmidt over the columns of ``C`` that picks the ``r``
*dependent* columns, the largest remaining column first within a preference tier: first the
passive coordinates, then the actuated ones, then coordinates that no closure row touches. By the
exchange property of linear independence this keeps as many actuated coordinates independent as
any valid set can, and the pivoting makes the dependent block well conditioned (the same rule as
LAPACK's ``geqp3``, restricted tier by tier). When the actuated-first set's closure error
``max |C E|`` at the model's reference pose exceeds :data:`CE_TOL` and plain pivoting does better
(a lift can only be as exact as the rows are consistent: the authors' excavator is planar to
~5e-13, and its six-cylinder set's lift is 4.7x larger than the best-conditioned one's), the
model's default preference becomes uniform; :func:`independent_choice` reports which rule holds.
The selection is plain ``jnp`` with a fixed trip count (``r`` steps of ``O(s nv)``), so it
vectorizes under ``jax.vmap`` without per-state LAPACK.

The mobility ``d`` has to be static (it fixes shapes). :func:`mobility` computes it once per model
from the rank of ``C`` at ``mech.q0`` projected onto the closure manifold (off the manifold the
rank of a planar loop's redundant rows rises), and caches it by topology and parameters. A traced
model (a ``jit`` argument) reuses the value of the last concrete model with the same topology:
call :func:`mobility` once outside ``jit``, or pass ``d=``.

Redundant actuation: actuator efforts ``f`` (na,) map to generalized forces ``tau = B f`` with
``B = P^T`` (``P`` the port Jacobian, :func:`jaxmech.port_jacobian`), which preserves virtual work
``f . pdot = tau . v``; on a tangent map ``v = E u`` the independent-speed forces are
``tau_u = E^T B f`` (:func:`reduced_effort`). The inverse, efforts that produce given ``tau_u``,
is not unique for ``na > d``: :func:`distribute_effort` returns the least-norm one, or the one of
least weighted norm ``f^T W^-1 f``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import lapack
from ._entry import entry
from ._jit import jit
from .mechanism import Mechanism

#: Preference tiers of :func:`coordinate_tiers` (higher = chosen as dependent first).
PASSIVE, PORTED, ACTUATED, FREE = 2.0, 1.5, 1.0, 0.0

_MOBILITY_CACHE: dict = {}
_TOPOLOGY_CACHE: dict = {}


def coordinate_names(mech: Mechanism) -> tuple[str, ...]:
    """Name of every velocity coordinate (nv,): the joint name, or ``'joint:k'`` for coordinate
    ``k`` of a multi-dof joint (the spelling :meth:`Mechanism.v_indices` accepts)."""
    t = mech.topo
    names = [""] * t.nv
    for name in t.joint_names:
        sl = mech.v_slice(name)
        n = sl.stop - sl.start
        for k in range(n):
            names[sl.start + k] = name if n == 1 else f"{name}:{k}"
    return tuple(names)


def coordinate_tiers(mech: Mechanism) -> np.ndarray:
    """Static preference tier of every velocity coordinate (nv,) float: ``PASSIVE`` (in some
    closure row, not actuated), ``PORTED`` (the joint of a joint port, not flagged actuated),
    ``ACTUATED`` (flagged actuated), or ``FREE`` (no closure row touches it)."""
    t = mech.topo
    tier = np.full(t.nv, FREE, dtype=float)
    tier[np.asarray(t.touched_v, dtype=int)] = PASSIVE
    pv = np.asarray(t.port_v, dtype=int).ravel()
    pv = pv[pv >= 0]
    tier[pv] = np.where(tier[pv] == PASSIVE, PORTED, FREE)
    act = np.asarray(t.actuated_v, dtype=int)
    tier[act] = np.where(tier[act] != FREE, ACTUATED, FREE)
    return tier


def select_independent(C: jnp.ndarray, d: int, tiers, rtol: float = 1e-9, ptol: float = 1e-6):
    """Choose ``d`` independent coordinates of a closure Jacobian ``C`` (s, nv).

    Column-pivoted Gram-Schmidt picks the ``nv - d`` dependent columns: at each step the column of
    largest remaining norm among the not yet chosen columns of the highest ``tiers`` value
    (static (nv,) ints; :func:`coordinate_tiers`: passive before actuated before free) whose
    remaining norm exceeds ``ptol`` times the largest column norm (so a preferred column that is
    nearly dependent, e.g. an actuated coordinate near a dead centre, does not force an
    ill-conditioned block); if none is left above that cutoff, the largest remaining column
    overall. Columns below ``rtol`` count as dependent. ``d`` static.

    Returns ``(I, D, rc)``: ``I`` (d,) and ``D`` (nv - d,) int32 sorted velocity indices, and
    ``rc`` = (smallest pivot) / (largest column norm), a condition estimate of ``C[:, D]`` (0 when
    the chosen columns do not have full rank, i.e. no valid set with this ``d``). Fixed shapes,
    no LAPACK; runs under ``jit`` / ``vmap``."""
    s, nv = C.shape
    d = int(d)
    r = nv - d
    if r < 0:
        raise ValueError(f"select_independent: d={d} exceeds the {nv} coordinates")
    tiers = jnp.asarray(tiers, dtype=C.dtype)  # numpy (static) or traced
    dt = C.dtype
    if r == 0 or s == 0:
        idx = jnp.arange(nv, dtype=jnp.int32)
        return idx[r:], idx[:r], jnp.asarray(1.0 if r == 0 else 0.0, dt)
    n2 = jnp.sum(C * C, 0)
    scale = jnp.maximum(jnp.max(n2), jnp.finfo(dt).tiny)
    cut = (rtol * rtol) * scale
    pcut = (ptol * ptol) * scale

    def step(carry, _):
        A, chosen, rc = carry
        m2 = jnp.sum(A * A, 0)
        rel = m2 / scale  # in [0, 1]
        key = jnp.where(m2 > pcut, 2.0 * tiers + rel, rel - 10.0)
        j = jnp.argmax(jnp.where(chosen, -jnp.inf, key))
        nj = jnp.sqrt(m2[j])
        qv = A[:, j] / jnp.where(nj > 0, nj, 1.0)
        A = A - qv[:, None] * (qv @ A)[None, :]
        A = A - qv[:, None] * (qv @ A)[None, :]  # second pass: keeps the remaining columns orthogonal
        return (A, chosen.at[j].set(True), jnp.minimum(rc, nj / jnp.sqrt(scale))), None

    (_, chosen, rc), _ = jax.lax.scan(step, (C, jnp.zeros(nv, bool), jnp.ones((), dt)), None, length=r)
    rc = jnp.where(rc * rc > cut / scale, rc, 0.0)
    I = jnp.nonzero(~chosen, size=d, fill_value=0)[0].astype(jnp.int32)
    D = jnp.nonzero(chosen, size=r, fill_value=0)[0].astype(jnp.int32)
    return I, D, rc


def _is_concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def _closed_reference(mech: Mechanism, q0: np.ndarray, rtol: float):
    """``(rank, C)`` of the closure Jacobian after 10 minimum-norm Gauss-Newton steps from ``q0``
    (off the closure manifold the rank of redundant rows can be larger): the steps of
    :func:`jaxmech.simulate.project_position`, run on the host in numpy around two small compiled
    programs (residual + Jacobian, and the configuration update). A one-time cost per model; one
    traced program with the loop and an SVD inside compiled 2-3x longer (1-3 s per model)."""
    from .closure import closure_residual_and_jacobian
    from .kinpass import integrate

    rj = _compiled("residual_jacobian", jit(closure_residual_and_jacobian), (mech, q0), {}, {})
    step = _compiled("integrate", jit(integrate), (mech, q0, q0[: mech.nv] * 0), {}, {})
    q = np.asarray(q0)
    for _ in range(10):
        r, C = (np.asarray(x) for x in rj(mech, q))
        G = C @ C.T
        G[np.diag_indices_from(G)] += 1e3 * np.finfo(G.dtype).eps * max(np.abs(np.diag(G)).max(initial=0.0), 1.0)
        q = np.asarray(step(mech, q, -C.T @ np.linalg.solve(G, r)))
    C = np.asarray(rj(mech, q)[1])
    sv = np.linalg.svd(C, compute_uv=False) if C.size else np.zeros(0)
    rank = int(np.sum((sv > rtol * sv[0]) & (sv > np.finfo(C.dtype).tiny))) if sv.size else 0
    return rank, C


_select_compiled_jit = jit(select_independent, static_argnames=("d", "rtol", "ptol"))


_EXECUTABLES: dict = {}  # compiled reference programs per (what, structure, shapes, statics)


def _compiled(what: str, fn, args: tuple, kwargs: dict, statics: dict):
    """``fn.lower(*args, **statics).compile()``, cached per argument structure, shapes and
    statics: an AOT executable runs concretely even while an outer function is being traced, and
    ``lower().compile()`` alone would compile again for every model (1-2 s each)."""
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    shapes = tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves)
    key = (what, tree, shapes, tuple(sorted(statics.items())))
    exe = _EXECUTABLES.get(key)
    if exe is None:
        if len(_EXECUTABLES) > 64:
            _EXECUTABLES.clear()
        exe = _EXECUTABLES[key] = fn.lower(*args, **kwargs, **statics).compile()
    return exe


def _select_compiled(C, d: int, tiers, rtol: float):
    """:func:`select_independent` on concrete inputs as one compiled call (also inside a trace)."""
    C, tiers = np.asarray(C), np.asarray(tiers, dtype=float)  # numpy: no tracer inside a trace
    exe = _compiled("select", _select_compiled_jit, (C,), {"tiers": tiers}, {"d": int(d), "rtol": float(rtol)})
    return exe(C, tiers=tiers)


#: Closure error ``max |C E|`` (m, rad: the units of the closure rows, the same absolute scale as
#: assembly's residual tolerance) above which the actuated-first default set is given up for the
#: best-conditioned one at the model's reference pose (:func:`independent_choice`).
CE_TOL = 1e-12


class IndependentChoice(NamedTuple):
    """How the default independent set of a model is chosen (:func:`independent_choice`).

    ``actuated_first``: True when the default prefers actuated coordinates (the rule), False when
    that set's closure error at the projected ``q0`` exceeded :data:`CE_TOL` and a uniform
    preference (plain column pivoting: the best-conditioned dependent block) met it better.
    ``names``: the default set there; ``ce_actuated_first`` / ``ce_chosen``: ``max |C E|`` of the
    actuated-first set and of the chosen one at that pose (equal when ``actuated_first``)."""

    actuated_first: bool
    names: tuple[str, ...]
    ce_actuated_first: float
    ce_chosen: float


class _Ref(NamedTuple):
    d: int
    I_actuated: np.ndarray  # actuated-first set at the projected q0 (assembly's default active set)
    tiers: np.ndarray  # preference tiers the default tangent map uses
    choice: IndependentChoice


def _closure_error(C: np.ndarray, I: np.ndarray) -> float:
    """``max |C E|`` of the lift ``E`` with identity on ``I``: least squares on the dependent
    columns (for a fixed ``I`` no lift does better; the square solve on selected rows matches it)."""
    D = np.setdiff1d(np.arange(C.shape[1]), I)
    E = np.zeros((C.shape[1], I.size))
    E[I, np.arange(I.size)] = 1.0
    if D.size:
        E[D] = -np.linalg.lstsq(C[:, D], C[:, I], rcond=None)[0]
    return float(np.abs(C @ E).max()) if C.size and E.size else 0.0


def _default_set(mech: Mechanism, C: np.ndarray, d: int, rtol: float) -> _Ref:
    """Actuated-first selection at the reference pose, and the fallback to uniform tiers when its
    closure error exceeds :data:`CE_TOL` (e.g. the authors' excavator: planar only to ~5e-13, where
    the six-cylinder set's lift is ~4.7x larger than the best-conditioned one's)."""
    tiers = coordinate_tiers(mech)
    I = np.asarray(_select_compiled(C, d, tiers, rtol)[0], dtype=int)
    ce = _closure_error(C, I)
    chosen_tiers, I_ch, ce_ch = tiers, I, ce
    if ce > CE_TOL:
        flat = np.where(tiers == FREE, FREE, PASSIVE)  # free columns are zero: never dependent anyway
        I2 = np.asarray(_select_compiled(C, d, flat, rtol)[0], dtype=int)
        ce2 = _closure_error(C, I2)
        if ce2 < ce:
            chosen_tiers, I_ch, ce_ch = flat, I2, ce2
    names = coordinate_names(mech)
    choice = IndependentChoice(chosen_tiers is tiers, tuple(names[i] for i in I_ch), ce, ce_ch)
    return _Ref(d, I, chosen_tiers, choice)


def _reference(mech: Mechanism, rtol: float = 1e-9) -> _Ref | None:
    """Cached :class:`_Ref` of a model at its projected ``q0``: the mobility, the actuated-first
    independent set there and the default preference (numpy). A traced model (e.g. passed as a
    ``jit`` argument) gets the values last computed for a concrete model of the same topology,
    or None."""
    leaves = [x for x in jax.tree_util.tree_leaves(mech) if hasattr(x, "shape")]
    if not _is_concrete(leaves):
        return _TOPOLOGY_CACHE.get((mech.topo._hash, float(rtol)))
    key = (mech.topo._hash, float(rtol), tuple(np.asarray(x).tobytes() for x in leaves))
    if key not in _MOBILITY_CACHE:
        # Possibly called while an outer function is being traced: run the one compiled
        # executable on the concrete model (ensure_compile_time_eval would instead evaluate the
        # body primitive by primitive, ~150 tiny compilations and ~5 s per model).
        q0 = np.asarray(mech.q0)
        r, C = _closed_reference(mech, q0, float(rtol))
        ref = _default_set(mech, np.asarray(C), int(mech.nv - r), rtol)
        if len(_MOBILITY_CACHE) > 64:
            _MOBILITY_CACHE.clear()
            _TOPOLOGY_CACHE.clear()
        _MOBILITY_CACHE[key] = ref
    _TOPOLOGY_CACHE[(mech.topo._hash, float(rtol))] = _MOBILITY_CACHE[key]
    return _MOBILITY_CACHE[key]


def independent_choice(mech: Mechanism) -> IndependentChoice | None:
    """How the default tangent map of this model chooses its independent speeds: actuated first,
    unless that set's ``max |C E|`` at the projected ``q0`` exceeds :data:`CE_TOL` and the
    best-conditioned set does better (then every touched coordinate is preferred alike). The set
    is still re-chosen at every state by pivoting; this fixes only the preference. None for a
    traced model with no concrete model of its topology seen yet, or an open chain."""
    if not mech.n_rows:
        return None
    ref = _reference(mech)
    return None if ref is None else ref.choice


def default_tiers(mech: Mechanism) -> np.ndarray:
    """Static preference tiers (nv,) of the default independent set: :func:`coordinate_tiers`,
    or the uniform fallback of :func:`independent_choice`."""
    ref = _reference(mech) if mech.n_rows else None
    return coordinate_tiers(mech) if ref is None else ref.tiers


def mobility(mech: Mechanism, rtol: float = 1e-9) -> int | None:
    """Static mobility ``d = nv - rank C`` of the model: the rank at ``mech.q0`` projected onto
    the closure manifold (minimum-norm Gauss-Newton), cached per topology and parameters. A traced
    model (a ``jit`` argument) gets the value of the last concrete model with the same topology:
    call ``jm.mobility(mech)`` once outside ``jit``; None if there was none (then pass
    ``d=``). Computed at the model's reference pose: a ``q0`` at a singular configuration gives a
    larger ``d`` (pass ``d=`` then)."""
    if not mech.n_rows:
        return mech.nv
    ref = _reference(mech, rtol)
    return None if ref is None else ref.d


def reference_independent(mech: Mechanism) -> np.ndarray | None:
    """Static default independent set (sorted velocity indices) of a concrete model at its
    projected ``q0`` (:func:`select_independent`, actuated first); None for a traced model."""
    if not mech.n_rows:
        return np.arange(mech.nv)
    ref = _reference(mech)
    return None if ref is None else ref.I_actuated


def default_d(mech: Mechanism) -> int:
    """Static ``d`` for the default independent set: :func:`mobility` when the model is concrete,
    else the number of actuated plus untouched coordinates (the pre-selection default; a wrong
    count is then reported by the status)."""
    d = mobility(mech)
    if d is not None:
        return d
    return int(np.sum(np.isin(coordinate_tiers(mech), (ACTUATED, FREE))))


def choose_independent(mech: Mechanism, C: jnp.ndarray, d: int | None = None):
    """Default independent set at a state: ``(I, D, rc, d)`` from :func:`select_independent`
    on ``C`` (s, nv) with the preference of :func:`default_tiers` (actuated first unless
    :func:`independent_choice` says otherwise), ``d`` = :func:`default_d` if None."""
    d = default_d(mech) if d is None else int(d)
    I, D, rc = select_independent(jax.lax.stop_gradient(C), d, default_tiers(mech))
    return I, D, rc, d


# ----------------------------------------------------------------------------- redundant actuation


def actuation_matrix(mech: Mechanism, q: jnp.ndarray) -> jnp.ndarray:
    """``B = P^T`` (nv, na): generalized force of actuator efforts ``tau = B f`` (ports when the
    model has ports, else the actuated joint coordinates)."""
    from .reduction import port_jacobian

    if len(mech.topo.port_names):
        return port_jacobian(mech, q).T
    act = np.asarray(mech.topo.actuated_v, dtype=int)
    return jnp.eye(mech.nv, dtype=q.dtype)[:, act]


def reduced_effort(mech: Mechanism, q: jnp.ndarray, E: jnp.ndarray, f: jnp.ndarray) -> jnp.ndarray:
    """Generalized forces on the independent speeds ``tau_u = E^T B f`` (d,) of actuator efforts
    ``f`` (na,); virtual work ``f . (P E u) = tau_u . u`` for every ``u``."""
    return E.T @ (actuation_matrix(mech, q) @ f)


@entry()
def distribute_effort(mech: Mechanism, q: jnp.ndarray, E: jnp.ndarray, tau_u: jnp.ndarray, weights=None):
    """Actuator efforts ``f`` (na,) that produce the independent-speed forces ``tau_u`` (d,),
    ``E^T B f = tau_u``, of least weighted norm ``f^T W^-1 f`` with ``W = diag(weights)``
    (default 1: least norm; a larger weight loads that actuator more). With ``A = B^T E = P E``
    (na, d): ``f = W^1/2 pinv(A^T W^1/2) tau_u`` (SVD least squares), which is
    ``W A (A^T W A)^-1 tau_u`` when the actuators span the mobility; directions no actuator
    moves (``A`` rank-deficient, e.g. an idle spin) get the least-squares fit."""
    A = actuation_matrix(mech, q).T @ E
    w = jnp.ones(A.shape[0], A.dtype) if weights is None else jnp.asarray(weights, A.dtype)
    sw = jnp.sqrt(w)
    g = lapack.lstsq((sw[:, None] * A).T, tau_u)
    return sw * g
