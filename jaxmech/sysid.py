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

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._jit import filter_jit
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
from .reduction import acceleration_lift, port_tangent_map, tangent_map

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
    """``E_p = E (P E)^-1`` (nv, np): velocity lift from all port speeds (mobility = ports);
    :func:`jaxmech.port_tangent_map` (identity in place of a singular ``P E``, no NaN)."""
    return port_tangent_map(mech, q)


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


_get_theta = filter_jit(get_theta)  # one program each, body names static
_set_theta = filter_jit(set_theta)


def _optimizer(optimizer: str, learning_rate, iterations: int):
    if optimizer == "lbfgs":
        return optax.lbfgs()
    return optax.adam(optax.cosine_decay_schedule(learning_rate, iterations, alpha=0.05))


def _loss(mech_guess, data, bodies, theta, sl):
    """:func:`identify`'s loss: mean squared effort error over the samples ``sl``, each port's
    error divided by its RMS effort over the whole dataset."""
    scale = jnp.sqrt(jnp.mean(data.f**2, 0)) + 1e-12
    m = set_theta(mech_guess, bodies, theta)
    pred = jax.vmap(lambda q, v, a, E: port_inverse_dynamics(m, q, v, a, E))(
        data.q[sl], data.v[sl], data.a[sl], data.Ep[sl]
    )
    return jnp.mean(((pred - data.f[sl]) / scale) ** 2)


@filter_jit
def _full_loss(mech_guess, data, bodies, theta):
    return _loss(mech_guess, data, bodies, theta, jnp.arange(data.q.shape[0]))


@filter_jit
def _update(mech_guess, data, theta, ost, k, bodies, optimizer, learning_rate, iterations, batch_size):
    """One optimizer step of :func:`identify`. The model and the data are arguments (not
    constants of a program built per call), so one compiled program serves every call with the
    same shapes and options; ``bodies``, the optimizer's name and settings are static."""
    N = data.q.shape[0]
    opt = _optimizer(optimizer, learning_rate, iterations)
    full = lambda t: _loss(mech_guess, data, bodies, t, jnp.arange(N))  # noqa: E731
    if optimizer == "lbfgs":
        val, g = optax.value_and_grad_from_state(full)(theta, state=ost)
        upd, ost = opt.update(g, ost, theta, value=val, grad=g, value_fn=full)
    else:
        sl = jnp.arange(N) if batch_size is None else jax.random.choice(k, N, (batch_size,), replace=False)
        val, g = jax.value_and_grad(lambda t: _loss(mech_guess, data, bodies, t, sl))(theta)
        upd, ost = opt.update(g, ost, theta)
    return optax.apply_updates(theta, upd), ost, val


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
    if optimizer not in ("lbfgs", "adam"):
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}")
    bodies = tuple(bodies)
    theta0 = _get_theta(mech_guess, bodies)
    idx = body_indices(mech_guess, bodies)
    opt = _optimizer(optimizer, learning_rate, iterations)

    # L-BFGS uses neither the learning rate nor the length: keep them out of its program's key
    settings = (
        (optimizer, learning_rate, iterations, batch_size) if optimizer == "adam" else ("lbfgs", None, None, None)
    )

    def update(theta, ost, k):
        return _update(mech_guess, data, theta, ost, k, bodies, *settings)

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
    losses.append(float(_full_loss(mech_guess, data, bodies, theta)))
    if m_true is not None:
        errs.append(np.abs(np.asarray(theta_to_inertial_batch(theta)) - m_true) / m_true)
    mech = _set_theta(mech_guess, bodies, theta)
    return SysIdResult(mech, theta, np.asarray(losses), np.asarray(errs))


def perturb(mech: Mechanism, bodies, key, rel: float = 0.3) -> Mechanism:
    """A wrong initial guess: masses and inertias scaled by ``exp(U(-rel, rel))``, COMs shifted
    by ``rel`` times 5 cm (uniform). Stays physical. One compiled program (body names static)."""
    return _perturb(mech, tuple(bodies), key, rel)


@filter_jit
def _perturb(mech: Mechanism, bodies: tuple, key, rel) -> Mechanism:
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


from .sysid_regressor import (  # noqa: E402, F401  (re-exported: jaxmech.sysid.<name> stays valid)
    RegressorSysIdResult,
    identify_regressor,
    mass_identifiability,
    perturb_density,
    regressor,
    stewart_identification_bodies,
)
