"""Test configuration: the float64 reference tier (the library itself never flips x64).

No XLA flags or environment changes here: the tests run under the configuration users get. The
suite keeps its compiled programs in JAX's persistent compilation cache through the public
:func:`jaxmech.compilation_cache` (the same call ``jaxmech demo`` makes), in
``.pytest_cache/jaxmech-xla``: the two xdist workers and the slow tier load what another test
already compiled instead of compiling it again. Delete that folder for a cold run.
"""

import gc
from pathlib import Path

import jax
import pytest
from _durations import UNKNOWN, file_seconds

import jaxmech as jm

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
jm.compilation_cache(ROOT / ".pytest_cache" / "jaxmech-xla")
CONFIGS = ROOT / "configs"


def pytest_collection_modifyitems(config, items):
    """Heaviest test files first (``tests/_durations.py``), each file's tests in their own order,
    so the two xdist workers finish together; pyproject's ``--no-loadscope-reorder`` keeps it."""
    seconds = file_seconds(config.option.markexpr or "")
    items.sort(key=lambda item: -seconds.get(item.path.name, UNKNOWN))  # stable: files stay whole


@pytest.fixture(scope="session")
def configs_dir() -> Path:
    return CONFIGS


def _mapped_regions() -> int:
    """Memory mappings of this process (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's compiled executables after a module once the process holds many mappings.

    Each XLA:CPU executable keeps ~100-200 memory mappings; a single process running the whole
    suite (~500 compilations) reached Linux's default limit of 65,530 (vm.max_map_count), where
    the next compilation fails with MemoryError and the run hangs. Clearing at module boundaries
    keeps the count bounded; later modules recompile what they use."""
    yield
    if _mapped_regions() > 20_000:
        jax.clear_caches()
        gc.collect()
