"""`GSPOTrainer`: TRL's `GRPOTrainer` with the GSPO loss, GSPO-token for per-token advantages, and per-response
statistics for the diagnostics callbacks.

Only `_compute_loss` changes, and only for the GSPO setting (sequence ratios, `loss_type="grpo"`). There it differs
from TRL's own loss in three ways:
- GSPO-token: with advantages of shape (B, T) each token's gradient is s_i * A_t * grad log pi(y_t) (the paper's
  stop-gradient form). TRL's main trainer broadcasts a sequence ratio against (B, T) advantages, which gives every
  token the response's mean advantage times the mean gradient instead.
- The mean log-ratio is clamped before `exp`, so no response produces inf or NaN.
- Responses with no completion tokens (for example truncated ones under `mask_truncated_completions`) neither
  count in the mean over responses nor move the loss.
For response-level advantages the loss and its gradient are otherwise TRL's (tests/test_trainer.py checks it).
"""

from __future__ import annotations

import logging
import os

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from .calibrate import EpsilonCalibration
from .callbacks.response_stats import ResponseStats, minibatch_index
from .config import GSPOConfig
from .loss import clipped_sides, gspo_token_objective, mean_over_responses, response_advantage
from .sampler_logps import SamplerLogps

logger = logging.getLogger(__name__)

# Model inputs beyond ids and mask that TRL passes through to the forward pass (vision-language models).
MULTIMODAL_INPUTS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


class GSPOTrainer(GRPOTrainer):
    """`trl.GRPOTrainer` for GSPO. Takes exactly the arguments of `GRPOTrainer`; `args` defaults to `GSPOConfig`."""

    _tag_names = ["trl", "gspo", "gspo-recipes"]
    _name = "GSPO"
    records_response_stats = True  # our loss records into `response_stats` once attach_response_stats sets it

    def __init__(self, model, reward_funcs, args: GSPOConfig | None = None, *pos, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = GSPOConfig(f"{name.split('/')[-1]}-GSPO")
        super().__init__(model, reward_funcs, args, *pos, **kwargs)
        self.sampler_logps = SamplerLogps(self)  # old_logps_source, the mismatch monitor, vLLM's IS weight
        self._handed_to_trl = self._features_outside_gspo_loss()
        if self._handed_to_trl:
            if self.importance_sampling_level == "sequence":
                logger.warning(
                    "GSPOTrainer hands the loss to TRL's GRPOTrainer because of %s: the ratio is still "
                    "sequence-level, but GSPO-token (per-token advantages) and the log-ratio clamp are off.",
                    ", ".join(self._handed_to_trl),
                )
            if getattr(args, "epsilon_calibration_steps", 0):
                raise ValueError(
                    "epsilon_calibration_steps works with GSPOTrainer's own loss, which is off because of "
                    f"{', '.join(self._handed_to_trl)}. Remove those settings or set epsilon_calibration_steps=0."
                )
            # TRL's loss on this instance; a diagnostics callback records around it as for a plain GRPOTrainer.
            self._compute_loss = self._trl_loss
            self.records_response_stats = False
        # Per-response statistics are kept only while a consumer (a diagnostics callback) drains them.
        self.response_stats: ResponseStats | None = None
        calibration_steps = getattr(args, "epsilon_calibration_steps", 0)
        self.calibration = EpsilonCalibration(calibration_steps, args.epsilon_target_clip) if calibration_steps else None
        if getattr(args, "gspo_diagnostics", False):
            self._add_diagnostics_callbacks()

    def _add_diagnostics_callbacks(self) -> None:
        from .callbacks import default_callbacks  # imported late: the callbacks import the trainer's helpers

        for callback in default_callbacks(self):
            self.add_callback(callback)

    def _features_outside_gspo_loss(self) -> list[str]:
        """Settings our loss does not implement; with any of them the loss is TRL's own."""
        args = self.args
        reasons = []
        if self.importance_sampling_level != "sequence":
            reasons.append(f"importance_sampling_level='{self.importance_sampling_level}'")
        if self.loss_type != "grpo":
            reasons.append(f"loss_type='{self.loss_type}'")
        if self.top_entropy_quantile < 1.0:
            reasons.append("top_entropy_quantile < 1")
        if self.off_policy_mask_threshold is not None:
            reasons.append("off_policy_mask_threshold")
        if self._entropy_bonus_enabled:
            reasons.append("an entropy bonus")
        if args.delta is not None:
            reasons.append("delta")
        return reasons

    # Old-policy log-probabilities from the sampler, and the mismatch monitor: gspo_recipes/sampler_logps.py.
    def _generate_and_score_completions(self, inputs):
        return self.sampler_logps.generate_and_score(super()._generate_and_score_completions, inputs)

    def _generate(self, prompts):
        return self.sampler_logps.generate(super()._generate, prompts)

    def _generate_single_turn(self, *args, **kwargs):
        return self.sampler_logps.generate_single_turn(super()._generate_single_turn, *args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        return self.sampler_logps.per_token_logps(super()._get_per_token_logps_and_entropies, model, *args, **kwargs)

    # Automatic calibration of the clip range (epsilon_calibration_steps): gspo_recipes/calibrate.py.
    def _calibrate_if_due(self) -> None:
        if self.calibration is None or self.calibration.done or self.state.global_step < self.calibration.steps:
            return
        current = (self.epsilon_low, self.epsilon_high)
        self.epsilon_low, self.epsilon_high = self.calibration.finish(self.accelerator, current)
        logger.warning(
            "Calibrated the clip range after %d optimizer steps to clip %.0f%% of the off-policy responses per side: "
            "epsilon=%.3g, epsilon_high=%.3g (was %.3g, %.3g).",
            self.state.global_step, 100 * self.calibration.target_clip, self.epsilon_low, self.epsilon_high, *current,
        )

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.calibration is not None and self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            self.calibration.save(folder)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.calibration is not None and checkpoint is not None and self.calibration.load(checkpoint):
            if self.calibration.done:
                self.epsilon_low, self.epsilon_high = self.calibration.epsilons

    def _trl_loss(self, model, inputs):
        if inputs["advantages"].dim() == 2:
            raise ValueError(
                "Per-token advantages (GSPO-token) need GSPOTrainer's own loss, which is off because of "
                f"{', '.join(self._handed_to_trl)}. Remove those settings."
            )
        return GRPOTrainer._compute_loss(self, model, inputs)

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            self._calibrate_if_due()
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        per_token_logps, entropies, aux_loss = self._per_token_logps(model, inputs)
        old_per_token_logps = inputs.get("old_per_token_logps")
        if old_per_token_logps is None:  # exactly on-policy: TRL skips the old forward pass
            old_per_token_logps = per_token_logps.detach()
        advantages = inputs["advantages"]

        surrogate, log_s, ratio = gspo_token_objective(
            per_token_logps, old_per_token_logps, advantages, mask, self.epsilon_low, self.epsilon_high
        )
        per_token_loss = -surrogate
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * ratio
            per_token_loss = per_token_loss + self.beta * per_token_kl

        loss = mean_over_responses(per_token_loss, mask)
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather(aux_loss.detach()).mean().item())
        if mode == "train":  # TRL turns off the Trainer's own scaling for gradient accumulation
            loss = loss / self.current_gradient_accumulation_steps

        response_adv = response_advantage(advantages, mask)
        low, high = clipped_sides(log_s, response_adv, self.epsilon_low, self.epsilon_high)
        lengths = mask.sum(-1)
        self._log_loss_metrics(mode, mask, entropies, low, high, lengths, per_token_kl if self.beta else None)
        if mode == "train":
            minibatch = minibatch_index(self)
            if self.response_stats is not None:
                self.response_stats.record(log_s, lengths, response_adv, low, high, minibatch)
            if self.calibration is not None and not self.calibration.done and minibatch > 1:
                self.calibration.collect(log_s, response_adv, lengths > 0)
        return loss

    def _per_token_logps(self, model, inputs):
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        return self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{name: inputs.get(name) for name in MULTIMODAL_INPUTS},
        )

    def _log_loss_metrics(self, mode, mask, entropies, low, high, lengths, per_token_kl) -> None:
        """TRL's metric names, so existing dashboards keep working; clip ratios count responses, as TRL's do."""
        metrics = self._metrics[mode]

        def global_mean(values: torch.Tensor, weights: torch.Tensor) -> float:
            local = torch.stack([(values * weights).sum(), weights.sum()]).float()
            total = self.accelerator.reduce(local, reduction="sum")
            return (total[0] / total[1].clamp(min=1.0)).item()

        token_mask = mask.float()
        if per_token_kl is not None:
            metrics["kl"].append(global_mean(per_token_kl.detach(), token_mask))
        metrics["entropy"].append(global_mean(entropies.detach(), token_mask))
        has_tokens = (lengths > 0).float()
        metrics["clip_ratio/low_mean"].append(global_mean(low.float(), has_tokens))
        metrics["clip_ratio/high_mean"].append(global_mean(high.float(), has_tokens))
        metrics["clip_ratio/region_mean"].append(global_mean((low | high).float(), has_tokens))
        if self.calibration is not None:
            metrics["gspo/epsilon_low"].append(self.epsilon_low)
            metrics["gspo/epsilon_high"].append(self.epsilon_high)
