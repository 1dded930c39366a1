"""Opt-in: keep freed host memory in the process, so large batched calls stop page-faulting.

XLA on CPU allocates each call's temporaries and outputs with ``malloc``. glibc serves a block
above its mmap threshold with a fresh ``mmap`` and hands it back with ``munmap`` when it is freed.
The threshold adapts upward as blocks are freed, but never past 32 MiB on 64-bit Linux. Every call
that needs a larger buffer therefore touches fresh pages: one page fault, and the kernel zeroing
the page, per 4 KiB, every call. Memory freed at the top of the heap is also trimmed back to the
system past ``M_TRIM_THRESHOLD``, with the same effect.

Measured on one core of the 2-core CI machine, float64 (``benchmarks/PROFILE.md``, session 23):

| call, batch | default | after :func:`reuse_host_buffers` |
|---|---|---|
| writing a (1,024, 80, 82) array of zeros, per state | 19.1 us | 1.1 us |
| Kangaroo closure residual + Jacobian (80 x 82), 1,024 states | 77-83 us | 40 us |
| Stewart forward dynamics, 4,096 states | 42.3 us | 33.4 us |
| Stewart forward dynamics, 1,024 states (buffers under 32 MiB) | 26.9 us | unchanged |

:func:`reuse_host_buffers` raises the mmap threshold and the trim threshold with glibc's
``mallopt``, so those blocks come from the heap and stay there between calls. It changes the
whole process's allocator, which is why importing jaxmech never does it: call it in a program
that runs large batches (``jaxmech bench --reuse-buffers`` and ``benchmarks/compare.py
--reuse-buffers`` do). The price is memory: the process keeps its peak heap instead of returning
it. The same settings are available without code as environment variables, read when the process
starts: ``MALLOC_MMAP_THRESHOLD_=2147483647 MALLOC_TRIM_THRESHOLD_=2147483647``.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MAX = 2**31 - 1  # mallopt takes an int


def reuse_host_buffers(threshold_bytes: int = _MAX) -> bool:
    """Serve and keep allocations up to ``threshold_bytes`` on the heap (see the module notes).

    Process-wide and not undone. Returns True where glibc accepted both settings, False
    where the C library is not glibc (macOS, musl) or refused them; nothing changes then."""
    if not 0 < threshold_bytes <= _MAX:
        raise ValueError(f"threshold_bytes must be in (0, {_MAX}], got {threshold_bytes}")
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, threshold_bytes) == 1
    return bool(ok and mallopt(_M_TRIM_THRESHOLD, threshold_bytes) == 1)
