"""Batched assembly that does not wait for stragglers.

``jax.jit(jax.vmap(assemble))`` runs one ``lax.while_loop`` for the whole batch, and a vmapped
loop steps *every* lane until the last one stops. From rough guesses a small share of states
(about 1 % of Stewart guesses within 0.2 m / 0.5 rad) runs to the iteration cap, so the batch pays
that cap for all of its states: at batch 1,024 the plain vmap costs about 10x what the median
state costs (``benchmarks/assembly.py``).

:func:`assemble_batch` splits the same loop in two:

1. the whole batch iterates until at most ``chunk`` of its states still iterate (a loop over the
   batch whose condition counts the running states, not an ``any``), or until it has run
   :data:`PATIENCE` times the iterations by which half of the batch had stopped;
2. the states still running, with their loop state intact (iterate, homotopy parameter, damping,
   counters), are gathered into batches of ``chunk`` and continue the *same* loop to its normal
   end; the final checks then run over the whole batch.

Phase 2 continues exactly where phase 1 stopped, so every state runs the iterations it runs in
``jax.vmap(assemble)``: same ``q``, ``status`` and ``iterations`` (``tests/test_straggler.py``).
Three programs are compiled: phase 1 and the final checks at the batch's shape, phase 2 at the
chunk's. The split happens on the host, so the function is not traceable: inside ``jit``, ``grad``
or ``vmap`` use ``jax.vmap(jm.assemble)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ._jit import jit
from .active_set import partition
from .assembly import AssemblyResult, _assemble_one, _complete, _setup, _start, _trivial, make_options
from .corrector import _loop, running
from .independent import mobility
from .mechanism import Mechanism

PATIENCE = 3
"""Phase 1 also stops after ``PATIENCE`` times the iterations by which half the batch stopped (then
phase 2 takes the late states in several chunks): many hopeless guesses cannot hold the batch."""


def default_chunk(n: int) -> int:
    """Phase-2 batch size for a batch of ``n``: ``n / 32`` rounded up to a power of two, at least
    1 and at most ``n`` (1,024 states: 32; 8,192: 256)."""
    return int(min(n, max(1, 2 ** math.ceil(math.log2(max(n / 32, 1))))))


def _where_running(run, new, old):
    """Per-state select over a batched :class:`_State` (``run`` (n,) bool)."""
    return jax.tree.map(lambda a, b: jnp.where(run.reshape(run.shape + (1,) * (a.ndim - 1)), a, b), new, old)


@jit(static_argnames=("active", "options"))
def _phase_one(mech: Mechanism, guesses, active, options: tuple, max_running):
    """Set-up of every state, then the corrector loop over the batch until ``<= max_running`` run."""
    opts, part = make_options(**dict(options)), partition(mech, active)
    m = jax.lax.stop_gradient(mech)
    q_in, finite_in = jax.vmap(lambda g: _start(m, g))(guesses)
    setup = jax.vmap(lambda q, f: _setup(m, part, q, f, opts))(q_in, finite_in)
    step = jax.vmap(lambda d, sel, s: _loop(m, part, d, sel, opts)[1](s))

    n = guesses.shape[0]
    never = jnp.asarray(np.iinfo(np.int32).max // (PATIENCE + 1), jnp.int32)

    def body(c):
        S, k, k_half = c
        S = _where_running(running(S, opts), step(setup.defect, setup.sel, S), S)
        k_half = jnp.where((k_half == never) & (2 * jnp.sum(running(S, opts)) <= n), k + 1, k_half)
        return S, k + 1, k_half

    def cond(c):
        S, k, k_half = c
        return (jnp.sum(running(S, opts)) > max_running) & (k < PATIENCE * k_half)

    state, _, _ = jax.lax.while_loop(cond, body, (setup.state, jnp.zeros((), jnp.int32), never))
    return setup._replace(state=state), running(state, opts)


@jit
def _gather(setup, idx):
    """The rows ``idx`` (chunk,) of a batched set-up (one small program per shape, not one per leaf)."""
    return jax.tree.map(lambda x: x[idx], setup)


@jit
def _scatter(state, done, idx):
    """``state`` with rows ``idx`` replaced by ``done``; repeated indices carry equal rows (the
    padding repeats the last late state, whose continued loop is the same computation)."""
    return jax.tree.map(lambda a, b: a.at[idx].set(b), state, done)


@jit(static_argnames=("active", "options"))
def _phase_two(mech: Mechanism, setup, active, options: tuple):
    """The corrector loop continued to its normal end on a gathered batch (plain vmapped loop)."""
    opts, part = make_options(**dict(options)), partition(mech, active)
    m = jax.lax.stop_gradient(mech)

    def one(d, sel, s):
        cond, body = _loop(m, part, d, sel, opts)
        return jax.lax.while_loop(cond, body, s)

    return jax.vmap(one)(setup.defect, setup.sel, setup.state)


@jit(static_argnames=("active", "options"))
def _checks(mech: Mechanism, guesses, setup, active, options: tuple) -> AssemblyResult:
    """Checks at the solutions, statuses and results for the whole batch."""
    opts, part = make_options(**dict(options)), partition(mech, active)
    return jax.vmap(lambda g, su: _complete(mech, part, g, su, su.state, opts))(guesses, setup)


@jit(static_argnames=("active", "options"))
def _assemble_many(mech: Mechanism, guesses, active, options: tuple) -> AssemblyResult:
    """``assemble`` vmapped over ``guesses`` (n, nq): the no-loop models (trees, under-determined)."""
    return jax.vmap(lambda q: _assemble_one(mech, q, active, options))(guesses)


def assemble_batch(mech: Mechanism, guesses, active=None, *, chunk: int | None = None, **options) -> AssemblyResult:
    """Assemble a batch of configurations; the few states that need many iterations finish apart.

    Args:
      mech: compiled mechanism.
      guesses: (n, nq) rough guesses (their active entries are the prescribed values), n >= 1.
      active: as for :func:`jaxmech.assemble` (static: one active set for the whole batch).
      chunk: phase-2 batch size (default :func:`default_chunk`): phase 1 stops once at most
        ``chunk`` states still iterate. ``chunk >= n`` gives the plain vmapped loop.
      **options: :class:`jaxmech.assembly.AssemblyOptions` fields (``max_iter``, ``tol``, ...).

    Returns:
      :class:`jaxmech.AssemblyResult` with a leading batch axis: ``q`` (n, nq), ``status`` (n,),
      ``iterations`` (n,), ... -- the values of ``jax.vmap(jm.assemble)`` on the same guesses.
    """
    make_options(**options)  # bad option names / values raise here, before any compilation
    g = jnp.asarray(guesses)
    if g.ndim != 2 or g.shape[1] != mech.nq or g.shape[0] < 1:
        raise ValueError(f"{mech.name}: guesses must have shape (n, {mech.nq}) with n >= 1, got {g.shape}")
    if not jnp.issubdtype(g.dtype, jnp.floating):
        g = g.astype(mech.q0.dtype)
    n = g.shape[0]
    chunk = default_chunk(n) if chunk is None else int(chunk)
    if chunk < 1:
        raise ValueError(f"assemble_batch: chunk must be >= 1, got {chunk}")
    chunk = min(chunk, n)
    act = tuple(active) if isinstance(active, list) else active
    opt = tuple(sorted(options.items()))
    mobility(mech)  # static, computed on the host once per model (the default active set needs it)
    if _trivial(mech, partition(mech, act)):
        return _assemble_many(mech, g, act, opt)
    # traced: one compile per batch shape; the running mask comes out of the same program
    setup, run = _phase_one(mech, g, act, opt, np.int32(chunk))
    late = np.nonzero(np.asarray(run))[0]
    for k in range(0, late.size, chunk):  # one chunk unless phase 1 ran out of patience
        part = late[k : k + chunk]
        idx = np.concatenate([part, np.repeat(part[-1:], chunk - part.size)]).astype(np.int32)
        done = _phase_two(mech, _gather(setup, idx), act, opt)
        setup = setup._replace(state=_scatter(setup.state, done, idx))
    return _checks(mech, g, setup, act, opt)
