"""The adaptive clip range (`GSPOConfig(epsilon_adaptive=True)`) against a fixed, calibrated one.

Part A (seconds): synthetic rollouts on `gspo simulate`'s noise model (`sequence_log_ratios`: independent Gaussian
token log-ratios, log s_i their mean), driven through the shipped controller
(`gspo_recipes.stats.adaptive_clip.AdaptiveClipController`). A rollout is 4 minibatches of 64 responses, half with
A > 0; after j = k - 1 optimizer steps a token of minibatch k has moved by lr x j x (A's sign x DRIFT_MEAN +
DRIFT_SPREAD x N(0, 1)), plus the sampler/trainer mismatch (a constant offset and Gaussian noise, on minibatch 1
too). Both arms start from the range calibrated on the first 4 rollouts (as `epsilon_calibration_steps`); the
controller decides after each later rollout. Scenarios, 60 rollouts x 8 seeds each: steady (no drift), a x2.5
learning-rate step at rollout 20, a linear decay to 0.1x, a length drift 16 -> 128 tokens, mismatch noise growing
from 0, a constant sampler offset from rollout 20. Checks (exit 1 when any fails):
  - LR step: >= 90% of the 4-rollout windows after the step have both sides' shares in [target/2, 2 target] with the
    controller, <= 20% with the fixed range; median recovery (rollouts until a rollout has both sides in that band)
    <= 10;
  - steady: <= 5 reversals per side;
  - noise and offset: frozen within 2 decisions of the defect's onset (for the noise, the first rollout whose
    on-policy minibatch would clip more than half the target on a side, by the model's own Gaussian tail), with the
    guard's warning.

Part B (minutes to hours on 2 cores): the embedded GSM8K default (recipes/gsm8k_gspo.py), fixed vs adaptive, with
and without a step of the learning rate (x`--drift-factor`, 2 by default) at step `--drift-step`, `--seeds` seeds;
per arm the per-side clip shares after the drift, the last-50-step reward, held-out pass@1 and the controller's share
of step time.

    python benchmarks/adaptive_clip.py --part A [--plot docs/img/adaptive_clip_a.png]
    python benchmarks/adaptive_clip.py --part B --steps 200 --seeds 3 [--drift-factor 2] [--out DIR] [--plot FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

from gspo_recipes.commands.simulate import sequence_log_ratios
from gspo_recipes.stats.adaptive_clip import AdaptiveClipController, rollout_table
from gspo_recipes.stats.calibration import calibrate_epsilons

TARGET = 0.1
ROLLOUTS, SEEDS, CALIBRATION_ROLLOUTS = 60, 8, 4
MINIBATCHES, PER_MINIBATCH = 4, 64
LENGTH = 32
DRIFT_MEAN, DRIFT_SPREAD = 1e-4, 2e-3  # per token and optimizer step at lr 1
EVENT = 20  # the rollout of the LR step and of the offset's onset
LR_STEP = 2.5
NOISE_END = 5e-3  # per-token mismatch noise reached at the last rollout
OFFSET = 3e-3  # per-token sampler offset, beyond the calibrated range
BAND = (TARGET / 2, 2 * TARGET)


def scenario_settings(name: str, rollout: int) -> dict:
    """lr, mean length, mismatch noise and offset (per token) of one rollout."""
    fraction = rollout / (ROLLOUTS - 1)
    lr, length, noise, offset = 1.0, LENGTH, 0.0, 0.0
    if name == "lr_step" and rollout >= EVENT:
        lr = LR_STEP
    elif name == "lr_decay":
        lr = 1.0 - 0.9 * fraction
    elif name == "length_drift":
        length = round(16 + (128 - 16) * fraction)
    elif name == "mismatch_noise":
        noise = NOISE_END * fraction
    elif name == "offset" and rollout >= EVENT:
        offset = OFFSET
    return dict(lr=lr, length=length, noise=noise, offset=offset)


SCENARIOS = ("steady", "lr_step", "lr_decay", "length_drift", "mismatch_noise", "offset")


def draw_rollout(settings: dict, rng: np.random.Generator) -> dict:
    n = MINIBATCHES * PER_MINIBATCH
    length = settings["length"]
    lengths = rng.integers(max(1, length // 2), length * 3 // 2 + 1, size=n)
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    minibatch = np.repeat(np.arange(1, MINIBATCHES + 1), PER_MINIBATCH)
    steps = settings["lr"] * (minibatch - 1)
    mean = steps * sign * DRIFT_MEAN + settings["offset"]
    spread = np.sqrt((steps * DRIFT_SPREAD) ** 2 + settings["noise"] ** 2)
    log_s = sequence_log_ratios(lengths, mean, spread, rng)
    return dict(log_s=log_s, sign=sign, minibatch=minibatch, lengths=lengths)


def side_counts(rollout: dict, epsilons) -> np.ndarray:
    """[negatives, clipped low, positives, clipped high] over the off-policy responses."""
    off = rollout["minibatch"] > 1
    log_s, sign = rollout["log_s"][off], rollout["sign"][off]
    low, high = math.log1p(-epsilons[0]), math.log1p(epsilons[1])
    return np.array(
        [(sign < 0).sum(), ((sign < 0) & (log_s < low)).sum(), (sign > 0).sum(), ((sign > 0) & (log_s > high)).sum()]
    )


def expected_on_policy_share(rollout: dict, settings: dict, epsilons) -> float:
    """The larger side's expected share clipped on minibatch 1 by the mismatch alone (the model's Gaussian tail)."""
    if settings["noise"] == 0 and settings["offset"] == 0:
        return 0.0
    lengths = rollout["lengths"][rollout["minibatch"] == 1].astype(float)
    sd = settings["noise"] / np.sqrt(lengths)
    low, high = math.log1p(-epsilons[0]), math.log1p(epsilons[1])
    above = np.mean([0.5 * math.erfc((high - settings["offset"]) / (s * math.sqrt(2)) if s else 0.0) for s in sd])
    below = np.mean([0.5 * math.erfc((settings["offset"] - low) / (s * math.sqrt(2)) if s else 0.0) for s in sd])
    if not np.any(sd):
        above, below = float(settings["offset"] > high), float(settings["offset"] < low)
    return max(above, below)


def run_scenario(name: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    settings = [scenario_settings(name, r) for r in range(ROLLOUTS)]
    rollouts = [draw_rollout(s, rng) for s in settings]
    calibration = [r for r in rollouts[:CALIBRATION_ROLLOUTS]]
    off = np.concatenate([r["minibatch"] > 1 for r in calibration])
    log_s = np.concatenate([r["log_s"] for r in calibration])[off]
    sign = np.concatenate([r["sign"] for r in calibration])[off]
    import torch

    start = calibrate_epsilons(torch.tensor(log_s), torch.tensor(sign), TARGET)
    controller = AdaptiveClipController(TARGET, start=start)
    epsilons = start
    trace = {"epsilons": [], "fixed": [], "adaptive": [], "frozen_at": None, "frozen_why": [], "onset": None}
    decision_index = 0
    for r in range(CALIBRATION_ROLLOUTS, ROLLOUTS):
        rollout, setting = rollouts[r], settings[r]
        trace["epsilons"].append(epsilons)
        trace["fixed"].append(side_counts(rollout, start))
        trace["adaptive"].append(side_counts(rollout, epsilons))
        if trace["onset"] is None and expected_on_policy_share(rollout, setting, epsilons) > TARGET / 2:
            trace["onset"] = decision_index  # the decision after this rollout is the first that could see it
        table = rollout_table(rollout["log_s"], rollout["sign"], rollout["minibatch"])
        decision = controller.decide(table, epsilons)
        decision_index += 1
        if decision.frozen and trace["frozen_at"] is None:
            trace["frozen_at"], trace["frozen_why"] = decision_index, sorted(decision.frozen)
        epsilons = decision.epsilons
    trace["reversals"] = dict(controller.reversals)
    trace["start"] = start
    return trace


def shares(counts: np.ndarray) -> tuple[float, float]:
    return counts[1] / max(counts[0], 1), counts[3] / max(counts[2], 1)


def windows_in_band(per_rollout: list[np.ndarray], first: int) -> float:
    """Share of the 4-rollout windows starting at `first` or later with both sides' pooled shares in BAND."""
    hits = []
    for start in range(first, len(per_rollout) - 3):
        low, high = shares(sum(per_rollout[start : start + 4]))
        hits.append(BAND[0] <= low <= BAND[1] and BAND[0] <= high <= BAND[1])
    return float(np.mean(hits))


def recovery(per_rollout: list[np.ndarray], first: int) -> int:
    """Rollouts from `first` until one has both sides in BAND (the rollout itself counted)."""
    for index in range(first, len(per_rollout)):
        low, high = shares(per_rollout[index])
        if BAND[0] <= low <= BAND[1] and BAND[0] <= high <= BAND[1]:
            return index - first + 1
    return len(per_rollout) - first + 1


def part_a(plot: str | None) -> int:
    started = time.perf_counter()
    traces = {name: [run_scenario(name, seed) for seed in range(SEEDS)] for name in SCENARIOS}
    event = EVENT - CALIBRATION_ROLLOUTS  # index of the event rollout among the traced ones
    print(
        f"Part A: target {TARGET:.0%} per side, band {BAND[0]:.0%}-{BAND[1]:.0%}, {SEEDS} seeds x {ROLLOUTS} rollouts"
    )
    print(f"{'scenario':<15} {'in band: adaptive':>17} {'fixed':>6}   {'mean share low/high: adaptive':>30} "
          f"{'fixed':>13}   {'eps end/start':>13} {'reversals':>9}  frozen")  # fmt: skip
    failures = []
    for name, runs in traces.items():
        first = event if name == "lr_step" else 0
        adaptive = [windows_in_band(t["adaptive"], first) for t in runs]
        fixed = [windows_in_band(t["fixed"], first) for t in runs]
        mean_adaptive = np.mean([shares(sum(t["adaptive"][first:])) for t in runs], axis=0)
        mean_fixed = np.mean([shares(sum(t["fixed"][first:])) for t in runs], axis=0)
        ratio = np.median([[e / s for e, s in zip(t["epsilons"][-1], t["start"])] for t in runs], axis=0)
        reversals = max(max(t["reversals"].values()) for t in runs)
        frozen = [t["frozen_at"] for t in runs]
        print(
            f"{name:<15} {np.mean(adaptive):>17.0%} {np.mean(fixed):>6.0%}   "
            f"{mean_adaptive[0]:>20.1%} / {mean_adaptive[1]:>5.1%} {mean_fixed[0]:>6.1%} / {mean_fixed[1]:>5.1%}   "
            f"{ratio[0]:>6.2f}/{ratio[1]:<6.2f} {reversals:>9}  "
            + (f"{sum(f is not None for f in frozen)}/{len(frozen)}" if any(f is not None for f in frozen) else "-")
        )
        if name == "lr_step":
            recoveries = [recovery(t["adaptive"], event) for t in runs]
            print(f"{'':<15} recovery after the step (rollouts), per seed: {recoveries}, median "
                  f"{statistics.median(recoveries)}")  # fmt: skip
            if np.mean(adaptive) < 0.9:
                failures.append(f"lr_step: adaptive windows in band {np.mean(adaptive):.0%} < 90%")
            if np.mean(fixed) > 0.2:
                failures.append(f"lr_step: the fixed range stays in band {np.mean(fixed):.0%} > 20% (vacuous)")
            if statistics.median(recoveries) > 10:
                failures.append(f"lr_step: median recovery {statistics.median(recoveries)} > 10 rollouts")
        if name == "steady" and reversals > 5:
            failures.append(f"steady: {reversals} reversals on a side > 5")
        if name in ("mismatch_noise", "offset"):
            # Frozen before the onset (a window's noise above the model's expectation) counts as in time: 0.
            delays = [
                None if t["frozen_at"] is None or t["onset"] is None else max(0, t["frozen_at"] - t["onset"])
                for t in runs
            ]
            why = sorted({w for t in runs for w in t["frozen_why"]})
            signed = [None if t["frozen_at"] is None else t["frozen_at"] - (t["onset"] or 0) for t in runs]
            print(f"{'':<15} decisions from onset to freeze, per seed: {delays} (signed: {signed}); "
                  f"guards: {', '.join(why) or '-'}")  # fmt: skip
            if any(d is None or d > 2 for d in delays):
                failures.append(f"{name}: not frozen within 2 decisions of the onset in every seed ({delays})")
            if not why:
                failures.append(f"{name}: no guard warning")
        elif any(f is not None for f in frozen):
            failures.append(f"{name}: frozen without a defect ({frozen})")
    print(f"({time.perf_counter() - started:.1f} s)")
    if plot:
        plot_part_a(traces, plot)
        print(f"figure: {plot}")
    for failure in failures:
        print(f"FAIL {failure}")
    print("Part A: every check holds" if not failures else f"Part A: {len(failures)} check(s) failed")
    return 0 if not failures else 1


def plot_part_a(traces: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(SCENARIOS), figsize=(3.2 * len(SCENARIOS), 5.5), sharex=True)
    x = np.arange(CALIBRATION_ROLLOUTS, ROLLOUTS)
    for column, (name, runs) in enumerate(traces.items()):
        run = runs[0]
        top, bottom = axes[0, column], axes[1, column]
        eps = np.array(run["epsilons"])
        top.semilogy(x, eps[:, 0], "b-", label="adaptive eps_low")
        top.semilogy(x, eps[:, 1], "r-", label="adaptive eps_high")
        top.axhline(run["start"][0], color="b", ls=":", lw=0.8, label="fixed eps_low")
        top.axhline(run["start"][1], color="r", ls=":", lw=0.8, label="fixed eps_high")
        top.set_title(name, fontsize=9)
        for arm, style in (("adaptive", "-"), ("fixed", ":")):
            per = np.array([shares(c) for c in run[arm]])
            bottom.plot(x, per[:, 0], "b" + style, lw=1, label=f"{arm} low")
            bottom.plot(x, per[:, 1], "r" + style, lw=1, label=f"{arm} high")
        bottom.axhspan(TARGET / 1.5, TARGET * 1.5, color="g", alpha=0.15, label="dead band")
        bottom.axhspan(*BAND, color="g", alpha=0.07)
        bottom.set(ylim=(0, 0.8), xlabel="rollout")
        if run["frozen_at"] is not None:
            for ax in (top, bottom):
                ax.axvline(CALIBRATION_ROLLOUTS + run["frozen_at"], color="k", lw=0.8, ls="--")
    axes[0, 0].set_ylabel("epsilon")
    axes[1, 0].set_ylabel("per-side share clipped")
    axes[0, 0].legend(fontsize=6)
    axes[1, 0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("A", "B"), default="A")
    parser.add_argument("--plot", help="write the part's figure here")
    parser.add_argument("--steps", type=int, default=200, help="Part B: optimizer steps per run")
    parser.add_argument("--drift-step", type=int, default=100, help="Part B: the step the learning rate steps up at")
    parser.add_argument("--drift-factor", type=float, default=2.0, help="Part B: the learning rate's step (x)")
    parser.add_argument("--seeds", type=int, default=3, help="Part B: seeds per arm")
    parser.add_argument("--out", default="adaptive_clip_runs", help="Part B: the runs' folder")
    args = parser.parse_args(argv)
    if args.part == "A":
        return part_a(args.plot)
    from adaptive_clip_part_b import part_b  # the training side: imports TRL, minutes per run

    return part_b(args)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
