"""``jm.assemble_batch`` (the straggler policy) against ``jax.vmap(jm.assemble)``.

Phase 2 continues each late state's own loop, so every field must equal the plain vmapped
assembly's: the reference is that assembly (through the session's shared compile) and Freudenstein's
closed form of the four-bar (tests/test_assembly.py)."""

from __future__ import annotations

import logging

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import assemble_batch as vmapped_assembly
from _shared import load
from test_assembly import FB, nearest_branch

import jaxmech as jm
from jaxmech import assembly, straggler

N = 32  # the shared padded batch of tests/_shared.py: the reference reuses the session's compile
FIELDS = ("q", "status", "residual", "iterations", "rank", "rcond", "rows", "lam", "active")


@pytest.fixture(scope="module")
def case():
    """Four-bar guesses around the crank circle with passive angles off by up to 1.2 rad (some
    take twice the median iteration count), one non-finite guess; the reference result and
    ``assemble_batch`` with a chunk of 4."""
    mech = load("four_bar")
    rng = np.random.default_rng(5)
    G = np.tile(np.asarray(mech.q0), (N, 1))
    G[:, 0] = np.linspace(0.0, 2 * np.pi, N, endpoint=False)
    G[:, 1:] += rng.uniform(-1.2, 1.2, (N, 2))
    G[-1, 0] = np.nan
    ref = jax.tree.map(np.asarray, vmapped_assembly(mech, G))
    compiled = _Compiles()
    logger = logging.getLogger("jax._src.interpreters.pxla")
    logger.addHandler(compiled)
    try:
        with jax.log_compiles():
            out = jax.tree.map(np.asarray, jm.assemble_batch(mech, G, chunk=4))
    finally:
        logger.removeHandler(compiled)
    return mech, G, ref, out, compiled.names


class _Compiles(logging.Handler):
    """Names of the programs JAX compiles while attached (``jax.log_compiles`` messages)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.names = []

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Compiling "):
            self.names.append(msg.split()[1])


def test_every_field_equals_the_vmapped_assembly(case):
    mech, G, ref, out, compiled = case
    # the case exercises phase 2: phase 1 stops with 1-4 states still iterating
    setup, run = straggler._phase_one(mech, jnp.asarray(G), None, (), jnp.asarray(4, jnp.int32))
    late = np.asarray(assembly.running(setup.state, assembly.make_options()))
    np.testing.assert_array_equal(np.asarray(run), late)  # the mask the host splits by
    assert 1 <= late.sum() <= 4
    assert np.all(ref.iterations[late] > np.asarray(setup.state.it)[late])
    fields = lambda r: {name: getattr(r, name) for name in FIELDS}  # noqa: E731
    chex.assert_trees_all_close(fields(out), fields(ref), rtol=0, atol=1e-15)  # names the leaf that differs
    chex.assert_trees_all_equal((out.iterations, out.status), (ref.iterations, ref.status))
    # the host split is two small programs (gather, scatter) next to the three phases, not one
    # eager operation per field (the old split compiled ~40 programs on a new batch shape)
    assert len(compiled) <= 8, compiled
    assert {"jit(_phase_one)", "jit(_phase_two)", "jit(_checks)"} <= set(compiled), compiled


def test_converged_states_are_the_closed_form(case):
    mech, G, _, out, _ = case
    ok = out.status == jm.Status.OK
    assert ok.sum() == N - 1 and int(out.status[-1]) == jm.Status.NONFINITE_INPUT
    for k in np.nonzero(ok)[0]:
        assert out.residual[k] <= 1e-12
        assert out.q[k, 0] == G[k, 0]  # the active crank angle is held
        closed = nearest_branch(out.q[k], np.array([G[k, 0]]), **FB)[0]
        np.testing.assert_allclose(np.angle(np.exp(1j * (out.q[k] - closed))), 0.0, atol=1e-9)


def test_chunk_of_the_whole_batch_and_a_model_without_loops():
    mech = load("four_bar")
    G = np.tile(np.asarray(mech.q0), (N, 1))
    G[:, 0] = np.linspace(-1.0, 1.0, N)
    ref = jax.tree.map(np.asarray, vmapped_assembly(mech, G))
    out = jm.assemble_batch(mech, jnp.asarray(G), chunk=10 * N)  # phase 1 does nothing
    np.testing.assert_allclose(np.asarray(out.q), ref.q, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(out.iterations), ref.iterations)
    # a model without loops (Go2, floating base): nothing to iterate, every field as the vmap's
    go2 = load("go2")
    assert go2.n_rows == 0
    Q = np.tile(np.asarray(go2.q0), (N, 1))
    tree, ref = (jax.tree.map(np.asarray, r) for r in (jm.assemble_batch(go2, Q), vmapped_assembly(go2, Q)))
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(tree, name), getattr(ref, name), err_msg=name)


def test_bad_arguments_name_the_problem():
    mech = load("four_bar")
    with pytest.raises(ValueError, match=r"guesses must have shape \(n, 3\)"):
        jm.assemble_batch(mech, mech.q0)
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        jm.assemble_batch(mech, mech.q0[None], chunk=0)
    with pytest.raises(TypeError, match="unknown assembly options"):
        jm.assemble_batch(mech, mech.q0[None], tolerance=1.0)


def test_default_chunk():
    assert [straggler.default_chunk(n) for n in (1, 2, 31, 64, 1024, 8192)] == [1, 1, 1, 2, 32, 256]
