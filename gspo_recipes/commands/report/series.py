"""The series `gspo report` draws, read from a run's files: pure functions over the parsed JSON lines.

Tests and notebooks call these directly; `gspo_recipes.commands.report` re-exports them.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re

import numpy as np

STATE_FILE = "trainer_state.json"

# ---------------------------------------------------------------------------------------------------------- reading


def find_trainer_state(run_dir: str) -> str | None:
    """`RUN_DIR/trainer_state.json` (written by `trainer.save_state()`), else the newest checkpoint's."""
    direct = os.path.join(run_dir, STATE_FILE)
    if os.path.isfile(direct):
        return direct
    checkpoints = []
    for path in glob.glob(os.path.join(run_dir, "checkpoint-*", STATE_FILE)):
        match = re.fullmatch(r"checkpoint-(\d+)", os.path.basename(os.path.dirname(path)))
        if match:
            checkpoints.append((int(match.group(1)), path))
    return max(checkpoints)[1] if checkpoints else None


def read_log_history(path: str) -> list[dict]:
    with open(path) as f:
        return json.load(f).get("log_history", [])


# ---------------------------------------------------------------------------------------------------------- numbers


def clip_fraction_series(lines: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """Per length bucket ("lo-hi") and overall ("all"): steps and the fractions clipped low and high.

    A fraction is of all responses in the bucket at that step (as `gspo/clip_frac_*/len_*`); NaN where the bucket
    was empty.
    """
    series: dict[str, dict[str, list]] = {}

    def add(name, step, responses, low, high):
        entry = series.setdefault(name, {"steps": [], "low": [], "high": []})
        entry["steps"].append(step)
        entry["low"].append(low / responses if responses else math.nan)
        entry["high"].append(high / responses if responses else math.nan)

    for line in lines:
        for bucket in line["buckets"]:
            add(
                f"{bucket['lo']}-{bucket['hi']}",
                line["step"],
                bucket["responses"],
                bucket["clipped_low"],
                bucket["clipped_high"],
            )
        per_k = line["minibatches"].values()
        low, high = sum(m["clipped_low"] for m in per_k), sum(m["clipped_high"] for m in per_k)
        add("all", line["step"], line["responses"], low, high)
    return {
        name: {key: np.asarray(values, dtype=float) for key, values in entry.items()} for name, entry in series.items()
    }


def common_grid_histogram(lines: list[dict], bins: int = 60) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The per-step histograms of log s_i re-binned onto one grid, for a heat map.

    Each line's histogram spans that window's own range, so the edges differ from line to line. Every line's counts
    are placed at its bin centres and re-counted on `bins` equal bins spanning the union of all lines' ranges, then
    divided by the line's total: column j is the share of step j's off-policy responses in each grid bin (a count
    moves by at most half its original bin width). Lines without a histogram (on-policy windows) get a NaN column.
    Returns (steps, grid edges, shares of shape (bins, len(steps))); no steps when no line has a histogram.
    """
    has_histogram = [bool(line.get("counts")) and sum(line["counts"]) > 0 for line in lines]
    if not any(has_histogram):
        return [], np.zeros(0), np.zeros((bins, 0))
    lo = min(line["bin_edges"][0] for line, has in zip(lines, has_histogram) if has)
    hi = max(line["bin_edges"][-1] for line, has in zip(lines, has_histogram) if has)
    grid = np.linspace(lo, hi, bins + 1)
    shares = np.full((bins, len(lines)), np.nan)
    for j, (line, has) in enumerate(zip(lines, has_histogram)):
        if has:
            edges, counts = np.asarray(line["bin_edges"]), np.asarray(line["counts"], dtype=float)
            column, _ = np.histogram((edges[:-1] + edges[1:]) / 2, bins=grid, weights=counts)
            shares[:, j] = column / counts.sum()
    return [line["step"] for line in lines], grid, shares


def spread_by_length(lines: list[dict]) -> list[dict]:
    """Spread of the off-policy log s_i per length bucket, pooled over steps.

    Pooled within-step variance: squared deviations from each (step, bucket) mean, summed over steps and divided by
    (values - groups), over groups of at least two values. Drifts of the mean from step to step therefore do not
    inflate it, and it estimates the same quantity as the per-step `log_s_std` the callback logs. Returns one dict
    per bucket with data: lo, hi, mean_length, std, values.
    """
    pooled = []
    buckets = {(b["lo"], b["hi"]) for line in lines for b in line["buckets"]}
    for lo, hi in sorted(buckets):
        squares, dof, lengths = 0.0, 0, []
        for line in lines:
            off = line.get("off_policy", {})
            pairs = [(v, n) for v, n in zip(off.get("log_s", []), off.get("length", [])) if lo <= n <= hi]
            if not pairs:
                continue
            values = np.array([v for v, _ in pairs])
            lengths += [n for _, n in pairs]
            if len(values) >= 2:
                squares += float(((values - values.mean()) ** 2).sum())
                dof += len(values) - 1
        if dof:
            pooled.append(
                {
                    "lo": lo,
                    "hi": hi,
                    "mean_length": float(np.mean(lengths)),
                    "std": math.sqrt(squares / dof),
                    "values": len(lengths),
                }
            )
    return pooled


def fit_inverse_sqrt(points: list[dict]) -> float | None:
    """c in std = c / sqrt(L), least squares on the log scale weighted by the values per bucket (None without data)."""
    points = [p for p in points if p["std"] > 0]
    if not points:
        return None
    weights = np.array([p["values"] for p in points], dtype=float)
    log_c = np.log([p["std"] * math.sqrt(p["mean_length"]) for p in points])
    return float(math.exp((weights * log_c).sum() / weights.sum()))


# The c / sqrt(L) line is drawn only when the buckets sit within this of it (weighted rms relative deviation): a line
# that misses its points by more would tell the reader a law the run does not follow.
FIT_TOLERANCE = 0.2


def inverse_sqrt_fit_error(points: list[dict], c: float | None) -> float | None:
    """How far the buckets' std sit from c / sqrt(L): the rms of log(std / fitted), weighted by the values per bucket,
    as a relative deviation (0.4: a typical bucket is 40% off the line). None with fewer than two buckets, where any
    c fits and nothing is tested."""
    points = [p for p in points if p["std"] > 0]
    if c is None or len(points) < 2:
        return None
    weights = np.array([p["values"] for p in points], dtype=float)
    residuals = np.log([p["std"] * math.sqrt(p["mean_length"]) / c for p in points])
    return float(math.expm1(math.sqrt((weights * residuals**2).sum() / weights.sum())))


def length_exponent(points: list[dict]) -> float | None:
    """a in std ~ L^a, weighted least squares on the log scale (GSPO's argument expects -0.5); None below two
    distinct lengths."""
    points = [p for p in points if p["std"] > 0]
    if len({p["mean_length"] for p in points}) < 2:
        return None
    weights = np.array([p["values"] for p in points], dtype=float)
    x, y = np.log([p["mean_length"] for p in points]), np.log([p["std"] for p in points])
    x_mean, y_mean = np.average(x, weights=weights), np.average(y, weights=weights)
    return float((weights * (x - x_mean) * (y - y_mean)).sum() / (weights * (x - x_mean) ** 2).sum())


def spread_law(points: list[dict]) -> tuple[float | None, float | None, str]:
    """(c, its fit error, the summary's sentence): c / sqrt(L) fitted through the buckets, and whether it fits."""
    c = fit_inverse_sqrt(points)
    error = inverse_sqrt_fit_error(points, c)
    if c is None:
        return None, None, ""
    if error is None:
        return c, None, f"one length bucket: std {c:.3g} / sqrt(L) there, no law tested (no line drawn)"
    exponent = length_exponent(points)
    if error <= FIT_TOLERANCE:
        return c, error, f"fitted std = {c:.3g} / sqrt(L), rms error {error:.0%} over {len(points)} buckets"
    return (
        c,
        error,
        (
            f"std does not follow c / sqrt(L): the best such line ({c:.3g} / sqrt(L)) is off by {error:.0%} (rms) over "
            f"{len(points)} buckets, so none is drawn; the buckets follow L^{exponent:.2f}"
        ),
    )


def learning_rates_by_step(log_history: list[dict]) -> dict[int, float]:
    return {e["step"]: e["learning_rate"] for e in log_history if "step" in e and "learning_rate" in e}
