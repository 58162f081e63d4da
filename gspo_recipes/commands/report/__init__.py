"""`gspo report RUN_DIR`: figures and a text summary from a run's `gspo_diagnostics.jsonl` and `trainer_state.json`.

Writes next to the diagnostics file: the clip fraction per length bucket over steps (one panel per side), a heat map
of log s_i over steps, the spread of log s_i against response length (log-log, with a c/sqrt(L) line fitted through
the points), reward over steps, for MoE runs the routing change per minibatch and per layer
(gspo_recipes/commands/report/routing.py), the groups that carry signal (gspo_recipes/commands/report/groups.py), and
`gspo_report.txt`, the summary printed to the console: the warnings the run gave (recorded in the diagnostics file as
they fired), then the clip health warnings recomputed from the recorded off-policy responses.

The helpers below are pure functions over the parsed JSON lines, so that tests and notebooks can call them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from types import SimpleNamespace

import numpy as np

from gspo_recipes.commands.report.adaptive_clip import ADAPTIVE_CLIP_FIGURE, plot_adaptive_clip
from gspo_recipes.commands.report.figures import plot_clip_fractions, plot_heatmap, plot_reward, plot_spread
from gspo_recipes.commands.report.groups import GROUPS_FIGURE, groups_summary, plot_groups
from gspo_recipes.commands.report.heldout import HELDOUT_FIGURE, heldout_summary, plot_heldout
from gspo_recipes.commands.report.one_token import ONE_TOKEN_FIGURE, one_token_summary, plot_one_token
from gspo_recipes.commands.report.routing import ROUTING_FIGURE, plot_routing, routing_summary
from gspo_recipes.commands.report.series import (  # noqa: F401 (re-exported)
    STATE_FILE,
    clip_fraction_series,
    common_grid_histogram,
    find_trainer_state,
    fit_inverse_sqrt,
    learning_rates_by_step,
    read_log_history,
    spread_by_length,
    spread_law,
)
from gspo_recipes.runfiles.diagnostics import DIAGNOSTICS_FILE, has_responses, read_diagnostics
from gspo_recipes.runfiles.output_dir import remove_report
from gspo_recipes.runfiles.run_warnings import recorded_warnings

SUMMARY_FILE = "gspo_report.txt"
INSTALL_HINT = "pip install 'gspo-recipes[report]'"
FIGURES = {
    "clip": "gspo_clip_fraction_by_length.png",
    "heatmap": "gspo_log_s_heatmap.png",
    "spread": "gspo_log_s_spread_vs_length.png",
    "reward": "gspo_reward.png",
}


def health_warnings(
    lines: list[dict], learning_rates: dict[int, float] | None = None, quiet_steps: int = 20
) -> list[dict]:
    """The clip callback's health warnings, replayed over the recorded off-policy responses: {step, kind, message}.

    Clips are recomputed from the rounded log s_i and the line's epsilons (high: s_i > 1 + epsilon_high with A > 0;
    low: s_i < 1 - epsilon_low with A < 0), and all values count as minibatch 2. As in the run, a window recorded
    while the clip range was being calibrated, or whose range changed within it, is not judged and restarts the
    judgement, and so does a change of range between windows; a window whose loss applied another clip than the
    sequence clip (`applied_clip`: token-level ratios, SAPO, ...) gets no clip warning at all. The on-policy warning
    is given (at the first step) when no window ever held a minibatch after the first. Lines written before these
    fields existed count as sequence-clip windows under one range. Lines with only sections are skipped.
    """
    import torch

    from gspo_recipes.loss import clipped_sides
    from gspo_recipes.runfiles.diagnostics import clip_range_of_line
    from gspo_recipes.stats.health import HealthWarnings

    learning_rates = learning_rates or {}
    buckets = [(b["lo"], b["hi"]) for b in lines[0]["buckets"]] if lines else []
    health = HealthWarnings(quiet_steps, length_buckets=buckets or None)
    found = []
    quiet_logger = logging.getLogger(HealthWarnings.__module__)
    level = quiet_logger.level
    quiet_logger.setLevel(logging.ERROR)  # the report prints them itself
    lines = [line for line in lines if has_responses(line) and line.get("applied_clip", "sequence") == "sequence"]
    try:
        if lines and not any(int(k) > 1 for line in lines for k in line["minibatches"]):
            health.check_setup(on_policy=True)
            found.append({"step": lines[0]["step"], **health.history[-1]})
        for line in lines:
            if line.get("calibrating") or line.get("clip_range_changed"):  # judged nothing in the run either
                health.restart()
                continue
            off = line["off_policy"]
            log_s = torch.tensor(off["log_s"], dtype=torch.float64)
            sign = torch.tensor(off["advantage_sign"], dtype=torch.float64)
            length = torch.tensor(off["length"], dtype=torch.float64)
            clipped_low, clipped_high = clipped_sides(log_s, sign, *clip_range_of_line(line, length))
            window = {
                "log_s": log_s,
                "length": length,
                # The advantages where the line holds them (the length check correlates them), else their signs.
                "advantage": torch.tensor(off["advantage"], dtype=torch.float64) if "advantage" in off else sign,
                "clipped_low": clipped_low.double(),
                "clipped_high": clipped_high.double(),
                "minibatch": torch.full_like(log_s, 2.0),
            }
            if "one_token" in off:  # files from before the field: the one-token check is not replayed
                window["one_token"] = torch.tensor(off["one_token"], dtype=torch.float64)
            args = SimpleNamespace(
                epsilon=line["epsilon_low"],
                epsilon_high=line["epsilon_high"],
                learning_rate=learning_rates.get(line["step"], "unknown"),
                epsilon_length_scaling=line.get("epsilon_reference_length") is not None,
            )
            before = len(health.history)
            health.check_window(window, args, (line["epsilon_low"], line["epsilon_high"]))
            found += [{"step": line["step"], **w} for w in health.history[before:]]
    finally:
        quiet_logger.setLevel(level)
    return found


# ---------------------------------------------------------------------------------------------------------- summary


def length_scaling_note(lines: list[dict]) -> str:
    """How the range was applied when the run scaled it with length (epsilon_length_scaling), else nothing."""
    references = sorted({line["epsilon_reference_length"] for line in lines if line.get("epsilon_reference_length")})
    if not references:
        return ""
    return f", length-scaled: x sqrt(L_ref / L) per response, L_ref = {', '.join(map(str, references))}"


def summarize(
    run_dir: str,
    lines: list[dict],
    warnings: list[dict],
    spread: list[dict],
    figures: list[str],
    notes: list[str],
    recorded: list[dict] | None = None,
) -> str:
    """The text of gspo_report.txt. `lines`: the lines with responses; `warnings`: the replayed clip warnings;
    `recorded`: the warnings the run itself gave (`recorded_warnings`)."""
    out = [f"GSPO report: {run_dir}"]
    out += warning_list(recorded or [], warnings)
    if not lines:
        out.append("responses: none recorded (the diagnostics file holds only sections)")
        return "\n".join(out + notes)
    steps = [line["step"] for line in lines]
    responses = sum(line["responses"] for line in lines)
    per_k: dict[int, list[int]] = {}
    for line in lines:
        for k, m in line["minibatches"].items():
            totals = per_k.setdefault(int(k), [0, 0, 0])
            totals[0] += m["responses"]
            totals[1] += m["clipped_low"]
            totals[2] += m["clipped_high"]
    low, high = sum(t[1] for t in per_k.values()), sum(t[2] for t in per_k.values())
    eps = {(line["epsilon_low"], line["epsilon_high"]) for line in lines}
    out.append(
        f"steps {steps[0]}-{steps[-1]} ({len(lines)} logged windows), {responses} responses; clip range "
        + ", ".join(f"[1 - {lo:g}, 1 + {hi:g}]" for lo, hi in sorted(eps))
        + length_scaling_note(lines)
    )
    if responses:
        out.append(f"clip fraction: low {low / responses:.1%}, high {high / responses:.1%} of all responses")
    out.append("clip fraction by minibatch (1 is on-policy):")
    for k, (n, lo_k, hi_k) in sorted(per_k.items()):
        out.append(
            f"  {k}: {(lo_k + hi_k) / max(n, 1):.1%} (low {lo_k / max(n, 1):.1%}, high {hi_k / max(n, 1):.1%})"
            f" of {n} responses"
        )
    values = np.array([v for line in lines for v in line["off_policy"]["log_s"]])
    if values.size:
        p05, p50, p95 = np.quantile(values, [0.05, 0.5, 0.95])
        out.append(
            f"log s_i over {values.size} off-policy responses: mean {values.mean():.3g}, "
            f"std {values.std():.3g}, p05 {p05:.3g}, median {p50:.3g}, p95 {p95:.3g}"
        )
        for p in spread:
            out.append(
                f"  length {p['lo']}-{p['hi']}: std {p['std']:.3g} (pooled within steps) over {p['values']} "
                f"responses, mean length {p['mean_length']:.1f}"
            )
        law = spread_law(spread)[2]
        if law:
            out.append(f"  {law}")
    else:
        out.append("log s_i: no off-policy responses recorded (every window was on-policy)")
    out.append("figures:" if figures else "figures: none written")
    out += [f"  {path}" for path in figures]
    out += notes
    return "\n".join(out)


def warning_list(recorded: list[dict], replayed: list[dict]) -> list[str]:
    """Two lists: what the run warned as it trained (every warner records into the diagnostics file), and the clip
    health warnings this report recomputes from the recorded responses (also for runs that recorded none)."""
    out = ["warnings the run gave (recorded as they fired):" if recorded else "warnings the run gave: none recorded"]
    out += [f"  step {w['step']} [{w['kind']}]: {w['message']}" for w in recorded]
    out.append(
        "replayed clip health warnings (recomputed here from the recorded off-policy responses):"
        if replayed
        else "replayed clip health warnings: none"
    )
    out += [f"  step {w['step']} [{w['kind']}]: {w['message']}" for w in replayed]
    return out


# ---------------------------------------------------------------------------------------------------------- command


def report(run_dir: str, bins: int = 60, quiet_steps: int = 20) -> int:
    """Write the figures and `gspo_report.txt` into `run_dir` and print the summary. Returns the exit code:
    0 on success, 1 when matplotlib is missing (the summary is still written), 2 without a diagnostics file."""
    path = os.path.join(run_dir, DIAGNOSTICS_FILE)
    if not os.path.isfile(path):
        missing = "no such directory" if not os.path.isdir(run_dir) else f"no {DIAGNOSTICS_FILE} there"
        print(
            f"gspo report: looked for {path}: {missing}. GSPOTrainer writes {DIAGNOSTICS_FILE} into its "
            "output_dir (with gspo_diagnostics=True, the default); for a plain GRPOTrainer add "
            "ClipFractionByLengthCallback and LogRatioHistogramCallback from gspo_recipes.callbacks.",
            file=sys.stderr,
        )
        return 2
    every_line = read_diagnostics(path)
    lines = [line for line in every_line if has_responses(line)]  # sections-only lines feed the sections' parts
    if not every_line:
        print(
            f"gspo report: {path} holds no diagnostics lines yet (they are written at each logging step).",
            file=sys.stderr,
        )
        return 2
    state = find_trainer_state(run_dir)
    log_history = read_log_history(state) if state else []
    notes = [f"trainer state: {state}"] if state else []
    warnings = health_warnings(lines, learning_rates_by_step(log_history), quiet_steps)
    spread = spread_by_length(lines)
    figures, code = [], 0
    # The figures of an earlier report are removed, not left beside these: a figure this run no longer draws (no
    # held-out evaluation now, say) would otherwise be read as this run's.
    remove_report(run_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        notes.append(f"figures skipped: matplotlib is not installed. Install it with: {INSTALL_HINT}")
        print(f"gspo report: the figures need matplotlib: {INSTALL_HINT}", file=sys.stderr)
        code = 1
    else:
        target = {key: os.path.join(run_dir, name) for key, name in FIGURES.items()}
        if lines:
            plot_clip_fractions(clip_fraction_series(lines), target["clip"])
            plot_heatmap(*common_grid_histogram(lines, bins), lines, target["heatmap"])
            plot_spread(spread, target["spread"], *spread_law(spread))
            figures = [target["clip"], target["heatmap"], target["spread"]]
        if plot_reward(log_history, target["reward"]):
            figures.append(target["reward"])
        elif state:
            notes.append(f"reward figure skipped: no 'reward' entries in the log_history of {state}")
        if plot_routing(every_line, os.path.join(run_dir, ROUTING_FIGURE)):  # MoE runs only
            figures.append(os.path.join(run_dir, ROUTING_FIGURE))
        if plot_groups(every_line, os.path.join(run_dir, GROUPS_FIGURE)):  # gspo/groups/* (GSPOTrainer runs)
            figures.append(os.path.join(run_dir, GROUPS_FIGURE))
        if plot_one_token(lines, os.path.join(run_dir, ONE_TOKEN_FIGURE)):  # files with one-token counts
            figures.append(os.path.join(run_dir, ONE_TOKEN_FIGURE))
        if plot_heldout(every_line, log_history, os.path.join(run_dir, HELDOUT_FIGURE)):  # HeldoutEvalCallback runs
            figures.append(os.path.join(run_dir, HELDOUT_FIGURE))
        if plot_adaptive_clip(lines, os.path.join(run_dir, ADAPTIVE_CLIP_FIGURE)):  # runs whose range moved
            figures.append(os.path.join(run_dir, ADAPTIVE_CLIP_FIGURE))
    if not state:
        notes.append(
            f"reward figure skipped: no {STATE_FILE} in {run_dir} or its checkpoint-* folders (the "
            "Trainer writes it with each checkpoint, or call trainer.save_state()); the health warnings "
            "show the learning rate as unknown"
        )
    notes = (
        routing_summary(every_line)
        + groups_summary(every_line)
        + one_token_summary(lines)
        + heldout_summary(every_line)
    ) + notes
    summary = summarize(run_dir, lines, warnings, spread, figures, notes, recorded_warnings(every_line))
    summary_path = os.path.join(run_dir, SUMMARY_FILE)
    with open(summary_path, "w") as f:
        f.write(summary + "\n")
    print(summary)
    print(f"summary written to {summary_path}")
    return code


def run(args: argparse.Namespace) -> int:
    return report(args.run_dir, bins=args.bins, quiet_steps=args.quiet_steps)


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report",
        help="figures and a text summary (with health warnings) from a run's gspo_diagnostics.jsonl",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's output_dir, holding gspo_diagnostics.jsonl")
    parser.add_argument("--bins", type=int, default=60, help="bins of the common grid of the log s_i heat map")
    parser.add_argument(
        "--quiet-steps",
        type=int,
        default=20,
        help="windows that clip nothing before the 'trust region does nothing' warning",
    )
    parser.set_defaults(func=run)
    return parser
