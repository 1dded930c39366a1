"""Learn Stewart-platform pose tracking from scratch: an MLP policy trained by antithetic evolution
strategies (jaxmech.envs.evolution_strategy, Adam from optax), compared with the tuned port-space
PD controller with gravity compensation. Writes a learning curve (return and episode length
against ES updates) to a PNG and the figures to a JSON next to it.

    python examples/stewart_es_mlp.py --iterations 40 --out stewart_es.png

The episode length is shown next to the return so that crashing early can never pass for
learning: a failed episode ends with ``done = 1`` and a failure reward of the worst the remaining
steps could have earned. No XLA flags are needed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxmech as jm
from jaxmech import envs

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def init_mlp(key, sizes):
    """Weights of an MLP ``sizes[0] -> ... -> sizes[-1]`` (LeCun-normal, zero biases)."""
    params = []
    for k, (a, b) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:], strict=True), strict=True):
        params.append({"w": jax.random.normal(k, (a, b)) / np.sqrt(a), "b": jnp.zeros(b)})
    params[-1]["w"] = 0.01 * params[-1]["w"]  # start near zero effort
    return params


def mlp_policy(obs_scale):
    def policy(env, params, state):
        x = state.obs / obs_scale
        for layer in params[:-1]:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return jnp.tanh(x @ params[-1]["w"] + params[-1]["b"])  # normalized action in [-1, 1]

    return policy


def make_evaluate(env, policy):
    """One compiled evaluation per policy (params and keys traced): mean return and length."""

    @jm.jit
    def run(params, keys):
        R, m = jax.vmap(lambda k: envs.episode_return(env, policy, params, k))(keys)
        return jnp.mean(R), jnp.mean(m["length"])

    return lambda params, keys: tuple(float(x) for x in run(params, keys))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--horizon", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--sigma", type=float, default=0.05)
    ap.add_argument("--lr", type=float, default=0.03)
    ap.add_argument("--out", default="stewart_es.png")
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)

    t0 = time.perf_counter()
    mech = jm.load(CONFIGS / "stewart.toml")
    env = envs.stewart_pose_env(mech, n_targets=16, horizon=args.horizon, substeps=2, dt=4e-3)
    spread = 0.05
    obs_scale = jnp.concatenate([jnp.full(6, spread), jnp.full(6, 10 * spread), jnp.full(6, spread), jnp.full(6, 1.0)])
    eval_keys = jax.random.split(jax.random.PRNGKey(99), 16)

    # tuned PD baseline: a small grid over the natural frequency and damping ratio
    best = None
    evaluate_pd = make_evaluate(env, envs.port_pd_policy)
    for wn in (4.0, 8.0, 16.0, 32.0):
        for zeta in (0.7, 1.0):
            p = {"log_wn": jnp.log(wn), "log_zeta": jnp.log(zeta)}
            R, L = evaluate_pd(p, eval_keys)
            if best is None or R > best[0]:
                best = (R, L, wn, zeta)
    print(f"PD (tuned: wn={best[2]}, zeta={best[3]}): return {best[0]:.3f}, episode length {best[1]:.1f}")
    zero_R, zero_L = make_evaluate(env, lambda e, p, s: jnp.zeros(e.action_size))(None, eval_keys)
    print(f"zero action: return {zero_R:.3f}, episode length {zero_L:.1f}")

    policy = mlp_policy(obs_scale)
    params0 = init_mlp(jax.random.PRNGKey(0), [env.observation_size, args.hidden, args.hidden, env.action_size])
    log = lambda it, r, n: print(f"  update {it:3d}: return {r:9.3f}  episode length {n:5.1f}", flush=True)  # noqa: E731
    params, hist = envs.evolution_strategy(
        env,
        policy,
        params0,
        jax.random.PRNGKey(1),
        iterations=args.iterations,
        pairs=args.pairs,
        sigma=args.sigma,
        learning_rate=args.lr,
        n_episodes=args.episodes,
        callback=log,
    )
    R, L = make_evaluate(env, policy)(params, eval_keys)
    print(f"MLP after {args.iterations} ES updates: return {R:.3f}, episode length {L:.1f} (16 held-out episodes)")
    wall = time.perf_counter() - t0

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(6, 5), sharex=True)
    it = np.arange(len(hist["return"]))
    a1.plot(it, hist["return"], label="MLP (ES)")
    a1.axhline(best[0], color="k", ls="--", label="tuned PD")
    a1.axhline(zero_R, color="gray", ls=":", label="zero action")
    a1.set_ylabel("return")
    a1.legend()
    a2.plot(it, hist["length"])
    a2.axhline(args.horizon, color="k", ls="--")
    a2.set_ylabel("episode length")
    a2.set_xlabel("ES update")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    summary = {
        "pd": {"return": best[0], "length": best[1], "wn": best[2], "zeta": best[3]},
        "zero_action": {"return": zero_R, "length": zero_L},
        "mlp": {"return": R, "length": L},
        "history": {k: v.tolist() for k, v in hist.items()},
        "args": vars(args),
        "wall_s": wall,
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.out} ({wall:.0f} s)")
    return summary


if __name__ == "__main__":
    main()
