"""Test configuration: the float64 reference tier (the library itself never flips x64).

No XLA flags or environment changes here: the tests run under the configuration users get.
"""

from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


@pytest.fixture(scope="session")
def configs_dir() -> Path:
    return CONFIGS
