"""``jaxmech bench``: time the public jaxmech calls on batches of states, over all devices.

For each stage (:mod:`jaxmech.bench_stages`), precision (float64, float32) and batch size it
measures, with ``jax.jit(jax.vmap(...))`` of the public function:

* compile time (``lower(...).compile()``), reported apart from the run time;
* run time: one untimed call, then the best and median of ``reps`` calls (fewer, at least 2,
  when they would take more than 5 s), each blocked on its result (``jax.block_until_ready``),
  as µs per state (per state-step for ``track`` and ``rollout``) and states per second;
* accuracy, in float64, on the first ``bank`` rows of the output (:mod:`jaxmech.bench_stages`).

The batch is sharded over a one-axis ``"batch"`` mesh of all devices (:mod:`jaxmech.sharding`) and
the model replicated; outputs stay sharded. A batch that does not split evenly is padded (by
repeating states) to a multiple of the device count; per-state figures count the requested
batch, so padding shows as overhead.
States are ``bank`` closed states tiled to the batch size, so the accuracy head covers every
distinct state.

Several hosts: every process runs :func:`run` after ``jaxmech.sharding.initialize``; each holds
and computes only its devices' rows; timings are the slowest process's; every decision (skip,
repetitions) is process 0's. Budget: batches run breadth first (the smallest batch of every
stage and precision, then the next size, ...); a batch whose predicted cost (compile time and
calls, extrapolated linearly from the group's previous batch; for a first batch the compile time
of the same stage in the other precision, or the mean compile time so far) exceeds the time left
is skipped with all larger ones of its group, and the report says so. A compile cannot be
interrupted: a budget shorter than one compile is overrun by it.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from . import native, sharding
from ._jit import jit
from .bench_stages import STAGES, Stage, load_bank, stages
from .mechanism import Mechanism

DTYPES = {"f64": jnp.float64, "f32": jnp.float32}


@dataclass(frozen=True)
class BenchOptions:
    """What to run; see the module docstring. ``devices``: None for all devices (of all processes)."""

    what: tuple[str, ...] = STAGES
    batches: tuple[int, ...] = (1, 1024, 65536)
    precisions: tuple[str, ...] = ("f64", "f32")
    devices: int | None = None
    budget: float = 600.0
    reps: int = 5
    bank: int = 256
    seed: int = 0
    track_steps: int = 8
    rollout_steps: int = 10
    dt: float = 1e-3
    matmul_precision: str | None = None  # jax.default_matmul_precision while compiling; None: JAX's default


@dataclass
class Row:
    """One measurement (seconds; ``us_per_state`` per state or per state-step, see ``unit``)."""

    stage: str
    precision: str
    batch: int
    padded_batch: int = 0
    unit: str = "state"
    compile_s: float = math.nan
    best_s: float = math.nan
    median_s: float = math.nan
    reps: int = 0
    us_per_state: float = math.nan
    states_per_s: float = math.nan
    accuracy: dict = field(default_factory=dict)
    skipped: str = ""


def cast(tree, dtype):
    """Every floating array leaf of ``tree`` cast to ``dtype``."""

    def f(x):
        if isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(x, dtype)
        return x

    return jax.tree_util.tree_map(f, tree)


def env_info(mesh) -> dict:
    """Where the figures were measured: device kind and count (global), processes, versions."""
    import jaxlib

    devs = list(mesh.devices.flat)
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "platform": devs[0].platform,
        "device_kind": devs[0].device_kind,
        "device_count": len(devs),
        "devices_available": jax.device_count(),
        "local_device_count": sum(d.process_index == jax.process_index() for d in devs),
        "process_count": jax.process_count(),
        "host": platform.node(),
        "python": platform.python_version(),
        "native_kernels": native.status() if devs[0].platform == "cpu" else "cpu only",
    }


def _agree(value):
    """Process 0's value on every process (budget decisions must match or collectives hang)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return type(value)(multihost_utils.broadcast_one_to_all(np.asarray(value)))


def _slowest(x: float) -> float:
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return float(np.max(multihost_utils.process_allgather(np.asarray(x))))


def _reps(reps: int, per_call: float, timed_s: float = 5.0) -> int:
    """Timed calls: ``reps``, fewer (at least 2) when they would take more than ``timed_s``."""
    return reps if per_call * reps <= timed_s else max(2, min(reps, int(timed_s / max(per_call, 1e-9))))


class _Budget:
    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


class _Group:
    """One (stage, precision): its jitted function, accuracy check and past timings for prediction."""

    def __init__(self, stage: Stage, dtype, mech64: Mechanism, mesh, bank: dict, acc_fns: dict, matmul=None):
        self.stage, self.dtype, self.mesh, self.bank = stage, dtype, mesh, bank
        self.matmul_precision = matmul
        self.mech = sharding.replicate(cast(mech64, dtype), mesh)
        self.fn = jit(jax.vmap(stage.fn, in_axes=(None,) + (0,) * len(stage.inputs)))
        if stage.name not in acc_fns:  # float64 check, one compile per stage for both precisions
            acc_fns[stage.name] = jit(stage.accuracy)
        self.acc = acc_fns[stage.name]
        self.mech64 = mech64
        self.last: Row | None = None
        self.compile_guess = math.nan

    def predict(self, batch: int, reps: int) -> float:
        """Seconds a batch should take (compile + 1 + reps calls); nan when nothing is known yet."""
        if self.last is None:
            return self.compile_guess
        per_call = self.last.best_s * batch / max(self.last.padded_batch, 1)
        return self.last.compile_s + (_reps(reps, per_call) + 1) * per_call

    def measure(self, batch: int, reps: int) -> tuple[Row, dict]:
        st, k = self.stage, self.bank["q"].shape[0]
        padded = sharding.padded_size(batch, self.mesh)
        host = [np.resize(self.bank[n], (padded,) + self.bank[n].shape[1:]).astype(self.dtype) for n in st.inputs]
        xs = sharding.shard(host, self.mesh)
        t0 = time.perf_counter()
        with jax.default_matmul_precision(self.matmul_precision):
            compiled = self.fn.lower(self.mech, *xs).compile()
        compile_s = _slowest(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(self.mech, *xs))
        reps = _reps(reps, time.perf_counter() - t0)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = jax.block_until_ready(compiled(self.mech, *xs))
            times.append(time.perf_counter() - t0)
        best, med = _slowest(min(times)), _slowest(float(np.median(times)))
        idx = np.arange(k) % batch  # the first rows, repeated to a fixed size: one accuracy compile
        head = _head(out, idx, self.mesh)
        ins64 = [np.asarray(np.asarray(h[idx]).astype(self.dtype), np.float64) for h in host]
        acc = self.acc(self.mech64, ins64, cast(head, jnp.float64))
        unit_n = batch * st.steps  # the states asked for (padding rows are overhead)
        row = Row(
            st.name,
            "f64" if self.dtype == jnp.float64 else "f32",
            batch,
            padded,
            "state-step" if st.steps > 1 else "state",
            compile_s,
            best,
            med,
            reps,
            1e6 * best / unit_n,
            unit_n / best,
            {name: float(v) for name, v in acc.items()},
        )
        self.last = row
        return row, head


def _head(out, idx: np.ndarray, mesh):
    """Rows ``idx`` of a sharded output, replicated and copied to host (works across processes)."""
    whole = NamedSharding(mesh, PartitionSpec())
    take = jit(lambda t: jax.tree_util.tree_map(lambda x: x[idx], t), out_shardings=whole)
    return jax.tree_util.tree_map(np.asarray, take(out))


def run(mech64: Mechanism, opts: BenchOptions, progress: Callable | None = None, bank: dict | None = None) -> dict:
    """Run the benchmark of ``mech64`` (a float64 Mechanism; x64 must be enabled) and return the
    report: ``env`` (device kind and count, processes, versions), ``rows`` (one dict per stage,
    precision and batch, see :class:`Row`), ``skipped`` messages, ``outputs`` (float64 heads of
    each stage's largest measured batch, host arrays) and the wall time. ``progress(text, n)`` is
    called after each batch. ``bank``: float64 host states to use instead of
    :func:`jaxmech.bench_stages.load_bank`'s (same keys; only those the stages read)."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError("jaxmech bench needs jax_enable_x64 (float64 is the reference precision)")
    bad = [w for w in opts.what if w not in STAGES] + [p for p in opts.precisions if p not in DTYPES]
    if bad:
        raise ValueError(f"unknown stage or precision {bad}: stages {STAGES}, precisions {tuple(DTYPES)}")
    if jax.process_count() > 1 and opts.devices not in (None, jax.device_count()):
        raise ValueError(f"--devices {opts.devices}: a multi-process run uses all {jax.device_count()} devices")
    t_start = time.perf_counter()
    budget = _Budget(opts.budget)
    mesh = sharding.batch_mesh(opts.devices)
    all_stages = stages(mech64, opts.track_steps, opts.rollout_steps, opts.dt)
    bank = load_bank(mech64, opts.bank, opts.seed, opts.track_steps) if bank is None else bank
    batches = sorted(set(opts.batches))
    rows: dict[tuple, Row] = {}
    outputs: dict[str, dict] = {}
    acc_fns: dict = {}
    groups: dict[tuple[str, str], _Group | None] = {}
    for sname in opts.what:
        for prec in opts.precisions:
            no_track = sname == "track" and bank.get("path", np.zeros((0, 0))).shape[-1] == 0
            groups[sname, prec] = (
                None if no_track else _Group(all_stages[sname], DTYPES[prec], mech64, mesh, bank, acc_fns)
            )
    why: dict[tuple[str, str], str] = {g: "no actuated joints to track" for g, v in groups.items() if v is None}
    # breadth first: the smallest batch of every stage, then the next size, ...: a short budget
    # covers every stage and skips the largest batches
    for b in batches:
        for (sname, prec), group in groups.items():
            if (sname, prec) in why:
                prior = rows.get((sname, prec, batches[0]))
                reason = "no actuated joints" if group is None else (prior.skipped if prior else "budget") or "budget"
                rows[sname, prec, b] = Row(sname, prec, b, skipped=reason)
                continue
            guess = group.predict(b, opts.reps)
            if math.isnan(guess):  # nothing known yet: the mean compile time seen so far
                seen = [g.last.compile_s for g in groups.values() if g and g.last]
                guess = group.compile_guess if not math.isnan(group.compile_guess) else float(np.mean(seen or [0.0]))
            left = budget.left()
            if not _agree(bool(left > 0.5 and guess <= left)):
                why[sname, prec] = f"budget: predicted {guess:.0f} s, {max(left, 0):.0f} s left"
                rows[sname, prec, b] = Row(sname, prec, b, skipped="budget")
                if progress:
                    progress(f"{sname} {prec} batch {b}: skipped", 1)
                continue
            try:
                row, head = group.measure(b, opts.reps)
            except Exception as e:  # a stage this model cannot run (e.g. no closure to assemble)
                msg = str(e).splitlines()[0] if str(e) else ""
                why[sname, prec] = f"{type(e).__name__}: {msg[:160]}"
                rows[sname, prec, b] = Row(sname, prec, b, skipped="error")
                if progress:
                    progress(f"{sname} {prec} batch {b}: error", 1)
                continue
            for (s2, _), g2 in groups.items():  # the other precision's first compile is alike
                if g2 and s2 == sname and math.isnan(g2.compile_guess):
                    g2.compile_guess = row.compile_s
            rows[sname, prec, b] = row
            outputs[f"{sname}_{prec}"] = head
            if progress:
                progress(f"{sname} {prec} batch {b}: {row.us_per_state:.3g} µs/{row.unit}", 1)
    ordered = [rows[s, p, b] for (s, p) in groups for b in batches]
    skipped = []
    for (s, p), msg in sorted(why.items(), key=lambda kv: list(groups).index(kv[0])):
        skip = [str(r.batch) for r in ordered if (r.stage, r.precision) == (s, p) and r.skipped]
        skipped.append(f"{s} {p}: batch{'es' if len(skip) > 1 else ''} {', '.join(skip)} skipped ({msg})")
    return {
        "mechanism": mech64.name,
        "env": env_info(mesh),
        "options": asdict(opts),
        "rows": [asdict(r) for r in ordered],
        "skipped": skipped,
        "elapsed_s": time.perf_counter() - t_start,
        "outputs": outputs,
    }
