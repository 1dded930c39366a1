"""Tree dynamics: RNEA, CRBA, ABA and the nonlinear effects (Featherstone, angular-first).

All quantities are body-frame: body ``i``'s twist ``V_i = (omega, v)`` and acceleration are
expressed in its own frame, wrenches are ``(tau, f)`` about the body origin. With the local
transform ``X_i`` (parent -> child pose) and ``Ad_i = Ad_{X_i^-1}`` (parent twist -> child twist):

    V_i = Ad_i V_parent + S_i v_i
    A_i = Ad_i A_parent + S_i a_i + ad_{V_i} (S_i v_i) + Sdot_i v_i          (Featherstone eq. 5.7)
    f_i = I_i A_i - ad_{V_i}^T I_i V_i - f_ext_i,   f_parent += Ad_i^T f_i

The world "accelerates" with ``(0, -g)`` (the usual gravity trick). ``S_i`` are the generic
joint columns of :func:`jaxmech.kinpass.joint_columns`; ``Sdot_i v_i`` (non-zero for
universal joints) is :func:`jaxmech.curvature.joint_bias` (the factor velocities' brackets). Every pass is
level-parallel: one vectorized update per depth level, child results segment-summed into parents.

Conventions shared by all functions here (so ``M a + h = tau`` holds exactly):

* ``M`` (:func:`crba`) includes ``diag(mech.armature)``;
* ``rnea(q, v, a) = M a + C(q, v) v + g(q) + damping * v - J^T f_ext``;
* ``nonlinear_effects(q, v) = rnea(q, v, 0)`` (equals Pinocchio's ``nle`` when damping = 0 and
  no external wrenches are given);
* :func:`aba` solves ``M a + h = tau``.

RNEA and CRBA run in world coordinates (Featherstone's spatial algebra holds in any fixed frame):
one forward-kinematics pass gives the world pose of every body and the world spatial column
``s_n = Ad_{T_b(n)} S_n`` of every velocity coordinate; body velocities and accelerations are then
sums over ancestors, ``V = Anc (s * v)``, and subtree sums of forces are the transposed static
ancestor matrix: no per-level recursion except the pose composition. The same pass feeds the
closure Jacobian and curvature in :func:`jaxmech.forward_dynamics` (:class:`_World`). Small
3-vector / 3x3 products are written out elementwise (``kinpass.mv3``): XLA's CPU backend runs a batched
tiny ``dot`` several times slower than the fused elementwise form.

External wrenches ``f_ext`` (see :func:`external_wrenches`): an array (nb, 6) of body wrenches,
or a dict {body or frame name: wrench (6,)}; ``f_ext_reference`` says in which frame.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import lapack, lie
from ._entry import entry
from .chunking import chunked
from .curvature import joint_bias
from .kinpass import (
    _frame_lookup,
    _levels,
    _pad2,
    _world_poses,
    joint_columns,
    joint_values,
    local_poses,
    local_transforms,
    mm3,
    mtv3,
    mv3,
    twist_to_world,
    world_columns,
)
from .mechanism import Mechanism

# ----------------------------------------------------------------------------- helpers


def spatial_inertia(mass, com, inertia) -> jnp.ndarray:
    """Body spatial inertia about the body origin, angular-first, (..., 6, 6).

    ``mass`` (...,) kg, ``com`` (..., 3) m in body axes, ``inertia`` (..., 3, 3) about the COM:
    ``[[I_c - m c^ c^, m c^], [-m c^, m 1]]``."""
    c = lie.hat(com)
    m = mass[..., None, None]
    eye = jnp.broadcast_to(jnp.eye(3, dtype=com.dtype), c.shape)
    cc = sum(c[..., :, k, None] * c[..., None, k, :] for k in range(3))  # c^ c^, written out
    top = jnp.concatenate([inertia - m * cc, m * c], -1)
    bot = jnp.concatenate([-m * c, m * eye], -1)
    return jnp.concatenate([top, bot], -2)


def _mv(A, x):
    return jnp.einsum("...ij,...j->...i", A, x)


def _cross_force(V, F):
    """``ad_V^* F = -ad_V^T F`` (..., 6): the spatial force cross product."""
    w, v = V[..., :3], V[..., 3:]
    n, f = F[..., :3], F[..., 3:]
    return jnp.concatenate([jnp.cross(w, n) + jnp.cross(v, f), jnp.cross(w, f)], -1)


def _per_body(mech: Mechanism, x: jnp.ndarray) -> jnp.ndarray:
    """Scatter a velocity-like vector (nv,) onto the 9 generic columns, (nb, 9) (0 where unused)."""
    vi = mech.topo.v_index
    xe = jnp.concatenate([x, jnp.zeros(1, x.dtype)])
    return xe[np.where(vi >= 0, vi, x.shape[0])]


def _ad(V, x):
    """``ad_V x`` (..., 6) for twists, angular-first (spatial motion cross product)."""
    w, v = V[..., :3], V[..., 3:]
    return jnp.concatenate([jnp.cross(w, x[..., :3]), jnp.cross(v, x[..., :3]) + jnp.cross(w, x[..., 3:])], -1)


class _Tree:
    """Per-state quantities shared by the passes (plain container, built inside a trace)."""

    def __init__(self, mech: Mechanism, q: jnp.ndarray):
        _, _, th1, th2, d = joint_values(mech, q)
        self.X = local_transforms(mech, q)  # (nb, 4, 4) parent -> child
        self.Ad = lie.adjoint(lie.se3_inv(self.X))  # (nb, 6, 6) parent twist -> child twist
        self.S = joint_columns(mech, th1, th2, d)  # (nb, 6, 9)
        self.I = spatial_inertia(mech.mass, mech.com, mech.inertia)  # (nb, 6, 6)


# ----------------------------------------------------------------------------- world-frame pass


def twist_to_local(R, p, x):
    """``Ad_{T^-1} x``: a world twist (..., 6) in the frame ``T = (R, p)``."""
    return jnp.concatenate([mtv3(R, x[..., :3]), mtv3(R, x[..., 3:] - jnp.cross(p, x[..., :3]))], -1)


def _wrench_to_world(R, p, f):
    """``Ad_{T^-1}^T f``: a body wrench (..., 6) about the body origin to world axes and origin."""
    fw = mv3(R, f[..., 3:])
    return jnp.concatenate([mv3(R, f[..., :3]) + jnp.cross(p, fw), fw], -1)


def _body_ancestor(mech: Mechanism) -> np.ndarray:
    """Static (nb, nb): ``A[b, c] = 1`` when body ``c`` is ``b`` or one of its ancestors."""
    nb = mech.nb
    A = np.eye(nb)
    for lv in mech.topo.levels:  # parents come first
        for b in lv:
            par = mech.topo.parent[b]
            if par >= 0:
                A[b] += A[par]
    return A


class Kinematics(eqx.Module):
    """One kinematics pass of one state in world coordinates: what every later stage consumes.

    ``R`` (nb, 3, 3) and ``p`` (nb, 3) world body poses; ``S`` (nb, 6, 9) body-frame motion
    columns of every joint (generic columns, :func:`jaxmech.kinpass.joint_columns`); ``cols``
    (nv, 6) world spatial motion column of each velocity coordinate (``Ad_T S``); with a velocity,
    ``V`` (nb, 6) world spatial body twists and ``Ab`` (nb, 6) their velocity-product
    accelerations (the spatial acceleration at ``a = 0`` without gravity); None without one."""

    R: jnp.ndarray
    p: jnp.ndarray
    S: jnp.ndarray
    cols: jnp.ndarray
    V: jnp.ndarray | None = None
    Ab: jnp.ndarray | None = None


@entry()
def kinematics(mech: Mechanism, q: jnp.ndarray, v: jnp.ndarray | None = None) -> Kinematics:
    """The one kinematics pass (:class:`Kinematics`) of configuration ``q`` (nq,) and optional
    velocity ``v`` (nv,): world poses by depth level, joint columns and world motion columns
    written elementwise, body twists and velocity-product accelerations as static ancestor sums.
    :func:`jaxmech.crba`, :func:`jaxmech.rnea`, the closure rows and curvature in
    :func:`jaxmech.forward_dynamics` all start from it."""
    _, _, th1, th2, d = joint_values(mech, q)
    R, p = _world_poses(mech, *local_poses(mech, q))
    S = joint_columns(mech, th1, th2, d)
    cols = world_columns(mech, R, p, S)
    if v is None:
        return Kinematics(R, p, S, cols)
    V, Ab = _motion(mech, R, p, S, cols, v)
    return Kinematics(R, p, S, cols, V, Ab)


def _motion(mech: Mechanism, R, p, S, cols, v):
    """World body velocities ``V`` (nb, 6) and velocity-product accelerations ``Ab`` (nb, 6)."""
    topo = mech.topo
    vJ = cols * v[:, None]  # (nv, 6)
    V = jnp.asarray(topo.ancestor, v.dtype) @ vJ
    # per body: ad(V_b) (its own joint twist) + Ad_T (Sdot v)_b; own-joint twist by coordinate
    own = jnp.asarray(topo.v_body[None, :] == np.arange(mech.nb)[:, None], v.dtype)
    sd = twist_to_world(R, p, joint_bias(mech, S, v))
    beta = _ad(V, own @ vJ) + sd
    return V, jnp.asarray(_body_ancestor(mech), v.dtype) @ beta


class _World:
    """Dynamics helpers on one :class:`Kinematics` (shared by RNEA, CRBA and the closure terms).

    ``R``, ``p``, ``S``, ``cols`` as in :class:`Kinematics`; ``anc`` (nb, nv) static "coordinate
    moves body"; world inertia data ``mass`` (nb,), ``com`` (nb, 3) world COM."""

    def __init__(self, mech: Mechanism, q: jnp.ndarray | None = None, kin: Kinematics | None = None):
        kin = kinematics(mech, q) if kin is None else kin
        dt = kin.R.dtype
        self.mech, self.kin = mech, kin
        self.R, self.p, self.S, self.cols = kin.R, kin.p, kin.S, kin.cols
        self.anc = jnp.asarray(mech.topo.ancestor, dt)  # (nb, nv)
        self.mass = mech.mass.astype(dt)
        self.com = self.p + mv3(self.R, mech.com.astype(dt))

    def inertia_times(self, x):
        """``I^w_b x_b`` (nb, 6) for world twists ``x`` (nb, 6): momenta about the world origin."""
        w = x[..., :3]
        P = self.mass[:, None] * (x[..., 3:] + jnp.cross(w, self.com))
        Icw = mv3(self.R, mv3(self.mech.inertia, mtv3(self.R, w)))
        return jnp.concatenate([Icw + jnp.cross(self.com, P), P], -1)

    def inertia(self):
        """World spatial inertias about the world origin (nb, 6, 6)."""
        R = self.R
        Icw = mm3(mm3(R, self.mech.inertia.astype(R.dtype)), jnp.swapaxes(R, -1, -2))
        return spatial_inertia(self.mass, self.com, Icw)

    def motion(self, v):
        """World body velocities ``V`` (nb, 6) and velocity-product accelerations ``Ab`` (nb, 6)
        (the spatial acceleration at ``a = 0`` without gravity)."""
        if self.kin.V is not None:
            return self.kin.V, self.kin.Ab
        return _motion(self.mech, self.R, self.p, self.S, self.cols, v)

    def mass_matrix(self):
        """``M`` (nv, nv) without armature: ``M[m, n] = s_m^T I^c_{b(n)} s_n`` for ``m`` moving ``b(n)``
        (``I^c`` the composite world inertia of the subtree), mirrored otherwise."""
        topo = self.mech.topo
        Icv = jnp.einsum("bn,bij->nij", self.anc, self.inertia())  # composite inertia of b(n)
        F = jnp.einsum("nij,nj->ni", Icv, self.cols)  # (nv, 6)
        G = sum(self.cols[:, None, i] * F[None, :, i] for i in range(6))  # G[m, n] = s_m . F_n
        up = topo.ancestor[topo.v_body].T  # up[m, n]: coordinate m moves body b(n)
        both = up & up.T  # same body
        M = jnp.where(both, 0.5 * (G + G.T), jnp.where(up, G, jnp.where(up.T, G.T, 0.0)))
        return M

    def inverse_dynamics(self, V, Ab, a=None, f_ext=None):
        """Tree inverse dynamics ``M a + C v + g - J^T f_ext`` (nv,) (no armature / damping); ``f_ext``
        body-frame wrenches (nb, 6)."""
        mech = self.mech
        dt = V.dtype
        A = Ab + jnp.concatenate([jnp.zeros(3, dt), -mech.gravity.astype(dt)])
        if a is not None:
            A = A + self.anc @ (self.cols * a[:, None])
        f = self.inertia_times(A) + _cross_force(V, self.inertia_times(V))
        if f_ext is not None:
            f = f - _wrench_to_world(self.R, self.p, f_ext)
        return jnp.sum(self.cols * (self.anc.T @ f), -1)


@entry(static_argnames=("reference",))
def external_wrenches(mech: Mechanism, q: jnp.ndarray, f_ext, reference: str = "local") -> jnp.ndarray:
    """Body wrenches (nb, 6), each in its body frame about the body origin, angular-first.

    ``f_ext`` is either an array (nb, 6) (one wrench per body, ``mech.body_names`` order) or a
    dict {body or frame name: wrench (6,)}. ``reference``:

    * ``"local"``: array rows in the body frame; dict entries in the named frame, about its origin;
    * ``"world"``: spatial wrenches in world axes about the world origin;
    * ``"world_aligned"``: world axes, about the origin of the body / named frame (a contact
      force at a foot site, say).
    Units: N m (torque part), N (force part)."""
    nb = mech.nb
    if reference not in ("local", "world", "world_aligned"):
        raise ValueError(f"f_ext reference must be 'local', 'world' or 'world_aligned', got {reference!r}")
    if isinstance(f_ext, dict):
        bodies, poses, wr = [], [], []
        for name, w in f_ext.items():
            b, Xf = _frame_lookup(mech, name)
            if b < 0:
                raise ValueError(f"{mech.name}: external wrench on '{name}' (the world) has no effect")
            bodies.append(b)
            poses.append(jnp.asarray(Xf, dtype=q.dtype))
            w = jnp.asarray(w, dtype=q.dtype)
            if w.shape != (6,):
                raise ValueError(f"{mech.name}: external wrench on '{name}' must have shape (6,), got {w.shape}")
            wr.append(w)
        bodies = np.asarray(bodies, dtype=int)
        Xf = jnp.stack(poses)  # frame in body
        wr = jnp.stack(wr)
    else:
        wr = jnp.asarray(f_ext, dtype=q.dtype)
        if wr.shape != (nb, 6):
            raise ValueError(f"{mech.name}: f_ext array must have shape (nb, 6) = ({nb}, 6), got {wr.shape}")
        bodies = np.arange(nb)
        Xf = jnp.broadcast_to(jnp.eye(4, dtype=q.dtype), (nb, 4, 4))
    if reference == "local":
        Xg = Xf  # wrench frame in body
    else:
        T = lie.make_pose(*_world_poses(mech, *local_poses(mech, q)))[bodies]  # body in world
        if reference == "world":
            Xg = lie.se3_inv(T)  # world frame in body
        else:
            p = (T @ Xf)[:, :3, 3]
            W = lie.make_pose(jnp.broadcast_to(jnp.eye(3, dtype=q.dtype), (len(bodies), 3, 3)), p)
            Xg = lie.se3_inv(T) @ W
    # body twist V_B -> wrench-frame twist Ad_{Xg^-1} V_B; power balance gives f_B = Ad_{Xg^-1}^T f_G
    fb = jnp.einsum("nji,nj->ni", lie.adjoint(lie.se3_inv(Xg)), wr)
    return jnp.zeros((nb, 6), q.dtype).at[bodies].add(fb)


# ----------------------------------------------------------------------------- RNEA


@entry(static_argnames=("f_ext_reference",))
@chunked
def rnea(mech: Mechanism, q, v, a, f_ext=None, f_ext_reference: str = "local") -> jnp.ndarray:
    """Recursive Newton-Euler inverse dynamics of the spanning tree, (nv,).

    ``tau = M(q) a + C(q, v) v + g(q) + damping * v - J^T f_ext`` with armature in ``M``
    (closure constraints ignored: see :func:`jaxmech.inverse_dynamics` for closed chains).
    ``q`` (nq,), ``v``/``a`` (nv,); joint units (N m, N). Computed in world coordinates from one
    kinematics pass (module docstring)."""
    return _rnea(mech, _World(mech, q), q, v, a, f_ext, f_ext_reference)


def _rnea(mech: Mechanism, w: _World, q, v, a, f_ext=None, f_ext_reference: str = "local", motion=None):
    """:func:`rnea` on a shared :class:`_World` (``a=None``: zero accelerations; ``motion``: the
    ``(V, Ab)`` of :meth:`_World.motion` if already computed)."""
    V, Ab = w.motion(v) if motion is None else motion
    fe = None if f_ext is None else external_wrenches(mech, q, f_ext, f_ext_reference)
    tau = w.inverse_dynamics(V, Ab, a, fe) + mech.damping * v
    return tau if a is None else tau + mech.armature * a


@entry(static_argnames=("f_ext_reference",))
@chunked
def nonlinear_effects(mech: Mechanism, q, v, f_ext=None, f_ext_reference: str = "local") -> jnp.ndarray:
    """``h = C(q, v) v + g(q) + damping * v - J^T f_ext`` (nv,), i.e. ``rnea(q, v, 0)``."""
    return _rnea(mech, _World(mech, q), q, v, None, f_ext, f_ext_reference)


@entry()
def gravity_torques(mech: Mechanism, q) -> jnp.ndarray:
    """``g(q)`` (nv,): the generalized gravity force (``rnea`` at rest)."""
    z = jnp.zeros(mech.nv, q.dtype)
    return rnea(mech, q, z, z)


# ----------------------------------------------------------------------------- CRBA


def mass_matrix(mech: Mechanism, kin: Kinematics) -> jnp.ndarray:
    """:func:`crba` from a :class:`Kinematics` pass: ``M`` (nv, nv), armature included."""
    return _World(mech, kin=kin).mass_matrix() + jnp.diag(mech.armature.astype(kin.R.dtype))


def bias_forces(mech: Mechanism, kin: Kinematics, v) -> jnp.ndarray:
    """:func:`nonlinear_effects` from a :class:`Kinematics` pass (with ``V``/``Ab`` from ``v``), (nv,)."""
    w = _World(mech, kin=kin)
    return w.inverse_dynamics(*w.motion(v)) + mech.damping * v


@entry()
@chunked
def crba(mech: Mechanism, q) -> jnp.ndarray:
    """Joint-space mass matrix ``M(q)`` (nv, nv), symmetric positive definite, armature included.

    Composite-rigid-body result in world coordinates: ``M[m, n] = s_m^T I^c_{b(n)} s_n`` when
    coordinate ``m`` moves body ``b(n)`` (mirrored when ``n`` moves ``b(m)``, zero otherwise),
    with ``s`` the world spatial columns and ``I^c_b`` the composite world inertia of ``b``'s
    subtree, itself one static ancestor-matrix product of the bodies' world inertias. No
    (nv, nv, 6, 6) table and no per-body (6, nv) Jacobians (Stewart batched: 163 -> 99 -> ~20 us
    per state over the last two versions)."""
    return _World(mech, q).mass_matrix() + jnp.diag(mech.armature.astype(q.dtype))


# ----------------------------------------------------------------------------- ABA


def _body_dofs(mech: Mechanism):
    """Compact per-body dof columns: (nb, k) generic column index, mask, velocity index."""
    vi = mech.topo.v_index
    nb = vi.shape[0]
    k = max(1, int((vi >= 0).sum(1).max()) if nb else 1)
    cols = np.zeros((nb, k), dtype=int)
    mask = np.zeros((nb, k), dtype=bool)
    vidx = np.full((nb, k), mech.nv, dtype=int)
    for b in range(nb):
        used = np.nonzero(vi[b] >= 0)[0]
        cols[b, : len(used)] = used
        mask[b, : len(used)] = True
        vidx[b, : len(used)] = vi[b, used]
    return cols, mask, vidx


@entry(static_argnames=("f_ext_reference",))
@chunked
def aba(mech: Mechanism, q, v, tau, f_ext=None, f_ext_reference: str = "local") -> jnp.ndarray:
    """Articulated-body forward dynamics of the spanning tree: ``a`` (nv,) with ``M a + h = tau``.

    Level-parallel: a backward sweep of articulated inertias (one batched small solve per depth
    level) and a forward sweep of accelerations. Armature adds to each joint's ``D`` block and
    ``damping * v`` to the bias."""
    nb, dt = mech.nb, q.dtype
    tr = _Tree(mech, q)
    cols, cmask, vidx = _body_dofs(mech)
    xs = _levels(mech)
    v9 = _per_body(mech, v)
    vJ = _mv(tr.S, v9)
    Ad, vJe = _pad2(tr.Ad), _pad2(vJ)

    def vel(V, x):
        idx, pidx = x
        return V.at[idx].set(_mv(Ad[idx], V[pidx]) + vJe[idx]), None

    V, _ = jax.lax.scan(vel, jnp.zeros((nb + 2, 6), dt), xs)
    V = V[:nb]
    c = _ad(V, vJ) + joint_bias(mech, tr.S, v)  # (nb, 6) velocity-product acceleration
    pA = _cross_force(V, _mv(tr.I, V))
    if f_ext is not None:
        pA = pA - external_wrenches(mech, q, f_ext, f_ext_reference)
    fm = jnp.asarray(cmask, dt)
    Sc = jnp.take_along_axis(tr.S, cols[:, None, :], axis=2) * fm[:, None, :]  # (nb, 6, k)
    ext = lambda x: jnp.concatenate([x, jnp.zeros(1, dt)])[vidx] * fm  # noqa: E731
    u0 = ext(tau - mech.damping * v)  # (nb, k)
    arm = ext(mech.armature.astype(dt))
    k = cols.shape[1]
    eye_k = jnp.eye(k, dtype=dt)
    # padded per-body data; the scratch rows get D = I (S = 0, mask 0)
    Sc, ce, u0, fme = _pad2(Sc), _pad2(c), _pad2(u0), _pad2(fm)
    Dfix = arm[..., None] * eye_k
    Dfix = _pad2(Dfix) + (1 - fme)[..., None] * eye_k

    def back(carry, x):
        idx, pidx = x
        IA, pA, U, Dinv, uu = carry
        S_l, I_l, p_l = Sc[idx], IA[idx], pA[idx]
        U_l = I_l @ S_l
        Di = lapack.inv(jnp.swapaxes(S_l, -1, -2) @ U_l + Dfix[idx])
        u_l = u0[idx] - jnp.einsum("nik,ni->nk", S_l, p_l)
        UDi = U_l @ Di
        Ia = I_l - UDi @ jnp.swapaxes(U_l, -1, -2)
        pa = p_l + _mv(Ia, ce[idx]) + _mv(UDi, u_l)
        A_l = Ad[idx]
        IA = IA.at[pidx].add(jnp.swapaxes(A_l, -1, -2) @ Ia @ A_l)
        pA = pA.at[pidx].add(jnp.einsum("nji,nj->ni", A_l, pa))
        return (IA, pA, U.at[idx].set(U_l), Dinv.at[idx].set(Di), uu.at[idx].set(u_l)), None

    init = (
        _pad2(tr.I),
        _pad2(pA),
        jnp.zeros((nb + 2, 6, k), dt),
        jnp.zeros((nb + 2, k, k), dt),
        jnp.zeros((nb + 2, k), dt),
    )
    (_, _, U, Dinv, uu), _ = jax.lax.scan(back, init, xs, reverse=True)

    def fwd(carry, x):
        idx, pidx = x
        A, qdd = carry
        Ap = _mv(Ad[idx], A[pidx]) + ce[idx]
        a_l = _mv(Dinv[idx], uu[idx] - jnp.einsum("nik,ni->nk", U[idx], Ap))
        return (A.at[idx].set(Ap + _mv(Sc[idx], a_l)), qdd.at[idx].set(a_l)), None

    A0 = jnp.zeros((nb + 2, 6), dt).at[nb, 3:].set(-mech.gravity.astype(dt))
    (_, qdd), _ = jax.lax.scan(fwd, (A0, jnp.zeros((nb + 2, k), dt)), xs)
    qdd = qdd[:nb]
    out = jnp.zeros(mech.nv + 1, dt).at[vidx.ravel()].add((qdd * fm).ravel())
    return out[: mech.nv]
