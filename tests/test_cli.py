"""The ``jaxmech`` command: ``info`` prints rank and degrees of freedom, no arguments shows the
help and the shipped examples, bad files give a one-line error and exit code 2 (no traceback).

Degrees of freedom are checked against Grübler/Kutzbach counts, not against our own output:
planar four-bar 1, Stewart platform (6-UPS/SPS) 6.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jaxmech.cli import app, main

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _run(*args, cwd=ROOT):
    """The console entry point ``jaxmech.cli.main`` in this process (what a user types, without
    the interpreter start): exit code and the text it printed. Typer's standalone mode turns an
    uncaught exception into a traceback on stderr, which the tests look for."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv, os.getcwd(), os.environ.get("COLUMNS")
    sys.argv = ["jaxmech", *args]
    os.chdir(cwd)
    os.environ["COLUMNS"] = "200"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old[0]
        os.chdir(old[1])
        if old[2] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old[2]
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _dof(out: str) -> tuple[int, int]:
    m = re.search(r"numerical rank (\d+) .*degrees of freedom nv - rank = (\d+)", _flat(out))
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_info_four_bar():
    res = runner.invoke(app, ["info", str(ROOT / "configs" / "four_bar.toml")])
    assert res.exit_code == 0, res.output
    rank, dof = _dof(res.output)
    assert (rank, dof) == (2, 1)  # planar four-bar: 3 joints - 2 independent loop rows = 1 dof
    flat = _flat(res.output)
    assert "four_bar" in flat and "rocker_ground" in flat and "cuts 1" in flat


def test_info_by_example_name():
    res = runner.invoke(app, ["info", "four_bar"])
    assert res.exit_code == 0, res.output
    assert _dof(res.output)[1] == 1


def test_info_stewart():
    res = runner.invoke(app, ["info", str(ROOT / "configs" / "stewart.toml")])
    assert res.exit_code == 0, res.output
    assert _dof(res.output)[1] == 6  # Stewart-Gough platform: 6 dof


def test_no_args_shows_help_and_examples():
    res = _run()
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "info" in out and "Usage" in out
    assert "Shipped examples" in out and "configs/four_bar.toml" in out
    for p in (ROOT / "configs").glob("*.toml"):
        assert f"configs/{p.name}" in out


@pytest.mark.parametrize(
    "content,expect",
    [
        ("x = [\n", "TOML syntax error"),
        ('[[body]]\nname = "a"\nmas = 1.0\n', "unknown key"),
        ('[[body]]\nname = "a"\n[[joint]]\nname = "j"\ntype = "hinge"\nparent = "world"\nchild = "a"\n', "hinge"),
        (None, "not found"),
    ],
    ids=["syntax", "typo", "joint_type", "missing"],
)
def test_bad_file_one_line_exit_2(tmp_path, content, expect):
    path = tmp_path / "bad.toml"
    if content is not None:
        path.write_text(content)
    res = _run("info", str(path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    text = (res.stdout + res.stderr).strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    assert text.startswith("error:") and expect in text and "bad.toml" in text


def test_bad_file_in_process(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[body]]\nname = "a"\ninertia = [1, 1, 5]\nmass = 1\n')
    res = runner.invoke(app, ["info", str(path)])
    assert res.exit_code == 2
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "triangle" in _flat(res.output)
