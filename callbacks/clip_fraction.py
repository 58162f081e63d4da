"""ClipFractionByLengthCallback: how many responses GSPO's clip removes, by side, response length and minibatch,
with health warnings that name the fix.

Drop-in for any TRL `GRPOTrainer` with `importance_sampling_level="sequence"`:

    trainer.add_callback(ClipFractionByLengthCallback(trainer))

Logged at every logging step, over the responses seen since the previous one and gathered from all processes:
`gspo/clip_frac`, `gspo/clip_frac_low`, `gspo/clip_frac_high`; the same under `/len_{lo}-{hi}` per length bucket;
`gspo/clip_frac/minibatch_{k}` (k = 1 is the on-policy minibatch); `gspo/clip_frac/one_token`, the share of the
clipped off-policy responses that one token clips (`gspo_recipes.loss.one_token_clips`), overall and per length
bucket; with a fixed range, `gspo/clip_suggest/low|high`, the range that would clip `epsilon_target_clip` of the
window's off-policy responses per side. High: s_i > 1 + epsilon_high with A > 0. Low: s_i < 1 - epsilon_low with
A < 0. The health warnings judge nothing while `GSPOTrainer` calibrates the clip range (`epsilon_calibration_steps`),
nor over a window or across windows in which the range changed. Copy this file into your project freely; it needs
gspo-recipes installed.

Only the sequence clip is described: when the trainer's loss applies another (token-level ratios: TRL logs its own
`clip_ratio/*`) or none (SAPO, VESPO, CISPO's cap), the callback logs nothing and gives no health warning.
"""

from __future__ import annotations

import math

import torch
from transformers import TrainerCallback

from gspo_recipes._trl import (
    add_to_trainer_logs,
    applied_clip,
    attach_response_stats,
    has_off_policy_minibatches,
    record_resumed_checkpoint,
    resumed_checkpoint,
)
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.calibration import calibrate_epsilons, length_normalised
from gspo_recipes.stats.health import HealthWarnings
from gspo_recipes.stats.response_stats import bucket_label, checkpoint_folder, off_policy_responses, window_ends
from gspo_recipes.stats.response_stats import length_buckets as make_length_buckets


class ClipFractionByLengthCallback(TrainerCallback):
    """Clip fractions per side, length bucket and minibatch, plus health warnings.

    Args:
        trainer: the `GRPOTrainer` (or `GSPOTrainer`) to watch.
        length_buckets: upper bounds of the length buckets in tokens (default: powers of two up to
            `max_completion_length`).
        quiet_steps: warn when this many consecutive logged windows with off-policy responses clip nothing.
        min_responses: judge the clipped shares of each side over at least this many off-policy responses,
            pooled across logging steps.
    """

    def __init__(
        self, trainer, length_buckets: list[int] | None = None, quiet_steps: int = 20, min_responses: int = 64
    ):
        self.trainer = trainer
        self.stats = attach_response_stats(trainer)
        record_resumed_checkpoint(trainer)  # to restore the open window from the checkpoint train() resumes from
        self.buckets = make_length_buckets(trainer.args.max_completion_length, length_buckets)
        self.warnings = HealthWarnings(quiet_steps, min_responses, length_buckets=self.buckets)
        self.warnings.emit = trainer.accelerator.is_main_process  # windows are gathered: judged alike everywhere
        self.warnings.on_warning = lambda kind, message: record_warning(trainer, kind, message)  # for gspo report
        self.clip_ranges: set[tuple[float, float]] = set()  # the clip ranges the current window's steps trained with
        self.closed_at: int | None = None  # the step whose log the last window went out with

    def describes_the_loss(self) -> bool:
        """Whether the loss applies the sequence clip these statistics count (module docstring)."""
        return applied_clip(self.trainer) == "sequence"

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0:  # resumed: the responses of the window that was open at the checkpoint
            folder = resumed_checkpoint(self.trainer) or checkpoint_folder(args, state)
            self.stats.restore_open_window(folder, state.is_world_process_zero)
        if self.describes_the_loss():
            self.warnings.check_setup(not has_off_policy_minibatches(self.trainer.args))

    def on_save(self, args, state, control, **kwargs):
        self.stats.save_open_window(
            checkpoint_folder(args, state), state.global_step, self.trainer.accelerator, state.is_world_process_zero
        )

    def on_step_end(self, args, state, control, **kwargs):
        # The range this step's loss clipped with (calibration changes it at the start of a step's loss).
        self.clip_ranges.add((self.trainer.epsilon_low, self.trainer.epsilon_high))
        if window_ends(state, control):
            self.close_window(args, state)

    def close_window(self, args, state) -> None:
        """Log the window of responses since the last log (once per step): at `on_step_end` when this step logs, and
        from GSPOTrainer just before a log another callback forced after this one's `on_step_end`."""
        if self.closed_at == state.global_step:
            return
        self.closed_at = state.global_step
        window = self.stats.window(state.global_step, self.trainer.accelerator)  # drained either way
        ranges, self.clip_ranges = self.clip_ranges, set()
        if window["log_s"].numel() == 0 or not self.describes_the_loss():
            return
        add_to_trainer_logs(self.trainer, clip_fractions(window, self.buckets))
        off_policy = off_policy_responses(window, not has_off_policy_minibatches(self.trainer.args))
        add_to_trainer_logs(self.trainer, one_token_fractions(window, self.buckets, off_policy))
        if getattr(self.trainer, "adaptive_clip", None) is None:  # with the controller on, gspo/epsilon_* says it
            add_to_trainer_logs(self.trainer, clip_suggestion(window, off_policy, self.trainer))
        # Judge nothing across a change of range, nor while calibrating.
        if len(ranges) > 1 or calibrating(self.trainer):
            self.warnings.restart()
            return
        self.warnings.check_window(window, args, ranges.pop())


def calibrating(trainer) -> bool:
    """Whether `GSPOTrainer` is still collecting the responses it calibrates the clip range from."""
    calibration = getattr(trainer, "calibration", None)
    return calibration is not None and not calibration.done


def clip_suggestion(window: dict[str, torch.Tensor], off_policy: torch.Tensor, trainer) -> dict[str, float]:
    """`gspo/clip_suggest/low|high`: the range that would have clipped `epsilon_target_clip` of this window's
    off-policy responses per side (the quantile rule `GSPOConfig(epsilon_adaptive=True)` steers toward), so a fixed
    range's drift shows without the loss changing. At L_ref for a length-scaled range. A side needs at least
    1 / target responses, else its quantile is just its most extreme response."""
    target = getattr(trainer.args, "epsilon_target_clip", 0.1)
    reference_length = getattr(trainer, "epsilon_reference_length", None)
    log_s = length_normalised(window["log_s"][off_policy], window["length"][off_policy], reference_length)
    sign = torch.sign(window["advantage"][off_policy])
    low, high = calibrate_epsilons(log_s, sign, target)
    enough = math.ceil(1 / target)
    metrics = {}
    if (sign < 0).sum() >= enough:
        metrics["gspo/clip_suggest/low"] = low
    if (sign > 0).sum() >= enough:
        metrics["gspo/clip_suggest/high"] = high
    return metrics


def clip_fractions(window: dict[str, torch.Tensor], buckets: list[tuple[int, int]]) -> dict[str, float]:
    """The fractions of responses clipped, overall, per length bucket and per minibatch."""

    def fractions(selected: torch.Tensor, suffix: str) -> dict[str, float]:
        count = selected.sum().item()
        if count == 0:
            return {}
        low = window["clipped_low"][selected].sum().item() / count
        high = window["clipped_high"][selected].sum().item() / count
        return {
            f"gspo/clip_frac{suffix}": low + high,
            f"gspo/clip_frac_low{suffix}": low,
            f"gspo/clip_frac_high{suffix}": high,
        }

    metrics = fractions(torch.ones_like(window["log_s"], dtype=torch.bool), "")
    for lo, hi in buckets:
        in_bucket = (window["length"] >= lo) & (window["length"] <= hi)
        metrics.update(fractions(in_bucket, "/" + bucket_label(lo, hi)))
    for k in sorted(set(window["minibatch"].long().tolist())):
        of_k = window["minibatch"] == k
        clipped = window["clipped_low"][of_k] + window["clipped_high"][of_k]
        metrics[f"gspo/clip_frac/minibatch_{k}"] = clipped.mean().item()
    return metrics


def one_token_fractions(
    window: dict[str, torch.Tensor], buckets: list[tuple[int, int]], selected: torch.Tensor
) -> dict[str, float]:
    """The share of the clipped `selected` (off-policy) responses that are one-token clips, overall and per length
    bucket; a bucket (or window) with no clipped response has no share and logs none."""
    clipped = selected & ((window["clipped_low"] + window["clipped_high"]) > 0)
    metrics = {}
    for suffix, in_bucket in [("", torch.ones_like(clipped))] + [
        ("/" + bucket_label(lo, hi), (window["length"] >= lo) & (window["length"] <= hi)) for lo, hi in buckets
    ]:
        counted = clipped & in_bucket
        if counted.any():
            metrics[f"gspo/clip_frac/one_token{suffix}"] = (window["one_token"][counted] > 0).float().mean().item()
    return metrics
