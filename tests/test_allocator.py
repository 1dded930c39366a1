"""jm.reuse_host_buffers: opt-in only, and it really moves large blocks onto the heap.

Each check runs in a fresh interpreter: the setting is process-wide and would otherwise leak
into the rest of the test run. A 64 MiB ``malloc`` is above glibc's largest automatic mmap
threshold (32 MiB), so by default it gets its own mapping; after the call it must come from the
``[heap]`` segment of ``/proc/self/maps``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import jaxmech as jm

_PROBE = textwrap.dedent(
    """
    import ctypes, ctypes.util, sys
    import jaxmech as jm
    if sys.argv[1] == "reuse":
        assert jm.reuse_host_buffers() is True
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    p = libc.malloc(64 << 20)
    heap = [l.split()[0].split("-") for l in open("/proc/self/maps") if l.rstrip().endswith("[heap]")]
    inside = any(int(a, 16) <= p < int(b, 16) for a, b in heap)
    libc.free(p)
    print("heap" if inside else "mmap")
    """
)


def _where(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc/self/maps")
def test_import_leaves_the_allocator_alone_and_the_call_moves_large_blocks_to_the_heap():
    assert _where("import") == "mmap"  # importing jaxmech changes nothing global
    assert _where("reuse") == "heap"


def test_threshold_is_checked():
    with pytest.raises(ValueError, match="threshold_bytes"):
        jm.reuse_host_buffers(0)
    with pytest.raises(ValueError, match="threshold_bytes"):
        jm.reuse_host_buffers(2**31)
