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


def assemble_each(mech: jm.Mechanism, guesses, **kw) -> jm.AssemblyResult:
    """``jm.assemble`` on each of ``guesses`` (n, nq), stacked: test data through the single-state
    program, which every test of the model that calls ``jm.assemble`` shares (per model one
    compile, from the persistent cache on the other worker), instead of a vmapped assembly
    compiled only to make states (35-40 % more compile: four-bar 4.0 against 2.5 s). ``kw``:
    ``jm.assemble``'s ``active`` and options."""
    res = [jm.assemble(mech, jnp.asarray(g), **kw) for g in np.asarray(guesses)]
    return jax.tree.map(lambda *x: np.stack(x), *res)


def perturbed_guesses(mech: jm.Mechanism, n: int, spread: float, seed: int = 0) -> np.ndarray:
    """q0 with its 1-dof actuated coordinates moved uniformly within +-spread (numpy seed)."""
    rng = np.random.default_rng(seed)
    qi = np.array([mech.topo.q_start[mech.topo.v_body[k]] for k in mech.topo.actuated_v])
    Q = np.tile(np.asarray(mech.q0), (n, 1))
    Q[:, qi] += rng.uniform(-spread, spread, (n, qi.size))
    return Q


def closed_states(mech: jm.Mechanism, n: int, spread: float, seed: int = 0) -> np.ndarray:
    """Closed configurations (<= n: the states whose assembly converged, at least half); batches
    over 64 through the shared vmapped assembly, smaller ones state by state."""
    g = perturbed_guesses(mech, n, spread, seed)
    res = assemble_batch(mech, g) if n > 64 else assemble_each(mech, g)
    ok = np.asarray(res.status) == 0
    assert ok.sum() >= max(1, n // 2), f"{mech.name}: assembly failed on {np.sum(~ok)} of {n} states"
    return np.asarray(res.q)[ok]


def random_configurations(mech: jm.Mechanism, n: int, seed: int, scale: float = 1.0) -> jnp.ndarray:
    """``n`` random configurations (n, nq), drawn with numpy: what ``jm.random_configuration``
    draws (1-D coordinates uniform within finite limits, else within +-scale; free-joint positions
    within +-scale; unit quaternions from normalized normal samples), from another generator.

    Test data only. ``jm.random_configuration`` itself is tested in ``tests/test_kinematics.py``;
    drawing every test's states through it compiled threefry hashing per mechanism (2.4-2.7 s
    each, about 20 s of a cold default tier)."""
    t = mech.topo
    rng = np.random.default_rng(seed)
    q = np.tile(np.asarray(mech.q0, float), (n, 1))
    if t.lin_q.size:
        lo, hi = np.asarray(mech.lower)[t.lin_q], np.asarray(mech.upper)[t.lin_q]
        lo = np.where(np.isfinite(lo), lo, -scale)
        hi = np.where(np.isfinite(hi), hi, scale)
        q[:, t.lin_q] = rng.uniform(lo, hi, (n, t.lin_q.size))
    quats = []
    if t.sph_q.size:
        quats.append(np.asarray(t.sph_q))
    if t.free_q.size:
        fq = np.asarray(t.free_q)
        q[:, fq[:, :3]] = rng.uniform(-scale, scale, (n,) + fq[:, :3].shape)
        quats.append(fq[:, 3:])
    for idx in quats:
        u = rng.normal(size=(n,) + idx.shape)
        q[:, idx] = u / np.linalg.norm(u, axis=-1, keepdims=True)
    return jnp.asarray(q)


def normal(seed: int, shape) -> jnp.ndarray:
    """Standard normal test data (numpy's generator ``seed``): an eager ``jax.random.normal``
    compiles a threefry program per shape."""
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape))
