"""``jm.jit``: ``jax.jit`` with the XLA compile options jaxmech's programs are built with.

XLA:CPU (jaxlib 0.10) emits fused loops through its "fusion emitters" by default. On jaxmech's
programs (many small fixed-shape matrices, unrolled over the joints of a tree) turning them off
halves compile time and makes the compiled code no slower, often faster (Stewart, batch 256,
jaxlib 0.10.2, 2 cores; see ``benchmarks/PROFILE.md``):

============================  ===============  ===============
program (jit of vmap)          default          fusion emitters off
============================  ===============  ===============
``closure_jacobian``           0.84 s / 2.4 ms  0.43 s / 1.6 ms
``forward_dynamics``           2.58 s / 10.7 ms 1.08 s / 7.6 ms
``assemble``                   4.32 s / 39 ms   2.89 s / 40 ms
============================  ===============  ===============

(compile time / run time per call).

It also turns off XLA:CPU's library ("YNN", XNNPACK) fusions, ``xla_cpu_experimental_ynn_fusion_type``
empty: jaxlib 0.10 offloads dots and reductions with their fused producers to them, and on these
shapes they run several times slower than XLA's own loops. The Stewart's batch-last mass matrix
(``jaxmech.batchlast_dynamics``, batch 1,024, one core) took 16.4 us per state in one such fusion
against 5.8 us without; vmapped forward dynamics 43.8 -> 35.1 us and 2.7 -> 2.0 s to compile
(``benchmarks/PROFILE.md``, session 35).

The options are passed per program through ``jax.jit``'s
``compiler_options``; nothing global changes, and programs that are not compiled through
:func:`jit` are compiled exactly as JAX would. The options are a field of XLA's ``DebugOptions``,
which every backend accepts (GPU ignores a CPU option). A jaxlib that does not know an option is
detected once, at the first compilation, and then gets no options at all.
"""

from __future__ import annotations

import functools

import jax

COMPILER_OPTIONS: dict[str, object] = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_experimental_ynn_fusion_type": "",
}
"""The options :func:`jit` adds to every program (a copy of this dict is used)."""


@functools.cache
def compiler_options() -> dict[str, object]:
    """``COMPILER_OPTIONS`` if this jaxlib accepts them, else ``{}`` (checked once, lazily)."""
    opts = dict(COMPILER_OPTIONS)
    try:
        jax.jit(lambda x: x + 1, compiler_options=opts).lower(0.0).compile()
    except Exception:  # an unknown option is an INVALID_ARGUMENT from XLA
        return {}
    return opts


def _under_trace() -> bool:
    """True inside a ``jit``/``vmap``/``grad`` trace: JAX takes compile options only at the top."""
    try:
        from jax._src.core import trace_state_clean
    except ImportError:  # private API moved: assume top level
        return False
    return not trace_state_clean()


class _Jitted:
    """A ``jax.jit`` wrapper built on first use, so that importing jaxmech touches no backend."""

    def __init__(self, fun, kwargs):
        self._fun, self._kwargs, self._jitted, self._nested = fun, kwargs, None, None
        functools.update_wrapper(self, fun)

    def _get(self):
        kw = {k: v for k, v in self._kwargs.items() if k != "compiler_options"}
        if _under_trace():  # a nested jit is inlined into the outer program, which has the options
            if self._nested is None:
                self._nested = jax.jit(self._fun, **kw)
            return self._nested
        if self._jitted is None:
            opts = {**compiler_options(), **(self._kwargs.get("compiler_options") or {})}
            self._jitted = jax.jit(self._fun, compiler_options=opts, **kw)
        return self._jitted

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)

    def __getattr__(self, name):  # .lower, .trace, .eval_shape, ._cache_size, ...
        if name.startswith("__") or name in ("_fun", "_kwargs", "_jitted", "_nested"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def __get__(self, obj, objtype=None):  # usable as a method decorator, like jax.jit
        return self if obj is None else functools.partial(self, obj)


def jit(fun=None, /, **kwargs):
    """``jax.jit(fun, **kwargs)`` compiled with jaxmech's :data:`COMPILER_OPTIONS`.

    Use it where you would use ``jax.jit`` around jaxmech functions, e.g.
    ``jm.jit(jax.vmap(lambda q: jm.closure_residual(mech, q)))``: the program compiles about
    twice as fast on CPU and runs at least as fast. ``compiler_options`` given here are added to
    (and override) jaxmech's. Works as a decorator, with or without keyword arguments.

    Compile time and batch size (XLA:CPU, jaxlib 0.10): a program vmapped over 4 to 10 states can
    compile 2-4x slower than over 1 or over 12 and more, because LLVM fully unrolls its short batch
    loops (the closure Jacobian of a 7-loop model: 1.2 s at 1 state, 4.7 s at 8, 1.6 s at 12;
    forward dynamics: 3.2, 9.5 and 4.6 s at 1, 8 and 16). For such a program pad the batch to 12
    or more, or pass ``compiler_options={"xla_cpu_use_fusion_emitters": True}`` (2.2 s at 8; slower
    to compile at other sizes, so not the default). Starting Python with
    ``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_disable_loop_unrolling`` turns the unrolling
    off process-wide (XLA reads that option only from the environment): ~13 % less compile time
    over the test suite, up to ~15 % slower run time at large batches. jaxmech sets neither."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _Jitted(fun, kwargs)


def filter_jit(fun=None, /, **kwargs):
    """``equinox.filter_jit`` with jaxmech's :data:`COMPILER_OPTIONS` (same use as :func:`jit`)."""
    import equinox as eqx

    if fun is None:
        return functools.partial(filter_jit, **kwargs)
    extra = dict(kwargs.pop("compiler_options", None) or {})
    built: dict = {}

    @functools.wraps(fun)
    def call(*args, **kw):
        nested = _under_trace()
        if nested not in built:
            opts = {} if nested else {"compiler_options": {**compiler_options(), **extra}}
            built[nested] = eqx.filter_jit(fun, **opts, **kwargs)
        return built[nested](*args, **kw)

    return call


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/jaxmech/xla`` (``~/.cache/jaxmech/xla`` when unset)."""
    import os
    from pathlib import Path

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(root / "jaxmech" / "xla")


def compilation_cache(path: str | None = None, min_compile_time: float = 0.5) -> str:
    """Keep compiled XLA programs on disk: JAX's persistent compilation cache, switched on.

    A program whose compilation took at least ``min_compile_time`` seconds is written to ``path``
    (default :func:`default_cache_dir`); any later compilation of the same program (same module
    text, compile options, backend and jax/jaxlib versions), in this process or another one, loads
    it instead of compiling. Results are bit-for-bit those of a fresh compilation; only compile
    time changes. This sets JAX's global ``jax_compilation_cache_dir`` and
    ``jax_persistent_cache_min_compile_time_secs``, so call it yourself, once, at the start of a
    program (importing jaxmech never does). ``jaxmech demo`` and the test suite call it. Returns
    the cache folder. Delete the folder to start cold."""
    import os

    path = os.fspath(path) if path is not None else default_cache_dir()
    if not isinstance(min_compile_time, (int, float)) or min_compile_time < 0:
        raise ValueError(f"compilation_cache: min_compile_time must be a number >= 0 s, got {min_compile_time!r}")
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time))
    try:  # JAX opens its cache once per process: make a changed folder take effect
        from jax.experimental.compilation_cache import compilation_cache as _cc

        _cc.reset_cache()
    except (ImportError, AttributeError):  # pragma: no cover - API moved; the config still applies
        pass
    return path
