"""Inertial-parameter identification through a regressor: eq. (1) of :mod:`jaxmech.sysid` is
linear in the standard parameters, so the regressor is built once (``jax.linearize``, exact),
weighted by each port's RMS effort, reduced by QR, and fitted by optax L-BFGS (or Adam, then
L-BFGS) in one jitted ``lax.scan``; mixed ``full`` (10 log-Cholesky parameters) and ``scaled``
(one mass scale) bodies. See :mod:`jaxmech.sysid` for the model, the parametrization and the
identifiability findings; its names are re-exported there (``jaxmech.sysid.identify_regressor``)."""

from __future__ import annotations

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._jit import filter_jit, jit
from .inertial import (
    body_indices,
    get_theta,
    inertial_from_standard,
    scaled_inertial,
    set_theta,
    standard_parameters,
    theta_to_standard,
)
from .mechanism import Mechanism
from .sysid import Dataset, port_inverse_dynamics


def _all_phi(mech):
    return jax.vmap(standard_parameters)(mech.mass, mech.com, mech.inertia)


def _with_phi(mech, phi):
    m, c, I = jax.vmap(inertial_from_standard)(phi)
    return eqx.tree_at(lambda k: (k.mass, k.com, k.inertia), mech, (m, c, I))


@filter_jit
def _directions(mech, full: tuple, scaled: tuple):
    """Directions (p, nb, 10) in the standard parameters of all bodies: 10 unit vectors per
    ``full`` body, the body's own phi per ``scaled`` body (body names static)."""
    nb = len(mech.body_names)
    phi0 = _all_phi(mech)
    D = []
    for b in body_indices(mech, full):
        D.extend(jnp.zeros((nb, 10), phi0.dtype).at[b, k].set(1.0) for k in range(10))
    for b in body_indices(mech, scaled):
        D.append(jnp.zeros((nb, 10), phi0.dtype).at[b].set(phi0[b]))
    return jnp.stack(D) if D else jnp.zeros((0, nb, 10), phi0.dtype)


@filter_jit
def _regressor_chunk(mech, D, q, v, a, Ep):
    phi0 = _all_phi(mech)

    def one(q, v, a, E):
        f = lambda z: port_inverse_dynamics(_with_phi(mech, phi0 + jnp.tensordot(z, D, 1)), q, v, a, E)  # noqa: E731
        f0, jz = jax.linearize(f, jnp.zeros(D.shape[0], q.dtype))
        Y = jax.vmap(jz, out_axes=1)(jnp.eye(D.shape[0], dtype=q.dtype))
        return Y, f0

    return jax.vmap(one)(q, v, a, Ep)


def regressor(mech: Mechanism, data: Dataset, full=(), scaled=(), chunk: int = 4096):
    """Inverse-dynamics regressor of eq. (1) for a mixed parametrization.

    Returns ``(Y, offset)``: ``Y`` (N, np, 10 nf + ns) with 10 columns per ``full`` body (its
    standard parameters) then one per ``scaled`` body (the efforts of that body as in ``mech``:
    coefficient = its mass scale), and ``offset`` (N, np) the efforts of everything held fixed
    (other bodies, damping, armature). The efforts of a model with the ``full`` bodies at
    ``phi`` (nf, 10) and the ``scaled`` bodies scaled by ``k`` (ns,) are
    ``Y @ concat(phi.ravel(), k) + offset``, exactly (the map is linear in phi)."""
    full, scaled = tuple(full), tuple(scaled)
    D = _directions(mech, full, scaled)
    N = data.q.shape[0]
    Ys, F0 = [], []
    for i in range(0, N, chunk):
        sl = slice(i, i + chunk)
        Y, f0 = _regressor_chunk(mech, D, data.q[sl], data.v[sl], data.a[sl], data.Ep[sl])
        Ys.append(Y)
        F0.append(f0)
    return _stack_and_offset(mech, Ys, F0, full, scaled)


@filter_jit
def _stack_and_offset(mech, Ys: list, F0: list, full: tuple, scaled: tuple):
    """:func:`regressor`'s chunks joined, and the offset: the efforts less the regressor's part at
    the model's own coefficients (one program; eagerly these ops compiled one by one)."""
    Y, F0 = jnp.concatenate(Ys, 0), jnp.concatenate(F0, 0)
    phi0 = _all_phi(mech)
    x0 = jnp.concatenate([phi0[body_indices(mech, full)].reshape(-1), jnp.ones(len(scaled), phi0.dtype)])
    return Y, F0 - Y @ x0


class RegressorSysIdResult(eqx.Module):
    """Result of :func:`identify_regressor`. ``mech`` the identified model; ``theta`` (nf, 10)
    log-Cholesky parameters of the ``full`` bodies; ``log_scale`` (ns,) of the ``scaled`` ones;
    ``bodies`` = full + scaled (order of the histories); ``loss`` (iterations+1,); ``masses``
    (iterations+1, nbodies) history; ``mass_errors`` the relative errors against ``reference``
    (empty without one); ``mass_sd`` (nbodies,) the predicted standard deviation of each mass
    from the residual and the regressor's R factor (Cramer-Rao, linear model); ``wall_s`` the
    fit's wall time (compile included), ``iterations`` its length."""

    mech: Mechanism
    theta: jnp.ndarray
    log_scale: jnp.ndarray
    bodies: tuple = eqx.field(static=True)
    loss: np.ndarray = None
    masses: np.ndarray = None
    mass_errors: np.ndarray = None
    mass_sd: np.ndarray = None
    wall_s: float = eqx.field(static=True, default=0.0)
    iterations: int = eqx.field(static=True, default=0)


def identify_regressor(
    mech_guess: Mechanism,
    data: Dataset,
    full=("payload",),
    scaled=(),
    *,
    iterations: int = 300,
    optimizer: str = "lbfgs",
    learning_rate: float = 0.05,
    adam_iterations: int = 100,
    reference: Mechanism | None = None,
    Y=None,
) -> RegressorSysIdResult:
    """Identify ``full`` bodies (all 10 parameters, log-Cholesky: COM and inertia unknown) and
    ``scaled`` bodies (one mass scale each, ``exp(s)``: geometry known, density unknown) from the
    efforts in ``data``; every other body is held at ``mech_guess``'s values.

    The regressor (:func:`regressor`, or ``Y = (Y, offset)`` precomputed) is weighted by each
    port's RMS effort and reduced once by QR, ``A = Q R``: the loss (mean squared normalized
    effort error) is ``(|R x(z) - Q^T y|^2 + |y - Q Q^T y|^2) / (N np)``, exact and O(p^2) per
    evaluation whatever N. ``x(z)`` maps the unconstrained ``z`` (log-Cholesky, log-scales) to
    the linear coefficients; every ``z`` is a physically consistent model. The whole descent is
    one compiled ``lax.scan``: ``optimizer="lbfgs"`` (optax L-BFGS with zoom line search),
    ``"adam"``, or ``"adam+lbfgs"`` (``adam_iterations`` of Adam, then L-BFGS).
    The initial guess's scaled bodies fix their geometry: ``mech_guess`` must have the right COMs
    and inertia shapes for them (:func:`perturb_density`)."""
    import time

    t0 = time.perf_counter()
    if optimizer not in ("lbfgs", "adam", "adam+lbfgs"):
        raise ValueError(f"optimizer must be 'lbfgs', 'adam' or 'adam+lbfgs', got {optimizer!r}")
    full, scaled = tuple(full), tuple(scaled)
    nf = len(full)
    Y, off = regressor(mech_guess, data, full, scaled) if Y is None else Y
    N, npt, p = Y.shape
    z0, m_s = _start(mech_guess, full, scaled)
    R, b, res0, Lt = _reduced_system(Y, data.f, off, z0, nf)
    n_res = N * npt
    if optimizer == "lbfgs":  # neither setting reaches its program: keep them out of its key
        learning_rate = adam_iterations = None
    z, losses, hist = _fit(
        R, b, res0, Lt, z0, m_s, jnp.asarray(n_res, Y.dtype), nf, iterations, optimizer, learning_rate, adam_iterations
    )
    losses = np.asarray(losses)
    hist = np.asarray(hist)
    mech, theta, log_scale = _identified(mech_guess, z, full, scaled)
    # predicted standard deviations of the masses (linear model around the optimum)
    sigma2 = float(losses[-1]) * n_res / max(n_res - p, 1)
    Rinv = np.linalg.inv(np.asarray(R))
    sd_c = np.sqrt(sigma2 * np.sum(Rinv**2, 1))
    sd = np.concatenate([sd_c[: 10 * nf : 10], sd_c[10 * nf :] * np.asarray(m_s)])
    bodies = full + scaled
    errs = np.zeros((0, len(bodies)))
    if reference is not None:
        m_true = np.asarray(reference.mass)[body_indices(reference, bodies)]
        errs = np.abs(hist - m_true) / m_true
    return RegressorSysIdResult(
        mech, theta, log_scale, bodies, losses, hist, errs, sd, time.perf_counter() - t0, iterations
    )


@filter_jit
def _start(mech_guess, full: tuple, scaled: tuple):
    """:func:`identify_regressor`'s starting point ``z0`` (the guess's log-Cholesky parameters,
    zero log-scales) and the guess's masses of the ``scaled`` bodies."""
    theta = get_theta(mech_guess, full).reshape(-1)
    z0 = jnp.concatenate([theta, jnp.zeros(len(scaled), mech_guess.mass.dtype)])
    return z0, mech_guess.mass[body_indices(mech_guess, scaled)]


@filter_jit
def _identified(mech_guess, z, full: tuple, scaled: tuple):
    """The model at the fitted ``z``: ``full`` bodies set from their log-Cholesky parameters,
    ``scaled`` ones scaled in mass and inertia; returns ``(mech, theta, log_scale)``."""
    nf = len(full)
    theta, log_scale = z[: 10 * nf].reshape(nf, 10), z[10 * nf :]
    mech = set_theta(mech_guess, full, theta) if nf else mech_guess
    if scaled:
        idx_s = body_indices(mech, scaled)
        m, _, I = jax.vmap(scaled_inertial)(log_scale, mech.mass[idx_s], mech.com[idx_s], mech.inertia[idx_s])
        mech = eqx.tree_at(
            lambda k: (k.mass, k.inertia), mech, (mech.mass.at[idx_s].set(m), mech.inertia.at[idx_s].set(I))
        )
    return mech, theta, log_scale


def _coeffs(z, nf: int):
    """Linear coefficients of the regressor from the unconstrained ``z``: the standard parameters
    of ``nf`` log-Cholesky bodies, then the mass scales ``exp(s)``."""
    th = z[: 10 * nf].reshape(nf, 10)
    return jnp.concatenate([jax.vmap(theta_to_standard)(th).reshape(-1), jnp.exp(z[10 * nf :])])


@partial(jit, static_argnames="nf")
def _reduced_system(Y, f, off, z0, nf: int):
    """The weighted regressor reduced by QR (``R``, ``b = Q^T y``, the residual ``|y - Q b|^2``
    outside its range) and the preconditioner ``L^T`` (``L L^T`` the Gauss-Newton Hessian at
    ``z0``): one compiled program (eagerly these ops compiled one by one, ~100 programs)."""
    N, npt, p = Y.shape
    scale = jnp.sqrt(jnp.mean(f**2, 0)) + 1e-12
    A = (Y / scale[None, :, None]).reshape(N * npt, p)
    y = ((f - off) / scale).reshape(-1)
    Qm, R = jnp.linalg.qr(A)
    b = Qm.T @ y
    res0 = jnp.sum((y - Qm @ b) ** 2)
    # preconditioning: z = z0 + L^-T w with L L^T the Gauss-Newton Hessian at z0, so that the
    # descent sees a near-isotropic quadratic (the leg scales are strongly correlated with each
    # other and with the payload; plain L-BFGS then needs thousands of iterations)
    G = R @ jax.jacfwd(lambda z: _coeffs(z, nf))(z0)
    H = G.T @ G
    H = H + 1e-12 * jnp.trace(H) / H.shape[0] * jnp.eye(H.shape[0], dtype=H.dtype)
    return R, b, res0, jnp.linalg.cholesky(H).T


@partial(jit, static_argnames=("nf", "iterations", "optimizer", "learning_rate", "adam_iterations"))
def _fit(R, b, res0, Lt, z0, m_s, n_res, nf, iterations, optimizer, learning_rate, adam_iterations):
    """The descent of :func:`identify_regressor` as one compiled program, defined once: the
    reduced system and the starting point are arguments, so repeated fits with the same sizes
    and options reuse it (it was a fresh ``jit`` of a closure per call, recompiled every time).
    Returns ``z`` and the loss and mass histories."""

    def coeffs(z):
        return _coeffs(z, nf)

    def masses(z):
        c = coeffs(z)
        return jnp.concatenate([c[: 10 * nf : 10], c[10 * nf :] * m_s])

    to_z = lambda w: z0 + jax.scipy.linalg.solve_triangular(Lt, w, lower=False)  # noqa: E731

    def loss(w):
        r = R @ coeffs(to_z(w)) - b
        return (jnp.dot(r, r) + res0) / n_res

    w, losses, hist = _descend(
        loss, lambda w: masses(to_z(w)), jnp.zeros_like(z0), iterations, optimizer, learning_rate, adam_iterations
    )
    return to_z(w), losses, hist


def _descend(loss, masses, z0, iterations, optimizer, learning_rate, adam_iterations):
    """Minimize ``loss`` from ``z0`` in one ``lax.scan`` (traced inside :func:`_fit`); histories
    of the loss and of ``masses`` at every incoming iterate, plus the final one."""

    def run_lbfgs(z, n):
        opt = optax.lbfgs()
        vg = optax.value_and_grad_from_state(loss)

        def step(carry, _):
            z, st = carry
            val, g = vg(z, state=st)
            upd, st = opt.update(g, st, z, value=val, grad=g, value_fn=loss)
            return (optax.apply_updates(z, upd), st), (val, masses(z))

        (z, _), h = jax.lax.scan(step, (z, opt.init(z)), None, length=n)
        return z, h

    def run_adam(z, n):
        opt = optax.adam(optax.cosine_decay_schedule(learning_rate, max(n, 1), alpha=0.05))

        def step(carry, _):
            z, st = carry
            val, g = jax.value_and_grad(loss)(z)
            upd, st = opt.update(g, st, z)
            return (optax.apply_updates(z, upd), st), (val, masses(z))

        (z, _), h = jax.lax.scan(step, (z, opt.init(z)), None, length=n)
        return z, h

    def run(z):
        if optimizer == "lbfgs":
            z, (ls, ms) = run_lbfgs(z, iterations)
        elif optimizer == "adam":
            z, (ls, ms) = run_adam(z, iterations)
        else:
            na = min(adam_iterations, iterations)
            z, (l1, m1) = run_adam(z, na)
            z, (l2, m2) = run_lbfgs(z, iterations - na)
            ls, ms = jnp.concatenate([l1, l2]), jnp.concatenate([m1, m2])
        return z, jnp.concatenate([ls, loss(z)[None]]), jnp.concatenate([ms, masses(z)[None]])

    return run(z0)


def perturb_density(mech: Mechanism, bodies, key, rel: float = 0.3) -> Mechanism:
    """A wrong guess of known geometry: each body's mass and inertia scaled by the same factor
    ``exp(U(-rel, rel))`` (COM unchanged), i.e. a wrong material density. One compiled program."""
    return _perturb_density(mech, tuple(bodies), key, rel)


@filter_jit
def _perturb_density(mech: Mechanism, bodies: tuple, key, rel) -> Mechanism:
    idx = body_indices(mech, bodies)
    s = jnp.exp(jax.random.uniform(key, (idx.size,), minval=-rel, maxval=rel))
    return eqx.tree_at(
        lambda k: (k.mass, k.inertia),
        mech,
        (mech.mass.at[idx].multiply(s), mech.inertia.at[idx].multiply(s[:, None, None])),
    )


def stewart_identification_bodies(mech: Mechanism):
    """``(full, scaled, unidentifiable)`` for a Stewart platform: the payload with all 10
    parameters (the platform is welded to it, only their sum shows, so it is held at its CAD
    values), every leg barrel and rod with a mass scale, and the yokes (rotating about one axis
    through their COM: their whole effort is ``I_xx`` times the yoke's angular acceleration,
    ~1e-4 of the leg forces) held at CAD values."""
    names = mech.body_names
    full = tuple(n for n in names if n == "payload")
    scaled = tuple(n for n in names if n.startswith("leg_") and (n.endswith("_barrel") or n.endswith("_rod")))
    fixed = tuple(n for n in names if n.endswith("_yoke"))
    return full, scaled, fixed


def mass_identifiability(Y, rtol: float = 1e-9):
    """Structural identifiability of the masses from a regressor ``Y`` (N, np, 10 nf) of ``full``
    bodies (:func:`regressor` with no scaled bodies): ``(rank, singular values, component)``
    where ``component[j]`` in [0, 1] is the norm of the projection of body j's mass direction
    onto the row space of ``Y`` (1: the mass alone is determined by noise-free data; 0: it does
    not move the efforts at all; in between: only combinations with other parameters are)."""
    A = np.asarray(Y).reshape(-1, Y.shape[-1])
    _, sv, Vt = np.linalg.svd(A, full_matrices=False)
    r = int((sv > rtol * sv[0]).sum())
    comp = np.linalg.norm(Vt[:r, 0::10], axis=0)
    return r, sv, comp
