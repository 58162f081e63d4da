"""ClipFractionByLengthCallback: how many responses GSPO's clip removes, by side, response length and minibatch,
with health warnings that name the fix.

Drop-in for any TRL `GRPOTrainer` with `importance_sampling_level="sequence"`:

    trainer.add_callback(ClipFractionByLengthCallback(trainer))

Logged at every logging step, over the responses seen since the previous one and gathered from all processes:
`gspo/clip_frac`, `gspo/clip_frac_low`, `gspo/clip_frac_high`; the same under `/len_{lo}-{hi}` per length bucket;
`gspo/clip_frac/minibatch_{k}` (k = 1 is the on-policy minibatch). High: s_i > 1 + epsilon_high with A > 0.
Low: s_i < 1 - epsilon_low with A < 0. Copy this file together with response_stats.py.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

from .response_stats import add_to_trainer_logs, attach_response_stats, bucket_label, is_on_policy_setup
from .response_stats import length_buckets as make_length_buckets

logger = logging.getLogger(__name__)


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

    def __init__(self, trainer, length_buckets: list[int] | None = None, quiet_steps: int = 20,
                 min_responses: int = 64):
        self.trainer = trainer
        self.stats = attach_response_stats(trainer)
        self.buckets = make_length_buckets(trainer.args.max_completion_length, length_buckets)
        self.warnings = HealthWarnings(quiet_steps, min_responses)

    def on_train_begin(self, args, state, control, **kwargs):
        self.warnings.check_setup(is_on_policy_setup(self.trainer))

    def on_step_end(self, args, state, control, **kwargs):
        if not control.should_log:
            return
        window = self.stats.window(state.global_step, self.trainer.accelerator)
        if window["log_s"].numel() == 0:
            return
        add_to_trainer_logs(self.trainer, clip_fractions(window, self.buckets))
        self.warnings.check_window(window, args)


def clip_fractions(window: dict[str, torch.Tensor], buckets: list[tuple[int, int]]) -> dict[str, float]:
    """The fractions of responses clipped, overall, per length bucket and per minibatch."""

    def fractions(selected: torch.Tensor, suffix: str) -> dict[str, float]:
        count = selected.sum().item()
        if count == 0:
            return {}
        low = window["clipped_low"][selected].sum().item() / count
        high = window["clipped_high"][selected].sum().item() / count
        return {f"gspo/clip_frac{suffix}": low + high, f"gspo/clip_frac_low{suffix}": low,
                f"gspo/clip_frac_high{suffix}": high}

    metrics = fractions(torch.ones_like(window["log_s"], dtype=torch.bool), "")
    for lo, hi in buckets:
        in_bucket = (window["length"] >= lo) & (window["length"] <= hi)
        metrics.update(fractions(in_bucket, "/" + bucket_label(lo, hi)))
    for k in sorted(set(window["minibatch"].long().tolist())):
        of_k = window["minibatch"] == k
        clipped = window["clipped_low"][of_k] + window["clipped_high"][of_k]
        metrics[f"gspo/clip_frac/minibatch_{k}"] = clipped.mean().item()
    return metrics


class HealthWarnings:
    """The explainer's failure modes, each warned once per occurrence (again only after it has cleared)."""

    def __init__(self, quiet_steps: int = 20, min_responses: int = 64):
        self.quiet_steps = quiet_steps
        self.min_responses = min_responses
        self.pending: torch.Tensor | None = None  # off-policy [positives, clipped high, negatives, clipped low]
        self.quiet_windows = 0
        self.active: set[str] = set()
        self.history: list[dict] = []  # every warning given: {"kind", "message"}

    def _set(self, kind: str, condition: bool, message: str) -> None:
        if condition and kind not in self.active:
            logger.warning(message)
            self.history.append({"kind": kind, "message": message})
        self.active = (self.active | {kind}) if condition else (self.active - {kind})

    def check_setup(self, on_policy: bool) -> None:
        self._set(
            "on_policy",
            on_policy,
            "GSPO health: training is fully on-policy (one optimizer step per generation batch), so every s_i is "
            "1 and GSPO equals GRPO. Fix: steps_per_generation = 4 x gradient_accumulation_steps.",
        )

    def check_window(self, window: dict[str, torch.Tensor], args) -> None:
        later = window["minibatch"] > 1
        if not later.any():
            return
        positive, negative = later & (window["advantage"] > 0), later & (window["advantage"] < 0)
        self.quiet_windows = self.quiet_windows + 1 if (window["clipped_low"] + window["clipped_high"])[later].sum() == 0 else 0
        self._set(
            "never_clips",
            self.quiet_windows >= self.quiet_steps,
            f"GSPO health: nothing clipped for {self.quiet_windows} consecutive logging steps with off-policy "
            "minibatches: the trust region does nothing. Fix: narrow epsilon/epsilon_high, or take fewer, larger "
            "steps per rollout batch.",
        )
        # The shares are judged over at least `min_responses` responses per side, pooled across logging steps:
        # a handful of responses (logging every step of a small run) would make them flip back and forth.
        counts = torch.tensor([positive.sum(), window["clipped_high"][positive].sum(),
                               negative.sum(), window["clipped_low"][negative].sum()], dtype=torch.float64)
        self.pending = counts if self.pending is None else self.pending + counts
        if min(self.pending[0], self.pending[2]) < self.min_responses:
            return
        high, low = (self.pending[1] / self.pending[0]).item(), (self.pending[3] / self.pending[2]).item()
        self.pending = None
        self._set(
            "wasted_rollouts",
            high > 0.5,
            f"GSPO health: {high:.0%} of positive-advantage responses are clipped on minibatches 2..k, so most "
            f"rollouts are wasted. Fix: widen epsilon_high (now {args.epsilon_high}) or lower the learning rate "
            f"(now {args.learning_rate}); `gspo calibrate` picks a range from data.",
        )
        one_sided = (low > 0.5 and high < 0.05) or (high > 0.5 and low < 0.05)
        self._set(
            "one_sided",
            one_sided,
            f"GSPO health: one side is clipped wholesale (low {low:.0%} of negative-advantage responses, high "
            f"{high:.0%} of positive ones): log s_i is shifted one way, typically a systematic bias between the "
            "sampler's and the trainer's log-probabilities. Fix: recompute the old log-probabilities "
            "(old_logps_source='recompute') or compare both sources before trusting the clip.",
        )


