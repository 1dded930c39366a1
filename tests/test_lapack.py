"""jaxmech.lapack: LAPACK calls chunked so that no batched call can block XLA's CPU pool.

References are jax's own linalg functions (values and derivatives) and numpy; the chunk sizes
are read off the compiled program (every LAPACK custom call must run inline in jaxlib 0.10.2:
batch x FLOP estimate < 200,000, or a batch of one)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import lapack

B = 300  # > every chunk size below, not a multiple of them: full chunks plus a remainder
RNG = np.random.default_rng(0)
A = RNG.normal(size=(B, 12, 12))
SPD = A @ np.swapaxes(A, 1, 2) + 12 * np.eye(12)
RHS = RNG.normal(size=(B, 12, 5))
VEC = RNG.normal(size=(B, 12))

# FLOP estimates per matrix of jaxlib 0.10.2's kernels (lapack_kernels.cc), by custom-call target
_COST = {
    "potrf": lambda s: s[-1] ** 3 // 3,
    "getrf": lambda s: s[-2] * s[-1] * min(s[-2:]),
    "geqp3": lambda s: 2 * s[-2] * s[-1] * min(s[-2:]) - 2 * min(s[-2:]) ** 3 // 3,
    "geqrf": lambda s: 2 * s[-2] * s[-1] * min(s[-2:]) - 2 * min(s[-2:]) ** 3 // 3,
    "gesdd": lambda s: 10 * s[-2] * s[-1] * min(s[-2:]),
}


def lapack_calls(compiled_text: str):
    """``(kernel, batch, cost)`` of every LAPACK custom call in a compiled program's HLO."""
    out = []
    for line in compiled_text.splitlines():
        m = re.search(r'custom_call_target="lapack_[sdcz](\w+?)_ffi"', line)
        if not m or "custom-call(" not in line:
            continue
        kind = m.group(1)
        shapes = [tuple(int(d) for d in s.split(",") if d) for s in re.findall(r"f\d\d\[([\d,]*)\]", line)]
        if kind == "trsm":  # operands: the triangular matrix, then the right-hand sides (the result first)
            y = shapes[0]
            cost = y[-2] * y[-1] * y[-2]
            batch = int(np.prod(y[:-2]))
        else:
            x = shapes[-1]  # the operand (last in the layout constraints)
            cost, batch = _COST[kind](x), int(np.prod(x[:-2]))
        out.append((kind, batch, cost))
    return out


def assert_inline(f, *args):
    calls = lapack_calls(jm.jit(f).lower(*args).compile().as_text())
    assert calls, "no LAPACK call found: the check would be vacuous"
    bad = [c for c in calls if c[1] > 1 and c[1] * c[2] >= lapack.MIN_WORK]
    assert not bad, f"LAPACK calls that would use the thread pool: {bad}"
    return calls


def test_values_match_jax_and_numpy():
    V = lambda f: jm.jit(jax.vmap(f))  # noqa: E731
    L = np.linalg.cholesky(SPD)
    # bit for bit against jax's own (same LAPACK kernel); numpy's LAPACK build may round differently
    np.testing.assert_array_equal(V(lapack.cholesky)(SPD), V(jnp.linalg.cholesky)(SPD))
    np.testing.assert_allclose(V(lapack.cholesky)(SPD), L, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(V(lapack.cho_solve)(L, VEC), np.linalg.solve(SPD, VEC[..., None])[..., 0], rtol=1e-12)
    np.testing.assert_allclose(V(lapack.cho_solve)(L, RHS), np.linalg.solve(SPD, RHS), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        V(lambda l, b: lapack.solve_triangular(l, b, True, True))(L, RHS),
        np.stack([jsl.solve_triangular(l, b, lower=True, trans="T") for l, b in zip(L, RHS, strict=True)]),
        rtol=1e-13,
    )
    np.testing.assert_allclose(V(lapack.solve)(A, VEC), np.linalg.solve(A, VEC[..., None])[..., 0], rtol=1e-9)
    np.testing.assert_allclose(V(lapack.inv)(A), np.linalg.inv(A), rtol=1e-9, atol=1e-12)
    x = V(lambda a, b: lapack.lu_solve(lapack.lu_factor(a), b))(A, VEC)
    np.testing.assert_allclose(x, np.linalg.solve(A, VEC[..., None])[..., 0], rtol=1e-9)
    tall = A[:, :, :7]
    np.testing.assert_allclose(V(lapack.singular_values)(tall), np.linalg.svd(tall, compute_uv=False), rtol=1e-13)
    d, P = V(lapack.pivoted_qr)(tall)
    R_ref = [jsl.qr(t, pivoting=True, mode="r") for t in tall]
    np.testing.assert_array_equal(P, np.stack([r[1] for r in R_ref]))
    np.testing.assert_allclose(d, np.abs(np.stack([np.diag(r[0]) for r in R_ref])), rtol=1e-13)
    np.testing.assert_allclose(
        V(lapack.lstsq)(tall, VEC),
        np.stack([np.linalg.lstsq(t, b, rcond=None)[0] for t, b in zip(tall, VEC, strict=True)]),
        atol=1e-12,
    )
    # nested vmap and explicit leading dimensions are chunked the same way
    np.testing.assert_array_equal(
        jm.jit(jax.vmap(jax.vmap(lapack.cholesky)))(SPD.reshape(3, 100, 12, 12)),
        V(jnp.linalg.cholesky)(SPD).reshape(3, 100, 12, 12),
    )
    np.testing.assert_allclose(jm.jit(lapack.inv)(A), np.linalg.inv(A), rtol=1e-9, atol=1e-12)


def _loss(la, a, x):
    s = a @ a.T + 12 * jnp.eye(12)
    if la is None:
        y = jsl.cho_solve((jnp.linalg.cholesky(s), True), x) + jnp.linalg.solve(a, x) + jnp.linalg.inv(a) @ x
        y = y + jnp.linalg.lstsq(a[:, :7], x)[0].sum() + jnp.linalg.lstsq(a[:7], x[:7])[0].sum()
        return jnp.sum(y**2) + jnp.sum(jnp.sin(jnp.linalg.cholesky(s)))
    y = la.cho_solve(la.cholesky(s), x) + la.solve(a, x) + la.inv(a) @ x
    y = y + la.lstsq(a[:, :7], x).sum() + la.lstsq(a[:7], x[:7]).sum()
    return jnp.sum(y**2) + jnp.sum(jnp.sin(la.cholesky(s)))


def test_derivatives_match_jax_in_both_modes_and_second_order():
    ref = jm.jit(jax.vmap(jax.grad(lambda a, x: _loss(None, a, x), (0, 1))))(A[:40], VEC[:40])
    rev = jm.jit(jax.vmap(jax.grad(lambda a, x: _loss(lapack, a, x), (0, 1))))(A[:40], VEC[:40])
    fwd = jm.jit(jax.vmap(jax.jacfwd(lambda a, x: _loss(lapack, a, x), (0, 1))))(A[:40], VEC[:40])
    for r, g, f in zip(ref, rev, fwd, strict=True):
        scale = 1 + np.max(np.abs(r))
        assert np.max(np.abs(g - r)) < 1e-11 * scale and np.max(np.abs(f - r)) < 1e-11 * scale
    h_ref = jm.jit(jax.hessian(lambda a: _loss(None, a, VEC[0])))(A[0])
    h = jm.jit(jax.hessian(lambda a: _loss(lapack, a, VEC[0])))(A[0])
    assert np.max(np.abs(h - h_ref)) < 1e-10 * (1 + np.max(np.abs(h_ref)))


def test_every_batched_call_runs_inline(monkeypatch):
    """With a pool that can block (2 threads), no LAPACK call in a vmapped program may use it."""
    monkeypatch.setenv("NPROC", "2")  # read by lapack.pool_may_block at trace time only
    assert lapack.pool_may_block()
    f = lambda a, b: _loss(lapack, a, b)  # noqa: E731
    calls = assert_inline(jax.vmap(jax.grad(f)), A, VEC)
    assert {k for k, _, _ in calls} >= {"potrf", "trsm", "getrf", "gesdd"}
    calls = assert_inline(jax.vmap(lambda m: lapack.pivoted_qr(m)[1]), A[:, :, :7])
    assert [k for k, _, _ in calls] and all(k == "geqp3" for k, _, _ in calls)


def test_one_thread_or_a_large_pool_keeps_one_batched_call(monkeypatch):
    for n in ("1", "32"):
        monkeypatch.setenv("NPROC", n)
        assert not lapack.pool_may_block()
        calls = lapack_calls(jax.jit(jax.vmap(lapack.cholesky)).lower(SPD).compile().as_text())
        assert calls == [("potrf", B, 12**3 // 3)]


def test_stewart_forward_dynamics_runs_inline(monkeypatch, configs_dir):
    """The batched program that hung CI (Stewart forward dynamics, 1,024 states, 2-thread pool)."""
    monkeypatch.setenv("NPROC", "2")
    mech = jm.load(configs_dir / "stewart.toml")
    q = jnp.tile(mech.q0, (1024, 1))
    v = jnp.zeros((1024, mech.nv))
    calls = assert_inline(jax.vmap(lambda q, v: jm.forward_dynamics(mech, q, v, v).a), q, v)
    assert {"potrf", "trsm", "geqp3"} <= {k for k, _, _ in calls}


def test_import_changes_no_environment_variable():
    """Importing jaxmech (after jax, which sets two logging variables of its own) leaves
    ``os.environ`` as it was, and no XLA flag or pool size is set."""
    code = (
        "import os, jax\n"
        "e = dict(os.environ)\n"
        "import jaxmech\n"
        "assert dict(os.environ) == e, set(os.environ.items()) ^ set(e.items())\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "XLA_FLAGS")}
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


@pytest.mark.slow
def test_batched_assembly_finishes_on_a_two_thread_pool(configs_dir):
    """Batched Stewart assembly, 1,024 states, in a fresh process whose XLA pool has 2 threads
    and no XLA flag: before jaxmech.lapack it sat at 0 % CPU forever on its first call."""
    code = (
        "import jax, jax.numpy as jnp, numpy as np\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "import jaxmech as jm\n"
        f"mech = jm.load({str(configs_dir / 'stewart.toml')!r})\n"
        "q0 = jm.assemble(mech, mech.q0).q\n"
        "G = q0 + 0.02 * jax.random.normal(jax.random.PRNGKey(0), (1024, q0.shape[0]))\n"
        "f = jm.jit(jax.vmap(lambda q: jm.assemble(mech, q)))\n"
        "for _ in range(3):\n"
        "    r = jax.block_until_ready(f(G))\n"
        "assert np.mean(np.asarray(r.status) == 0) > 0.9\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["NPROC"] = "2"  # the 2-core CI machine's pool, on any machine
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
