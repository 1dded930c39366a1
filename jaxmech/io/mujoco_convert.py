"""Velocity conversion between jaxmech ``v`` and MuJoCo ``qvel``.

For a mechanism loaded from MJCF (or exported with :func:`jaxmech.export_mjcf`) ``q`` is
MuJoCo's ``qpos`` and the velocity coordinates sit at the same indices. Only free joints differ:

* jaxmech: ``v = (omega_body, v_body)`` — the body-frame twist, angular-first;
* MuJoCo:  ``qvel = (v_world, omega_body)`` — the world-frame velocity of the body origin, then
  the body-frame angular velocity.

With ``R`` the body rotation (from the free joint's quaternion in ``q``), ``v_world = R v_body``.
Ball joints (body-frame omega), hinges and slides are identical. Both functions are pure and
jit/vmap-able; shapes (nv,).
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import lie


def mujoco_qvel_to_v(mech, q: jnp.ndarray, qvel: jnp.ndarray) -> jnp.ndarray:
    """MuJoCo ``qvel`` (nv,) at configuration ``q = qpos`` (nq,) -> jaxmech ``v`` (nv,)."""
    t = mech.topo
    v = jnp.asarray(qvel)
    if t.free_q.size:
        R = lie.quat_to_matrix(q[t.free_q[:, 3:]])  # (n, 3, 3)
        qv = qvel[t.free_v]  # (n, 6) = (v_world, omega_body)
        vb = jnp.einsum("nji,nj->ni", R, qv[:, :3])
        v = v.at[t.free_v].set(jnp.concatenate([qv[:, 3:], vb], -1))
    return v


def v_to_mujoco_qvel(mech, q: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
    """jaxmech ``v`` (nv,) at ``q`` (nq,) -> MuJoCo ``qvel`` (nv,) (inverse of :func:`mujoco_qvel_to_v`)."""
    t = mech.topo
    out = jnp.asarray(v)
    if t.free_q.size:
        R = lie.quat_to_matrix(q[t.free_q[:, 3:]])
        xi = v[t.free_v]  # (n, 6) = (omega_body, v_body)
        vw = jnp.einsum("nij,nj->ni", R, xi[:, 3:])
        out = out.at[t.free_v].set(jnp.concatenate([vw, xi[:, :3]], -1))
    return out
