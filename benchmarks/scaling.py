"""Throughput against the number of devices: one batch sharded (``jm.shard``) over meshes of 1, 2, 4
... devices of this machine, timed interleaved in one process (fair under shared load), with the
process CPU time per call next to the wall time.

On a CPU the devices are forced with ``XLA_FLAGS`` (set here before JAX starts, as a script may);
they share the machine's cores, so more devices than cores cannot run faster: wall time stays
flat or grows while the CPU time per call shows the work is the same.

    python benchmarks/scaling.py --devices 1,2,4 --batch 4096 --what fd
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="stewart")
    ap.add_argument("--devices", default="1,2,4")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--what", default="fd", help="one stage of jaxmech bench")
    ap.add_argument("--precision", default="f64")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    counts = [int(x) for x in a.devices.split(",")]
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={max(counts)}".strip()
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import jaxmech as jm
    from jaxmech import bench, sharding
    from jaxmech.bench_stages import load_bank, stages
    from jaxmech.cli import resolve_config

    if jax.devices()[0].platform != "cpu" and max(counts) > jax.device_count():
        counts = [c for c in counts if c <= jax.device_count()]
    mech = jm.load(resolve_config(a.config))
    st = stages(mech)[a.what]
    bank = load_bank(mech, 256)
    dtype = bench.DTYPES[a.precision]
    host = [np.resize(bank[n], (a.batch,) + bank[n].shape[1:]).astype(dtype) for n in st.inputs]
    fn = jm.jit(jax.vmap(st.fn, in_axes=(None,) + (0,) * len(st.inputs)))
    runs = {}
    for n in counts:
        mesh = sharding.batch_mesh(n)
        m, xs = sharding.replicate(bench.cast(mech, dtype), mesh), sharding.shard(host, mesh)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(m, *xs))
        runs[n] = {"args": (m, xs), "compile_s": time.perf_counter() - t0, "wall": [], "cpu": []}
    for _ in range(a.reps):  # interleaved: 1 2 4 1 2 4 ...
        for r in runs.values():
            m, xs = r["args"]
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(fn(m, *xs))
            r["wall"].append(time.perf_counter() - t0)
            r["cpu"].append(time.process_time() - c0)
    out = {
        "config": a.config,
        "stage": a.what,
        "precision": a.precision,
        "batch": a.batch,
        "cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "device_kind": jax.devices()[0].device_kind,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "rows": [],
    }
    base = min(runs[counts[0]]["wall"])
    n_units = a.batch * st.steps  # per state-step for track and rollout, as jaxmech bench
    print(f"{a.config} {a.what} {a.precision}, batch {a.batch}, {out['cpu_count']} cores, load {out['load_average']}")
    unit = "us/" + ("state-step" if st.steps > 1 else "state")
    print(f"{'devices':>8} {unit:>13} {'states/s':>12} {'speed-up':>9} {'cpu s/call':>11} {'compile s':>10}")
    for n, r in runs.items():
        best = min(r["wall"])
        row = {
            "devices": n,
            "us_per_state": 1e6 * best / n_units,
            "states_per_s": n_units / best,
            "speedup": base / best,
            "cpu_s_per_call": min(r["cpu"]),
            "compile_s": r["compile_s"],
        }
        out["rows"].append(row)
        print(
            f"{n:>8} {row['us_per_state']:>13.3g} {row['states_per_s']:>12,.0f} {row['speedup']:>9.2f} "
            f"{row['cpu_s_per_call']:>11.3f} {row['compile_s']:>10.1f}"
        )
    res = ROOT / "benchmarks" / "results"
    res.mkdir(parents=True, exist_ok=True)
    (res / "scaling.json").write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
