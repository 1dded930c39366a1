"""jm.jit: jax.jit plus jaxmech's compile options, forwarded per program, never global."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import _jit


def _f(x, n=2):
    return jnp.sin(x) * n


def test_same_values_as_jax_jit_and_static_args():
    x = jnp.linspace(-1.0, 1.0, 7)
    np.testing.assert_array_equal(jm.jit(_f)(x), jax.jit(_f)(x))
    g = jm.jit(_f, static_argnames="n")
    np.testing.assert_array_equal(g(x, n=3), _f(x, 3))
    assert g.__name__ == "_f"
    assert "sin" in g.lower(x, n=3).as_text()  # attribute access reaches the jax.jit object


def test_options_reach_xla_and_user_options_are_added():
    assert _jit.compiler_options() == _jit.COMPILER_OPTIONS  # this jaxlib accepts them
    x = jnp.ones(3)
    with pytest.raises(Exception, match="no_such_option"):
        jm.jit(_f, compiler_options={"xla_no_such_option": True})(x)


def test_decorator_forms():
    @jm.jit
    def a(x):
        return x + 1

    @jm.jit(static_argnames="k")
    def b(x, k):
        return x * k

    assert float(a(1.0)) == 2.0 and float(b(2.0, k=3)) == 6.0


def test_unknown_option_falls_back_to_no_options(monkeypatch):
    monkeypatch.setattr(_jit, "COMPILER_OPTIONS", {"xla_option_from_the_future": True})
    _jit.compiler_options.cache_clear()
    try:
        assert _jit.compiler_options() == {}
        assert float(jm.jit(lambda x: x * 2)(3.0)) == 6.0
    finally:
        _jit.compiler_options.cache_clear()


def test_jax_jit_is_untouched():
    """Importing jaxmech and using jm.jit leaves plain jax.jit programs at XLA's defaults."""
    x = jnp.ones(3)
    jm.jit(_f)(x)
    with pytest.raises(Exception, match="no_such_option"):
        jax.jit(_f, compiler_options={"xla_no_such_option": True})(x)
    assert "xla_cpu_use_fusion_emitters" not in __import__("os").environ.get("XLA_FLAGS", "")


def test_nested_inside_a_trace():
    """A jm.jit function called inside another trace (concrete arguments included) is inlined."""
    inner = jm.jit(_f)
    x = jnp.ones(3)
    np.testing.assert_allclose(jax.jit(lambda y: inner(x) + inner(y))(x), 2 * _f(x))
    np.testing.assert_allclose(jax.vmap(inner)(x), _f(x))
    np.testing.assert_allclose(jax.grad(lambda y: jm.jit(_f)(y).sum())(x), 2 * jnp.cos(x))
    fj = _jit.filter_jit(_f)
    np.testing.assert_allclose(jm.jit(lambda y: fj(y) + fj(x))(x), 2 * _f(x))


def _prog_source():
    def prog(x):
        return jnp.cos(x) * 7.25 + jnp.arange(5.0)

    return prog


def test_compilation_cache_writes_then_reloads(tmp_path):
    """jm.compilation_cache points JAX's on-disk cache at a folder: a compiled program lands there,
    and the same program built again from a new function object (a miss in JAX's in-memory cache)
    is loaded from disk (JAX records a cache hit), with equal values. The suite's own cache folder
    is restored afterwards."""
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    hits = []

    def listen(event, **kw):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    jax.monitoring.register_event_listener(listen)
    try:
        assert jm.compilation_cache(tmp_path / "xla", min_compile_time=0.0) == str(tmp_path / "xla")
        x = jnp.linspace(0.0, 1.0, 5)
        y1 = jm.jit(_prog_source())(x)
        files = sorted(p.name for p in (tmp_path / "xla").iterdir())
        assert any(f.startswith("jit_prog") for f in files), files
        assert hits == []
        y2 = jm.jit(_prog_source())(x)
        assert len(hits) == 1
        np.testing.assert_array_equal(y1, y2)
        with pytest.raises(ValueError, match="min_compile_time"):
            jm.compilation_cache(tmp_path, min_compile_time=-1)
    finally:
        jax.monitoring.unregister_event_listener(listen)
        if before[0]:
            jm.compilation_cache(before[0], before[1])
