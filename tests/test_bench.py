"""`jaxmech bench`: the report's figures are consistent, float32 accuracy is measured in float64,
the budget skips batches and says so, and the command writes JSON and a PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import bench, bench_report

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def four_bar(configs_dir):
    return jm.load(configs_dir / "four_bar.toml")


@pytest.fixture(scope="module")
def kin_report(four_bar):
    # a hand-made bank (q near q0; no generator compile): kinematics needs only q
    q = np.asarray(four_bar.q0)[None] + 0.3 * np.arange(4)[:, None]
    opts = bench.BenchOptions(what=("kinematics",), batches=(6,), precisions=("f64", "f32"), reps=2, budget=600)
    return bench.run(four_bar, opts, bank={"q": q}), q


def test_report_rows_are_consistent(kin_report):
    rep, _ = kin_report
    assert rep["env"]["device_count"] == jax.device_count()
    assert rep["env"]["device_kind"] == jax.devices()[0].device_kind
    rows = {(r["precision"], r["batch"]): r for r in rep["rows"]}
    assert set(rows) == {("f64", 6), ("f32", 6)}
    for r in rows.values():
        assert not r["skipped"] and r["compile_s"] > 0 and r["reps"] == 2
        assert r["best_s"] <= r["median_s"]
        assert r["us_per_state"] == pytest.approx(1e6 * r["best_s"] / r["batch"])
        assert r["us_per_state"] * r["states_per_s"] == pytest.approx(1e6)
        assert r["padded_batch"] % jax.device_count() == 0 and r["padded_batch"] >= r["batch"]


def test_accuracy_is_float64_check_of_each_precision(kin_report, four_bar):
    rep, q = kin_report
    acc = {(r["precision"], r["batch"]): r["accuracy"]["max |T - T_f64|"] for r in rep["rows"]}
    assert acc[("f64", 6)] < 1e-15
    assert 1e-9 < acc[("f32", 6)] < 1e-5  # float32 rounding, seen through a float64 check
    # the output head: the first 4 of the 6 rows (the bank repeated), as plain forward kinematics gives
    head = rep["outputs"]["kinematics_f64"]
    fk = jm.jit(jm.forward_kinematics)  # one state at a time, no vmap, no sharding
    ref = np.stack([np.asarray(fk(four_bar, q[i % 4])) for i in range(4)])
    np.testing.assert_allclose(head, ref, rtol=0, atol=1e-14)


def test_budget_skips_and_says_so(four_bar):
    opts = bench.BenchOptions(what=("fd", "closure"), batches=(1, 64), precisions=("f64",), budget=0.0)
    rep = bench.run(four_bar, opts, bank={"q": np.asarray(four_bar.q0)[None]})
    assert [r["skipped"] for r in rep["rows"]] == ["budget"] * 4
    assert any("fd f64: batches 1, 64 skipped" in m for m in rep["skipped"])


def test_json_and_plot(kin_report, tmp_path):
    rep, _ = kin_report
    p = bench_report.write_json(rep, tmp_path / "b.json")
    back = json.loads(p.read_text())
    assert "outputs" not in back and back["env"]["device_count"] == jax.device_count()
    assert {"us_per_state", "states_per_s", "compile_s", "accuracy"} <= set(back["rows"][0])
    png = bench_report.plot(rep, tmp_path / "b.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_bad_stage_is_an_error(four_bar):
    with pytest.raises(ValueError, match="unknown stage"):
        bench.run(four_bar, bench.BenchOptions(what=("nope",)))


@pytest.mark.slow
def test_cli_stewart_budget_60(tmp_path):
    """The issue's command: `jaxmech bench configs/stewart.toml --budget 60 --json out.json`, with
    host buffers reused (the report says so)."""
    env = dict(os.environ, JAXMECH_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "jaxmech.cli", "bench", "configs/stewart.toml", "--budget", "60", "--json", str(out)]
    cmd.append("--reuse-buffers")
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["mechanism"] == "stewart" and rep["env"]["device_count"] >= 1 and rep["env"]["device_kind"]
    out_words = " ".join(p.stdout.split())  # rich wraps the header at the terminal width
    assert rep["env"]["reuse_host_buffers"] is True and "host buffers reused" in out_words
    done = [r for r in rep["rows"] if not r["skipped"]]
    assert done, rep["skipped"]
    r = done[0]
    assert r["stage"] == "fd" and r["us_per_state"] > 0 and r["states_per_s"] > 0 and r["compile_s"] > 0
    assert r["accuracy"]["max |C a + gamma|"] < 1e-9
    assert "fd" in p.stdout and "µs/state" in p.stdout
