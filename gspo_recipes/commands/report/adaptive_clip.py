"""The clip-range part of `gspo report`: the epsilon trajectory beside the per-side clip shares and the target band,
for runs whose range moved (`epsilon_adaptive`, or a calibration). Shares are of the off-policy responses of each
side (A < 0 below 1 - epsilon_low; A > 0 above 1 + epsilon_high), recomputed from each line's own range as
`gspo report`'s health replay does. Pure functions over the parsed lines, plus one figure.
"""

from __future__ import annotations

import math

from gspo_recipes.commands.report.figures import pyplot, save
from gspo_recipes.runfiles.diagnostics import clip_range_of_line, has_responses

ADAPTIVE_CLIP_FIGURE = "gspo_clip_range.png"
SECTION = "adaptive_clip"  # the controller's decisions (gspo_recipes/trainer/adaptive_clip.py)
DEFAULT_TARGET = 0.1


def clip_range_series(lines: list[dict]) -> dict[str, list]:
    """Per line with responses: step, epsilon_low, epsilon_high, and each side's share of off-policy responses clipped
    (NaN where a side had none)."""
    import torch  # here, not at the top: `gspo report --help` must not pay for torch

    from gspo_recipes.loss import clipped_sides

    series = {"steps": [], "epsilon_low": [], "epsilon_high": [], "share_low": [], "share_high": []}
    for line in lines:
        if not has_responses(line):
            continue
        off = line["off_policy"]
        log_s = torch.tensor(off["log_s"], dtype=torch.float64)
        sign = torch.tensor(off["advantage_sign"], dtype=torch.float64)
        lengths = torch.tensor(off.get("length", [1] * len(off["log_s"])), dtype=torch.float64)
        low, high = clipped_sides(log_s, sign, *clip_range_of_line(line, lengths))
        negative, positive = sign < 0, sign > 0
        series["steps"].append(line["step"])
        series["epsilon_low"].append(line["epsilon_low"])
        series["epsilon_high"].append(line["epsilon_high"])
        series["share_low"].append(low[negative].double().mean().item() if negative.any() else math.nan)
        series["share_high"].append(high[positive].double().mean().item() if positive.any() else math.nan)
    return series


def decisions(lines: list[dict]) -> list[dict]:
    return [decision for line in lines for decision in line.get(SECTION) or []]


def plot_adaptive_clip(lines: list[dict], path: str) -> bool:
    """Draw the figure when the run's range moved or the controller decided; False (nothing drawn) otherwise."""
    series = clip_range_series(lines)
    made = decisions(lines)
    ranges = set(zip(series["epsilon_low"], series["epsilon_high"]))
    if not made and len(ranges) < 2:
        return False
    target = made[0]["target"] if made else DEFAULT_TARGET
    plt = pyplot()
    fig, (ax_eps, ax_share) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    ax_eps.semilogy(series["steps"], series["epsilon_low"], "b-", label="epsilon_low")
    ax_eps.semilogy(series["steps"], series["epsilon_high"], "r-", label="epsilon_high")
    frozen = [d["step"] for d in made if d.get("frozen")]
    if frozen:
        ax_eps.plot(frozen, [series["epsilon_high"][0]] * len(frozen), "kx", label="frozen decision")
    ax_eps.set(xlabel="step", ylabel="epsilon (at L_ref when length-scaled)", title="clip range")
    ax_eps.legend(fontsize=8)
    ax_share.plot(series["steps"], series["share_low"], "b.-", label="low (A < 0)")
    ax_share.plot(series["steps"], series["share_high"], "r.-", label="high (A > 0)")
    ax_share.axhspan(target / 1.5, target * 1.5, color="g", alpha=0.15, label=f"dead band around {target:.0%}")
    ax_share.axhline(target, color="g", lw=0.8)
    ax_share.set(xlabel="step", ylabel="share of the side's off-policy responses", ylim=(0, 1), title="clipped")
    ax_share.legend(fontsize=8)
    save(fig, plt, path)
    return True
