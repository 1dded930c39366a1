"""Figures (matplotlib, Agg backend, PNG): rollout trajectories, closure gap over time, system
identification convergence, throughput versus batch size. Every function takes plain arrays,
draws on a new figure (or a given axes) and returns the figure; ``save(fig, path)`` writes PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def save(fig, path) -> Path:
    """Write ``fig`` as PNG (creating the folder) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def trajectories(t, x, labels=None, ax=None, title="trajectories", ylabel="value"):
    """Lines ``x`` (n_steps, k) or a batch (batch, n_steps, k; thin lines) against time ``t``."""
    fig, ax = _axes(ax)
    x = np.asarray(x)
    t = np.asarray(t)
    if x.ndim == 3:
        for b in range(x.shape[0]):
            ax.plot(t, x[b], lw=0.6, alpha=0.5)
    else:
        x = x.reshape(len(t), -1)
        for k in range(x.shape[1]):
            ax.plot(t, x[:, k], lw=1.2, label=None if labels is None else labels[k])
        if labels is not None:
            ax.legend(fontsize=7, ncol=2)
    ax.set(xlabel="time [s]", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    return fig


def closure_gap(t, gap, ax=None, title="closure gap", floor: float = 1e-17):
    """max |rho| per step (log scale): ``gap`` (n_steps,) or (batch, n_steps) (max and median)."""
    fig, ax = _axes(ax)
    g = np.maximum(np.asarray(gap), floor)
    if g.ndim == 2:
        ax.semilogy(t, g.max(0), label="max over batch")
        ax.semilogy(t, np.median(g, 0), label="median", alpha=0.7)
        ax.legend(fontsize=8)
    else:
        ax.semilogy(t, g)
    ax.set(xlabel="time [s]", ylabel="max |residual| [m, rad]", title=title)
    ax.grid(alpha=0.3, which="both")
    return fig


def sysid_convergence(loss, mass_errors=None, labels=None, title="system identification"):
    """Loss history (log) and, if given, relative mass errors per body (iterations, nbodies)."""
    n = 2 if mass_errors is not None and np.size(mass_errors) else 1
    fig, axs = plt.subplots(1, n, figsize=(5 * n, 3.6), squeeze=False)
    axs[0, 0].semilogy(np.asarray(loss))
    axs[0, 0].set(xlabel="iteration", ylabel="loss (normalized effort MSE)", title=title)
    axs[0, 0].grid(alpha=0.3, which="both")
    if n == 2:
        e = np.maximum(np.asarray(mass_errors), 1e-8)
        for k in range(e.shape[1]):
            axs[0, 1].semilogy(e[:, k], lw=1, label=None if labels is None else labels[k])
        axs[0, 1].set(xlabel="iteration", ylabel="relative mass error", title="mass errors")
        axs[0, 1].grid(alpha=0.3, which="both")
        if labels is not None:
            axs[0, 1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def throughput(batch, seconds_per_state, labels=None, ax=None, title="throughput"):
    """Time per state versus batch size, log-log. ``seconds_per_state``: (n,) or a dict
    {label: (n,)} (one line per function / dtype)."""
    fig, ax = _axes(ax)
    series = seconds_per_state if isinstance(seconds_per_state, dict) else {labels or "time": seconds_per_state}
    for name, s in series.items():
        ax.loglog(np.asarray(batch), 1e6 * np.asarray(s), "o-", label=name)
    ax.set(xlabel="batch size", ylabel="time per state [us]", title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def _axes(ax):
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        return fig, ax
    return ax.figure, ax
