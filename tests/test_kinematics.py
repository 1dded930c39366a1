"""Forward kinematics, frame Jacobians and integrate/difference against Pinocchio and autodiff.

The same serial chain (revolute, prismatic, spherical, universal, cylindrical, free, revolute,
all with off-axis joint placements and child placements) is built in jaxmech and in Pinocchio.
Conversions at the boundary: Pinocchio quaternions are (x, y, z, w), its twists linear-first,
and the universal / cylindrical joints are composed there from revolute and prismatic joints.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from _shared import random_configurations
from scipy.spatial.transform import Rotation

import jaxmech as jm
from jaxmech import lie

RNG = np.random.default_rng(3)


def _rand_pose(scale=0.3):
    return jm.pose(RNG.normal(size=3) * scale, rpy=RNG.normal(size=3))


def _unit():
    a = RNG.normal(size=3)
    return a / np.linalg.norm(a)


# (type, axis, axis2, parent_pose, child_pose)
CHAIN = [
    ("revolute", _unit(), None, _rand_pose(), _rand_pose()),
    ("prismatic", _unit(), None, _rand_pose(), _rand_pose()),
    ("spherical", None, None, _rand_pose(), _rand_pose()),
    ("universal", np.array([1.0, 0, 0]), np.array([0, 0.6, 0.8]), _rand_pose(), _rand_pose()),
    ("cylindrical", _unit(), None, _rand_pose(), _rand_pose()),
    ("free", None, None, _rand_pose(), _rand_pose()),
    ("revolute", _unit(), None, _rand_pose(), _rand_pose()),
]
TOOL = _rand_pose()


def _jm_chain():
    g = jm.Graph(name="chain")
    parent = "world"
    for i, (t, ax, ax2, P, C) in enumerate(CHAIN):
        g.add_body(f"b{i}", 1.0, inertia=[0.1, 0.1, 0.1])
        kw = {}
        if ax is not None:
            kw["axis"] = ax
        if ax2 is not None:
            kw["axis2"] = ax2
        g.add_joint(f"j{i}", t, parent, f"b{i}", parent_pose=P, child_pose=C, **kw)
        parent = f"b{i}"
    g.add_frame(parent, "tool", TOOL)
    return jm.compile(g)


def _pin_chain():
    """Pinocchio model of CHAIN; returns the model, the body frame ids, the tool frame id."""
    model = pin.Model()
    parent, prev_Cinv = 0, np.eye(4)
    body_frames = []
    for i, (t, ax, ax2, P, C) in enumerate(CHAIN):
        place = pin.SE3(prev_Cinv @ P)
        if t == "revolute":
            jid = model.addJoint(parent, pin.JointModelRevoluteUnaligned(ax), place, f"j{i}")
        elif t == "prismatic":
            jid = model.addJoint(parent, pin.JointModelPrismaticUnaligned(ax), place, f"j{i}")
        elif t == "spherical":
            jid = model.addJoint(parent, pin.JointModelSpherical(), place, f"j{i}")
        elif t == "free":
            jid = model.addJoint(parent, pin.JointModelFreeFlyer(), place, f"j{i}")
        elif t == "universal":  # Rot(axis, q1) Rot(axis2, q2) as two revolutes
            j1 = model.addJoint(parent, pin.JointModelRevoluteUnaligned(ax), place, f"j{i}a")
            jid = model.addJoint(j1, pin.JointModelRevoluteUnaligned(ax2), pin.SE3.Identity(), f"j{i}b")
        elif t == "cylindrical":  # rotation about then translation along the same axis
            j1 = model.addJoint(parent, pin.JointModelRevoluteUnaligned(ax), place, f"j{i}a")
            jid = model.addJoint(j1, pin.JointModelPrismaticUnaligned(ax), pin.SE3.Identity(), f"j{i}b")
        Cinv = np.linalg.inv(C)
        body_frames.append(model.addFrame(pin.Frame(f"b{i}", jid, 0, pin.SE3(Cinv), pin.FrameType.OP_FRAME)))
        parent, prev_Cinv = jid, Cinv
    tool = model.addFrame(pin.Frame("tool", parent, 0, pin.SE3(prev_Cinv @ TOOL), pin.FrameType.OP_FRAME))
    return model, body_frames, tool


def _to_pin(mech, q):
    """jaxmech q (wxyz quaternions) -> Pinocchio q (xyzw); and the velocity permutation P with
    v_pin = P v_jm (free joints: (w, v) -> (v, w))."""
    q = np.asarray(q)
    qp, perm = [], []
    for name, t in zip(mech.joint_names, mech.topo.joint_types, strict=True):
        qs, vs = mech.q_slice(name), mech.v_slice(name)
        qj, vi = q[qs], list(range(vs.start, vs.stop))
        if t == "spherical":
            qp.append(qj[[1, 2, 3, 0]])
        elif t == "free":
            qp.append(np.concatenate([qj[:3], qj[[4, 5, 6, 3]]]))
            vi = vi[3:] + vi[:3]
        else:
            qp.append(qj)
        perm.extend(vi)
    P = np.eye(mech.nv)[perm]
    return np.concatenate(qp), P


SWAP = np.block([[np.zeros((3, 3)), np.eye(3)], [np.eye(3), np.zeros((3, 3))]])  # lin-first <-> ang-first


@pytest.fixture(scope="module")
def chain():
    mech = _jm_chain()
    model, body_frames, tool = _pin_chain()
    fk = jm.jit(jm.forward_kinematics)
    jac = {
        ref: jm.jit(lambda m, q, ref=ref: jm.frame_jacobian(m, q, "tool", ref))
        for ref in ("local", "world", "world_aligned")
    }
    jac_b3 = jm.jit(lambda m, q: jm.frame_jacobian(m, q, "b3", "local"))
    pose_tool = jm.jit(lambda m, q: jm.frame_pose(m, q, "tool"))
    return dict(
        mech=mech,
        model=model,
        data=model.createData(),
        body_frames=body_frames,
        tool=tool,
        fk=fk,
        jac=jac,
        jac_b3=jac_b3,
        pose_tool=pose_tool,
    )


def _states(mech, n=6):
    return [mech.q0] + list(random_configurations(mech, n, 0, scale=1.5))


def test_sizes(chain):
    mech, model = chain["mech"], chain["model"]
    assert (mech.nq, mech.nv) == (model.nq, model.nv) == (1 + 1 + 4 + 2 + 2 + 7 + 1, 1 + 1 + 3 + 2 + 2 + 6 + 1)


def test_forward_kinematics_vs_pinocchio(chain):
    mech, model, data = chain["mech"], chain["model"], chain["data"]
    for q in _states(mech):
        qp, _ = _to_pin(mech, q)
        pin.framesForwardKinematics(model, data, qp)
        T = np.asarray(chain["fk"](mech, q))
        for i, fid in enumerate(chain["body_frames"]):
            np.testing.assert_allclose(T[i], data.oMf[fid].homogeneous, atol=1e-12)
        np.testing.assert_allclose(
            np.asarray(chain["pose_tool"](mech, q)), data.oMf[chain["tool"]].homogeneous, atol=1e-12
        )


@pytest.mark.parametrize(
    "ref,pref", [("local", pin.LOCAL), ("world", pin.WORLD), ("world_aligned", pin.LOCAL_WORLD_ALIGNED)]
)
def test_frame_jacobian_vs_pinocchio(chain, ref, pref):
    mech, model, data = chain["mech"], chain["model"], chain["data"]
    for q in _states(mech):
        qp, P = _to_pin(mech, q)
        Jp = pin.computeFrameJacobian(model, data, qp, chain["tool"], pref)
        J = np.asarray(chain["jac"][ref](mech, q))
        np.testing.assert_allclose(J, SWAP @ Jp @ P, atol=1e-11)
        # a mid-chain frame: columns of later joints are exactly zero
        Jb = np.asarray(chain["jac_b3"](mech, q))
        Jpb = pin.computeFrameJacobian(model, data, qp, chain["body_frames"][3], pin.LOCAL)
        np.testing.assert_allclose(Jb, SWAP @ Jpb @ P, atol=1e-11)
        assert np.all(Jb[:, mech.v_slice("j4").start :] == 0.0)


def test_eager_frame_queries_compile_once_per_model(chain, caplog):
    """Eager ``frame_pose`` / ``frame_jacobian`` / ``task_jacobian`` resolve the name before the
    compiled program, so another frame or body of the same model compiles nothing (each name used
    to compile its own program), and the values are those of the functions run as written."""
    mech = chain["mech"]
    q = jnp.asarray(_states(mech, 1)[0])
    E = jnp.eye(mech.nv)[:, :2]
    jm.frame_pose(mech, q, "tool"), jm.frame_jacobian(mech, q, "tool", "world_aligned")
    jm.task_jacobian(mech, q, "tool", E, "world_aligned")
    other = mech.body_names[-2]
    caplog.clear()
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        T = jm.frame_pose(mech, q, other)
        J = jm.frame_jacobian(mech, q, other, "world_aligned")
        Jt = jm.task_jacobian(mech, q, other, E, "world_aligned")
    compiled = [r.getMessage().splitlines()[0] for r in caplog.records if "ompil" in r.getMessage()]
    assert compiled == [], compiled
    T_ref, J_ref = jm.jit(
        lambda q: (jm.frame_pose(mech, q, other), jm.frame_jacobian(mech, q, other, "world_aligned"))
    )(q)
    np.testing.assert_allclose(T, T_ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(J, J_ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(Jt, J_ref[:, :2], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(jm.frame_pose(mech, q, "world"), np.eye(4))
    np.testing.assert_array_equal(jm.frame_jacobian(mech, q, "world"), np.zeros((6, mech.nv)))
    # a float32 model's body pose is float32, as a named frame's (a float64 identity promoted it)
    m32 = jax.tree.map(lambda x: x.astype(jnp.float32) if getattr(x, "dtype", None) == jnp.float64 else x, mech)
    assert jm.frame_pose(m32, q.astype(jnp.float32), other).dtype == jnp.float32
    assert jm.frame_pose(m32, q.astype(jnp.float32), "tool").dtype == jnp.float32
    with pytest.raises(KeyError, match="nope"):
        jm.frame_pose(mech, q, "nope")
    with pytest.raises(ValueError, match="reference"):
        jm.frame_jacobian(mech, q, "tool", "body")


def test_frame_jacobian_vs_autodiff_along_integrate(chain):
    """J_local = d/de Log(T(q)^-1 T(q (+) e)) at e = 0; world and world_aligned from it."""
    mech = chain["mech"]

    @jm.jit
    def ad_local(q):
        T0i = lie.se3_inv(jm.frame_pose(mech, q, "tool"))
        return jax.jacfwd(lambda e: lie.se3_log(T0i @ jm.frame_pose(mech, jm.integrate(mech, q, e), "tool")))(
            jnp.zeros(mech.nv)
        )

    for q in _states(mech, 3):
        Jl = np.asarray(ad_local(q))
        np.testing.assert_allclose(np.asarray(chain["jac"]["local"](mech, q)), Jl, atol=1e-11)
        T = np.asarray(chain["pose_tool"](mech, q))
        Ad = np.asarray(lie.adjoint(jnp.asarray(T)))
        np.testing.assert_allclose(np.asarray(chain["jac"]["world"](mech, q)), Ad @ Jl, atol=1e-11)
        R = T[:3, :3]
        np.testing.assert_allclose(
            np.asarray(chain["jac"]["world_aligned"](mech, q)),
            np.block([[R, np.zeros((3, 3))], [np.zeros((3, 3)), R]]) @ Jl,
            atol=1e-11,
        )


def test_integrate_vs_pinocchio(chain):
    mech, model = chain["mech"], chain["model"]
    integ = jm.jit(jm.integrate)
    for q in _states(mech, 3):
        v = RNG.normal(size=mech.nv)
        q1 = np.asarray(integ(mech, q, jnp.asarray(v), 0.7))
        qp, P = _to_pin(mech, q)
        qp1 = pin.integrate(model, qp, P @ v * 0.7)
        qq, _ = _to_pin(mech, q1)
        # quaternions are equal up to sign
        np.testing.assert_allclose(pin.difference(model, qp1, qq), 0.0, atol=1e-12)


def test_integrate_difference_round_trip(chain):
    mech = chain["mech"]
    integ, diff = jm.jit(jm.integrate), jm.jit(jm.difference)
    t = mech.topo
    for q in _states(mech, 4):
        for scale in (1e-9, 1e-3, 0.5, 1.0):
            v = RNG.normal(size=mech.nv) * scale
            # keep every rotation angle below pi (principal branch of the log)
            for idx in list(t.sph_v) + [r[:3] for r in t.free_v]:
                n = np.linalg.norm(v[idx])
                if n > 3.0:
                    v[idx] *= 3.0 / n
            q1 = integ(mech, q, jnp.asarray(v), 1.0)
            np.testing.assert_allclose(np.asarray(diff(mech, q, q1)), v, atol=1e-12)
            quats = np.concatenate([np.asarray(q1)[t.sph_q], np.asarray(q1)[t.free_q[:, 3:]]])
            np.testing.assert_allclose(np.linalg.norm(quats, axis=-1), 1.0, atol=1e-14)
        np.testing.assert_allclose(np.asarray(diff(mech, q, q)), 0.0, atol=1e-14)


def test_difference_vs_pinocchio(chain):
    mech, model = chain["mech"], chain["model"]
    qa, qb = _states(mech, 3)[1:3]
    pa, P = _to_pin(mech, qa)
    pb, _ = _to_pin(mech, qb)
    d = np.asarray(jm.jit(jm.difference)(mech, qa, qb))
    np.testing.assert_allclose(P @ d, pin.difference(model, pa, pb), atol=1e-11)


def test_free_and_spherical_quaternion_convention():
    """Free joint q = (position in parent, quaternion wxyz); spherical q = quaternion wxyz."""
    for t in ("free", "spherical"):
        g = jm.Graph()
        g.add_body("b", 1.0, inertia=[1, 1, 1])
        g.add_joint("j", t, "world", "b")
        mech = jm.compile(g)
        r = Rotation.from_rotvec([0.3, -0.2, 0.9])
        x, y, z, w = r.as_quat()
        q = np.array([0.1, 0.2, 0.3, w, x, y, z]) if t == "free" else np.array([w, x, y, z])
        T = np.asarray(jm.forward_kinematics(mech, jnp.asarray(q)))[0]
        np.testing.assert_allclose(T[:3, :3], r.as_matrix(), atol=1e-14)
        if t == "free":
            np.testing.assert_allclose(T[:3, 3], [0.1, 0.2, 0.3], atol=1e-15)


def _compound(kind):
    """A universal / cylindrical joint and the same motion composed from two 1-dof joints."""
    P, C, T = _rand_pose(), _rand_pose(), _rand_pose()
    ax, ax2 = _unit(), _unit()
    g1 = jm.Graph()
    g1.add_body("b", 1.0, inertia=[1, 1, 1], frames={"f": T})
    g2 = jm.Graph()
    g2.add_body("mid")
    g2.add_body("b", 1.0, inertia=[1, 1, 1], frames={"f": T})
    if kind == "universal":
        g1.add_joint("u", "universal", "world", "b", parent_pose=P, child_pose=C, axis=ax, axis2=ax2)
        g2.add_joint("r1", "revolute", "world", "mid", parent_pose=P, axis=ax)
        g2.add_joint("r2", "revolute", "mid", "b", child_pose=C, axis=ax2)
    else:
        g1.add_joint("c", "cylindrical", "world", "b", parent_pose=P, child_pose=C, axis=ax)
        g2.add_joint("r1", "revolute", "world", "mid", parent_pose=P, axis=ax)
        g2.add_joint("p2", "prismatic", "mid", "b", child_pose=C, axis=ax)
    return jm.compile(g1), jm.compile(g2)


@pytest.mark.parametrize("kind", ["universal", "cylindrical"])
def test_compound_joints_vs_composition(kind):
    m1, m2 = _compound(kind)
    assert m1.nq == m2.nq == m1.nv == 2

    @jm.jit
    def all_(m, q):
        return jm.frame_pose(m, q, "f"), [jm.frame_jacobian(m, q, "f", r) for r in ("local", "world", "world_aligned")]

    for _ in range(5):
        q = jnp.asarray(RNG.uniform(-2, 2, size=2))
        (T1, J1), (T2, J2) = all_(m1, q), all_(m2, q)
        np.testing.assert_allclose(np.asarray(T1), np.asarray(T2), atol=1e-13)
        for a, b in zip(J1, J2, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-13)


def test_batched_forward_kinematics(chain):
    mech = chain["mech"]
    keys = jax.random.split(jax.random.PRNGKey(1), 64)
    qs = jm.jit(jax.vmap(jm.random_configuration, in_axes=(None, 0)))(mech, keys)
    # what random_configuration promises: 1-D coordinates within finite limits, unit quaternions
    t, Q = mech.topo, np.asarray(qs)
    lo, hi = np.asarray(mech.lower)[t.lin_q], np.asarray(mech.upper)[t.lin_q]
    assert np.all(Q[:, t.lin_q] >= np.where(np.isfinite(lo), lo, -1.0))
    assert np.all(Q[:, t.lin_q] <= np.where(np.isfinite(hi), hi, 1.0))
    quats = [t.sph_q] + ([t.free_q[:, 3:]] if t.free_q.size else [])
    assert sum(i.size for i in quats) > 0  # the chain has a ball or free joint
    for idx in quats:
        np.testing.assert_allclose(np.linalg.norm(Q[:, idx], axis=-1), 1.0, atol=1e-14)
    assert np.ptp(Q[:, t.lin_q], 0).min() > 0  # not a constant
    T = jm.jit(jax.vmap(jm.forward_kinematics, in_axes=(None, 0)))(mech, qs)
    assert T.shape == (64, mech.nb, 4, 4)
    np.testing.assert_allclose(np.asarray(T[5]), np.asarray(chain["fk"](mech, qs[5])), atol=1e-14)


def test_specialized_local_poses_equal_the_generic_formula(chain):
    """Hinges and slides take the short local-pose formula (``kinpass.local_poses``); every body
    still gets the generic product's pose, here with joint offsets and off-axis placements."""
    import equinox as eqx

    from jaxmech.kinpass import _generic_local_poses, _pose_classes, local_poses

    mech = chain["mech"]
    hinge, slide, other, _ = _pose_classes(mech)
    assert hinge.size >= 2 and slide.size == 1 and other.size >= 4  # the chain has every class
    offsets = RNG.normal(size=(2, mech.nb))  # th1 / d offsets on every body, used slot or not
    mech = eqx.tree_at(lambda m: (m.offset_th, m.offset_d), mech, tuple(jnp.asarray(o) for o in offsets))
    both = jm.jit(lambda m, q: (local_poses(m, q), _generic_local_poses(m, q, np.arange(m.nb))))
    for k in range(3):
        q = random_configurations(mech, 1, 10 + k, 2.0)[0]
        (R, p), (R0, p0) = both(mech, q)
        np.testing.assert_allclose(R, R0, rtol=0, atol=2e-15)
        np.testing.assert_allclose(p, p0, rtol=0, atol=2e-15)
