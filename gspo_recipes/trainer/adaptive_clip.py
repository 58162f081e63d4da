"""The trainer's side of the adaptive clip range (`epsilon_adaptive`; the rule is gspo_recipes/stats/adaptive_clip.py).

The loss records each micro-batch's responses here; at the first micro-step of every generation batch (TRL's rule:
`_step` a multiple of `steps_per_generation * num_iterations`, gspo_recipes/_trl.py) the responses of the rollout
just trained on are gathered from every process and the controller decides the range of the next one, so the range
never changes inside a generation batch. The state, with the responses of a rollout still open, goes into every
checkpoint (`gspo_adaptive_clip.json`).
"""

from __future__ import annotations

import json
import logging
import os

import torch

from gspo_recipes import _trl
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.adaptive_clip import AdaptiveClipController, frozen_message, rollout_table
from gspo_recipes.stats.calibration import length_normalised
from gspo_recipes.stats.health import ONE_TOKEN_OUTLIER_LOG_RATIO
from gspo_recipes.stats.response_stats import gather_columns

logger = logging.getLogger(__name__)

STATE_FILE = "gspo_adaptive_clip.json"
SECTION = "adaptive_clip"  # the decisions in the diagnostics file's lines
FROZEN_WARNING = "adaptive_clip_frozen"


class AdaptiveClipRange:
    def __init__(self, trainer):
        args = trainer.args
        self.trainer = trainer
        self.controller = AdaptiveClipController(
            args.epsilon_target_clip, min_responses=args.epsilon_adaptive_min_responses
        )
        self.rows: list[torch.Tensor] = []  # this process's responses of the open rollout

    def record(self, log_s, lengths, advantages, minibatch: int, one_token=None) -> None:
        kept = lengths > 0
        # With a length-scaled range the controlled epsilons are those at L_ref (composes with epsilon_length_scaling)
        normalised = length_normalised(log_s.detach()[kept], lengths[kept], self.trainer.epsilon_reference_length)
        outliers = None if one_token is None else (one_token.detach()[kept] >= ONE_TOKEN_OUTLIER_LOG_RATIO)
        sign = torch.sign(advantages.detach()[kept]).cpu()
        self.rows.append(rollout_table(normalised.cpu(), sign, minibatch, None if outliers is None else outliers.cpu()))

    def _gathered_rollout(self) -> torch.Tensor:
        """Collective: the open rollout's responses of every process, in process order (alike everywhere)."""
        local = torch.cat(self.rows, dim=1) if self.rows else rollout_table([], [], 1)
        self.rows = []
        accelerator = self.trainer.accelerator
        return gather_columns(local, accelerator) if accelerator.num_processes > 1 else local

    def at_micro_step(self, calibrating: bool) -> None:
        """Call from the loss at every training micro-step, before the loss uses the range."""
        trainer = self.trainer
        if not _trl.starts_generation_batch(trainer):
            return
        rollout = self._gathered_rollout()
        # While calibrating, the start is not known yet. During the learning-rate warm-up the policy barely moves
        # and then moves ever more: a range narrowed to its first steps clipped 92% of a side once it ended (the
        # embedded GSM8K default, benchmarks/adaptive_clip.py Part B), so those rollouts are left out.
        warming_up = trainer.state.global_step < trainer.args.get_warmup_steps(trainer.state.max_steps)
        if calibrating or warming_up or rollout.numel() == 0:
            return
        current = (trainer.epsilon_low, trainer.epsilon_high)
        decision = self.controller.decide(rollout, current, routing_changed=self._routing_changed())
        trainer.epsilon_low, trainer.epsilon_high = decision.epsilons
        metrics = _trl.metric_store(trainer)
        for side, share in decision.shares.items():
            metrics[f"gspo/adaptive/share_{side}"].append(share)
            metrics[f"gspo/adaptive/factor_{side}"].append(decision.factors[side])
        metrics["gspo/adaptive/frozen"].append(float(bool(decision.frozen)))
        sections = trainer.__dict__.setdefault("gspo_diagnostics_sections", {})
        sections.setdefault(SECTION, []).append(
            {
                "step": trainer.state.global_step,
                "target": self.controller.target,
                "epsilons_before": list(current),
                "epsilons": list(decision.epsilons),
                "shares": decision.shares,
                "skipped": decision.skipped,
                "frozen": sorted(decision.frozen),
            }
        )
        if decision.newly_frozen:
            message = frozen_message(decision.newly_frozen)
            record_warning(trainer, FROZEN_WARNING, message)
            if trainer.accelerator.is_main_process:
                logger.warning(message)
        elif trainer.accelerator.is_main_process and decision.epsilons != current:
            logger.info(
                "Adaptive clip range: epsilon=%.3g, epsilon_high=%.3g (was %.3g, %.3g; window shares low %.1f%%, "
                "high %.1f%%).",
                *decision.epsilons,
                *current,
                100 * decision.shares["low"],
                100 * decision.shares["high"],
            )

    def _routing_changed(self) -> float | None:
        """The last step's MoE routing volatility (alike on every process), where replay does not remove it."""
        if getattr(self.trainer.args, "routing_replay", False):
            return None
        return getattr(self.trainer, "routing_changed_frac", None)

    def save(self, folder: str, write: bool) -> None:
        """Every process calls this (the open rollout is gathered); the process with `write` writes the state."""
        accelerator = self.trainer.accelerator
        local = torch.cat(self.rows, dim=1) if self.rows else rollout_table([], [], 1)
        open_rollout = gather_columns(local, accelerator) if accelerator.num_processes > 1 else local
        if not write:
            return
        state = {"controller": self.controller.state_dict(), "open_rollout": open_rollout.tolist()}
        with open(os.path.join(folder, STATE_FILE), "w") as f:
            json.dump(state, f)

    def load(self, folder: str) -> bool:
        """Restore the state; the open rollout's responses go to the main process only, so they count once."""
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            return False
        with open(path) as f:
            state = json.load(f)
        self.controller.load_state_dict(state["controller"])
        table = torch.tensor(state["open_rollout"], dtype=torch.float64).reshape(4, -1)
        self.rows = [table] if self.trainer.accelerator.is_main_process and table.numel() else []
        if self.controller.epsilons is not None:
            self.trainer.epsilon_low, self.trainer.epsilon_high = self.controller.epsilons
        return True
