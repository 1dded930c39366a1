"""XLA CPU flags jaxmech needs before the backend starts (appended to ``XLA_FLAGS``).

``--xla_cpu_enable_concurrency_optimized_scheduler=false``: with the default scheduler, XLA's
CPU runtime runs independent thunks concurrently. jaxlib's batched LAPACK kernels (gesdd SVD,
geqp3 pivoted QR, getrf/trsm solves) split a large batch over the same intra-op thread pool and
block until the pieces finish, so two of them running at once on a 2-core machine each hold
one pool thread while waiting for work queued behind the other: ``jit(vmap(assemble))`` on
the Stewart platform at batch 1,024 hung at 0% CPU (native stacks: both pool threads in
``jax::ParallelBatchMap`` -> ``BlockingCounter::Wait``). ``taskset -c 0`` avoided it;
``--xla_cpu_use_fusion_emitters=false`` and ``--xla_cpu_multi_thread_eigen=false`` did not;
this flag did (7.0 s instead of a hang, the same time as the single-core run). The flag only
changes the CPU schedule; GPU backends ignore it. A user's own setting of the flag wins.
"""

from __future__ import annotations

import os

_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def configure() -> None:
    """Append jaxmech's CPU flag to ``XLA_FLAGS`` unless the user set that flag already.
    Takes effect if called before JAX's CPU backend is first used."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_enable_concurrency_optimized_scheduler" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}".strip()
