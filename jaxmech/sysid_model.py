"""System identification from measured data: datasets from plain arrays, per-body
parametrizations, joint friction / armature / effort-offset terms, and an identifiability report.

Model (see :mod:`jaxmech.sysid`): port efforts ``f = E_p^T (rnea(phi; q, v, a) + tau_j)`` with
``phi`` the standard inertial parameters of every body and ``tau_j`` the joint terms, plus a
per-port effort offset. Per body (``bodies={name: kind}``), one of:

* ``"full"`` -- all 10 parameters, log-Cholesky (physically consistent at every iterate);
* ``"mass"`` -- the mass only (COM and inertia about the COM known): coefficient = mass (kg);
* ``"density"`` -- one scale of the whole body (geometry known): coefficient = scale;
* ``("point", frame)`` -- an added point mass (kg) at a named frame of that body;
* an array ``(k, 10)`` -- user directions ``D`` in the standard parameters
  ``(m, m c, Ibar_xx, yy, zz, xy, xz, yz)``: ``phi = phi_guess + D^T z``.

Joint terms (``joints={name: ("viscous", "coulomb", "armature")}`` on 1-D joints):
``tau_i = b_i v_i + c_i tanh(v_i / coulomb_eps) + I_i a_i`` (N m s/rad or N s/m, N m or N,
kg m^2 or kg); ``offsets=True`` adds a constant effort per port (N or N m). The guess's own
damping / armature of a joint with such a term is replaced, not added to.

Everything but ``"full"`` is linear in its coefficients, so :func:`fit` solves a linear least
squares problem (minimum-norm in the unidentifiable directions, which keep the guess's values)
and runs Gauss-Newton on the log-Cholesky parameters when ``"full"`` bodies are present.
The report (:class:`Fit`) gives the regressor rank, the base (identifiable) combinations, the
predicted standard deviation of every coefficient and mass (``inf`` with a warning when it has a
component outside the identifiable space, never NaN), and a flag when the residual stays above
the noise floor estimated by the richest linear model of the same data (F-test): a probable wrong
parametrization.
"""

from __future__ import annotations

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._jit import filter_jit, jit
from .graph import ModelError
from .inertial import inertial_from_standard, inertial_to_theta, standard_parameters, theta_to_standard
from .mechanism import Mechanism


def _point_direction(r) -> np.ndarray:
    """Standard parameters of a unit point mass at r (3,) in the body frame, (10,) (host numpy)."""
    x, y, z = (float(c) for c in np.asarray(r))
    return np.array([1.0, x, y, z, y * y + z * z, x * x + z * z, x * x + y * y, -x * y, -x * z, -y * z])


@jit
def _standard_all(mass, com, inertia):
    """Standard parameters (nb, 10) of every body: one compiled program per model size."""
    return jax.vmap(standard_parameters)(mass, com, inertia)


@jit
def _inertials_of(phi):
    """(mass, com, inertia) of standard parameters (k, 10)."""
    return jax.vmap(inertial_from_standard)(phi)


class _Spec(eqx.Module):
    """Affine map coefficients -> standard parameters of all bodies: ``phi = base + sum_k x_k D_k``
    for the linear coefficients, plus ``full`` bodies (10 columns each, base 0)."""

    D: jnp.ndarray  # (p_lin, nb, 10)
    base: jnp.ndarray  # (nb, 10)
    x0: jnp.ndarray  # (p_lin,) guess values
    names: tuple = eqx.field(static=True)
    mass_of: tuple = eqx.field(static=True)  # per identified body: (body, kind, column index)


def _body_spec(mech: Mechanism, bodies: dict):
    """The affine spec on the host (numpy, the model's float dtype): ``base`` (nb, 10), the
    directions ``D`` (list of (nb, 10)), guesses ``x0``, coefficient names, full bodies and
    ``(body, kind, column)`` of the mass-like coefficients. Host arithmetic, so that a first fit
    does not compile one small program per array operation."""
    phi0 = np.asarray(_standard_all(mech.mass, mech.com, mech.inertia))
    dt = phi0.dtype
    nb = mech.nb
    base = phi0.copy()
    mass, com = np.asarray(mech.mass), np.asarray(mech.com)
    D, x0, names, full, lin_mass = [], [], [], [], []

    def direction(i, row):
        d = np.zeros((nb, 10), dt)
        d[i] = row
        return d

    for b, kind in bodies.items():
        if b not in mech.body_names:
            raise ModelError(f"{mech.name}: sysid body '{b}' does not exist (bodies: {', '.join(mech.body_names)})")
        i = mech.body_names.index(b)
        if isinstance(kind, str) and kind == "full":
            full.append(b)
            base[i] = 0.0
            continue
        if isinstance(kind, str) and kind == "mass":
            d = _point_direction(com[i])
            base[i] -= mass[i] * d
            lin_mass.append((b, "mass", len(D)))
            D.append(direction(i, d))
            x0.append(mass[i])
            names.append(f"{b}.mass")
        elif isinstance(kind, str) and kind == "density":
            base[i] = 0.0
            lin_mass.append((b, "density", len(D)))
            D.append(direction(i, phi0[i]))
            x0.append(1.0)
            names.append(f"{b}.scale")
        elif isinstance(kind, tuple) and len(kind) == 2 and kind[0] == "point":
            f = kind[1]
            if f not in mech.frame_names or mech.topo.frame_body[mech.frame_names.index(f)] != i:
                raise ModelError(f"{mech.name}: sysid point mass of body '{b}': '{f}' is not a frame of that body")
            r = np.asarray(mech.frame_pose[mech.frame_names.index(f)])[:3, 3]
            lin_mass.append((b, "point", len(D)))
            D.append(direction(i, _point_direction(r)))
            x0.append(0.0)
            names.append(f"{b}.point_mass@{f}")
        else:
            Dk = np.asarray(kind, dtype=float)
            if Dk.ndim != 2 or Dk.shape[1] != 10:
                raise ModelError(
                    f"{mech.name}: sysid body '{b}': kind must be 'full', 'mass', 'density', ('point', frame) "
                    f"or directions of shape (k, 10), got {kind!r}"
                )
            for k, row in enumerate(Dk):
                D.append(direction(i, row))
                x0.append(0.0)
                names.append(f"{b}.dir{k}")
    return base, D, np.asarray(x0, dt).reshape(-1), names, tuple(full), tuple(lin_mass)


def _joint_columns(mech: Mechanism, joints: dict):
    """[(v index, term)] for the joint terms."""
    out = []
    lin_v = set(np.asarray(mech.topo.lin_v, int).tolist())
    for j, terms in joints.items():
        if j not in mech.joint_names:
            raise ModelError(f"{mech.name}: sysid joint '{j}' does not exist (joints: {', '.join(mech.joint_names)})")
        vi = int(mech.topo.v_start[mech.joint_names.index(j)])
        if vi not in lin_v:
            raise ModelError(f"{mech.name}: sysid joint '{j}': friction/armature terms need a 1-D joint")
        for t in (terms,) if isinstance(terms, str) else terms:
            if t not in ("viscous", "coulomb", "armature"):
                raise ModelError(f"{mech.name}: sysid joint '{j}': unknown term '{t}' (viscous, coulomb, armature)")
            out.append((vi, t, f"{j}.{t}"))
    return out


@filter_jit
def _regress(mech, D, q, v, a, Ep):
    """Efforts (N, np) of the model and their derivatives (N, np, p) along the directions D."""
    from .sysid import port_inverse_dynamics

    phi0 = jax.vmap(standard_parameters)(mech.mass, mech.com, mech.inertia)

    def _with_phi(mech, phi):  # massless bodies (COM undefined) stay as they are
        m, h = phi[:, 0], phi[:, 1:4]
        safe = jnp.where(m > 0, m, 1.0)
        c = jnp.where((m > 0)[:, None], h / safe[:, None], mech.com)
        xx, yy, zz, xy, xz, yz = (phi[:, k] for k in range(4, 10))
        Ib = jnp.stack([jnp.stack([xx, xy, xz], -1), jnp.stack([xy, yy, yz], -1), jnp.stack([xz, yz, zz], -1)], -2)
        cc = jnp.einsum("bi,bi->b", c, c)[:, None, None] * jnp.eye(3, dtype=phi.dtype) - jnp.einsum("bi,bj->bij", c, c)
        return eqx.tree_at(lambda k: (k.mass, k.com, k.inertia), mech, (m, c, Ib - m[:, None, None] * cc))

    def one(q, v, a, E):
        f = lambda z: port_inverse_dynamics(_with_phi(mech, phi0 + jnp.tensordot(z, D, 1)), q, v, a, E)  # noqa: E731
        f0, jz = jax.linearize(f, jnp.zeros(D.shape[0], q.dtype))
        return jax.vmap(jz, out_axes=1)(jnp.eye(D.shape[0], dtype=q.dtype)), f0

    return jax.vmap(one)(q, v, a, Ep)


@jit(static_argnames=("jcols", "offsets"))
def _columns(Y, f0, xg, v, a, Ep, coulomb_eps, jcols: tuple, offsets: bool):
    """The regressor with its joint-term and offset columns appended, (N, np, p), and the fixed
    efforts ``y0 = f0 - Y xg`` (N, np). ``jcols``: ((v index, term), ...)."""
    y0 = f0 - Y @ xg
    cols = [Y]
    for vi, t in jcols:
        vv = v[:, vi]
        x = vv if t == "viscous" else jnp.tanh(vv / coulomb_eps) if t == "coulomb" else a[:, vi]
        cols.append((Ep[:, vi, :] * x[:, None])[..., None])
    if offsets:
        N, npt = Ep.shape[0], Ep.shape[2]
        cols.append(jnp.broadcast_to(jnp.eye(npt, dtype=Y.dtype), (N, npt, npt)))
    return jnp.concatenate(cols, -1), y0


def _design(mech: Mechanism, data, bodies: dict, joints: dict, offsets: bool, coulomb_eps: float):
    """Regressor ``Y`` (N, np, p), fixed efforts ``y0`` (N, np), column names, the affine spec."""
    base, D, x0, names, full, lin_mass = _body_spec(mech, bodies)
    jcols = _joint_columns(mech, joints)
    jv = np.asarray(sorted({vi for vi, _, _ in jcols}), int)
    m = mech
    if jv.size:  # identified joint terms replace the guess's own
        damping, armature = np.array(m.damping), np.array(m.armature)
        damping[jv], armature[jv] = 0.0, 0.0
        m = eqx.tree_at(lambda k: (k.damping, k.armature), m, (jnp.asarray(damping), jnp.asarray(armature)))
    nb = mech.nb
    fidx = [mech.body_names.index(b) for b in full]
    Dfull = []
    for i in fidx:
        for k in range(10):
            d = np.zeros((nb, 10), base.dtype)
            d[i, k] = 1.0
            Dfull.append(d)
    Dall = np.stack(D + Dfull) if (D or Dfull) else np.zeros((0, nb, 10), base.dtype)
    Y, f0 = _regress(m, jnp.asarray(Dall), data.q, data.v, data.a, data.Ep)
    phi0 = np.asarray(_standard_all(mech.mass, mech.com, mech.inertia))
    # f0 is at phi0 = base + sum x0 D + full phi0: remove the coefficient part
    xg = np.concatenate([x0, phi0[fidx].reshape(-1)]).astype(base.dtype)
    jkey = tuple((vi, t) for vi, t, _ in jcols)
    Yall, y0 = _columns(Y, f0, jnp.asarray(xg), data.v, data.a, data.Ep, coulomb_eps, jcols=jkey, offsets=bool(offsets))
    names.extend(nm for _, _, nm in jcols)
    if offsets:
        names.extend(f"offset[{k}]" for k in range(data.f.shape[1]))
    p_lin = len(D)
    names = names[:p_lin] + [f"{b}.phi[{k}]" for b in full for k in range(10)] + names[p_lin:]
    # column order: body linear (p_lin), full (10 nf), joint terms, offsets
    return Yall, y0, tuple(names), p_lin, full, lin_mass, x0


class Fit(eqx.Module):
    """Result of :func:`fit`. ``mech``: identified model (bodies and joint damping/armature set);
    ``names`` / ``x`` / ``sd`` (p,): coefficients, their predicted standard deviations (Cramer-Rao
    from the residual; ``inf`` when not identifiable); ``masses`` / ``mass_sd`` (dict body ->
    kg); ``rank`` of the weighted regressor of ``p`` columns; ``base`` (r, p): orthonormal rows
    spanning the identifiable combinations of the coefficients (the base parameters are
    ``base @ x``); ``unidentifiable``: names with a component outside that space;
    ``rms_residual`` (normalized effort units), ``floor_rms`` (of the richest linear model),
    ``f_statistic`` and ``wrong_parametrization`` (True: the residual stays clearly above the
    noise floor)."""

    mech: Mechanism
    x: np.ndarray
    sd: np.ndarray
    names: tuple = eqx.field(static=True)
    masses: dict = eqx.field(static=True)
    mass_sd: dict = eqx.field(static=True)
    rank: int = eqx.field(static=True)
    base: np.ndarray = None
    unidentifiable: tuple = eqx.field(static=True, default=())
    rms_residual: float = eqx.field(static=True, default=0.0)
    floor_rms: float = eqx.field(static=True, default=0.0)
    f_statistic: float = eqx.field(static=True, default=0.0)
    wrong_parametrization: bool = eqx.field(static=True, default=False)

    def summary(self) -> str:
        lines = [f"rank {self.rank} of {len(self.names)} columns; rms residual {self.rms_residual:.3g}"]
        lines += [f"  {n:28s} {x: .6g} +- {s:.3g}" for n, x, s in zip(self.names, self.x, self.sd, strict=True)]
        if self.wrong_parametrization:
            lines.append(
                f"  WARNING: residual above the noise floor (F = {self.f_statistic:.3g}): wrong parametrization?"
            )
        return "\n".join(lines)


def _f_critical(df1: int, df2: int, alpha: float) -> float:
    try:
        from scipy.stats import f as fdist

        return float(fdist.ppf(1.0 - alpha, df1, df2))
    except ImportError:  # Wilson-Hilferty-style bound, conservative for alpha ~ 1e-3
        return 1.0 + 5.0 * np.sqrt(2.0 / max(df1, 1)) + 5.0 * np.sqrt(2.0 / max(df2, 1))


@jit
def _weighted_system(f, w, Y, y0):
    scale = jnp.sqrt(jnp.mean(f**2, 0)) + 1e-12
    sw = jnp.sqrt(w)[:, None]
    A = (sw[..., None] * Y / scale[None, :, None]).reshape(-1, Y.shape[-1])
    y = (sw * (f - y0) / scale).reshape(-1)
    return A, y


def _weighted(data, Y, y0):
    """The least-squares system (A (N np, p), y (N np,)) on the host: samples weighted by
    ``data.w``, each port's efforts normalized by their RMS."""
    w = np.ones(data.f.shape[0]) if data.w is None else np.asarray(data.w)
    A, y = _weighted_system(data.f, jnp.asarray(w, data.f.dtype), Y, y0)
    return np.asarray(A), np.asarray(y)


def _lstsq(A, y, x_ref, rtol):
    if not (np.isfinite(A).all() and np.isfinite(y).all()):
        bad = np.flatnonzero(~np.isfinite(A).all(0))
        raise FloatingPointError(f"sysid: non-finite regressor (columns {bad.tolist()[:10]}) or efforts")
    try:
        U, S, Vt = np.linalg.svd(A, full_matrices=False)
    except np.linalg.LinAlgError:  # LAPACK gesdd can fail to converge on tall, badly scaled A: use gesvd
        import scipy.linalg

        U, S, Vt = scipy.linalg.svd(A, full_matrices=False, lapack_driver="gesvd")
    r = int((S > rtol * S[0]).sum()) if S.size else 0
    dx = Vt[:r].T @ ((U[:, :r].T @ (y - A @ x_ref)) / S[:r])
    x = x_ref + dx
    return x, r, S[:r], Vt[:r], float(np.sum((A @ x - y) ** 2))


def fit(
    mech_guess: Mechanism,
    data,
    bodies: dict,
    joints: dict | None = None,
    *,
    offsets: bool = False,
    coulomb_eps: float = 1e-2,
    iterations: int = 50,
    rtol: float = 1e-9,
    alpha: float = 1e-3,
    warn: bool = True,
) -> Fit:
    """Identify the parametrization ``bodies`` / ``joints`` / ``offsets`` (module docstring) from
    ``data`` (:class:`jaxmech.sysid.Dataset`, e.g. from :func:`jaxmech.sysid.Dataset.from_measurements`;
    its weights ``w`` weight the samples). Loss: weighted mean squared effort error normalized by
    each port's RMS effort. Other bodies keep ``mech_guess``'s values. ``rtol``: relative singular
    value threshold of the rank; ``alpha``: false-alarm level of the wrong-parametrization test."""
    joints = joints or {}
    Y, y0, names, p_lin, full, lin_mass, x0 = _design(mech_guess, data, bodies, joints, offsets, coulomb_eps)
    A, y = _weighted(data, Y, y0)
    nf, p = len(full), A.shape[1]
    fidx = [mech_guess.body_names.index(b) for b in full]
    phi0 = np.asarray(_standard_all(mech_guess.mass, mech_guess.com, mech_guess.inertia))
    i_jv = [k for k, n in enumerate(names) if n.endswith((".viscous", ".coulomb", ".armature"))]
    xg = np.zeros(p)
    xg[:p_lin] = np.asarray(x0)
    xg[p_lin : p_lin + 10 * nf] = phi0[fidx].reshape(-1)
    for k in i_jv:
        j, t = names[k].rsplit(".", 1)
        vi = int(mech_guess.topo.v_start[mech_guess.joint_names.index(j)])
        xg[k] = {"viscous": np.asarray(mech_guess.damping), "armature": np.asarray(mech_guess.armature)}.get(
            t, np.zeros(mech_guess.nv)
        )[vi]
    x, r, S, Vr, rss = _lstsq(A, y, xg, rtol)
    if nf:
        x = _gauss_newton_full(A, y, x, xg, p_lin, nf, iterations, rtol)
        rss = float(np.sum((A @ x - y) ** 2))
    n = A.shape[0]
    sigma2 = rss / max(n - r, 1)
    comp = np.linalg.norm(Vr, axis=0) if r else np.zeros(p)
    ident = comp > 1.0 - 1e-6
    cov_diag = sigma2 * np.sum((Vr / S[:, None]) ** 2, 0) if r else np.zeros(p)
    sd = np.where(ident, np.sqrt(cov_diag), np.inf)
    masses, mass_sd = {}, {}
    mass_guess = np.asarray(mech_guess.mass)
    for b, kind, k in lin_mass:
        i = mech_guess.body_names.index(b)
        m0 = float(mass_guess[i])
        if kind == "mass":
            masses[b], mass_sd[b] = float(x[k]), float(sd[k])
        elif kind == "density":
            masses[b], mass_sd[b] = float(x[k]) * m0, float(sd[k]) * m0
        else:
            masses[b], mass_sd[b] = m0 + float(x[k]), float(sd[k])
    for q, b in enumerate(full):
        k = p_lin + 10 * q
        masses[b], mass_sd[b] = float(x[k]), float(sd[k])
    bad = tuple(nm for nm, ok in zip(names, ident, strict=True) if not ok)
    if bad and warn:
        warnings.warn(
            f"{mech_guess.name}: regressor rank {r} of {p}; not identifiable from these data (component outside "
            f"the identifiable space; value = guess + minimum-norm correction, SD = inf): {', '.join(bad)}",
            RuntimeWarning,
            stacklevel=2,
        )
    # noise floor: the richest linear model (every body's 10 parameters, friction and armature on
    # every 1-D joint, effort offsets)
    rich = {b: "full" for b, m_b in zip(mech_guess.body_names, mass_guess, strict=True) if m_b > 0}
    lin_j = {mech_guess.joint_names[b]: ("viscous", "coulomb", "armature") for b in _one_dof_joints(mech_guess)}
    Yr, y0r, *_ = _design(mech_guess, data, rich, lin_j, True, coulomb_eps)
    Ar, yr = _weighted(data, Yr, y0r)
    _, r_f, _, _, rss_f = _lstsq(Ar, yr, np.zeros(Ar.shape[1]), rtol)
    rms = float(np.sqrt(rss / n))
    df1, df2 = max(r_f - r, 1), max(n - r_f, 1)
    F = ((rss - rss_f) / df1) / max(rss_f / df2, 1e-300)
    wrong = bool(rms > 1e-7 and F > _f_critical(df1, df2, alpha))
    if wrong and warn:
        warnings.warn(
            f"{mech_guess.name}: residual rms {rms:.3g} stays above the noise floor {np.sqrt(rss_f / n):.3g} of the "
            f"richest model (F = {F:.3g} on ({df1}, {df2}) dof): probable wrong parametrization",
            RuntimeWarning,
            stacklevel=2,
        )
    mech = _apply(mech_guess, bodies, names, x, p_lin, full, fidx, i_jv)
    base_rows = Vr
    return Fit(mech, x, sd, names, masses, mass_sd, r, base_rows, bad, rms, float(np.sqrt(rss_f / n)), float(F), wrong)


def _one_dof_joints(mech: Mechanism):
    """Indices of the joints whose first velocity coordinate is a 1-D (revolute/prismatic) one."""
    lin_v = set(np.asarray(mech.topo.lin_v, int).tolist())
    return [
        b
        for b, t in enumerate(mech.topo.joint_types)
        if t in ("revolute", "prismatic") and int(mech.topo.v_start[b]) in lin_v
    ]


@jit
def _theta_of(phi):
    """Log-Cholesky parameters (10,) of standard parameters (10,) (NaN where not physical)."""
    return inertial_to_theta(*inertial_from_standard(phi))


def _full_coeffs(z, p_lin: int, nf: int):
    """Coefficients with the full bodies' log-Cholesky parameters mapped to standard ones."""
    sl = slice(p_lin, p_lin + 10 * nf)
    th = z[sl].reshape(nf, 10)
    return jnp.concatenate([z[:p_lin], jax.vmap(theta_to_standard)(th).reshape(-1), z[p_lin + 10 * nf :]])


_full_coeffs_at = jit(_full_coeffs, static_argnames=("p_lin", "nf"))


@jit(static_argnames=("p_lin", "nf"))
def _full_loss(z, Rr, b, p_lin: int, nf: int):
    return jnp.sum((Rr @ _full_coeffs(z, p_lin, nf) - b) ** 2)


@jit(static_argnames=("p_lin", "nf", "rtol"))
def _full_step(z, Rr, b, p_lin: int, nf: int, rtol: float):
    """Minimum-norm Gauss-Newton step and the loss at ``z`` (one program per layout, reused
    across fits and iterations)."""
    res = Rr @ _full_coeffs(z, p_lin, nf) - b
    J = Rr @ jax.jacfwd(_full_coeffs)(z, p_lin, nf)
    dz = jnp.linalg.lstsq(J, -res, rcond=rtol)[0]
    return dz, jnp.sum(res**2)


def _gauss_newton_full(A, y, x_lin_sol, xg, p_lin, nf, iterations, rtol):
    """Gauss-Newton on the log-Cholesky parameters of the full bodies (other coefficients linear),
    minimum-norm steps (unidentifiable directions keep their values)."""
    sl = slice(p_lin, p_lin + 10 * nf)
    th0 = []
    for q in range(nf):
        t = np.asarray(_theta_of(jnp.asarray(x_lin_sol[sl][10 * q : 10 * q + 10])))
        if not np.all(np.isfinite(t)):  # the unconstrained optimum is not physical: start at the guess
            t = np.asarray(_theta_of(jnp.asarray(xg[sl][10 * q : 10 * q + 10])))
        th0.append(t)
    z = np.concatenate([x_lin_sol[:p_lin], np.concatenate(th0), x_lin_sol[p_lin + 10 * nf :]])
    U, S, Vt = np.linalg.svd(A, full_matrices=False)
    Rr, b = jnp.asarray(S[:, None] * Vt), jnp.asarray(U.T @ y)  # |A c - y|^2 = |Rr c - b|^2 + const
    for _ in range(iterations):
        dz, f0 = _full_step(jnp.asarray(z), Rr, b, p_lin=p_lin, nf=nf, rtol=float(rtol))
        dz, f0 = np.asarray(dz), float(f0)
        t = 1.0
        for _ls in range(20):  # backtracking keeps the descent monotone far from the optimum
            zn = z + t * dz
            if float(_full_loss(jnp.asarray(zn), Rr, b, p_lin=p_lin, nf=nf)) <= f0:
                break
            t *= 0.5
        else:
            break
        z = zn
        if np.linalg.norm(t * dz) < 1e-14 * (1 + np.linalg.norm(z)):
            break
    return np.asarray(_full_coeffs_at(jnp.asarray(z), p_lin=p_lin, nf=nf))


def _apply(mech, bodies, names, x, p_lin, full, fidx, i_jv):
    """``mech`` with the identified coefficients ``x`` set (host arithmetic, one compiled
    conversion of the standard parameters)."""
    base, D, *_ = _body_spec(mech, bodies)
    phi = base + (np.tensordot(np.asarray(x[:p_lin]), np.stack(D), 1) if p_lin else 0.0)
    for q, i in enumerate(fidx):
        phi[i] = x[p_lin + 10 * q : p_lin + 10 * q + 10]
    ids = np.asarray([mech.body_names.index(b) for b in bodies], int)
    parts = []
    for old, new in zip(
        (mech.mass, mech.com, mech.inertia), _inertials_of(jnp.asarray(phi[ids], base.dtype)), strict=True
    ):
        arr = np.array(old)
        arr[ids] = np.asarray(new)
        parts.append(jnp.asarray(arr, old.dtype))
    m = eqx.tree_at(lambda z: (z.mass, z.com, z.inertia), mech, tuple(parts))
    damping, armature = np.array(m.damping), np.array(m.armature)
    for k in i_jv:
        j, t = names[k].rsplit(".", 1)
        vi = int(mech.topo.v_start[mech.joint_names.index(j)])
        if t == "viscous":
            damping[vi] = x[k]
        elif t == "armature":
            armature[vi] = x[k]
    if i_jv:
        m = eqx.tree_at(
            lambda z: (z.damping, z.armature),
            m,
            (jnp.asarray(damping, m.damping.dtype), jnp.asarray(armature, m.armature.dtype)),
        )
    return m
