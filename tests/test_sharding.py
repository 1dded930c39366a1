"""Batches sharded over several devices (jm.shard, NamedSharding over a 'batch' mesh axis) and over
several processes (jax.distributed on 127.0.0.1) give the single-device results bit for bit.

Several CPU devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts,
so those checks run in subprocesses (the flag is never set in this process or the library)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

import jaxmech as jm
from jaxmech import sharding

ROOT = Path(__file__).resolve().parents[1]


def _env(n_devices: int, cache: Path | None = None) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["JAXMECH_CACHE"] = str(cache)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n_devices}".strip()
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _python(code: str, n_devices: int, tmp_path: Path, timeout: float = 600) -> str:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    p = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=_env(n_devices), capture_output=True, text=True, timeout=timeout
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_shard_places_leaves_on_the_batch_axis():
    x = {"q": np.zeros((4, 3)), "t": np.float64(1.0), "name": "keep", "s": jnp.ones(())}
    out = jm.shard(x)
    assert isinstance(out["q"].sharding, NamedSharding)
    assert out["q"].sharding.spec == jax.sharding.PartitionSpec("batch")
    assert out["s"].sharding.spec == jax.sharding.PartitionSpec()
    assert out["name"] == "keep"
    np.testing.assert_array_equal(np.asarray(out["q"]), x["q"])


def test_shard_rejects_a_mesh_without_batch_axis_and_bad_counts():
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("x",))
    with pytest.raises(ValueError, match="'batch' axis"):
        jm.shard(np.zeros((2, 2)), mesh)
    with pytest.raises(ValueError, match="between 1 and"):
        sharding.batch_mesh(jax.device_count() + 1)


FOUR_DEVICES = """
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxmech as jm
from jaxmech import envs
from jaxmech.bench_stages import make_bank

assert jax.device_count() == 4, jax.devices()
mech = jm.load("configs/five_bar.toml")
bank = make_bank(mech, 8, track_steps=2)
mesh = jm.sharding.batch_mesh()
try:
    jm.shard({"q": np.zeros((6, 2))})
    raise AssertionError("6 states over 4 devices must be refused")
except ValueError as e:
    assert "does not split evenly over 4 devices" in str(e), e

def roll(m, q, v):
    traj, info = jm.rollout(m, jm.SimState(q, v), jnp.zeros(jm.simulate.control_size(m)), 1e-3, 3)
    return traj.q, info.closure_gap

f_roll = jm.jit(jax.vmap(roll, in_axes=(None, 0, 0)))
one = jax.devices()[0]
def single(x):
    return jax.device_put(x, one)

def check(name, ref, out, constants_replicated=False):
    for r, o in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(out)):
        assert isinstance(o.sharding, jax.sharding.NamedSharding), (name, o.sharding)
        assert len(o.sharding.device_set) == 4 and len(r.sharding.device_set) == 1, (name, o.sharding)
        if constants_replicated and o.sharding.is_fully_replicated:  # e.g. reset's step counter
            assert np.all(np.asarray(o) == np.asarray(o)[:1]), name
        else:
            assert o.sharding.spec[0] == "batch", (name, o.sharding)
            shards = {s.device: s.data.shape[0] for s in o.addressable_shards}
            assert len(shards) == 4 and set(shards.values()) == {o.shape[0] // 4}, shards
        assert np.array_equal(np.asarray(r), np.asarray(o)), (name, np.abs(np.asarray(r) - np.asarray(o)).max())
    print("ok", name)

args = (bank["q"], bank["v"])
check("rollout", f_roll(single(mech), *map(single, args)), f_roll(mech, *jm.shard(args)))

env = envs.make_tracking_env(mech, "end_effector", "position", ["left_crank", "right_crank"], n_targets=4, horizon=4,
                             substeps=1)
reset, step = jm.jit(jax.vmap(env.reset)), jm.jit(jax.vmap(env.step))
keys = jax.random.split(jax.random.PRNGKey(0), 8)
act = 0.1 * jnp.ones((8, env.action_size))
s_ref = reset(single(keys))
ref = step(s_ref, single(act))
s_sh = jm.shard(jax.device_get(s_ref))   # a user's batch of env states placed over 4 devices
out = step(s_sh, jm.shard(act))
check("env.step", ref, out)
check("env.reset", s_ref, reset(jm.shard(keys)), constants_replicated=True)
"""


@pytest.mark.slow
def test_four_devices_match_one_device_bitwise(tmp_path):
    out = _python(FOUR_DEVICES, 4, tmp_path)
    for name in ("rollout", "env.step", "env.reset"):
        assert f"ok {name}" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bench(args: list[str], n_devices: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jaxmech.cli", "bench", "configs/five_bar.toml", *args]
    env = _env(n_devices, cache=log.parent / "cache")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
    """`jaxmech bench --coordinator ...` in two processes with two CPU devices each: process 0's
    JSON names 4 devices and 2 processes, and the sharded rollout's outputs (10 steps of forward
    dynamics and projections each) equal a one-process, one-device run's bit for bit."""
    common = ["--what", "rollout", "--batch", "8", "--precision", "f64", "--budget", "600"]
    port = _free_port()
    procs = [
        _bench(
            common
            + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(k)]
            + ["--outputs", str(tmp_path / f"mp{k}.npz"), "--json", str(tmp_path / f"mp{k}.json")],
            2,
            tmp_path / f"mp{k}.log",
        )
        for k in (0, 1)
    ]
    ref = _bench(common + ["--devices", "1", "--outputs", str(tmp_path / "sp.npz")], 1, tmp_path / "sp.log")
    for p, name in zip([*procs, ref], ["mp0", "mp1", "sp"], strict=True):
        rc = p.wait(timeout=900)
        assert rc == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    import json

    rep = json.loads((tmp_path / "mp0.json").read_text())
    assert rep["env"]["device_count"] == 4 and rep["env"]["process_count"] == 2
    assert not (tmp_path / "mp1.json").exists()  # only process 0 reports
    a, b = np.load(tmp_path / "sp.npz"), np.load(tmp_path / "mp0.npz")
    assert sorted(a.files) == sorted(b.files) == ["rollout_f64/0"]
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
