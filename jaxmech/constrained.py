"""Constrained forward and inverse dynamics of closed chains, with support modes.

Equations (one state; ``C`` = :func:`jaxmech.closure_jacobian` (s, nv), ``gamma`` =
:func:`jaxmech.closure_bias` (s,), ``M`` = :func:`jaxmech.crba`, ``h`` =
:func:`jaxmech.nonlinear_effects`)::

    M a + h = tau + C^T lambda,        C a + gamma = 0.

``lambda`` (s,) are the constraint forces in closure-row space (the generalized force of the
constraint is ``C^T lambda``; for ``point`` rows it is the force on body B at the cut point in
frame A's axes).

Redundant rows (a planar loop closed by a revolute cut: 5 rows, rank 2; or a singular state) are
handled by rank-revealing selection (``jaxmech.rank.select_rows_ranked``): one column-pivoted QR
of ``C^T`` gives ``r`` independent rows and the rank ``r``, the number of pivots
``|R_ii| > rtol |R_00|`` (no SVD: it was the costliest step of a batched solve). Shapes
stay fixed: the selected block is ``k = min(s, nv)`` rows with the ``k - r`` trailing ones masked
to zero (identity on the masked diagonal of every solve), and the dropped rows get ``lambda = 0``.
The selection is a discrete choice made on ``stop_gradient(C)``, so derivatives flow through the
selected rows only (exact where the rank is locally constant). At a singular state where the
dropped rows cannot also be satisfied (inconsistent ``gamma``), the result keeps the selected rows
and reports ``status = INCONSISTENT`` with the violation in ``constraint_error``.

The dense forward solve skips the QR where it cannot change the answer (:mod:`jaxmech.kkt`): for a
model whose rows are independent at its reference pose (:func:`independent_rows`: the Stewart,
not the planar linkages), it first solves on every active row in natural order, and the factors of
that solve bound ``cond(C)``. Where the bound is below ``1 / rtol`` the QR would keep every row, so
the natural-order solution is the selected one. The other states run the QR path inside a
one-pass loop that a vmapped batch enters only when one of its states needs it. Derivatives are
those of the QR path.

Forward dynamics, two forms that agree to round-off:

* ``method="kkt"``: Cholesky ``M = L L^T``, one forward substitution ``Z = L^-1 [tau - h, C_s^T]``,
  Schur complement ``K = C_s M^-1 C_s^T = Z_C^T Z_C`` (Cholesky), then
  ``lambda_s = K^-1 (-gamma_s - C_s M^-1 (tau - h))``, ``a = M^-1 (tau - h + C_s^T lambda_s)``,
  then one correction ``d lambda = K^-1 (-gamma_s - C_s a)``, ``a += M^-1 C_s^T d lambda``: the
  Newton step of the constraint rows in the metric of ``M``, with the same factors (the certified
  path takes it only where ``|C_s a + gamma_s|`` exceeds 16 eps on the status check's scale).
  ``K`` has the condition of ``C_s M^-1 C_s^T``; where ``M`` is badly conditioned (Kangaroo: light links,
  ``cond(M) ~ 3e8``) the plain Schur solve left ``|C a + gamma| ~ 1e-8`` and a 1e-10 relative
  error against a 30-digit KKT solve; with the correction both are ~1e-15 (issue 10). It costs
  about 1.5 us per state on the Stewart (6 % of forward dynamics, batch 1,024, one core).
* ``method="kkt_blocks"``: the same equations per independent component of blocks of ``M`` (one
  block per subtree of the world) and closure rows, with the unrolled, LAPACK-free routines of
  :mod:`jaxmech.linalg` (rows chosen by pivoted Gram-Schmidt); cost linear in independent loops.
* ``method="projected"``: ``(E^T M E) udot = E^T (tau - h - M a_gamma)``, ``a = E udot + a_gamma``,
  with ``E`` a basis of ``null(C)`` and ``C a_gamma = -gamma``. Default ``E``: the orthogonal
  projector ``P = I - C_s^T (C_s C_s^T)^-1 C_s = E E^T`` (solve ``(P M P + I - P) x = P b``; valid
  for every support mode without a static mobility); or pass ``E`` (e.g. ``jm.tangent_map``).
  Multipliers from ``C_s^T lambda_s = M a + h - tau`` (least squares on the selected rows, exact
  for consistent data).

Support modes: ``support`` is a boolean mask over the raw rows (s,) or over the loops
(``mech.loop_names``, n_loops,); masked-out rows are zeroed in ``C`` and ``gamma`` before the
selection, so they drop out exactly like redundant rows (zero multiplier) and the solve stays
non-singular. A batch of states in different modes (flight, single, double, four-foot support)
runs through one ``jax.vmap``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import kkt, lapack, linalg
from ._entry import entry
from .chunking import chunked
from .curvature import closure_terms_world
from .dynamics import _rnea, _World, kinematics
from .kkt import Rows as _Rows
from .mechanism import Mechanism
from .status import Status, messages

# The codes of jaxmech.status (one numbering for every result); the messages in the dynamics' terms.
OK, INCONSISTENT, NONFINITE = Status.OK, Status.INCONSISTENT, Status.NONFINITE
STATUS_MESSAGES = messages(
    {
        OK: "success",
        INCONSISTENT: "inconsistent: closure rows dropped as dependent are violated (singular state or inconsistent "
        "velocity); inverse dynamics: the actuators cannot realize the accelerations exactly",
        NONFINITE: "non-finite result (mass matrix not positive definite or non-finite input)",
    }
)


class ConstrainedDynamics(eqx.Module):
    """Result of :func:`forward_dynamics`.

    ``a`` (nv,) accelerations; ``multipliers`` (s,) constraint forces per raw closure row (0 for
    inactive or dropped rows); ``status`` int32 (:data:`STATUS_MESSAGES`); ``rank`` int32 rank of
    the active rows; ``constraint_error`` ``max |C a + gamma|`` over the active rows."""

    a: jnp.ndarray
    multipliers: jnp.ndarray
    status: jnp.ndarray
    rank: jnp.ndarray
    constraint_error: jnp.ndarray


class InverseDynamics(eqx.Module):
    """Result of :func:`inverse_dynamics`.

    ``tau`` (nv,) generalized actuation ``B f``; ``effort`` (na,) actuator efforts ``f``;
    ``multipliers`` (s,); ``residual`` ``max |B f + C^T lambda - (M a + h)|``; ``status``
    (:data:`STATUS_MESSAGES`: ``OK``; ``INCONSISTENT`` the actuators cannot realize ``a`` exactly /
    singular actuation; ``NONFINITE``)."""

    tau: jnp.ndarray
    effort: jnp.ndarray
    multipliers: jnp.ndarray
    residual: jnp.ndarray
    status: jnp.ndarray


def row_loops(mech: Mechanism) -> np.ndarray:
    """Static (s,) index of the loop each raw row belongs to (-1 for coupling rows)."""
    out = -np.ones(mech.n_rows, dtype=int)
    for g in mech.topo.groups:
        r = len(g.rows)
        for i, li in enumerate(g.loop_id):
            out[g.row_offset + i * r : g.row_offset + (i + 1) * r] = li
    return out


def support_mask(mech: Mechanism, active) -> np.ndarray:
    """Static row mask (s,) bool: rows of the loops named in ``active`` on, rows of every other
    loop off, coupling rows on. Stack such masks to batch support modes in one vmap."""
    names = [active] if isinstance(active, str) else list(active)
    bad = [n for n in names if n not in mech.loop_names]
    if bad:
        raise KeyError(f"{mech.name}: unknown loops {bad} (loops: {', '.join(mech.loop_names)})")
    rl = row_loops(mech)
    keep = np.array([mech.loop_names.index(n) for n in names], dtype=int)
    return (rl < 0) | np.isin(rl, keep)


def _row_mask(mech: Mechanism, support, dtype):
    s = mech.n_rows
    if support is None:
        return jnp.ones(s, dtype)
    m = jnp.asarray(support)
    if m.shape == (s,):
        return m.astype(dtype)
    if m.shape == (mech.n_loops,):
        rl = row_loops(mech)
        return jnp.where(rl < 0, True, m[np.maximum(rl, 0)]).astype(dtype)
    raise ValueError(
        f"{mech.name}: support mask must have shape (s,) = ({s},) rows or (n_loops,) = ({mech.n_loops},), got {m.shape}"
    )


def _default_rtol(dtype) -> float:
    return 1e-9 if jnp.finfo(dtype).bits >= 64 else 1e-4


METHODS = ("auto", "kkt", "kkt_blocks", "projected")
REFERENCES = ("local", "world", "world_aligned")


@dataclass(frozen=True)
class DynamicsOptions:
    """Static options of :func:`forward_dynamics` and :func:`inverse_dynamics` (hashable; pass as
    keyword arguments, ``forward_dynamics(mech, q, v, tau, method="kkt", rtol=1e-10)``, or as one
    object, ``options=DynamicsOptions(...)``).

    ``method`` (forward dynamics only): ``"auto"`` (default: ``"kkt_blocks"`` on GPU/TPU and on
    CPU for models of small independent loops, else ``"kkt"``; see :func:`default_method`),
    ``"kkt"``, ``"kkt_blocks"`` or ``"projected"`` (module docstring); ``rtol``: the relative rank
    cutoff of the closure rows' selection (None: 1e-9 in float64, 1e-4 in float32);
    ``f_ext_reference``: the frame of ``f_ext``, ``"local"``, ``"world"`` or ``"world_aligned"``
    (:func:`jaxmech.dynamics.external_wrenches`).
    Bad values raise ``ValueError`` when the object is made, before any compilation."""

    method: str = "auto"
    rtol: float | None = None
    f_ext_reference: str = "local"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got {self.method!r}")
        if self.rtol is not None and not (isinstance(self.rtol, (int, float)) and 0 < self.rtol < 1):
            raise ValueError(f"rtol must be a number in (0, 1) or None, got {self.rtol!r}")
        if self.f_ext_reference not in REFERENCES:
            raise ValueError(
                f"f_ext_reference must be one of {', '.join(map(repr, REFERENCES))}, got {self.f_ext_reference!r}"
            )


def dynamics_options(options: DynamicsOptions | None = None, **kwargs) -> DynamicsOptions:
    """``options`` with the keyword fields replaced (a ``TypeError`` names an unknown one)."""
    base = DynamicsOptions() if options is None else options
    if not isinstance(base, DynamicsOptions):
        raise TypeError(f"options must be a DynamicsOptions, got {type(base).__name__}")
    fields = {f.name for f in dataclasses.fields(DynamicsOptions)}
    bad = sorted(set(kwargs) - fields)
    if bad:
        raise TypeError(f"unknown dynamics option(s) {bad} (options: {', '.join(sorted(fields))})")
    return dataclasses.replace(base, **kwargs) if kwargs else base


def block_structure(mech: Mechanism) -> linalg.BlockKKT:
    """The static :class:`jaxmech.linalg.BlockKKT` of ``mech`` (built once per topology)."""
    topo = mech.topo
    st = getattr(topo, "_block_kkt", None)
    if st is None:
        st = linalg.BlockKKT(topo, topo.lin_v if len(topo.coupling_names) else np.zeros(0, int))
        object.__setattr__(topo, "_block_kkt", st)
    return st


def kkt_sparsity(mech: Mechanism) -> kkt.Sparsity:
    """The static :class:`jaxmech.kkt.Sparsity` of ``mech``'s mass matrix (the tree's branch
    sparsity: ``M[m, n]`` is zero unless one coordinate moves the other's body) and closure Jacobian
    (each row on its loop's path dofs), built once per topology. Both are exact zeros in every
    state (:mod:`jaxmech.batchlast_dynamics` writes only those entries)."""
    topo = mech.topo
    sp = getattr(topo, "_kkt_sparsity", None)
    if sp is None:
        from .batchlast_dynamics import _mass_pairs_all
        from .closure import _jacobian_targets

        P = np.eye(mech.nv, dtype=bool)
        P[_mass_pairs_all(mech)] = True
        Cp = np.zeros((mech.n_rows, mech.nv), bool)
        Cp[_jacobian_targets(mech, list(topo.groups), np.ones(len(topo.coupling_names), bool))] = True
        sp = kkt.sparsity(P, Cp)
        object.__setattr__(topo, "_kkt_sparsity", sp)
    return sp


def _to_blocks(mech: Mechanism, M, C, gamma):
    """``(Mb, Cc, gc)``: the diagonal blocks of ``M`` per independent component (c, nbc, bs, bs),
    identity on padded slots, and the closure rows on each component's dofs (c, sc, nbc, bs) and
    their curvature (c, sc) (zero on padded rows); ``block_structure`` gives the layout."""
    st = block_structure(mech)
    dt = M.dtype
    cd, pad = st.comp_dof, st.pad_dof  # (c, nbc, bs)
    Mb = jnp.pad(M, ((0, 1), (0, 1)))[cd[..., :, None], cd[..., None, :]]
    eye = np.eye(st.bs, dtype=bool)
    Mb = jnp.where(pad[..., :, None] | pad[..., None, :], jnp.asarray(eye, dt), Mb)
    rows = st.comp_rows  # (c, sc)
    Cc = jnp.pad(C, ((0, 1), (0, 1)))[rows[:, :, None, None], cd[:, None]]
    gc = jnp.concatenate([gamma, jnp.zeros(1, dt)])[rows]
    return Mb, Cc, gc


def _kkt_solve(mech: Mechanism, Mb, Cc, gc, row_mask, b, rtol):
    """``(a, lambda, rank, err, cmax)`` of ``M a = b + C^T lambda``, ``C a = -gamma`` on
    rank-selected rows, from the blocks of :func:`_to_blocks` (``err = max |C a + gamma|`` and
    ``cmax = max |C|`` over the active rows).

    Per independent component (``block_structure``), all components vectorized together: the
    Cholesky factors of the diagonal blocks of ``M`` (``M = L L^T`` blockwise), the rows chosen
    by :func:`jaxmech.linalg.pivoted_rows` on ``stop_gradient(C)`` (rank: ``|R_tt| > rtol`` times
    the largest row norm of ``C``; dropped rows get ``lambda = 0``), ``Z = L^-1 C_s^T``, the Schur
    complement ``K = Z^T Z`` (identity on dropped rows), ``lambda = K^-1 (-gamma - Z^T L^-1 b)``
    and ``a = L^-T L^-1 (b + C_s^T lambda)``. No LAPACK call, and no dense ``M`` or ``C``: the cost
    grows with the number of components, not with its square. ``M`` must be block-diagonal over the
    world's subtrees (true of every tree's mass matrix)."""
    st = block_structure(mech)
    nv, s, dt = mech.nv, mech.n_rows, Mb.dtype
    cd, pad = st.comp_dof, st.pad_dof  # (c, nb, bs)
    L = linalg.cholesky(Mb)
    zb = linalg.solve_lower(L, jnp.concatenate([b, jnp.zeros(1, dt)])[cd][..., None])[..., 0]
    rank = jnp.zeros((), jnp.int32)
    lam_full = jnp.zeros(s, dt)
    err = cmax = jnp.zeros((), dt)
    if st.sc:
        rows = st.comp_rows  # (c, sc)
        mr = jnp.concatenate([row_mask.astype(dt), jnp.zeros(1, dt)])[rows]
        Cc, gc = Cc * mr[..., None, None], gc * mr
        nc, sc = rows.shape
        k = min(sc, cd.shape[1] * st.bs)
        order, d = linalg.pivoted_rows(jax.lax.stop_gradient(Cc).reshape(nc, sc, -1), k)
        keep = (d > rtol * jnp.max(d[:, 0])) & (d > jnp.finfo(dt).tiny)  # (c, k)
        rank = jnp.sum(keep).astype(jnp.int32)
        sel = jnp.sum(jnp.where(keep[..., None], order[..., None] == np.arange(sc), 0.0), -2).astype(dt)
        Z = linalg.solve_lower(L, jnp.moveaxis(Cc * sel[..., None, None], 1, -1))  # (c, nb, bs, sc)
        K = jnp.sum(Z[..., :, None] * Z[..., None, :], (1, 2)) + (1.0 - sel)[..., None] * np.eye(sc)
        rhs = -gc * sel - jnp.sum(Z * zb[..., None], (1, 2))
        lam = linalg.cho_solve(linalg.cholesky(K), rhs) * sel  # (c, sc)
        zb = zb + jnp.sum(Z * lam[:, None, None, :], -1)
        lam_full = jnp.zeros(s + 1, dt).at[rows.ravel()].add(lam.ravel())[:s]
    ac = jnp.where(pad, 0.0, linalg.solve_lower_t(L, zb[..., None])[..., 0])
    if st.sc:
        err = jnp.max(jnp.abs(jnp.sum(Cc * ac[:, None], (2, 3)) + gc))
        cmax = jnp.max(jnp.abs(Cc))
    a = jnp.zeros(nv + 1, dt).at[cd.ravel()].add(ac.ravel())[:nv]
    return a, lam_full, rank, err, cmax


def _finish(rank, C, gamma, a, lam):
    err = jnp.max(jnp.abs(C @ a + gamma)) if C.shape[0] else jnp.zeros((), a.dtype)
    cmax = jnp.max(jnp.abs(C), initial=0.0)
    return _result(a, lam, rank, err, jnp.max(jnp.abs(gamma), initial=0.0), cmax)


def _result(a, lam, rank, err, gmax, cmax):
    """:class:`ConstrainedDynamics` with its status: ``err = max |C a + gamma|`` against
    ``sqrt(eps) (1 + max |gamma| + max |C| max |a|)`` on the active rows."""
    eps = jnp.finfo(a.dtype).eps
    scale = 1.0 + gmax + cmax * jnp.max(jnp.abs(a), initial=0.0)
    finite = jnp.all(jnp.isfinite(a)) & jnp.all(jnp.isfinite(lam))
    status = jnp.where(~finite, NONFINITE, jnp.where(err > jnp.sqrt(eps) * scale, INCONSISTENT, OK)).astype(jnp.int32)
    return ConstrainedDynamics(a, lam, status, rank.astype(jnp.int32), err)


def _tree_and_closure_terms(mech: Mechanism, q, v, f_ext=None, f_ext_reference: str = "local"):
    """``(M, h, C, gamma)`` of one state from one world-frame kinematics pass
    (:class:`jaxmech.dynamics._World`): ``M`` with armature, ``h = rnea(q, v, 0)`` with ``f_ext``,
    the closure Jacobian and curvature."""
    w = _World(mech, kin=kinematics(mech, q, v))
    V, Ab = w.motion(v)
    M = w.mass_matrix() + jnp.diag(mech.armature.astype(q.dtype))
    h = _rnea(mech, w, q, v, None, f_ext, f_ext_reference, motion=(V, Ab))
    C, gamma = closure_terms_world(mech, w.R, w.p, w.cols, V, Ab)
    return M, h, C, gamma


@functools.cache
def _terms_batched():
    """:func:`_tree_and_closure_terms` without external wrenches; under ``vmap`` the batch-last
    kernels of :mod:`jaxmech.batchlast_dynamics` (derivatives from the per-state code)."""
    from . import batchlast, batchlast_dynamics

    return batchlast.batched(lambda m, q, v: _tree_and_closure_terms(m, q, v), batchlast_dynamics.terms)


def _block_row_mask(mech: Mechanism, mask):
    """The row mask (s,) laid out as the components' rows (c, sc) (0 on padded rows)."""
    rows = block_structure(mech).comp_rows
    return jnp.concatenate([mask, jnp.zeros(1, mask.dtype)])[rows]


def _block_terms(mech: Mechanism, q, v):
    """``(Mb, h, Cc, gc)`` of one state: :func:`_tree_and_closure_terms` laid out by :func:`_to_blocks`."""
    M, h, C, gamma = _tree_and_closure_terms(mech, q, v)
    Mb, Cc, gc = _to_blocks(mech, M, C, gamma)
    return Mb, h, Cc, gc


@functools.cache
def _block_terms_batched():
    """:func:`_block_terms`; under ``vmap`` the batch-last kernels, which write the blocks directly
    (:func:`jaxmech.batchlast_dynamics.block_terms`: no dense ``M`` or ``C``)."""
    from . import batchlast, batchlast_dynamics

    return batchlast.batched(_block_terms, batchlast_dynamics.block_terms)


SMALL_COMPONENT_ROWS = 8
"""On CPU, ``method="auto"`` takes the per-component solve when no independent component has more
closure rows than this (many small loops: the dense LAPACK KKT grows with the cube of the size)."""


def default_method(mech: Mechanism | None = None) -> str:
    """The forward-dynamics method ``"auto"`` resolves to (chosen when the call is traced, from JAX's
    default backend and ``mech``'s static structure):

    * on GPU / TPU ``"kkt_blocks"`` (unrolled, LAPACK-free, per block of the tree): on an H200
      (Stewart, float64, batch 65,536) it ran 0.40 us/state against 9.2 us/state for the batched
      cuSOLVER path (``benchmarks/GPU.md``);
    * on CPU ``"kkt_blocks"`` too when every independent component of ``mech`` is small (at most
      :data:`SMALL_COMPONENT_ROWS` rows: a four-bar 1.1 against 2.1 us/state, 48 four-bars side by
      side 68 against 2,170 us/state, ``benchmarks/growth.py``), else ``"kkt"`` (LAPACK Cholesky
      and triangular solves; the Stewart's one 18-row component: 25 against 29 us/state)."""
    if jax.default_backend() != "cpu":
        return "kkt_blocks"
    if mech is not None and mech.n_rows and block_structure(mech).sc <= SMALL_COMPONENT_ROWS:
        return "kkt_blocks"
    return "kkt"


def forward_dynamics(
    mech: Mechanism,
    q,
    v,
    tau,
    f_ext=None,
    support=None,
    E=None,
    *,
    options: DynamicsOptions | None = None,
    **kwargs,
) -> ConstrainedDynamics:
    """Constrained forward dynamics of one state (see the module docstring for the equations).

    ``q`` (nq,), ``v`` (nv,) (should satisfy ``C v = 0``), ``tau`` (nv,) generalized forces
    (joint units; add actuator efforts with ``jm.port_effort``), ``f_ext`` external wrenches (see
    :func:`jaxmech.dynamics.external_wrenches`), ``support`` an optional row / loop mask,
    ``E`` an optional null-space basis (nv, d) for ``method="projected"`` (it must match the
    active rows). Options: ``options`` a :class:`DynamicsOptions` and / or its fields as keywords
    (``method``, ``rtol``, ``f_ext_reference``); bad values raise before any work. Returns
    :class:`ConstrainedDynamics`. A tree (no rows) gives the unconstrained ``M^-1 (tau - h)``."""
    opts = dynamics_options(options, **kwargs)
    return _forward_dynamics(mech, q, v, tau, f_ext, support, E, opts)


@entry(static_argnames=("options",), prime_mobility=True)
@chunked
def _forward_dynamics(mech: Mechanism, q, v, tau, f_ext, support, E, options: DynamicsOptions) -> ConstrainedDynamics:
    method, rtol, f_ext_reference = options.method, options.rtol, options.f_ext_reference
    if method == "auto":
        method = default_method(mech)
    dt = q.dtype
    rtol = _default_rtol(dt) if rtol is None else rtol
    mask = _row_mask(mech, support, dt)  # a bad mask fails here, before any work
    if method == "kkt_blocks":  # per component, from block terms (batched: batch-last, no dense M or C)
        if f_ext is None:
            Mb, h, Cc, gc = _block_terms_batched()(mech, q, v)
        else:
            M, h, C, gamma = _tree_and_closure_terms(mech, q, v, f_ext, f_ext_reference)
            Mb, Cc, gc = _to_blocks(mech, M, C, gamma)
        a, lam, rank, err, cmax = _kkt_solve(mech, Mb, Cc, gc, mask, tau - h, rtol)
        gmax = jnp.max(jnp.abs(gc * _block_row_mask(mech, mask)), initial=0.0)
        return _result(a, lam, rank, err, gmax, cmax)
    if f_ext is None:  # batched: the batch-last kernels (jaxmech.batchlast_dynamics)
        M, h, C, gamma = _terms_batched()(mech, q, v)
    else:
        M, h, C, gamma = _tree_and_closure_terms(mech, q, v, f_ext, f_ext_reference)
    return _dense_solve(mech, method, M, C, gamma, tau - h, mask, rtol, E)


def independent_rows(mech: Mechanism) -> bool:
    """Static: whether the dense KKT solve first tries every row in natural order
    (:func:`jaxmech.kkt.solve`). False when the rows are dependent at the model's reference pose
    (``mobility > nv - s``: Kangaroo's and the planar linkages' revolute cuts), which would pay for
    the attempt and the QR. When the mobility is unknown (a traced model whose topology has not been
    seen concrete: call ``jm.mobility(mech)`` once), the attempt is made whenever ``s <= nv``; the
    certificate keeps the results right either way."""
    from .independent import mobility

    if not mech.n_rows or mech.n_rows > mech.nv:
        return False
    d = mobility(mech)
    return d is None or mech.nv - d == mech.n_rows


def _dense_solve(mech: Mechanism, method: str, M, C, gamma, b, mask, rtol, E=None, factor=False):
    """``method`` "kkt" or "projected" on the dense terms (``b = tau - h``). ``factor=True``
    (``kkt``): also return the Cholesky factor of ``M`` the solve made."""
    dt = M.dtype
    if method == "kkt":  # the natural-order solve where certified, else the pivoted-QR selection
        out = kkt.solve(M, C, gamma, mask, b, rtol, independent_rows(mech), factor, kkt_sparsity(mech))
        res = _finish(out[2], C * mask[:, None], gamma * mask, out[0], out[1])
        return (res, out[3]) if factor else res
    rows = _Rows(C, gamma, mask, rtol)
    # projected
    G = rows.Cs @ rows.Cs.T + rows.pad  # Gram of the selected rows
    Lg = lapack.cholesky(G) if rows.k else None
    if rows.k:
        a_g = -rows.Cs.T @ lapack.cho_solve(Lg, rows.gs)  # minimum-norm particular solution
    else:
        a_g = jnp.zeros(mech.nv, dt)
    r = b - M @ a_g
    if E is not None:
        E = jnp.asarray(E, dt)
        udot = lapack.solve(E.T @ M @ E, E.T @ r)
        a = E @ udot + a_g
    else:
        P = jnp.eye(mech.nv, dtype=dt)
        if rows.k:
            P = P - rows.Cs.T @ lapack.cho_solve(Lg, rows.Cs)
        x = lapack.solve(P @ M @ P + jnp.eye(mech.nv, dtype=dt) - P, P @ r)
        a = P @ x + a_g
    lam = jnp.zeros(rows.s, dt)
    if rows.k:
        lam = rows.scatter(lapack.cho_solve(Lg, rows.Cs @ (M @ a - b)))
    return _finish(rows.rank, rows.C, rows.gamma, a, lam)


def dynamics_and_mass(mech: Mechanism, q, v, tau, method: str = "auto"):
    """``(forward_dynamics(mech, q, v, tau, method=method), L)`` with ``L`` the lower Cholesky
    factor (nv, nv) of the mass matrix ``M = L L^T`` that the dense KKT solve factorized: the
    rollout's velocity projection reuses it instead of running CRBA and the factorization again
    (batched, ``M`` comes from the same batch-last pass as the dynamics' other terms). The
    per-component and projected solves have no dense factor of ``M``: it comes from
    :func:`jaxmech.crba` and one Cholesky factorization."""
    from .dynamics import crba

    if method == "auto":
        method = default_method(mech)
    if method != "kkt":
        return forward_dynamics(mech, q, v, tau, method=method), lapack.cholesky(crba(mech, q))
    dt = q.dtype
    M, h, C, gamma = _terms_batched()(mech, q, v)
    mask = jnp.ones(mech.n_rows, dt)
    return _dense_solve(mech, method, M, C, gamma, tau - h, mask, _default_rtol(dt), factor=True)


# the compiled path eager calls take, and the functions as written (as on every entry function)
forward_dynamics.jitted, forward_dynamics.eager = _forward_dynamics.jitted, _forward_dynamics.eager


def _actuation(mech: Mechanism, actuators, dt):
    """Actuation matrix B (nv, na): generalized force = B f."""
    if actuators is None:
        idx = mech.topo.actuated_v if mech.n_rows else np.arange(mech.nv)
        if mech.n_rows and idx.size == 0:
            raise ValueError(f"{mech.name}: no actuated joints; pass actuators= (names, indices or a (nv, na) matrix)")
        return jnp.eye(mech.nv, dtype=dt)[:, idx]
    if isinstance(actuators, (list, tuple)) or (isinstance(actuators, np.ndarray) and actuators.ndim == 1):
        idx = mech.v_indices(list(actuators))
        return jnp.eye(mech.nv, dtype=dt)[:, idx]
    B = jnp.asarray(actuators, dt)
    if B.ndim != 2 or B.shape[0] != mech.nv:
        raise ValueError(f"{mech.name}: actuation matrix must have shape (nv, na) = ({mech.nv}, na), got {B.shape}")
    return B


def inverse_dynamics(
    mech: Mechanism,
    q,
    v,
    a,
    f_ext=None,
    actuators=None,
    support=None,
    *,
    options: DynamicsOptions | None = None,
    **kwargs,
) -> InverseDynamics:
    """Actuator efforts that realize the accelerations ``a`` (nv,) of one state.

    Solves ``B f + C^T lambda = M a + h`` (virtual-work consistent: ``B = P^T`` for port efforts,
    pass ``actuators=jm.port_jacobian(mech, q).T``; default: the actuated joint coordinates, or
    every coordinate of a tree). ``a`` should satisfy ``C a + gamma = 0``. With ``P`` the
    orthogonal projector onto ``null(C_s)`` the efforts solve ``P B f = P (M a + h)`` (exact when
    the actuators span the mobility, i.e. ``E^T B`` is square and invertible; minimum-norm efforts
    for redundant actuation; status ``INCONSISTENT`` when no effort realizes ``a``), then
    ``C_s^T lambda_s = M a + h - B f``. For a tree this reduces to ``f = rnea`` restricted to
    ``actuators``. ``actuators``: None, joint names / 'joint:k' / indices, or a matrix (nv, na).
    Options: ``options`` a :class:`DynamicsOptions` and / or its fields ``rtol``,
    ``f_ext_reference`` as keywords (``method`` is unused here)."""
    opts = dynamics_options(options, **kwargs)
    return _inverse_dynamics(mech, q, v, a, f_ext, actuators, support, opts)


@entry(static_argnames=("actuators", "options"), prime_mobility=True)
@chunked
def _inverse_dynamics(mech: Mechanism, q, v, a, f_ext, actuators, support, options: DynamicsOptions) -> InverseDynamics:
    rtol, f_ext_reference = options.rtol, options.f_ext_reference
    dt = q.dtype
    rtol = _default_rtol(dt) if rtol is None else rtol
    mask = _row_mask(mech, support, dt)  # a bad mask fails here, before any work
    w = _World(mech, q)
    rhs = _rnea(mech, w, q, v, a, f_ext, f_ext_reference)
    B = _actuation(mech, actuators, dt)
    C, _ = closure_terms_world(mech, w.R, w.p, w.cols)
    gamma = jnp.zeros(mech.n_rows, dt)
    rows = _Rows(C, gamma, mask, rtol)
    P = jnp.eye(mech.nv, dtype=dt)
    if rows.k:
        G = rows.Cs @ rows.Cs.T + rows.pad
        Lg = lapack.cholesky(G)
        P = P - rows.Cs.T @ lapack.cho_solve(Lg, rows.Cs)
    PB = P @ B
    # exact when the actuators span the mobility (square, invertible E^T B); minimum-norm
    # efforts for redundant actuation (SVD), so an over-actuated system never gives NaN. PB has
    # rank <= mobility by construction; its other singular values are round-off of the projector
    # (~1e-15 relative), so they are cut at rtol: LAPACK's default cut (max(m, n) eps) let them
    # through on some builds, and the "minimum-norm" efforts then depended on that round-off
    f = lapack.lstsq(PB, P @ rhs, rtol) if B.shape[1] else jnp.zeros(0, dt)
    tau = B @ f
    lam = jnp.zeros(rows.s, dt)
    if rows.k:
        lam = rows.scatter(lapack.cho_solve(Lg, rows.Cs @ (rhs - tau)))
    res = jnp.max(jnp.abs(tau + rows.C.T @ lam - rhs), initial=0.0)
    eps = jnp.finfo(dt).eps
    finite = jnp.all(jnp.isfinite(f)) & jnp.all(jnp.isfinite(lam))
    bad = res > jnp.sqrt(eps) * (1.0 + jnp.max(jnp.abs(rhs)))
    status = jnp.where(~finite, NONFINITE, jnp.where(bad, INCONSISTENT, OK)).astype(jnp.int32)
    return InverseDynamics(tau, f, lam, res, status)


inverse_dynamics.jitted, inverse_dynamics.eager = _inverse_dynamics.jitted, _inverse_dynamics.eager
