"""GSPO's failure modes as warnings that name the fix, judged over windows of per-response statistics.

`ClipFractionByLengthCallback` feeds it during a run; `gspo report` replays it over a run's diagnostics file.
Needs only torch.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


class HealthWarnings:
    """The explainer's failure modes, each warned once per occurrence (again only after it has cleared)."""

    def __init__(self, quiet_steps: int = 20, min_responses: int = 64):
        self.quiet_steps = quiet_steps
        self.min_responses = min_responses
        self.pending: torch.Tensor | None = None  # off-policy [positives, clipped high, negatives, clipped low]
        self.quiet_windows = 0
        self.active: set[str] = set()
        self.history: list[dict] = []  # every warning given: {"kind", "message"}
        self.clip_range: tuple[float, float] | None = None  # (epsilon_low, epsilon_high) of the windows judged
        self.emit = True  # False on all but the main process: each judges the same gathered window, one shows it
        self.on_warning = None  # called as on_warning(kind, message) when a warning fires (run_warnings.py)

    def _set(self, kind: str, condition: bool, message: str) -> None:
        if condition and kind not in self.active:
            if self.emit:
                logger.warning(message)
            self.history.append({"kind": kind, "message": message})
            if self.on_warning is not None:
                self.on_warning(kind, message)
        self.active = (self.active | {kind}) if condition else (self.active - {kind})

    def check_setup(self, on_policy: bool) -> None:
        self._set(
            "on_policy",
            on_policy,
            "GSPO health: training is fully on-policy (one optimizer step per generation batch), so every s_i is "
            "1 and GSPO equals GRPO. Fix: steps_per_generation = 4 x gradient_accumulation_steps.",
        )

    def restart(self) -> None:
        """Forget what the clip judgements pooled so far (after a change of the clip range, or while it is being
        calibrated): responses clipped under one range say nothing about another."""
        self.pending = None
        self.quiet_windows = 0
        self.active -= {"never_clips", "wasted_rollouts", "one_sided"}

    def check_window(
        self, window: dict[str, torch.Tensor], args, clip_range: tuple[float, float] | None = None
    ) -> None:
        """Judge one logging window. `clip_range` (epsilon_low, epsilon_high) in force over the whole window: when it
        differs from the previous window's, the judgement starts afresh from this window."""
        if clip_range is not None and clip_range != self.clip_range:
            if self.clip_range is not None:
                self.restart()
            self.clip_range = clip_range
        later = window["minibatch"] > 1
        if not later.any():
            return
        positive, negative = later & (window["advantage"] > 0), later & (window["advantage"] < 0)
        self.quiet_windows = (
            self.quiet_windows + 1 if (window["clipped_low"] + window["clipped_high"])[later].sum() == 0 else 0
        )
        self._set(
            "never_clips",
            self.quiet_windows >= self.quiet_steps,
            f"GSPO health: nothing clipped for {self.quiet_windows} consecutive logging steps with off-policy "
            "minibatches: the trust region does nothing. Fix: narrow epsilon/epsilon_high, or take fewer, larger "
            "steps per rollout batch.",
        )
        # The shares are judged over at least `min_responses` responses per side, pooled across logging steps:
        # a handful of responses (logging every step of a small run) would make them flip back and forth.
        counts = torch.tensor(
            [
                positive.sum(),
                window["clipped_high"][positive].sum(),
                negative.sum(),
                window["clipped_low"][negative].sum(),
            ],
            dtype=torch.float64,
        )
        self.pending = counts if self.pending is None else self.pending + counts
        if min(self.pending[0], self.pending[2]) < self.min_responses:
            return
        high, low = (self.pending[1] / self.pending[0]).item(), (self.pending[3] / self.pending[2]).item()
        self.pending = None
        # The range in force (the trainer's, after any calibration), not the configured one.
        epsilon_high = self.clip_range[1] if self.clip_range is not None else args.epsilon_high
        self._set(
            "wasted_rollouts",
            high > 0.5,
            f"GSPO health: {high:.0%} of positive-advantage responses are clipped on minibatches 2..k, so most "
            f"rollouts are wasted. Fix: widen epsilon_high (now {epsilon_high:g}) or lower the learning rate "
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
