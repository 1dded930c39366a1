"""``jm.rollout`` against a reference simulator built on Pinocchio: the same scheme (semi-implicit
Euler, ``q (+) v dt`` by ``pin.integrate``, ``sim.PROJECTION_ITERS`` minimum-norm Gauss-Newton steps back onto the
closure, M-orthogonal velocity projection with M at the step's start) with every quantity from
an independent source:

* Stewart platform: accelerations from Pinocchio's ``constraintDynamics`` on the model of
  ``jm.to_pinocchio`` (six CONTACT_3D constraints);
* four-bar (a revolute cut, which Pinocchio's rigid constraints do not express): accelerations
  from Pinocchio's M and h and the independent C, gamma of ``tests/_pinref.py`` (KKT by SVD);
* residual rows and Jacobians for the projections from ``tests/_pinref.py`` (Pinocchio frame
  placements and Jacobians), M from Pinocchio's ``crba``.

One second of motion under constant generalized forces, compared step by step: every step of the
reference starts from jaxmech's previous state, and the two new states must agree to 1e-10."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from _pinref import PinReference
from _shared import closed_states, load

import jaxmech as jm
from jaxmech import simulate as sim

DT = 1e-3
N_STEPS = 1000  # 1 s


@jm.jit
def _rollout(mech, state, tau):
    return sim.rollout(mech, state, tau, DT, N_STEPS, actuation="generalized")


@jm.jit
def _difference(mech, q0, q1):
    return jax.vmap(jm.difference, (None, 0, 0))(mech, q0, q1)


class ReferenceSimulator:
    def __init__(self, mech, pin_dynamics: bool):
        self.mech, self.ref = mech, PinReference(mech)
        self.model, self.data = self.ref.model, self.ref.data
        if pin_dynamics:
            _, self.cons = jm.to_pinocchio(mech)
            self.cdata = pin.StdVec_RigidConstraintData([c.createData() for c in self.cons])
            pin.initConstraintDynamics(self.model, self.data, self.cons, self.cdata)
            self.settings = pin.ProximalSettings(1e-14, 0.0, 1)
        self.pin_dynamics = pin_dynamics

    def accel(self, q, v, tau):
        if not self.pin_dynamics:
            return self.ref.forward_dynamics(q, v, tau)
        r = self.ref
        a = pin.constraintDynamics(
            self.model, self.data, r.q(q), r.v(v), r.v(tau), self.cons, self.cdata, self.settings
        )
        return r.v_back(a)

    def integrate(self, q, v):
        """q (+) v with Pinocchio's integrate (SE(3) exponential for the free joint)."""
        m = self.mech
        qp = pin.integrate(self.model, self.ref.q(q), self.ref.v(v))
        return np.asarray(jm.q_from_pinocchio(m, qp))

    @staticmethod
    def _damping(G):
        return 1e3 * np.finfo(float).eps * max(np.abs(np.diag(G)).max(), 1.0)

    def jacobian(self, q):
        return self.ref.jacobian_and_bias(q, np.zeros(self.mech.nv))[0]

    def step(self, q, v, tau):
        a = self.accel(q, v, tau)
        v1 = v + DT * a
        q1 = self.integrate(q, DT * v1)
        for _ in range(sim.PROJECTION_ITERS):  # minimum-norm Gauss-Newton onto rho = 0 (the library's count)
            r, C = self.ref.residual(q1), self.jacobian(q1)
            G = C @ C.T
            q1 = self.integrate(q1, -C.T @ np.linalg.solve(G + self._damping(G) * np.eye(len(G)), r))
        M, _ = self.ref.mass_matrix_and_bias(q, v)
        C = self.jacobian(q1)
        MiCt = np.linalg.solve(M, C.T)
        G = C @ MiCt
        v1 = v1 - MiCt @ np.linalg.solve(G + self._damping(G) * np.eye(len(G)), C @ v1)
        return q1, v1


# The Stewart (Pinocchio's constraintDynamics, ~12 s: 1,000 reference steps in Python and its own
# assembly and rollout compiles) runs in the slow tier; the four-bar by default.
@pytest.mark.parametrize(
    "name,pin_dynamics", [pytest.param("stewart", True, marks=pytest.mark.slow), ("four_bar", False)]
)
def test_rollout_matches_pinocchio_reference_step_by_step(name, pin_dynamics):
    mech = load(name)
    assert set(mech.topo.loop_types) == ({"point"} if pin_dynamics else {"revolute"})
    sim_ref = ReferenceSimulator(mech, pin_dynamics)
    q0 = closed_states(mech, 1, 0.05, seed=1)[0]
    rng = np.random.default_rng(1)
    C = sim_ref.jacobian(q0)
    _, S, Vt = np.linalg.svd(C)
    v0 = Vt[int((S > 1e-9 * S[0]).sum()) :].T @ rng.normal(size=mech.nv - int((S > 1e-9 * S[0]).sum()))
    tau = rng.normal(size=mech.nv)
    traj, info = _rollout(mech, sim.SimState(jnp.asarray(q0), jnp.asarray(v0)), jnp.asarray(tau))
    Q, V = np.concatenate([q0[None], traj.q]), np.concatenate([v0[None], traj.v])
    assert np.abs(np.asarray(_difference(mech, jnp.asarray(Q[:1]), jnp.asarray(Q[-1:])))).max() > 0.05  # it moved
    ref = [sim_ref.step(Q[k], V[k], tau) for k in range(N_STEPS)]
    q_ref, v_ref = np.array([x[0] for x in ref]), np.array([x[1] for x in ref])
    err_q = np.abs(np.asarray(_difference(mech, jnp.asarray(Q[1:]), jnp.asarray(q_ref)))).max()
    err_v = (np.abs(V[1:] - v_ref).max(1) / np.maximum(1.0, np.abs(v_ref).max(1))).max()
    assert err_q <= 1e-10 and err_v <= 1e-10, (err_q, err_v)
    assert float(np.max(info.closure_gap)) <= 1e-10
