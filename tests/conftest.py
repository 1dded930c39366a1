"""Test configuration: the float64 reference tier (the library itself never flips x64)."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false")
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


@pytest.fixture(scope="session")
def configs_dir() -> Path:
    return CONFIGS
