"""``jaxmech demo`` end to end at a small size."""

import pytest
from typer.testing import CliRunner

from jaxmech.cli import app


def test_demo_help():
    r = CliRunner().invoke(app, ["demo", "--help"])
    assert r.exit_code == 0 and "Stewart" in r.output


@pytest.mark.slow
def test_demo_small(tmp_path):
    r = CliRunner().invoke(
        app, ["demo", "--batch", "4", "--steps", "20", "--path-steps", "10", "--out", str(tmp_path), "--no-cache"]
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "stewart_demo.png").stat().st_size > 10_000
    assert "peak closure gap" in r.output and "rollout" in r.output
