"""Floating base with support modes (issue 6): all support modes of a robot in ONE vmapped call of
the inverse dynamics at rest (v = 0, a = 0); the support forces must balance gravity.

At rest the whole robot is in equilibrium, so whatever the distribution between the feet, the
support forces (multipliers of the support constraints, force on the robot) sum to ``-m g``.

* Go2 on point feet: two diagonal feet, the other diagonal, three and four feet. Two point feet
  carry the robot only when the COM lies above the line through them (gravity has a moment
  about that line otherwise), so the posture is solved (hip and thigh angles of all legs) to put
  the COM above the crossing of the diagonals. Two front feet cannot hold it there, and the
  solver must say so (status INCONSISTENT: no effort realizes a = 0) instead of returning a least-squares
  answer as if it were an equilibrium.
* Cassie with welded soles: floating, left, right and double support. Cassie's shin and heel
  springs are unactuated joints whose stiffness supplies their torque; the inverse dynamics solves
  for the spring torques with the motor torques (the spring deflection follows from the stiffness).
  Floating it cannot stand still (status INCONSISTENT)."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
import scipy.linalg

import jaxmech as jm
from jaxmech.reduction import add_support_points

BAD = jm.Status.INCONSISTENT  # inverse dynamics: no effort realizes the accelerations

FEET = ["FL_sole", "FR_sole", "RL_sole", "RR_sole"]


@jm.jit
def _fk(mech, q):
    """World poses of all bodies (jitted once; the mechanism is an argument)."""
    return jm.forward_kinematics(mech, q)


@jm.jit
def _feet(mech, q):
    """World positions (4, 3) of the four feet."""
    return jnp.stack([jm.frame_pose(mech, q, f)[:3, 3] for f in FEET])


def _com(mech, q) -> np.ndarray:
    X = np.asarray(_fk(mech, jnp.asarray(q)))
    m = np.asarray(mech.mass)
    c = np.einsum("bij,bj->bi", X[:, :3, :3], np.asarray(mech.com)) + X[:, :3, 3]
    return (m[:, None] * c).sum(0) / m.sum()


def _diagonal_crossing(mech, q) -> np.ndarray:
    """Horizontal point where the lines FL-RR and FR-RL cross."""
    p = list(np.asarray(_feet(mech, jnp.asarray(q)))[:, :2])
    d1, d2 = p[3] - p[0], p[2] - p[1]
    s = np.linalg.solve(np.stack([d1, -d2], 1), p[1] - p[0])
    return p[0] + s[0] * d1


def _go2_balanced_posture(mech) -> np.ndarray:
    """Standing posture with the COM above the crossing of the diagonals (Newton on two shared
    joint offsets: hip abduction mirrored left/right and thigh pitch of all legs)."""
    q0 = np.asarray(mech.q0).copy()
    q0[2] = 0.3
    q0[7:] = np.tile([0.0, 0.8, -1.5], 4)
    side = np.array([1.0, -1.0, 1.0, -1.0])  # FL FR RL RR: left legs +, right legs -

    def posture(x):
        q = q0.copy()
        q[7::3] += side * x[0]
        q[8::3] += x[1]
        return q

    def gap(x):
        q = posture(x)
        return _com(mech, q)[:2] - _diagonal_crossing(mech, q)

    x = np.zeros(2)
    for _ in range(20):
        r = gap(x)
        if np.max(np.abs(r)) < 1e-14:
            break
        J = np.stack([(gap(x + h) - r) / 1e-7 for h in np.eye(2) * 1e-7], 1)
        x = x - np.linalg.solve(J, r)
    assert np.max(np.abs(gap(x))) < 1e-13
    return posture(x)


def test_go2_support_forces_balance_gravity_in_one_vmap(configs_dir):
    g = jm.read_graph(configs_dir / "go2.toml")
    base = jm.compile(g)
    q = _go2_balanced_posture(base)
    names = add_support_points(g, base, jnp.asarray(q), FEET)
    mech = jm.compile(g)
    modes = {  # name -> feet on the ground (loop mask over the four foot constraints), status
        "two (FL-RR diagonal)": ([1, 0, 0, 1], 0),
        "two (FR-RL diagonal)": ([0, 1, 1, 0], 0),
        "two (front)": ([1, 1, 0, 0], BAD),
        "three": ([1, 1, 1, 0], 0),
        "four": ([1, 1, 1, 1], 0),
    }
    masks = jnp.asarray(np.array([m for m, _ in modes.values()], bool))
    joints = np.arange(6, mech.nv)  # the twelve motors; the base (first 6) is unactuated
    zero = jnp.zeros(mech.nv)
    f = jm.jit(jax.vmap(lambda s: jm.inverse_dynamics(mech, jnp.asarray(q), zero, zero, actuators=joints, support=s)))
    out = f(masks)
    status = np.asarray(out.status)
    np.testing.assert_array_equal(status, [s for _, s in modes.values()])
    weight = -float(jnp.sum(mech.mass)) * np.asarray(mech.gravity)  # the force that holds the robot up
    lam = np.asarray(out.multipliers).reshape(len(modes), 4, 3)  # rows: foot x, y, z (world)
    feet = np.asarray(_feet(mech, jnp.asarray(q)))
    c = _com(mech, q)
    for k, (label, (on, st)) in enumerate(modes.items()):
        if st:
            continue
        assert np.all(lam[k][~np.asarray(on, bool)] == 0), label  # lifted feet carry nothing
        np.testing.assert_allclose(lam[k].sum(0), weight, atol=1e-9, err_msg=label)
        # moments about the COM (gravity acts there): sum_k (p_k - c) x f_k = 0
        moment = sum(np.cross(feet[i] - c, lam[k][i]) for i in range(4))
        np.testing.assert_allclose(moment, 0.0, atol=1e-9, err_msg=label)
        assert np.all(lam[k][np.asarray(on, bool), 2] > -1e-9), (
            label
        )  # feet push, never pull (FL carries 0 of 3: COM on FR-RL)
    assert mech.loop_names == tuple(names)
    # four feet are redundant: the efforts must be the minimum-norm ones, pinv(E^T B) E^T h with E a
    # null-space basis of all twelve foot rows (scipy SVD) and h the gravity torques (at rest)
    C = np.asarray(jm.closure_jacobian(mech, jnp.asarray(q)))
    E = scipy.linalg.null_space(C)
    h = np.asarray(jm.rnea(mech, jnp.asarray(q), zero, zero))
    f_ref = np.linalg.pinv(E.T[:, joints]) @ (E.T @ h)
    np.testing.assert_allclose(np.asarray(out.effort)[-1], f_ref, atol=1e-8)
    z = lam[-1, :, 2]  # the Go2 is left-right symmetric and the COM lies on the diagonals' crossing
    np.testing.assert_allclose(z[[1, 0, 3, 2]], z, rtol=1e-9)


@pytest.mark.slow  # ~6 s; the Go2 checks above run the same balance (forces and moments) by default
def test_cassie_support_modes_balance_gravity_in_one_vmap(configs_dir):
    g = jm.read_graph(configs_dir / "cassie.toml")
    base = jm.compile(g)
    q = base.q0  # standing, loops exactly closed in the file
    soles = ["left_sole", "right_sole"]
    add_support_points(g, base, q, soles, kind="weld")
    mech = jm.compile(g)
    n_loop = mech.n_rows - 12  # the four rod loops come first, then the two 6-row sole welds
    springs = [f"{s}-{j}" for s in ("left", "right") for j in ("knee-shin-joint", "tarsus-spring-joint")]
    efforts = [n for n in mech.joint_names if n.endswith("-op")] + springs  # the 10 motors
    modes = {"floating": ([0, 0], BAD), "left": ([1, 0], 0), "right": ([0, 1], 0), "double": ([1, 1], 0)}
    masks = jnp.asarray(np.array([[1] * 4 + m for m, _ in modes.values()], bool))
    zero = jnp.zeros(mech.nv)
    f = jm.jit(jax.vmap(lambda s: jm.inverse_dynamics(mech, q, zero, zero, actuators=efforts, support=s)))
    out = f(masks)
    np.testing.assert_array_equal(np.asarray(out.status), [s for _, s in modes.values()])
    weight = -float(jnp.sum(mech.mass)) * np.asarray(mech.gravity)
    X = [np.asarray(jm.frame_pose(mech, q, s)) for s in soles]
    R, p = [x[:3, :3] for x in X], [x[:3, 3] for x in X]  # weld rows are in sole axes
    c = _com(mech, q)
    lam = np.asarray(out.multipliers)[:, n_loop:].reshape(len(modes), 2, 6)  # (moment, force) per sole
    for k, (label, (on, st)) in enumerate(modes.items()):
        if st:
            continue
        force = sum(R[i] @ lam[k, i, 3:] for i in range(2))
        np.testing.assert_allclose(force, weight, atol=1e-9, err_msg=label)
        # moments about the COM: sole moments plus the moments of the sole forces
        moment = sum(R[i] @ lam[k, i, :3] + np.cross(p[i] - c, R[i] @ lam[k, i, 3:]) for i in range(2))
        np.testing.assert_allclose(moment, 0.0, atol=1e-9, err_msg=label)
        for i in range(2):
            assert (np.any(lam[k, i] != 0)) == bool(on[i]), label
    # Static equilibrium against Pinocchio's gravity vector on the same tree (independent of
    # jaxmech's dynamics): B f + C^T lambda = g(q), so the motor and spring torques are exactly
    # those that hold the robot; each spring torque is the weight share it carries.
    model, _ = jm.to_pinocchio(mech, unsupported="skip")
    g_ref = jm.v_from_pinocchio(
        mech, pin.computeGeneralizedGravity(model, model.createData(), jm.q_to_pinocchio(mech, np.asarray(q)))
    )
    C = np.asarray(jm.closure_jacobian(mech, q))
    cols = [mech.v_slice(n).start for n in efforts]
    for k, (label, (_, st)) in enumerate(modes.items()):
        if st:
            continue
        tau = np.zeros(mech.nv)
        tau[cols] = np.asarray(out.effort[k])
        np.testing.assert_allclose(tau + C.T @ np.asarray(out.multipliers[k]), g_ref, atol=1e-9, err_msg=label)
