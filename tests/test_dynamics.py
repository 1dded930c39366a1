"""Tree dynamics (RNEA, CRBA, ABA, nonlinear effects, external wrenches) against Pinocchio,
Pinocchio export round trip, and derivatives against finite differences."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from _shared import random_configurations

import jaxmech as jm
from jaxmech.io import resolve_resource

N_STATES = 16


def _erd(rel):
    """The installed example-robot-data file (the package's own metadata lookup, as in test_io):
    a missing file is a ModelError, i.e. a failure, not a skip."""
    return str(resolve_resource("example-robot-data:" + rel))


class Robot:
    """Our mechanism (from configs/*.toml, i.e. our URDF loader) and Pinocchio's model built
    directly from the same URDF, with index maps between the two velocity / q orders."""

    def __init__(self, cfg, urdf, floating):
        mech = jm.load(Path(__file__).resolve().parents[1] / "configs" / f"{cfg}.toml")
        self.model = (
            pin.buildModelFromUrdf(_erd(urdf), pin.JointModelFreeFlyer())
            if floating
            else pin.buildModelFromUrdf(_erd(urdf))
        )
        rng = np.random.default_rng(1)
        arm = rng.uniform(0.0, 0.05, mech.nv)
        # Pinocchio ignores damping in its algorithms: compare with damping 0 (tested separately).
        self.mech = eqx.tree_at(lambda m: (m.armature, m.damping), mech, (jnp.asarray(arm), jnp.zeros(mech.nv)))
        # our v index of each Pinocchio v index; our q index of each Pinocchio q index
        pv, pq = np.zeros(mech.nv, int), np.zeros(mech.nq, int)
        perm_q, perm_v = jm.io.pinocchio.pinocchio_permutations(mech)
        for j in range(1, self.model.njoints):
            jt = self.model.joints[j]
            vs, qs = mech.v_slice(self.model.names[j]), mech.q_slice(self.model.names[j])
            pv[jt.idx_v : jt.idx_v + jt.nv] = perm_v[vs]
            pq[jt.idx_q : jt.idx_q + jt.nq] = perm_q[qs]
        self.pv, self.pq = pv, pq
        self.model.armature[:] = arm[pv]
        self.data = self.model.createData()

    def to_pin_q(self, q):
        return np.asarray(q)[self.pq]

    def to_pin_v(self, v):
        return np.asarray(v)[self.pv]

    def from_pin_v(self, vp):
        out = np.empty_like(vp)
        out[self.pv] = vp
        return out


_ROBOTS = {}


def _robot(name):
    if name not in _ROBOTS:
        urdf = {"panda": "panda_description/urdf/panda.urdf", "go2": "go2_description/urdf/go2.urdf"}[name]
        _ROBOTS[name] = Robot(name, urdf, name == "go2")
    return _ROBOTS[name]


# Go2 (free base, revolute legs) by default; the Panda (fixed base, revolute arm, prismatic fingers)
# in the slow tier: prismatic tree dynamics run by default against Pinocchio in the Stewart's legs
# (tests/test_constrained.py::test_stewart_vs_pinocchio), the Panda's rnea against finite
# differences below
@pytest.fixture(scope="module", params=["go2", pytest.param("panda", marks=pytest.mark.slow)])
def robot(request):
    return _robot(request.param)


def _states(mech, n, seed=0):
    q = random_configurations(mech, n, seed)
    rng = np.random.default_rng(seed)
    v, a, tau = (jnp.asarray(rng.normal(size=(n, mech.nv))) for _ in range(3))
    return q, v, a, tau


def _rel(x, ref):
    return float(np.max(np.abs(np.asarray(x) - ref)) / max(1.0, np.max(np.abs(ref))))


def test_tree_dynamics_vs_pinocchio(robot):
    mech, model, data = robot.mech, robot.model, robot.data
    q, v, a, tau = _states(mech, N_STATES)

    @jm.jit
    @jax.vmap
    def ours(q, v, a, tau):
        return jm.rnea(mech, q, v, a), jm.crba(mech, q), jm.aba(mech, q, v, tau), jm.nonlinear_effects(mech, q, v)

    T, M, A, H = (np.asarray(x) for x in ours(q, v, a, tau))
    for i in range(N_STATES):
        qp, vp, ap, tp = robot.to_pin_q(q[i]), robot.to_pin_v(v[i]), robot.to_pin_v(a[i]), robot.to_pin_v(tau[i])
        assert _rel(T[i], robot.from_pin_v(pin.rnea(model, data, qp, vp, ap))) < 1e-10
        Mp = pin.crba(model, data, qp)
        Mp = np.triu(Mp) + np.triu(Mp, 1).T
        assert _rel(M[i][np.ix_(robot.pv, robot.pv)], Mp) < 1e-10
        assert _rel(A[i], robot.from_pin_v(pin.aba(model, data, qp, vp, tp))) < 1e-10
        assert _rel(H[i], robot.from_pin_v(pin.nle(model, data, qp, vp))) < 1e-10
    # M a + h = rnea, and the mass matrix is symmetric positive definite
    np.testing.assert_allclose(np.einsum("nij,nj->ni", M, np.asarray(a)) + H, T, rtol=0, atol=1e-10 * np.abs(T).max())
    assert np.all(np.linalg.eigvalsh(M) > 0)


def test_external_wrenches_vs_pinocchio(robot):
    mech, model, data = robot.mech, robot.model, robot.data
    q, v, a, tau = _states(mech, 4, seed=3)
    rng = np.random.default_rng(3)
    # one wrench per Pinocchio joint, on the URDF child link of that joint (= the joint frame)
    links = {}
    for j in range(1, model.njoints):
        b = mech.topo.v_body[mech.v_slice(model.names[j]).start]
        links[mech.body_names[b]] = j
    W = {name: rng.normal(size=6) for name in links}
    fn = jm.jit(lambda q, v, a, tau: (jm.rnea(mech, q, v, a, f_ext=W), jm.aba(mech, q, v, tau, f_ext=W)))
    fext = pin.StdVec_Force([pin.Force.Zero() for _ in range(model.njoints)])
    for name, j in links.items():
        fext[j] = pin.Force(W[name][3:], W[name][:3])  # Pinocchio: linear first, local joint frame
    for i in range(4):
        t_ours, a_ours = fn(q[i], v[i], a[i], tau[i])
        qp, vp = robot.to_pin_q(q[i]), robot.to_pin_v(v[i])
        t_ref = robot.from_pin_v(pin.rnea(model, data, qp, vp, robot.to_pin_v(a[i]), fext))
        a_ref = robot.from_pin_v(pin.aba(model, data, qp, vp, robot.to_pin_v(tau[i]), fext))
        assert _rel(t_ours, t_ref) < 1e-10
        assert _rel(a_ours, a_ref) < 1e-10
    # the same wrenches given in world axes at the link origins ("world_aligned") and as
    # spatial world wrenches ("world") give the same torques
    T = np.asarray(jm.forward_kinematics(mech, q[0]))
    Ww, Wa = {}, {}
    for name, w in W.items():
        R, p = T[mech.body_names.index(name)][:3, :3], T[mech.body_names.index(name)][:3, 3]
        tq, f = R @ w[:3], R @ w[3:]
        Wa[name] = np.concatenate([tq, f])
        Ww[name] = np.concatenate([tq + np.cross(p, f), f])
    refs = jm.jit(
        lambda q, v, a: (
            jm.rnea(mech, q, v, a, f_ext=W),
            jm.rnea(mech, q, v, a, Wa, "world_aligned"),
            jm.rnea(mech, q, v, a, Ww, "world"),
        )
    )
    t0, t1, t2 = refs(q[0], v[0], a[0])
    np.testing.assert_allclose(t1, t0, atol=1e-10)
    np.testing.assert_allclose(t2, t0, atol=1e-10)
    # the public body-wrench map, called eagerly (one compiled program per reference): the three
    # descriptions are the same body wrenches
    fb = [
        np.asarray(jm.external_wrenches(mech, q[0], w, ref))
        for w, ref in ((W, "local"), (Wa, "world_aligned"), (Ww, "world"))
    ]
    np.testing.assert_allclose(fb[1], fb[0], atol=1e-12)
    np.testing.assert_allclose(fb[2], fb[0], atol=1e-12)
    with pytest.raises(ValueError, match="reference must be"):
        jm.external_wrenches(mech, q[0], W, "body")


def test_damping_and_armature_conventions():
    mech = jm.load(Path(__file__).resolve().parents[1] / "configs" / "panda.toml")
    mech = eqx.tree_at(lambda m: (m.armature, m.damping), mech, (jnp.full(mech.nv, 0.1), jnp.full(mech.nv, 0.3)))
    q, v, a, tau = (x[0] for x in _states(mech, 1, seed=5))

    @jm.jit
    def parts(q, v, a, tau):
        return (
            jm.crba(mech, q),
            jm.nonlinear_effects(mech, q, v),
            jm.rnea(mech, q, v, a),
            jm.aba(mech, q, v, tau),
            jax.jacfwd(lambda a: jm.rnea(mech, q, v, a))(a),
            jm.gravity_torques(mech, q),
            jm.nonlinear_effects(mech, q, 2 * v),
        )

    M, h, t, acc, dtda, g, h2 = parts(q, v, a, tau)
    np.testing.assert_allclose(t, M @ a + h, atol=1e-11)
    np.testing.assert_allclose(M @ acc + h, tau, atol=1e-10)
    # M is the Jacobian of rnea with respect to a (forward-mode autodiff)
    np.testing.assert_allclose(dtda, M, atol=1e-12)
    # h - g is damping * v + C(q, v) v, with C v quadratic in v
    cv = h - g - 0.3 * v
    np.testing.assert_allclose(h2 - g - 0.6 * v, 4 * cv, atol=1e-10)


_rnea = jm.jit(jm.rnea)  # the model is an argument: one compilation per robot


def test_to_pinocchio_round_trip(robot):
    """Our model exported to Pinocchio reproduces Pinocchio's own URDF model."""
    mech = robot.mech
    model, cons = jm.to_pinocchio(mech, unsupported="skip")
    assert model.nq == mech.nq and model.nv == mech.nv and len(cons) == 0
    data = model.createData()
    q, v, a, tau = _states(mech, 4, seed=7)
    for i in range(4):
        qp, vp = jm.q_to_pinocchio(mech, np.asarray(q[i])), jm.v_to_pinocchio(mech, np.asarray(v[i]))
        ap = jm.v_to_pinocchio(mech, np.asarray(a[i]))
        t = jm.v_from_pinocchio(mech, pin.rnea(model, data, qp, vp, ap))
        assert _rel(t, np.asarray(_rnea(mech, q[i], v[i], a[i]))) < 1e-10
        np.testing.assert_array_equal(jm.q_from_pinocchio(mech, qp), np.asarray(q[i]))


def _fd(f, x, dx, h=1e-6):
    return (f(x + h * dx) - f(x - h * dx)) / (2 * h)


@pytest.mark.parametrize("fn", ["rnea", pytest.param("aba", marks=pytest.mark.slow)])  # aba: 21 s of compile
def test_gradients_vs_finite_differences(fn):
    mech = _robot("go2" if fn == "aba" else "panda").mech
    q, v, a, tau = (x[0] for x in _states(mech, 1, seed=11))
    rng = np.random.default_rng(11)
    dq, dv, dt = (jnp.asarray(rng.normal(size=mech.nv)) for _ in range(3))
    dm = jnp.asarray(rng.normal(size=mech.nb))
    x3 = a if fn == "rnea" else tau
    w = jnp.asarray(rng.normal(size=mech.nv))

    def along(eps):  # q moves on the manifold (integrate), everything else linearly
        m = eqx.tree_at(lambda m: m.mass, mech, mech.mass + eps * dm)
        return getattr(jm, fn)(m, jm.integrate(mech, q, eps * dq), v + eps * dv, x3 + eps * dt)

    @jm.jit
    def derivs():
        # forward mode and its transpose (reverse mode, as jax.grad) from one linearization
        _, lin = jax.linearize(along, jnp.zeros(()))
        vals = jax.vmap(along)(jnp.array([1e-6, -1e-6]))
        return lin(jnp.ones(())), (vals[0] - vals[1]) / 2e-6, jax.linear_transpose(lin, jnp.zeros(()))(w)[0]

    jvp, fd, g = derivs()
    assert float(jnp.max(jnp.abs(jvp - fd)) / jnp.max(jnp.abs(jvp))) < 1e-6
    np.testing.assert_allclose(g, w @ jvp, rtol=1e-9)  # reverse mode agrees with forward mode


def test_float32_tier():
    mech = _robot("go2").mech
    q, v, a, tau = _states(mech, 8, seed=13)
    ref = jm.jit(jax.vmap(lambda q, v, t: jm.aba(mech, q, v, t)))(q, v, tau)
    m32 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32) if eqx.is_array(x) else x, mech)
    out = jm.jit(jax.vmap(lambda q, v, t: jm.aba(m32, q, v, t)))(*(x.astype(jnp.float32) for x in (q, v, tau)))
    assert out.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(out - ref)) / jnp.max(jnp.abs(ref))) < 1e-3


def _chain_and_tree(depth: int, branches: int):
    """``branches`` serial chains of ``depth`` bodies on the world, each a revolute, a prismatic
    and revolutes: every joint class of ``kinpass.local_poses`` at any size."""
    g = jm.Graph(name=f"tree{depth}x{branches}")
    for k in range(branches):
        parent = "world"
        for i in range(depth):
            g.add_body(f"b{k}_{i}", 1.0, com=(0.0, 0.0, 0.1), inertia=[0.01, 0.02, 0.03])
            kind = "prismatic" if i == 1 else "revolute"
            g.add_joint(f"j{k}_{i}", kind, parent, f"b{k}_{i}", parent_pose=jm.pose((0.1, 0.0, 0.2)), axis=(0, 1, 0))
            parent = f"b{k}_{i}"
    return jm.compile(g)


def test_tree_passes_are_level_parallel():
    """The traced program does not grow with the number of bodies or the depth (lax.scan over
    padded depth levels; a fixed number of joint classes in the local poses): a 3-body chain, a
    30-deep chain and 4 branches of 10 trace to nearly the same number of operations."""
    counts = []
    for mech in (_chain_and_tree(3, 1), _chain_and_tree(30, 1), _chain_and_tree(10, 4)):
        q = v = a = jnp.zeros(mech.nv)
        counts.append(len(jax.make_jaxpr(lambda q, v, a, m=mech: jm.rnea(m, q, v, a))(q, v, a).eqns))
    assert max(counts) - min(counts) < 0.1 * max(counts), counts
