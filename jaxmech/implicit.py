"""Implicit-function-theorem derivatives of assembled configurations (paper 001 eqs. (52)-(55)).

:func:`_attach` is the identity on a solved ``q_star``; its JVP differentiates the closure
``rho(q_star(a, theta), theta) = 0`` on the selected rows, so the gradient of ``jm.assemble`` and
``jm.track`` with respect to the active coordinates and the model's array leaves comes from one
linear solve at the solution, not from the solver's iterations.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from . import lapack
from .active_set import Partition
from .closure import closure_residual, closure_residual_and_jacobian
from .kinpass import difference, integrate
from .mechanism import Mechanism
from .rank import rcond


def _passive_q_mask(mech: Mechanism, part: Partition) -> np.ndarray:
    """Static (nq,) mask: q entries of joints that own a passive coordinate."""
    t = mech.topo
    mask = np.zeros(mech.nq, bool)
    pset = set(part.passive)
    for n in t.joint_names:
        vs, qs = mech.v_slice(n), mech.q_slice(n)
        if any(i in pset for i in range(vs.start, vs.stop)):
            mask[qs] = True
    return mask


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _attach(part: Partition, mech: Mechanism, q_in, q_star, rows, ok):
    """Identity on ``q_star``; its JVP is the implicit-function-theorem derivative (paper 001
    eqs. (52)-(55)): ``dv_p = -R_p^-1 (R_a dv_a + d rho/d theta . dtheta)`` on the selected rows."""
    del part, mech, q_in, rows, ok
    return q_star


@_attach.defjvp
def _attach_jvp(part: Partition, primals, tangents):
    mech, q_in, q_star, rows, ok = primals
    dmech, dq_in = tangents[0], tangents[1]
    p = np.asarray(part.passive, int)
    keep_q = jnp.asarray(~_passive_q_mask(mech, part), q_star.dtype)
    # Linear maps evaluated at the primal point (jacfwd builds them from primals only), so the
    # tangent computation below is a chain of matrix products and solves: transposable for
    # reverse mode.
    Dm = jax.jacfwd(lambda x: difference(mech, q_star, x))(q_star)  # (nv, nq)
    Nm = jax.jacfwd(lambda v: integrate(mech, q_star, v))(jnp.zeros(mech.nv, q_star.dtype))  # (nq, nv)
    known = np.ones(mech.nv)
    known[p] = 0.0
    dv_known = (Dm @ (dq_in * keep_q)) * jnp.asarray(known, q_star.dtype)
    if p.size and mech.n_rows:
        r_theta = jax.jvp(lambda m: closure_residual(m, q_star), (mech,), (dmech,))[1]
        _, C = closure_residual_and_jacobian(mech, q_star)
        Rp = C[rows][:, p]
        rhs = (C @ dv_known + r_theta)[rows]
        good = ok & jnp.all(jnp.isfinite(Rp)) & (rcond(Rp) > 0)
        Rp = jnp.where(good, Rp, jnp.eye(p.size, dtype=Rp.dtype))  # where-shim: no NaN cotangents
        dvp = jnp.where(good, -(lapack.inv(Rp) @ rhs), 0.0)  # inverse of a primal: transposable
        P = np.zeros((mech.nv, p.size))
        P[p, np.arange(p.size)] = 1.0
        dv = dv_known + jnp.asarray(P, q_star.dtype) @ dvp
    else:
        dv = dv_known
    dq = Nm @ dv
    return q_star, dq
