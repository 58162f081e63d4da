"""The figures of `gspo report` (matplotlib, imported only when a figure is drawn)."""

from __future__ import annotations

import math
import textwrap

import numpy as np


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_clip_fractions(series, path: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, side, rule in zip(axes, ("low", "high"), ("s_i < 1 - eps_low, A < 0", "s_i > 1 + eps_high, A > 0")):
        for name, entry in series.items():
            if name == "all":
                ax.plot(entry["steps"], entry[side], "k--", lw=1.5, label="all lengths")
            elif not np.all(np.isnan(entry[side])):
                ax.plot(entry["steps"], entry[side], "o-", ms=3, label=f"length {name}")
        ax.set(title=f"clipped {side} ({rule})", xlabel="step", ylim=(-0.02, 1.02))
    axes[0].set_ylabel("fraction of responses in the bucket")
    axes[1].legend(fontsize=8)
    save(fig, plt, path)


def plot_heatmap(steps, grid, shares, lines, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if steps:
        centres = np.asarray(steps, dtype=float)
        gaps = np.diff(centres) if len(centres) > 1 else np.ones(1)
        x_edges = np.concatenate(
            [[centres[0] - gaps[0] / 2], (centres[:-1] + centres[1:]) / 2, [centres[-1] + gaps[-1] / 2]]
        )
        empty = np.isnan(shares) | (shares == 0)  # white: no response there, or an on-policy window
        mesh = ax.pcolormesh(x_edges, grid, np.ma.masked_where(empty, shares), cmap="viridis", shading="flat")
        fig.colorbar(mesh, ax=ax, label="share of the step's off-policy responses")
        bounds = (("epsilon_low", -1, "log(1 - eps_low)", "--"), ("epsilon_high", 1, "log(1 + eps_high)", "-"))
        for key, sign, name, style in bounds:
            ax.plot(
                [line["step"] for line in lines],
                # epsilon_low = 1 puts the low bound at s_i = 0: no line (log 0), not a crash
                [math.log1p(sign * line[key]) if sign * line[key] > -1 else math.nan for line in lines],
                "r" + style,
                lw=0.8,
                label=name,
            )
        ax.legend(fontsize=8, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no off-policy responses: every window was on-policy", ha="center", transform=ax.transAxes)
    ax.set(xlabel="step", ylabel="log $s_i$", title="log $s_i$ over steps (re-binned onto a common grid)")
    save(fig, plt, path)


def plot_spread(spread, path: str, c: float | None, error: float | None = None, law: str = "") -> None:
    """The spread of log s_i against length, with the fitted c / sqrt(L) line only where it fits: `error` (its rms
    relative deviation, series.inverse_sqrt_fit_error) within series.FIT_TOLERANCE; else `law` says why not."""
    from matplotlib.ticker import NullFormatter

    from gspo_recipes.commands.report.series import FIT_TOLERANCE

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    points = [p for p in spread if p["std"] > 0]
    if points:
        lengths = np.array([p["mean_length"] for p in points])
        ax.loglog(lengths, [p["std"] for p in points], "o", label="std of log $s_i$ per length bucket")
        for p in points:
            ax.annotate(
                f"n={p['values']}", (p["mean_length"], p["std"]), textcoords="offset points", xytext=(4, 4), fontsize=7
            )
        if c is not None and error is not None and error <= FIT_TOLERANCE:
            span = np.geomspace(max(1.0, lengths.min() / 2), lengths.max() * 2, 50)
            ax.loglog(span, c / np.sqrt(span), "k--", label=f"{c:.3g} / sqrt(L) (fitted, rms error {error:.0%})")
        elif law:  # why no line: in the legend, where the reader looks for it
            ax.plot([], [], " ", label=textwrap.fill(law, 60))
        # Ticks at the buckets' lengths: a log axis spanning less than a decade otherwise labels every minor tick.
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(lengths, [f"{length:.0f}" for length in lengths])
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no off-policy spread to show", ha="center", transform=ax.transAxes)
    ax.set(
        xlabel="response length L (mean in bucket, tokens)",
        ylabel="std of log $s_i$ (pooled within steps)",
        title="spread of log $s_i$ against length",
    )
    save(fig, plt, path)


# The range each of the package's rewards can take, by the name TRL logs it under (rewards/{name}/mean).
REWARD_BOUNDS = {
    **dict.fromkeys(("gsm8k_accuracy", "math_accuracy", "gsm8k_accuracy_lenient", "math_accuracy_lenient"), (0.0, 1.0)),
    **dict.fromkeys(("code_execution", "code_execution_binary", "format_reward", "format_strict_reward"), (0.0, 1.0)),
    "soft_overlong_punishment": (-1.0, 0.0),
}


def reward_bounds(entries: list[dict]) -> tuple[float, float] | None:
    """The range the total reward can take: the sum of its rewards' ranges (TRL's default weights of 1); None when a
    reward's range is unknown or the run logged the reward without its parts."""
    names = {key[len("rewards/") : -len("/mean")] for e in entries for key in e if key.startswith("rewards/")
             and key.endswith("/mean")}  # fmt: skip
    if not names or any(name not in REWARD_BOUNDS for name in names):
        return None
    return sum(REWARD_BOUNDS[n][0] for n in names), sum(REWARD_BOUNDS[n][1] for n in names)


def plot_reward(log_history: list[dict], path: str) -> bool:
    """The mean reward over steps, with the spread over the batch drawn only where it can be: a ±std band clipped to
    the reward's range when that is known (a band past it would show rewards no response can get), else the std as
    its own line."""
    entries = [e for e in log_history if "reward" in e and "step" in e]
    if not entries:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.array([e["step"] for e in entries])
    reward = np.array([e["reward"] for e in entries])
    ax.plot(steps, reward, "o-", ms=3, label="mean reward")
    if all("reward_std" in e for e in entries):
        std = np.array([e["reward_std"] for e in entries])
        bounds = reward_bounds(entries)
        if bounds is not None:
            low, high = np.clip(reward - std, *bounds), np.clip(reward + std, *bounds)
            ax.fill_between(
                steps, low, high, alpha=0.2, label=f"± std over the batch, within [{bounds[0]:g}, {bounds[1]:g}]"
            )
        else:
            ax.plot(steps, std, ":", color="grey", label="std over the batch (the reward's range is unknown)")
    ax.set(xlabel="step", ylabel="reward", title="reward over steps")
    ax.legend(fontsize=8)
    save(fig, plt, path)
    return True


def save(fig, plt, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
