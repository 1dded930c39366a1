"""Brax-style environments: pure/vmappable reset and step, closure kept, PD control and ES."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmech as jm
from jaxmech import envs


@pytest.fixture(scope="module")
def stewart_env(configs_dir):
    mech = jm.load(configs_dir / "stewart.toml")
    return envs.stewart_pose_env(mech, n_targets=4, horizon=8, substeps=2, dt=2e-3)


@pytest.mark.slow  # ~17 s of compiles; the four-bar version runs by default (test_envs_semantics.py)
def test_reset_step_shapes_and_purity(stewart_env):
    env = stewart_env
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    s = jm.jit(jax.vmap(lambda k: env.reset(k)))(keys)
    assert s.obs.shape == (3, env.observation_size)
    act = jnp.zeros((3, env.action_size))
    step = jm.jit(jax.vmap(lambda s, a: env.step(s, a)))
    s1 = step(s, act)
    # batch members are independent: the reversed batch gives the reversed results (vmap, no
    # cross-talk), on the same compiled step
    s1r = step(jax.tree.map(lambda x: x[::-1], s), act)
    np.testing.assert_allclose(np.asarray(s1r.obs)[::-1], np.asarray(s1.obs), rtol=0, atol=1e-12)
    assert s1.reward.shape == (3,) and s1.done.dtype == s1.reward.dtype  # float like Brax
    # the state moved, and its closure, re-evaluated independently of the env, is at round-off
    assert float(jnp.max(jnp.abs(s1.sim.q - s.sim.q))) > 0.0
    gap = jm.jit(jax.vmap(jm.closure_residual, (None, 0)))(env.mech, s1.sim.q)
    assert float(jnp.max(jnp.abs(gap))) < 1e-9
    np.testing.assert_allclose(np.asarray(s1.metrics["closure_gap"]), np.max(np.abs(np.asarray(gap)), 1), atol=1e-12)
    assert np.isfinite(np.asarray(s1.obs)).all()


@pytest.mark.slow
def test_port_pd_and_es_improve_the_return(stewart_env):
    """ES (antithetic, Adam) on the two gains of the port-space PD improves the return from a
    weak start."""
    env = stewart_env
    weak = {"log_wn": jnp.log(2.0), "log_zeta": jnp.log(0.3)}
    params, hist = envs.evolution_strategy(
        env,
        envs.port_pd_policy,
        weak,
        jax.random.PRNGKey(2),
        iterations=6,
        pairs=3,
        n_episodes=2,
        learning_rate=0.4,
        sigma=0.2,
    )
    assert np.isfinite(hist["return"]).all()
    assert hist["return"][-1] > hist["return"][0], hist
    assert hist["length"][-1] >= hist["length"][0], hist  # not by crashing sooner


@pytest.mark.slow
def test_excavator_env_pd(configs_dir):
    mech = jm.load(configs_dir / "excavator.toml")
    env = envs.excavator_tip_env(mech, n_targets=4, horizon=10, substeps=2)
    params = {"log_wn": jnp.log(8.0), "log_zeta": jnp.log(0.8)}
    R, m = jm.jit(lambda k: envs.episode_return(env, envs.port_pd_policy, params, k))(jax.random.PRNGKey(0))
    s0 = env.reset(jax.random.PRNGKey(0))
    assert float(m["final_error"]) < float(s0.metrics["task_error"])
    assert float(m["max_closure_gap"]) < 1e-8


@pytest.mark.slow
def test_evolution_strategy_runs_without_xla_flags(configs_dir, tmp_path):
    """The ES helper in a fresh process with no XLA flags (it used to fail the HLO verifier
    unless --xla_cpu_use_fusion_emitters=false was set)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import jax, jax.numpy as jnp, numpy as np\n"
        "import jaxmech as jm\n"
        f"mech = jm.load({str(configs_dir / 'stewart.toml')!r})\n"
        "env = jm.envs.stewart_pose_env(mech, n_targets=4, horizon=6, substeps=2)\n"
        "gains = {'log_wn': jnp.log(4.0), 'log_zeta': jnp.log(0.7)}\n"
        "p, h = jm.envs.evolution_strategy(env, jm.envs.port_pd_policy, gains, jax.random.PRNGKey(0), "
        "iterations=1, pairs=3, n_episodes=2)\n"
        "assert np.isfinite(h['return']).all(); print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(2400)  # five compiled episode functions (PD grid, zero action, ES, evaluations)
def test_learning_example_runs_without_xla_flags(tmp_path):
    """examples/stewart_es_mlp.py at a tiny size in a fresh process with no XLA flags: it writes
    the learning curve and the figures (return and episode length)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "curve.png"
    args = ["--iterations", "1", "--pairs", "2", "--episodes", "1", "--horizon", "4", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(root)
    r = subprocess.run(
        [sys.executable, str(root / "examples" / "stewart_es_mlp.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=2300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.exists() and out.stat().st_size > 1000
    s = json.loads(out.with_suffix(".json").read_text())
    assert len(s["history"]["return"]) == 2 and len(s["history"]["length"]) == 2
    assert s["pd"]["length"] == 4 and np.isfinite(s["mlp"]["return"])
