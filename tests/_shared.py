"""Session-wide caches for the test suite: each shipped mechanism is loaded once, and batched
assembly is one jitted function with the mechanism as an argument, always called at a padded batch
size, so every test module reuses one compilation per mechanism instead of compiling a fresh
``jax.jit(lambda ...)`` per call and per batch size."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxmech as jm

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PAD = 32  # batched calls are padded up to a multiple of this


@functools.cache
def load(name: str) -> jm.Mechanism:
    """``configs/<name>.toml``, loaded once per session."""
    return jm.load(CONFIGS / f"{name}.toml")


@jm.jit
def _assemble_batch(mech, guesses):
    return jax.vmap(jm.assemble, in_axes=(None, 0))(mech, guesses)


def pad(x: np.ndarray, multiple: int = PAD) -> np.ndarray:
    """``x`` (n, ...) with its last row repeated up to a multiple of ``multiple`` rows."""
    n = x.shape[0]
    m = -(-n // multiple) * multiple
    return np.concatenate([x, np.repeat(x[-1:], m - n, 0)]) if m > n else x


def assemble_batch(mech: jm.Mechanism, guesses) -> jm.AssemblyResult:
    """``jm.assemble`` vmapped over ``guesses`` (n, nq), through the shared padded compilation."""
    g = np.asarray(guesses)
    res = _assemble_batch(mech, jnp.asarray(pad(g)))
    return jax.tree.map(lambda x: x[: g.shape[0]], res)


def perturbed_guesses(mech: jm.Mechanism, n: int, spread: float, seed: int = 0) -> np.ndarray:
    """q0 with its 1-dof actuated coordinates moved uniformly within +-spread (numpy seed)."""
    rng = np.random.default_rng(seed)
    qi = np.array([mech.topo.q_start[mech.topo.v_body[k]] for k in mech.topo.actuated_v])
    Q = np.tile(np.asarray(mech.q0), (n, 1))
    Q[:, qi] += rng.uniform(-spread, spread, (n, qi.size))
    return Q


def closed_states(mech: jm.Mechanism, n: int, spread: float, seed: int = 0) -> np.ndarray:
    """Closed configurations (<= n: the states whose assembly converged, at least half)."""
    res = assemble_batch(mech, perturbed_guesses(mech, n, spread, seed))
    ok = np.asarray(res.status) == 0
    assert ok.sum() >= max(1, n // 2), f"{mech.name}: assembly failed on {np.sum(~ok)} of {n} states"
    return np.asarray(res.q)[ok]


@functools.partial(jm.jit, static_argnames="n")
def _random_configurations(mech, seed, n, scale):
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return jax.vmap(jm.random_configuration, (None, 0, None))(mech, keys, scale)


def random_configurations(mech: jm.Mechanism, n: int, seed: int, scale: float = 1.0) -> jnp.ndarray:
    """``jm.random_configuration`` at the ``n`` keys ``split(PRNGKey(seed), n)``: one compiled
    program per topology and ``n`` (an eager ``vmap`` of a lambda compiles every primitive)."""
    return _random_configurations(mech, seed, n, float(scale))
