"""Independent references built on Pinocchio, numpy and scipy (no jaxmech numerics).

A jaxmech mechanism is exported once with ``jm.to_pinocchio(mech, unsupported="skip")`` (the
tree only: joint placements, inertias, armature); everything else here is computed from
Pinocchio's kinematics and dynamics:

* the cut frames of every closure element as Pinocchio operational frames, their world placements
  (``updateFramePlacements``), LOCAL frame Jacobians and LOCAL spatial accelerations;
* the closure rows of each cut type from the relative pose ``Delta = inv(T_A) T_B``, with rotation
  logs from scipy (``Rotation.as_rotvec``, ``scipy.linalg.logm`` for SE(3)):
  point ``p``; revolute ``(p, R02, R12)``; cylindrical ``(p_x, p_y, R02, R12)``; universal
  ``(p, R01 - cos angle)``; prismatic ``(log R, p_x, p_y)``; weld ``Log(Delta)``; pose the selected
  rows of ``Log(Delta)``;
* their Jacobian rows from the relative twist of B against A written in A,
  ``w = Ad_Delta J_B - J_A`` (``p' = w_v - p^ w_w``, ``R' = w_w^ R``), and the curvature
  ``gamma = rho''`` at zero acceleration from the frames' spatial accelerations;
* M (``crba``) and h (``nle``), and a float64 null-space solve of the KKT system.

Twists are angular-first (omega, v) here, as in jaxmech; Pinocchio's linear-first vectors are
permuted at the boundary.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import scipy.linalg
from scipy.spatial.transform import Rotation

import jaxmech as jm


def hat(w: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def adjoint(T: np.ndarray) -> np.ndarray:
    """Ad_T (6, 6), angular-first: [[R, 0], [p^ R, R]]."""
    R, p = T[:3, :3], T[:3, 3]
    A = np.zeros((6, 6))
    A[:3, :3] = R
    A[3:, 3:] = R
    A[3:, :3] = hat(p) @ R
    return A


def ad(x: np.ndarray) -> np.ndarray:
    """ad_x (6, 6), angular-first: [[w^, 0], [v^, w^]]."""
    A = np.zeros((6, 6))
    A[:3, :3] = hat(x[:3])
    A[3:, 3:] = hat(x[:3])
    A[3:, :3] = hat(x[3:])
    return A


def _ang_first(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x[3:6], x[0:3]]) if x.ndim == 1 else np.concatenate([x[3:6], x[0:3]], 0)


def se3_log(T: np.ndarray) -> np.ndarray:
    """(omega, v) with expm([[omega^, v], [0, 0]]) = T, from scipy's matrix logarithm."""
    L = np.real(scipy.linalg.logm(T))
    return np.array([L[2, 1], L[0, 2], L[1, 0], L[0, 3], L[1, 3], L[2, 3]])


class PinReference:
    """Pinocchio model of ``mech``'s tree plus the cut frames of its closure elements."""

    def __init__(self, mech: jm.Mechanism):
        self.mech = mech
        self.model, _ = jm.to_pinocchio(mech, unsupported="skip")
        t = mech.topo
        cpa, cpb = np.asarray(mech.cut_pose_a), np.asarray(mech.cut_pose_b)
        groups = {n: g for g in t.groups for n in g.names}
        self.loops = []  # (name, type, frame A, frame B, selected rows, cut length, row indices)
        for li, (name, typ) in enumerate(zip(t.loop_names, t.loop_types, strict=True)):
            fids = []
            for side, (b, P) in enumerate(zip(t.loop_bodies[li], (cpa[li], cpb[li]), strict=True)):
                if b < 0:
                    parent, place, pframe = 0, P, 0
                else:
                    bf = self.model.getFrameId(t.body_names[b])
                    f = self.model.frames[bf]
                    parent, place, pframe = f.parentJoint, f.placement.homogeneous @ P, bf
                frame = pin.Frame(f"{name}_{'AB'[side]}", parent, pframe, pin.SE3(place), pin.FrameType.OP_FRAME)
                fids.append(self.model.addFrame(frame))
            rows = np.asarray(groups[name].rows) if typ == "pose" else None
            idx = np.asarray(jm.closure_rows(mech, [name]))
            self.loops.append((name, typ, fids[0], fids[1], rows, float(mech.cut_length[li]), idx))
        self.data = self.model.createData()
        self.n_rows = mech.n_rows

    # ------------------------------------------------------------------ conversions
    def q(self, q) -> np.ndarray:
        return np.asarray(jm.q_to_pinocchio(self.mech, np.asarray(q, float)))

    def v(self, v) -> np.ndarray:
        return np.asarray(jm.v_to_pinocchio(self.mech, np.asarray(v, float)))

    def v_back(self, vp) -> np.ndarray:
        return np.asarray(jm.v_from_pinocchio(self.mech, np.asarray(vp)))

    # ------------------------------------------------------------------ kinematics
    def _update(self, q, v=None):
        qp = self.q(q)
        if v is None:
            pin.forwardKinematics(self.model, self.data, qp)
        else:
            pin.forwardKinematics(self.model, self.data, qp, self.v(v), np.zeros(self.model.nv))
            pin.computeJointJacobians(self.model, self.data, qp)
        pin.updateFramePlacements(self.model, self.data)

    def _frame(self, fid, with_vel):
        T = self.data.oMf[fid].homogeneous
        if not with_vel:
            return T, None, None
        J = pin.getFrameJacobian(self.model, self.data, fid, pin.ReferenceFrame.LOCAL)
        J = self.v_back(_ang_first(J))  # (6, nv) angular-first, our v order
        acc = pin.getFrameAcceleration(self.model, self.data, fid, pin.ReferenceFrame.LOCAL).vector
        return T, J, _ang_first(acc)

    @staticmethod
    def _rows(typ, Delta, sel, length):
        R, p = Delta[:3, :3], Delta[:3, 3]
        if typ == "point":
            return p
        if typ == "revolute":
            return np.concatenate([p, [R[0, 2], R[1, 2]]])
        if typ == "cylindrical":
            return np.concatenate([p[:2], [R[0, 2], R[1, 2]]])
        if typ == "universal":
            return np.concatenate([p, [R[0, 1] - length]])
        if typ == "prismatic":
            return np.concatenate([Rotation.from_matrix(R).as_rotvec(), p[:2]])
        if typ == "weld":
            return se3_log(Delta)
        if typ == "pose":
            return se3_log(Delta)[sel]
        raise NotImplementedError(typ)

    def residual(self, q) -> np.ndarray:
        """Closure residual (s,) in jaxmech's row order (loop rows only; couplings excluded)."""
        self._update(q)
        out = np.full(self.n_rows, np.nan)
        for _, typ, fa, fb, sel, length, idx in self.loops:
            Ta, Tb = self.data.oMf[fa].homogeneous, self.data.oMf[fb].homogeneous
            out[idx] = self._rows(typ, np.linalg.inv(Ta) @ Tb, sel, length)
        return out

    def jacobian_and_bias(self, q, v) -> tuple[np.ndarray, np.ndarray]:
        """C (s, nv) and gamma = d^2 rho / dt^2 at zero acceleration (s,), for the row types
        whose rates are algebraic in the relative twist (point, revolute, cylindrical, universal)."""
        self._update(q, v)
        v = np.asarray(v, float)
        C = np.full((self.n_rows, self.mech.nv), np.nan)
        g = np.full(self.n_rows, np.nan)
        for _, typ, fa, fb, _, _, idx in self.loops:
            Ta, Ja, aa = self._frame(fa, True)
            Tb, Jb, ab = self._frame(fb, True)
            D = np.linalg.inv(Ta) @ Tb
            R, p = D[:3, :3], D[:3, 3]
            AdD = adjoint(D)
            W = AdD @ Jb - Ja  # relative twist of B against A, in A: w = W v
            xa, xb = Ja @ v, Jb @ v
            w = W @ v
            zeta = xb - adjoint(np.linalg.inv(D)) @ xa  # Delta^-1 Delta' (body frame of B)
            wdot = AdD @ (ad(zeta) @ xb + ab) - aa  # d/dt (Ad_Delta xi_B - xi_A) at zero acceleration
            ww, wv, dw, dv = w[:3], w[3:], wdot[:3], wdot[3:]
            pdot = wv - hat(p) @ ww
            Cp = W[3:] - hat(p) @ W[:3]
            gp = dv - hat(pdot) @ ww - hat(p) @ dw

            def axis(i, k, W=W, R=R, ww=ww, dw=dw):
                c = -(hat(R[:, k]) @ W[:3])[i]
                Rdot = hat(ww) @ R
                return c, (hat(dw) @ R + hat(ww) @ Rdot)[i, k]

            if typ == "point":
                rows = [(Cp[i], gp[i]) for i in range(3)]
            elif typ == "revolute":
                rows = [(Cp[i], gp[i]) for i in range(3)] + [axis(0, 2), axis(1, 2)]
            elif typ == "cylindrical":
                rows = [(Cp[i], gp[i]) for i in range(2)] + [axis(0, 2), axis(1, 2)]
            elif typ == "universal":
                rows = [(Cp[i], gp[i]) for i in range(3)] + [axis(0, 1)]
            else:  # log rows (prismatic, weld, pose): left NaN, see the module docstring
                continue
            C[idx] = np.array([r[0] for r in rows])
            g[idx] = np.array([r[1] for r in rows])
        return C, g

    # ------------------------------------------------------------------ dynamics
    def mass_matrix_and_bias(self, q, v) -> tuple[np.ndarray, np.ndarray]:
        """M (nv, nv) from ``crba`` (with armature) and h = C(q, v) v + g(q) from ``nle``, in our
        v order."""
        qp, vp = self.q(q), self.v(v)
        M = pin.crba(self.model, self.data, qp)
        M = np.triu(M) + np.triu(M, 1).T
        perm = np.argsort(jm.io.pinocchio.pinocchio_permutations(self.mech)[1])
        return M[np.ix_(perm, perm)], self.v_back(pin.nle(self.model, self.data, qp, vp))

    def forward_dynamics(self, q, v, tau) -> np.ndarray:
        """a from M a + h = tau + C^T lambda, C a + gamma = 0 (null space of C by SVD, float64)."""
        M, h = self.mass_matrix_and_bias(q, v)
        C, gamma = self.jacobian_and_bias(q, v)
        return kkt_solve(M, h, C, gamma, np.asarray(tau, float))


def kkt_solve(M, h, C, gamma, tau, rtol: float = 1e-10) -> np.ndarray:
    """Acceleration of the constrained system with possibly redundant rows: a = a_p + N u with
    a_p = -C^+ gamma and N spanning null(C) (numpy SVD), u from the projected equation."""
    U, S, Vt = np.linalg.svd(C)
    r = int((S > rtol * S[0]).sum()) if S.size else 0
    ap = -Vt[:r].T @ ((U[:, :r].T @ gamma) / S[:r])
    N = Vt[r:].T
    u = np.linalg.solve(N.T @ M @ N, N.T @ (tau - h - M @ ap))
    return N @ u + ap
