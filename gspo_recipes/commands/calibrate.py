"""`gspo calibrate RUN_DIR --target-clip 0.1`: choose the clip range from a run's off-policy log s_i.

Reads RUN_DIR/gspo_diagnostics.jsonl and applies the same rule as the trainer's automatic calibration
(gspo_recipes/stats/calibration.py): per side, the epsilon that clips the target fraction of the responses that side can
clip (epsilon_high from the responses with A > 0, epsilon_low from those with A < 0).

`--length-scaled [--reference-length L]` chooses the length-scaled range instead (`epsilon_length_scaling`): epsilon
and epsilon_high at L_ref from the length-normalised log s_i * sqrt(L / L_ref), so that the target holds at every
length where the 1/sqrt(L) law does; the per-bucket table shows it beside the plain range's.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from gspo_recipes.runfiles.diagnostics import DIAGNOSTICS_FILE, has_responses, read_diagnostics

# torch, the loss and the calibration rule are imported where they are used, so that `gspo calibrate --help` (and
# `gspo --help`, which lists this command) answer without importing torch.
if TYPE_CHECKING:
    import torch


def clip_fraction_by_bucket(log_s, advantage_sign, lengths, eps_low, eps_high, buckets) -> list[dict]:
    """Per (lo, hi) length bucket, the share of the responses with A < 0 that (eps_low, eps_high) clips low and of
    those with A > 0 that it clips high: the same per-side fractions the target is set in."""
    from gspo_recipes.loss import clipped_sides

    low, high = clipped_sides(log_s.double(), advantage_sign, eps_low, eps_high)
    negative, positive = advantage_sign < 0, advantage_sign > 0
    rows = []
    for lo, hi in buckets:
        in_bucket = (lengths >= lo) & (lengths <= hi)
        if in_bucket.any():
            rows.append(
                {
                    "lo": lo,
                    "hi": hi,
                    "responses": int(in_bucket.sum()),
                    "clip_low": _share(low, in_bucket & negative),
                    "clip_high": _share(high, in_bucket & positive),
                }
            )
    return rows


def _share(flags: torch.Tensor, selected: torch.Tensor) -> float:
    count = int(selected.sum())
    return flags[selected].sum().item() / count if count else 0.0


def read_off_policy(path: str, max_step: int | None = None) -> dict:
    """Pool the off-policy log s_i, advantage signs and lengths of a diagnostics file (up to `max_step`)."""
    import torch

    lines = [
        line
        for line in read_diagnostics(path)
        if has_responses(line) and (max_step is None or line["step"] <= max_step)  # not the sections-only lines
    ]
    log_s, sign, length = [], [], []
    for line in lines:
        off = line["off_policy"]
        log_s += off["log_s"]
        sign += off["advantage_sign"]
        length += off["length"]
    return {
        "log_s": torch.tensor(log_s, dtype=torch.float64),
        "sign": torch.tensor(sign),
        "length": torch.tensor(length),
        "steps": [line["step"] for line in lines],
        "buckets": [(b["lo"], b["hi"]) for b in lines[-1]["buckets"]] if lines else [],
        "epsilons": (lines[-1]["epsilon_low"], lines[-1]["epsilon_high"]) if lines else None,
        # The run's own L_ref (None: a plain range), and its max_completion_length (None in files from before it).
        "reference_length": lines[-1].get("epsilon_reference_length") if lines else None,
        "max_completion_length": lines[-1].get("max_completion_length") if lines else None,
    }


def yaml_snippet(eps_low: float, eps_high: float, reference_length: int | None = None) -> str:
    snippet = f"epsilon: {eps_low:.3g}\nepsilon_high: {eps_high:.3g}\n"
    if reference_length is not None:
        snippet += f"epsilon_length_scaling: true\nepsilon_reference_length: {reference_length}\n"
    return snippet


def default_reference_length(data: dict) -> int:
    """L_ref when --reference-length is not given: the run's own, else its max_completion_length (the trainer's
    default), else the end of the last length bucket (which is max_completion_length with the default buckets)."""
    for value in (data["reference_length"], data["max_completion_length"]):
        if value is not None:
            return int(value)
    return int(data["buckets"][-1][1]) if data["buckets"] else int(data["length"].max())


def run(args) -> int:
    import torch

    from gspo_recipes.stats.calibration import calibrate_epsilons, length_normalised
    from gspo_recipes.stats.calibration import nan_to as _zero_nan

    path = os.path.join(args.run_dir, DIAGNOSTICS_FILE)
    if not os.path.exists(path):
        print(
            f"gspo calibrate: no {DIAGNOSTICS_FILE} in {args.run_dir}. GSPOTrainer writes it to its output_dir; on "
            "a plain GRPOTrainer add gspo_recipes.callbacks.LogRatioHistogramCallback."
        )
        return 2
    data = read_off_policy(path, args.max_step)
    if data["log_s"].numel() == 0:
        print(
            f"gspo calibrate: {path} holds no off-policy responses (minibatches 2..k). Run with "
            "steps_per_generation > gradient_accumulation_steps (GSPOConfig's default: 4 minibatches) for a few steps."
        )
        return 2
    reference, plain = None, None
    if args.length_scaled:
        reference = args.reference_length or default_reference_length(data)
    elif args.reference_length is not None:
        print("gspo calibrate: --reference-length is the L_ref of --length-scaled; add --length-scaled.")
        return 2
    eps_low, eps_high = calibrate_epsilons(data["log_s"], data["sign"], args.target_clip)
    if reference is not None:
        plain = (eps_low, eps_high)
        normalised = length_normalised(data["log_s"], data["length"], reference)
        eps_low, eps_high = calibrate_epsilons(normalised, data["sign"], args.target_clip)
    n_pos, n_neg = int((data["sign"] > 0).sum()), int((data["sign"] < 0).sum())
    print(
        f"Off-policy responses: {data['log_s'].numel()} ({n_pos} with A > 0, {n_neg} with A < 0) "
        f"over steps {data['steps'][0]}-{data['steps'][-1]}"
    )
    quantiles = torch.quantile(data["log_s"], torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64)).tolist()
    print(f"log s_i: p05 {quantiles[0]:.3g}  p50 {quantiles[1]:.3g}  p95 {quantiles[2]:.3g}")
    print(f"\nTarget: {args.target_clip:.0%} of the responses clipped on each side")
    if reference is not None:
        print(f"Length-scaled range: response i gets epsilon * sqrt({reference} / L_i); at length {reference}:")
    print(f"  epsilon_low  = {eps_low:.3g}   (range low bound 1 - {eps_low:.3g})")
    print(f"  epsilon_high = {eps_high:.3g}   (range high bound 1 + {eps_high:.3g})")
    for side, value, count in (("low", eps_low, n_neg), ("high", eps_high, n_pos)):
        if math.isnan(value):
            print(f"  No responses with {'A < 0' if side == 'low' else 'A > 0'}: epsilon_{side} cannot be calibrated.")
        elif value == 0.0:
            print(
                f"  epsilon_{side} = 0: log s_i moved the other way, so this side clips less than the target even at 0."
            )
        elif count < 50:
            print(f"  Only {count} responses inform epsilon_{side}: run longer for a steadier value.")
    print_bucket_table(data, _zero_nan(eps_low), _zero_nan(eps_high), reference, plain)
    print("\nPaste into your recipe config (YAML):\n")
    run_low, run_high = data["epsilons"]
    snippet = yaml_snippet(_zero_nan(eps_low, run_low), _zero_nan(eps_high, run_high), reference)
    if reference is None and data["reference_length"] is not None:  # the run was scaled: say the plain one is meant
        snippet += "epsilon_length_scaling: false  # the run used a length-scaled range; --length-scaled keeps one\n"
    print(snippet)
    return 0


def print_bucket_table(data: dict, eps_low: float, eps_high: float, reference, plain) -> None:
    """Per length bucket: the chosen range's clip fractions (per response with a length-scaled one), the plain
    calibrated range's beside them when the chosen one is scaled, and the run's own range's."""
    from gspo_recipes.loss import length_scaled_epsilons
    from gspo_recipes.stats.calibration import nan_to as _zero_nan

    log_s, sign, length, buckets = data["log_s"], data["sign"], data["length"], data["buckets"]

    def table(low, high, run_reference=None) -> dict:
        low, high = length_scaled_epsilons(low, high, length, run_reference)
        return {(r["lo"], r["hi"]): r for r in clip_fraction_by_bucket(log_s, sign, length, low, high, buckets)}

    chosen = table(eps_low, eps_high, reference)
    columns = [("low", "high", chosen)]
    if plain is not None:
        columns.append(("plain low", "plain high", table(_zero_nan(plain[0]), _zero_nan(plain[1]))))
    columns.append(("run low", "run high", table(*data["epsilons"], data["reference_length"])))
    print(
        "\nClip fraction per length bucket with these values"
        + (" (and with the plain range calibrated the same way)" if plain is not None else "")
        + " and with the run's own range, per side as a share of the responses that side can clip:"
    )
    header = "   ".join(f"{a:>10} {b:>10}" for a, b, _ in columns)
    print(f"  {'length':>12} {'responses':>10}   {header}")
    for key, row in chosen.items():
        cells = "   ".join(f"{t[key]['clip_low']:>10.1%} {t[key]['clip_high']:>10.1%}" for _, _, t in columns)
        print(f"  {row['lo']:>5}-{row['hi']:<6} {row['responses']:>10}   {cells}")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="choose epsilon_low/epsilon_high from the log s_i of a short run",
        description="Reads RUN_DIR/gspo_diagnostics.jsonl (off-policy minibatches only) and prints the clip range "
        "that clips a target fraction of responses on each side, with the clip fraction per length bucket it implies "
        "and a YAML snippet.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the output_dir of a GSPO run")
    parser.add_argument(
        "--target-clip", type=float, default=0.1, help="fraction of responses to clip on each side (default 0.1)"
    )
    parser.add_argument("--max-step", type=int, default=None, help="use only the logging steps up to this one")
    parser.add_argument(
        "--length-scaled",
        action="store_true",
        help="choose a length-scaled range (epsilon_length_scaling): epsilon * sqrt(L_ref / L) per response",
    )
    parser.add_argument(
        "--reference-length",
        type=int,
        default=None,
        metavar="L",
        help="with --length-scaled: L_ref, where epsilon holds as printed (default: the run's own, else its "
        "max_completion_length)",
    )
    parser.set_defaults(func=run)


def __getattr__(name):
    # calibrate_epsilons was importable from here when this module imported it at the top; it still is, lazily.
    if name == "calibrate_epsilons":
        from gspo_recipes.stats.calibration import calibrate_epsilons

        return calibrate_epsilons
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
