"""Inertial-parameter identification of closed chains by gradient descent (optax) through the
constrained inverse dynamics, with a physically consistent parametrization.

Model: for a closed chain driven by ports, ``M a + h = P^T f + C^T lambda`` with ``C a + gamma =
0``. With the port lift ``E_p`` (``C E_p = 0``, ``P E_p = I``; :func:`jaxmech.port_tangent_map`)
the constrained inverse dynamics in port space is

    f = E_p^T rnea(theta; q, v, a)                                             (1)

(the multipliers drop out because ``C E_p = 0``). ``E_p`` depends on kinematics only, so it is
computed once per sample; (1) is linear in the standard inertial parameters of every body.

Parametrization (Rucker & Wensing, "Smooth parameterization of rigid-body inertia", RA-L 2022):
each body's 4x4 pseudo-inertia ``J = [[Sigma, m c], [m c^T, m]]`` with
``Sigma = 0.5 tr(Ibar) I - Ibar`` (``Ibar`` = rotational inertia about the body origin) is
``J = U U^T``, ``U = e^alpha [[e^d1, s12, s13, t1], [0, e^d2, s23, t2], [0, 0, e^d3, t3],
[0, 0, 0, 1]]``. Every real 10-vector gives ``J`` positive definite, i.e. a positive mass and an
inertia that satisfies the triangle inequalities (density realizable): physical consistency
holds at every iterate, not only at the optimum.

Two parametrizations, mixed freely per body (:func:`identify_regressor`):

* ``full`` bodies -- all 10 parameters in the log-Cholesky form above (COM and inertia unknown:
  an unknown payload);
* ``scaled`` bodies -- one mass scale ``exp(s)`` multiplying the body's whole ``(m, m c, I)``
  (geometry known from CAD, material density unknown). Physically consistent for every real
  ``s``; identifiable as soon as the body moves the efforts at all.

Efforts (1) are linear in the standard parameters ``(m, m c, Ibar)``, so
:func:`identify_regressor` builds the regressor once (``jax.linearize`` of (1), exact), weights it
by each port's RMS effort, reduces it by QR and runs optax L-BFGS on the unconstrained parameters
(preconditioned by the Gauss-Newton Hessian at the initial guess) in one jitted ``lax.scan``:
each iteration costs O(p^2) whatever the number of samples. :func:`identify` (kept) instead
evaluates (1) through ``rnea`` at every iteration, full 10 parameters only.

Identifiability on ``configs/stewart.toml`` (:func:`mass_identifiability`,
``benchmarks/sysid.py``): with all 10 parameters on each of the 19 moving bodies (payload and 18
leg bodies; the platform is welded to the payload, only their sum shows), the 190-column
regressor has rank 88. A yoke (rotating about one axis through its COM) and a barrel (rotating
about the fixed base pivot) show only their first moment and inertia about the pivot: their mass
direction has no component in the regressor's row space. A rod's mass and the payload's mass
have components ~0.49 and ~0.40: a point mass at a rod's top spherical joint moves freely between
rod and platform. So the old full-10 fit of the rods stayed 10-17 % off even noise-free, whatever
the data. With the mixed model -- payload full, the 6 barrels and 6 rods by mass scale, yokes
held at CAD values -- all 13 masses are recovered to round-off from noise-free data and, with the
platform-twist excitation :data:`STEWART_EXCITATION`, 65,536 samples and 5 % effort noise (of
each leg's RMS force), to 1.1 % mean error, 3.1 % max (``benchmarks/results/sysid.json``; 64 k
samples are needed because a leg body carries a few newtons of ~110 N RMS leg forces, and barrel
and rod of a leg are strongly correlated). The yokes stay out: their whole effort, ``I_xx`` times
their angular acceleration, is ~1e-4 of the leg forces (Cramer-Rao standard deviation of a yoke
density > 30x its value with 512 samples of leg-length excitation at 5 % noise).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import lapack
from ._jit import filter_jit, jit
from .dynamics import rnea
from .inertial import (  # noqa: F401  (re-exported: jaxmech.sysid.<name> stays valid)
    _U,
    _phi_from_pseudo,
    body_indices,
    from_pseudo_inertia,
    get_theta,
    inertial_from_standard,
    inertial_to_theta,
    pseudo_inertia,
    scaled_inertial,
    set_theta,
    standard_parameters,
    theta_to_inertial,
    theta_to_inertial_batch,
    theta_to_standard,
)
from .mechanism import Mechanism
from .reduction import acceleration_lift, port_jacobian, tangent_map

# ----------------------------------------------------------------------------- data


class Dataset(eqx.Module):
    """Samples of motion and port efforts: ``q`` (N, nq), ``v``/``a`` (N, nv) consistent with the
    closure, ``Ep`` (N, nv, np) port lifts, ``f`` (N, np) measured efforts (N or N m), optional
    per-sample weights ``w`` (N,). Build from plain arrays with :meth:`from_measurements` (or
    :meth:`from_encoders` when only the actuated coordinates were measured)."""

    q: jnp.ndarray
    v: jnp.ndarray
    a: jnp.ndarray
    Ep: jnp.ndarray
    f: jnp.ndarray
    w: jnp.ndarray | None = None

    @classmethod
    def from_measurements(cls, mech: Mechanism, q, v, a, effort, weights=None, **tolerances) -> Dataset:
        """See :func:`jaxmech.sysid_data.from_measurements`."""
        from .sysid_data import from_measurements

        return from_measurements(mech, q, v, a, effort, weights=weights, **tolerances)

    @classmethod
    def from_encoders(cls, mech: Mechanism, t, q_actuated, effort, **kw) -> Dataset:
        """See :func:`jaxmech.sysid_data.from_encoders`."""
        from .sysid_data import from_encoders

        return from_encoders(mech, t, q_actuated, effort, **kw)


def port_lift(mech: Mechanism, q) -> jnp.ndarray:
    """``E_p = E (P E)^-1`` (nv, np): velocity lift from all port speeds (mobility = ports)."""
    P = port_jacobian(mech, q)
    E = tangent_map(mech, q, d=P.shape[0])
    return E @ lapack.inv(P @ E)


def port_inverse_dynamics(mech: Mechanism, q, v, a, Ep=None) -> jnp.ndarray:
    """Port efforts (np,) that produce the consistent motion (q, v, a), eq. (1)."""
    Ep = port_lift(mech, q) if Ep is None else Ep
    return Ep.T @ rnea(mech, q, v, a)


def make_dataset(
    mech: Mechanism,
    key,
    n: int,
    noise: float = 0.0,
    spread: float = 0.2,
    speed=0.5,
    accel=5.0,
    independent=None,
    chunk: int = 8192,
) -> Dataset:
    """``n`` random consistent states of the true model ``mech``: configurations near q0 along the
    mobility (:func:`jaxmech.simulate.random_closed_configurations`, ``spread``), speeds
    ``v = E u`` and accelerations ``a = E udot + a_gamma`` (:func:`jaxmech.acceleration_lift`)
    with ``u ~ speed * N(0, 1)`` and ``udot ~ accel * N(0, 1)``, efforts from eq. (1) plus
    Gaussian noise of ``noise`` times each port's RMS effort (over the data set).

    ``independent`` chooses the coordinates ``u`` (default: the mobility's own choice, the
    actuated leg lengths on a Stewart platform); ``speed``/``accel`` may be arrays (d,) scaling
    each coordinate. ``independent=["platform_free"]`` with angular-first scales drives a
    platform by its body twist, see :data:`STEWART_EXCITATION`. Computed in chunks of ``chunk``
    samples by one compiled function (re-used across calls)."""
    from .simulate import random_closed_configurations

    k1, k2, k3, k4 = jax.random.split(key, 4)
    d = len(mech.topo.port_names)
    ind = None if independent is None else tuple(independent)
    Q = filter_jit(random_closed_configurations)(mech, k1, n, spread)
    U = jnp.asarray(speed, Q.dtype) * jax.random.normal(k2, (n, d), Q.dtype)
    Ud = jnp.asarray(accel, Q.dtype) * jax.random.normal(k3, (n, d), Q.dtype)
    parts = [
        _lift_states(mech, Q[i : i + chunk], U[i : i + chunk], Ud[i : i + chunk], ind, d) for i in range(0, n, chunk)
    ]
    V, A, Ep, F = (jnp.concatenate([p[j] for p in parts], 0) for j in range(4))
    return add_effort_noise(Dataset(Q, V, A, Ep, F), k4, noise)


def add_effort_noise(data: Dataset, key, noise: float) -> Dataset:
    """``data`` with Gaussian noise of standard deviation ``noise`` times each port's RMS effort
    (over the data set) added to the efforts (the motion stays exact)."""
    F = data.f
    rms = jnp.sqrt(jnp.mean(F**2, 0))
    return eqx.tree_at(lambda d: d.f, data, F + noise * rms * jax.random.normal(key, F.shape, F.dtype))


@filter_jit
def _lift_states(mech, Q, U, Ud, independent, d):
    ind = None if independent is None else list(independent)

    def one(q, u, ud):
        v = tangent_map(mech, q, independent=ind, d=d) @ u
        a, _ = acceleration_lift(mech, q, v, ud, independent=ind, d=d)
        Ep = port_lift(mech, q)
        return v, a, Ep, port_inverse_dynamics(mech, q, v, a, Ep)

    return jax.vmap(one)(Q, U, Ud)


# ----------------------------------------------------------------------------- fitting


class SysIdResult(eqx.Module):
    """``mech`` the identified model, ``theta`` (nbodies, 10), ``loss`` history (iterations+1,),
    ``errors`` history of the relative mass errors (iterations+1, nbodies) when a reference was
    given (else empty)."""

    mech: Mechanism
    theta: jnp.ndarray
    loss: np.ndarray
    mass_errors: np.ndarray


def identify(
    mech_guess: Mechanism,
    data: Dataset,
    bodies,
    *,
    iterations: int = 200,
    optimizer: str = "lbfgs",
    learning_rate: float = 0.02,
    batch_size: int | None = None,
    key=None,
    reference: Mechanism | None = None,
    callback: Callable | None = None,
) -> SysIdResult:
    """Fit the inertial parameters of ``bodies`` (others held at ``mech_guess``'s values) to the
    efforts in ``data`` by gradient descent on the log-Cholesky parameters; loss = mean squared
    effort error normalized by each port's RMS effort.

    ``optimizer="lbfgs"`` (default): ``optax.lbfgs`` with its zoom line search on the full batch
    (the loss is a smooth least-squares problem; L-BFGS needs far fewer iterations than Adam on
    its poorly scaled directions). ``"adam"``: ``optax.adam`` with a cosine-decayed
    ``learning_rate``, optionally on random minibatches of ``batch_size`` samples. ``reference``
    (the true model, for tests/demos) only records the mass-error history."""
    theta0 = get_theta(mech_guess, bodies)
    scale = jnp.sqrt(jnp.mean(data.f**2, 0)) + 1e-12
    idx = body_indices(mech_guess, bodies)
    N = data.q.shape[0]

    def loss_fn(theta, sl):
        m = set_theta(mech_guess, bodies, theta)
        pred = jax.vmap(lambda q, v, a, E: port_inverse_dynamics(m, q, v, a, E))(
            data.q[sl], data.v[sl], data.a[sl], data.Ep[sl]
        )
        return jnp.mean(((pred - data.f[sl]) / scale) ** 2)

    full = lambda t: loss_fn(t, jnp.arange(N))  # noqa: E731
    if optimizer == "lbfgs":
        opt = optax.lbfgs()
        vg = optax.value_and_grad_from_state(full)

        @jit
        def update(theta, ost, k):
            val, g = vg(theta, state=ost)
            upd, ost = opt.update(g, ost, theta, value=val, grad=g, value_fn=full)
            return optax.apply_updates(theta, upd), ost, val

    elif optimizer == "adam":
        opt = optax.adam(optax.cosine_decay_schedule(learning_rate, iterations, alpha=0.05))

        @jit
        def update(theta, ost, k):
            sl = jnp.arange(N) if batch_size is None else jax.random.choice(k, N, (batch_size,), replace=False)
            val, g = jax.value_and_grad(loss_fn)(theta, sl)
            upd, ost = opt.update(g, ost, theta)
            return optax.apply_updates(theta, upd), ost, val

    else:
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}")

    m_true = None if reference is None else np.asarray(reference.mass)[idx]
    theta, ost = theta0, opt.init(theta0)
    key = jax.random.PRNGKey(0) if key is None else key
    # the optimizer state update() returns has strong dtypes where opt.init's has weak ones;
    # start from those types so that update compiles once, not twice
    _, ost_type, _ = jax.eval_shape(update, theta, ost, key)
    ost = jax.tree.map(lambda x, t: jnp.asarray(x, t.dtype), ost, ost_type)
    losses, errs = [], []
    for it in range(iterations):
        key, sub = jax.random.split(key)
        theta_new, ost, val = update(theta, ost, sub)
        losses.append(float(val))  # loss at the incoming theta
        if m_true is not None:
            m = np.asarray(theta_to_inertial_batch(theta))
            errs.append(np.abs(m - m_true) / m_true)
        if callback is not None:
            callback(it, losses[-1])
        theta = theta_new
    losses.append(float(jit(full)(theta)))
    if m_true is not None:
        errs.append(np.abs(np.asarray(theta_to_inertial_batch(theta)) - m_true) / m_true)
    return SysIdResult(set_theta(mech_guess, bodies, theta), theta, np.asarray(losses), np.asarray(errs))


def perturb(mech: Mechanism, bodies, key, rel: float = 0.3) -> Mechanism:
    """A wrong initial guess: masses and inertias scaled by ``exp(U(-rel, rel))``, COMs shifted
    by ``rel`` times 5 cm (uniform). Stays physical."""
    idx = body_indices(mech, bodies)
    k1, k2, k3 = jax.random.split(key, 3)
    n = idx.size
    sm = jnp.exp(jax.random.uniform(k1, (n,), minval=-rel, maxval=rel))
    si = jnp.exp(jax.random.uniform(k2, (n,), minval=-rel, maxval=rel))
    dc = 0.05 * rel * jax.random.uniform(k3, (n, 3), minval=-1.0, maxval=1.0)
    return eqx.tree_at(
        lambda k: (k.mass, k.com, k.inertia),
        mech,
        (
            mech.mass.at[idx].multiply(sm),
            mech.com.at[idx].add(dc),
            mech.inertia.at[idx].multiply(si[:, None, None]),
        ),
    )


def parameter_errors(est: Mechanism, ref: Mechanism, bodies) -> dict:
    """Per-body errors: relative mass, COM (m), relative inertia (Frobenius)."""
    idx = body_indices(ref, bodies)
    m_e = np.abs(np.asarray(est.mass)[idx] - np.asarray(ref.mass)[idx]) / np.asarray(ref.mass)[idx]
    c_e = np.linalg.norm(np.asarray(est.com)[idx] - np.asarray(ref.com)[idx], axis=-1)
    Ir = np.asarray(ref.inertia)[idx]
    i_e = np.linalg.norm(np.asarray(est.inertia)[idx] - Ir, axis=(1, 2)) / np.linalg.norm(Ir, axis=(1, 2))
    return {"mass_rel": m_e, "com_abs": c_e, "inertia_rel": i_e}


# ----------------------------------------------------------------------------- regressor identification
#
# Standard inertial parameters of a body: phi = (m, m c (3), Ibar_xx, Ibar_yy, Ibar_zz, Ibar_xy,
# Ibar_xz, Ibar_yz) with Ibar the rotational inertia about the body origin. Efforts (1) are
# linear in them: f = Y(q, v, a) phi (+ damping/armature terms, which do not depend on phi).

#: Excitation used for the Stewart identification (make_dataset keywords): the platform is driven
#: by its body twist (angular first) at ~2 rad/s, 2 m/s with ~1 rad/s^2, 1 m/s^2 accelerations,
#: poses within 0.2 m of leg stroke of q0. Fast motion with small platform acceleration lets the
#: legs' velocity-product and gravity efforts stand out against the platform's inertia (Cramer-Rao
#: bound of the leg mass scales ~2x lower than the leg-space excitation of the same size).
STEWART_EXCITATION = dict(
    spread=0.2,
    speed=(2.0, 2.0, 2.0, 2.0, 2.0, 2.0),
    accel=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
    independent=("platform_free",),
)


def _all_phi(mech):
    return jax.vmap(standard_parameters)(mech.mass, mech.com, mech.inertia)


def _with_phi(mech, phi):
    m, c, I = jax.vmap(inertial_from_standard)(phi)
    return eqx.tree_at(lambda k: (k.mass, k.com, k.inertia), mech, (m, c, I))


def _directions(mech, full, scaled):
    """Directions (p, nb, 10) in the standard parameters of all bodies: 10 unit vectors per
    ``full`` body, the body's own phi per ``scaled`` body."""
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
    D = _directions(mech, full, scaled)
    N = data.q.shape[0]
    Ys, F0 = [], []
    for i in range(0, N, chunk):
        sl = slice(i, i + chunk)
        Y, f0 = _regressor_chunk(mech, D, data.q[sl], data.v[sl], data.a[sl], data.Ep[sl])
        Ys.append(Y)
        F0.append(f0)
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
    full, scaled = tuple(full), tuple(scaled)
    nf, ns = len(full), len(scaled)
    Y, off = regressor(mech_guess, data, full, scaled) if Y is None else Y
    N, npt, p = Y.shape
    z0 = jnp.concatenate([get_theta(mech_guess, full).reshape(-1), jnp.zeros(ns, Y.dtype)])
    idx_s = body_indices(mech_guess, scaled)
    m_s = jnp.asarray(mech_guess.mass)[idx_s]
    R, b, res0, Lt = _reduced_system(Y, data.f, off, z0, nf)
    n_res = N * npt

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
    z = to_z(w)
    losses = np.asarray(losses)
    hist = np.asarray(hist)
    theta, log_scale = z[: 10 * nf].reshape(nf, 10), z[10 * nf :]
    mech = set_theta(mech_guess, full, theta) if nf else mech_guess
    if ns:
        m, c, I = jit(jax.vmap(scaled_inertial))(log_scale, mech.mass[idx_s], mech.com[idx_s], mech.inertia[idx_s])
        mech = eqx.tree_at(
            lambda k: (k.mass, k.inertia), mech, (mech.mass.at[idx_s].set(m), mech.inertia.at[idx_s].set(I))
        )
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


def _descend(loss, masses, z0, iterations, optimizer, learning_rate, adam_iterations):
    """Minimize ``loss`` from ``z0`` in one jitted ``lax.scan``; histories of the loss and of
    ``masses`` at every incoming iterate, plus the final one."""
    if optimizer not in ("lbfgs", "adam", "adam+lbfgs"):
        raise ValueError(f"optimizer must be 'lbfgs', 'adam' or 'adam+lbfgs', got {optimizer!r}")

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

    @jit
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
    ``exp(U(-rel, rel))`` (COM unchanged), i.e. a wrong material density."""
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
