"""Floating base with support modes (issue 6): Go2 on two, three and four feet, all modes in ONE
vmapped call of the inverse dynamics at rest (v = 0, a = 0).

On three or four point feet the robot can stand still: the support forces (multipliers of the
foot point constraints: world axes, force on the robot) must balance gravity, sum = -m g. On two
point feet it cannot (gravity has a moment about the line through the feet unless the COM lies
exactly above it), and the solver must say so (status 1: no effort realizes a = 0) instead of
returning a least-squares answer as if it were an equilibrium."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxmech as jm
from jaxmech.reduction import add_support_points


def test_go2_support_forces_balance_gravity_in_one_vmap(configs_dir):
    g = jm.read_graph(configs_dir / "go2.toml")
    base = jm.compile(g)
    q = np.asarray(base.q0).copy()
    q[2] = 0.3  # standing posture: knees bent, base level
    q[7:] = np.tile([0.0, 0.8, -1.5], 4)
    feet = ["FL_sole", "FR_sole", "RL_sole", "RR_sole"]
    names = add_support_points(g, base, jnp.asarray(q), feet)
    mech = jm.compile(g)
    modes = {  # name -> feet on the ground (loop mask over the four foot constraints)
        "two (diagonal)": [1, 0, 0, 1],
        "two (front)": [1, 1, 0, 0],
        "three": [1, 1, 1, 0],
        "four": [1, 1, 1, 1],
    }
    masks = jnp.asarray(np.array(list(modes.values()), bool))
    joints = np.arange(6, mech.nv)  # the twelve motors; the base (first 6) is unactuated
    zero = jnp.zeros(mech.nv)
    f = jax.jit(jax.vmap(lambda s: jm.inverse_dynamics(mech, jnp.asarray(q), zero, zero, actuators=joints, support=s)))
    out = f(masks)
    two = np.array([sum(on) == 2 for on in modes.values()])
    status = np.asarray(out.status)
    assert np.all(status[~two] == 0) and np.all(status[two] == 1), status
    total_mass = float(jnp.sum(mech.mass))
    weight = -total_mass * np.asarray(mech.gravity)  # the force that holds the robot up
    lam = np.asarray(out.multipliers).reshape(len(modes), 4, 3)  # rows: foot x, y, z (world)
    for k, (label, on) in enumerate(modes.items()):
        if two[k]:
            continue
        assert np.all(lam[k][~np.asarray(on, bool)] == 0), label  # lifted feet carry nothing
        np.testing.assert_allclose(lam[k].sum(0), weight, atol=1e-9, err_msg=label)
    assert mech.loop_names == tuple(names)
