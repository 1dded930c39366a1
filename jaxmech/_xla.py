"""XLA CPU settings jaxmech needs before JAX's CPU backend starts.

The deadlock (jaxlib 0.10.x on machines with few cores). jaxlib's batched LAPACK kernels
(``gesdd`` SVD, ``geqp3`` pivoted QR, ``potrf`` Cholesky, ``trsm`` solves) split a batch into
chunks, queue them on XLA's intra-op thread pool ("XLAEigen") and block until they finish
(``jax::ParallelBatchMap`` -> ``BlockingCounter::Wait``). XLA's thunk executor runs independent
thunks concurrently on that same pool. The pool is sized from the CPU affinity, so on a
2-core machine it has 2 threads: when two independent LAPACK calls start at once (the SVD of
the closure Jacobian and a triangular solve with the mass matrix's Cholesky factor, in one
vmapped forward-dynamics call), each holds one pool thread while waiting for chunks queued
behind the other, and the process sits at 0 % CPU forever. Observed with gdb on
``jit(vmap(forward_dynamics))`` for the Stewart platform at batch 1,024 (one thread in
``SingularValueDecompositionKernel``, the other in ``TriMatrixEquationSolver``, both in
``BlockingCounter::Wait``); it hung CI's slow tier. jaxlib 0.11.2 compiles the parallel path out
of open-source builds, but 0.10.2 is the newest jaxlib that installs here.

What fixes it. XLA sizes its CPU pools from the ``NPROC`` environment variable when it is set
(``DefaultThreadPoolSize``), so jaxmech sets ``NPROC`` to at least 16 when the machine has fewer
cores: a deadlock then needs 16 LAPACK calls in flight at once, far more than any jaxmech
program has independent ones. With ``NPROC=8`` the hanging call above finishes (Stewart forward
dynamics, 1,024 states) and per-state time is unchanged within noise (135-157 us at 8 and 16
threads, 161 us pinned to one core). What did not fix it: ``taskset -c 0`` only makes it
rarer, ``--xla_cpu_use_fusion_emitters=false`` and ``--xla_cpu_multi_thread_eigen=false`` do
nothing, and ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` (kept, since it avoids
the hang in the batched assembly) only changes the order thunks start in.

Measured in session 19: passing the scheduler option per program (``jax.jit``'s
``compiler_options``) instead of through ``XLA_FLAGS`` is not equivalent. With ``NPROC=2`` the
batched Stewart assembly (1,024 states) stalled at 0 % CPU on its first call with the per-program
option, and ran 16 calls in 40 s with the flag in ``XLA_FLAGS``; so the flag stays global.

A user's own ``NPROC`` or flag wins. Importing jaxmech after JAX already ran something on the
CPU is too late for the pool size; :func:`configure` warns in that case.
"""

from __future__ import annotations

import os
import warnings

_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
_MIN_POOL = 16


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # private API moved: assume not started
        return False


def configure() -> None:
    """Set jaxmech's CPU flag and a deadlock-safe intra-op pool size unless the user set them.

    Takes effect only if called before JAX's CPU backend is first used (jaxmech calls it at
    import); warns when the backend already started with a small pool."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_enable_concurrency_optimized_scheduler" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}".strip()
    if "NPROC" in os.environ or _cpu_count() >= _MIN_POOL:
        return
    if _backend_started():
        warnings.warn(
            f"jaxmech was imported after JAX's CPU backend started with a {_cpu_count()}-thread pool; "
            "batched LAPACK calls (SVD, QR, Cholesky) can deadlock on jaxlib 0.10 with so few threads. "
            f"Import jaxmech before running JAX code, or set NPROC={_MIN_POOL} in the environment.",
            RuntimeWarning,
            stacklevel=3,
        )
    os.environ["NPROC"] = str(_MIN_POOL)
