"""Shared helpers for the benchmark scripts (the protocol: docs/benchmarks.md).

* :func:`time_fn` -- compile time measured separately (first call), then best and median of >= 5
  calls, each blocking on the *result* with ``jax.block_until_ready``; :func:`time_interleaved`
  does the same for several functions with alternating calls (fair ratios under shared load)
  and also records process CPU time: on an oversubscribed machine a call longer than a scheduler
  time slice is descheduled, so wall time per state grows with batch size while CPU time does not.
* :func:`cast` -- a mechanism (or any pytree) in float32 / float64.
* :func:`env_info` -- jax/jaxlib versions, device, CPU count, dtype, XLA flags.
* :func:`print_table` (rich) and :func:`write_json` (into ``benchmarks/results/``).
* :class:`Budget` -- a wall-clock budget for ``--budget SECONDS``.

No XLA flag or pool size is set (importing jaxmech changes nothing; ``jaxmech/lapack.py`` keeps
batched LAPACK calls off a small pool). The scripts compile through ``jm.jit``,
which passes jaxmech's compile options (XLA:CPU fusion emitters off) per program, as users get
them (``jaxmech/_jit.py``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxmech  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CONFIGS = ROOT / "configs"


def enable_x64() -> None:
    """Benchmarks run the float64 reference tier and cast to float32 explicitly."""
    jax.config.update("jax_enable_x64", True)


@dataclass
class Timing:
    """Seconds: ``compile_s`` is the first call (trace + compile + one run); ``best_s`` and
    ``median_s`` over ``reps`` further calls."""

    compile_s: float
    best_s: float
    median_s: float
    reps: int
    cpu_best_s: float = float("nan")  # process CPU time of the fastest call (all threads)

    def per_state_us(self, batch: int) -> float:
        return 1e6 * self.best_s / batch


def time_fn(fn, *args, reps: int = 5, min_time: float = 0.0) -> Timing:
    """Time ``fn(*args)``: first call separately, then at least ``reps`` calls (and at least
    ``min_time`` seconds of calls), each blocked on its result."""
    reps = max(5, int(reps))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t0
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps or (time.perf_counter() - start < min_time and len(times) < 1000):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return Timing(compile_s, min(times), statistics.median(times), len(times))


def time_interleaved(fns: dict, *args, reps: int = 5, min_time: float = 0.0) -> dict[str, Timing]:
    """Time several functions on the same arguments, alternating calls (A B A B ...) so that load
    from other processes on a shared machine hits them alike; ratios of the results are robust.
    Each is compiled (first call, timed separately) before any timed call."""
    reps = max(5, int(reps))
    compile_s = {}
    for k, f in fns.items():
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        compile_s[k] = time.perf_counter() - t0
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    n = 0
    while n < reps or (time.perf_counter() - start < min_time and n < 1000):
        for k, f in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(f(*args))
            times[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
        n += 1
    return {k: Timing(compile_s[k], min(v), statistics.median(v), len(v), min(cpu[k])) for k, v in times.items()}


def cast(tree, dtype):
    """Every floating array leaf of ``tree`` cast to ``dtype`` (integer leaves untouched)."""

    def f(x):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(x, dtype)
        return x

    return jax.tree_util.tree_map(f, tree)


#: set by :func:`reuse_host_buffers`; recorded by :func:`env_info`
REUSED = {"host_buffers": False}


def pin_to_core(core: int | set[int] | None) -> None:
    """Pin every thread of this process (XLA's pools included) to ``core``, one core or a set of
    them (as ``taskset -c``); ``None`` leaves it.

    Call it before the first JAX computation: XLA sizes its CPU pool from the cores the process
    may use when the client is created, and a one-core pool runs batched LAPACK kernels inline.
    MJX's batched solver (Cholesky per state) hangs on this machine's 2-thread pool otherwise:
    ``docs/benchmarks.md`` pins MJX to one core for that reason."""
    if core is None or not hasattr(os, "sched_setaffinity"):
        return
    cores = {int(c) for c in core} if isinstance(core, (set, frozenset, list, tuple)) else {int(core)}
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that just ended
            pass


def add_reuse_flag(ap) -> None:
    """``--reuse-buffers``: the scripts' switch for :func:`jaxmech.reuse_host_buffers`."""
    ap.add_argument(
        "--reuse-buffers",
        action="store_true",
        help="keep freed host memory (jm.reuse_host_buffers): large batches stop page-faulting; "
        "it applies to every peer in the process",
    )


def reuse_host_buffers(enabled: bool) -> bool:
    """Apply :func:`jaxmech.reuse_host_buffers` when ``enabled``; remember it for :func:`env_info`."""
    REUSED["host_buffers"] = bool(enabled) and jaxmech.reuse_host_buffers()
    return REUSED["host_buffers"]


def native_status() -> str:
    """Whether jaxmech's native CPU kernels ran (``jaxmech.native.status``)."""
    from jaxmech import native

    return native.status()


def env_info(dtypes=("float64",)) -> dict:
    """What the numbers were measured on."""
    dev = jax.devices()[0]
    try:
        import jaxlib

        jaxlib_version = jaxlib.__version__
    except Exception:  # pragma: no cover
        jaxlib_version = "?"
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = os.cpu_count()
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib_version,
        "backend": jax.default_backend(),
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '?')}",
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "dtypes": list(dtypes),
        "x64": bool(jax.config.jax_enable_x64),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "processor": platform.processor() or platform.platform(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "reuse_host_buffers": REUSED["host_buffers"],
        "native_kernels": native_status(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def print_table(title: str, columns: list[str], rows: list[list], caption: str | None = None) -> None:
    """A rich table (numbers right-aligned)."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, caption=caption)
    for c in columns:
        t.add_column(c, justify="left" if c in ("example", "method", "dtype", "function") else "right")
    for r in rows:
        t.add_row(*[_fmt(x) for x in r])
    Console(width=max(120, int(os.environ.get("COLUMNS", 0) or 0))).print(t)


def _fmt(x) -> str:
    if isinstance(x, float):
        if x == 0 or 1e-2 <= abs(x) < 1e5:
            return f"{x:.3g}" if abs(x) < 100 else f"{x:.1f}"
        return f"{x:.2e}"
    return str(x)


def write_json(name: str, payload: dict) -> Path:
    """Write ``benchmarks/results/<name>.json`` (dataclasses converted) and return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / (name if name.endswith(".json") else f"{name}.json")

    def default(o):
        if hasattr(o, "__dataclass_fields__"):
            return asdict(o)
        if hasattr(o, "tolist"):
            return o.tolist()
        return str(o)

    path.write_text(json.dumps(payload, indent=1, default=default))
    return path


class Budget:
    """Wall-clock budget: ``Budget(600).left()`` seconds remain; ``None`` means unlimited."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.elapsed()

    def exhausted(self) -> bool:
        return self.left() <= 0


def shipped_examples(suffix: str = ".toml") -> list[Path]:
    return sorted(CONFIGS.glob(f"*{suffix}"))
