"""`GSPOTrainer`: TRL's `GRPOTrainer` with the GSPO loss, GSPO-token for per-token advantages, and per-response
statistics for the diagnostics callbacks.

Only `_compute_loss` changes, and only for the GSPO setting (sequence ratios, `loss_type="grpo"`); every other loss
type is TRL's own (the README's loss-type table). There it differs from TRL's own loss in these ways:
- GSPO-token: with advantages of shape (B, T) each token's gradient is s_i * A_t * grad log pi(y_t) (the paper's
  stop-gradient form). TRL's main trainer broadcasts a sequence ratio against (B, T) advantages, which gives every
  token the response's mean advantage times the mean gradient instead.
- The mean log-ratio is clamped before `exp`, so no response produces inf or NaN.
- The share masked by each of TRL's loss options (OPSM, top_entropy_quantile, delta) is logged (loss_options.py).
- The loss itself is one call, `gspo_recipes.loss.batch.gspo_batch_loss`; this class only wires TRL's batch to it.
- Opt-in `token_log_ratio_clip`: GMPO's per-token clamp before the mean (`loss.clamp_token_log_ratios`); and for the
  diagnostics, which clipped responses one token clips (`loss.one_token_clips`, from the same log-ratios).
For response-level advantages the loss and its gradient are otherwise TRL's, KL term, entropy bonus, OPSM,
`top_entropy_quantile`, `delta` and the normalisation of `mask_truncated_completions` included (tests/test_trainer.py
and tests/test_loss_options.py check it). What the trainer assumes about TRL's internals is in gspo_recipes/_trl.py.
"""

from __future__ import annotations

import logging
import os

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig, GRPOTrainer

from gspo_recipes import _trl
from gspo_recipes.loss.batch import gspo_batch_loss
from gspo_recipes.loss.objective import zero_where_masked
from gspo_recipes.rewards.math.cost import WARNING_KIND as COST_WARNING
from gspo_recipes.rewards.math.cost import past_bound_message, take_past_bound
from gspo_recipes.rewards.math.golds import WARNING_KIND as GOLD_WARNING
from gspo_recipes.rewards.math.golds import take_unreadable_golds, unreadable_gold_message
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.sampler import SamplerLogprobs
from gspo_recipes.sampler.sampling_mask import KEPT_IDS_KEY
from gspo_recipes.stats.calibration import EpsilonCalibration
from gspo_recipes.stats.response_stats import window_ends
from gspo_recipes.trainer.config import GSPOConfig
from gspo_recipes.trainer.dynamic_sampling import FILLER_KEY
from gspo_recipes.trainer.engine import unengaged_engine, vllm_server_refusal
from gspo_recipes.trainer.gloo_exit import end_gloo_process_group_at_exit
from gspo_recipes.trainer.group_health import GroupHealth
from gspo_recipes.trainer.grpo_conversion import from_grpo_config
from gspo_recipes.trainer.loss_options import add_entropy_bonus, masked_shares, policy_masks
from gspo_recipes.trainer.reward_sandbox import check_reward_sandboxes, record_sandbox_notes

logger = logging.getLogger(__name__)


class GSPOTrainer(GRPOTrainer):
    """`trl.GRPOTrainer` for GSPO. Takes exactly the arguments of `GRPOTrainer`; `args` defaults to `GSPOConfig`, and
    a plain `GRPOConfig` is converted to one (with a warning naming every GRPO default replaced by GSPO's)."""

    _tag_names = ["trl", "gspo", "gspo-recipes"]
    _name = "GSPO"
    records_response_stats = True  # our loss records into `response_stats` once attach_response_stats sets it

    def __init__(
        self,
        model,
        reward_funcs=None,
        args=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        tools=None,
        rollout_func=None,
        environment_factory=None,
    ):
        # A code reward that cannot confine model code refuses here, before any model is loaded.
        sandbox_notes = check_reward_sandboxes(reward_funcs)
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = GSPOConfig(f"{name.split('/')[-1]}-GSPO")
        elif isinstance(args, GRPOConfig) and not isinstance(args, GSPOConfig):
            args = from_grpo_config(args)
        server_refusal = vllm_server_refusal(args)  # before TRL loads a model named by path, or waits for a server
        if server_refusal:
            raise ValueError(server_refusal)
        super().__init__(
            model,
            reward_funcs,
            args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
            tools=tools,
            rollout_func=rollout_func,
            environment_factory=environment_factory,
        )
        unengaged = unengaged_engine(str(self.accelerator.distributed_type).split(".")[-1])
        if unengaged is not None and self.accelerator.is_main_process:  # fsdp.yaml on CPU processes
            logger.warning(unengaged)
        record_sandbox_notes(self, sandbox_notes)  # a weaker sandbox, asked for: said in every diagnostics file
        # The clip the loss applies: "sequence", "token" or None; clip statistics and warnings consult it.
        self.applied_clip = _trl.applied_clip(self)
        self.sampler_logprobs = SamplerLogprobs(self)  # old_logps_source, the mismatch monitor, vLLM's IS weight
        self._handed_to_trl = self._features_outside_gspo_loss()
        if self._handed_to_trl:
            self._hand_loss_to_trl(args)
        # Per-response statistics are kept only while a consumer (a diagnostics callback) drains them.
        self.response_stats = None
        self._clip_counts: dict[str, torch.Tensor] = {}  # per mode: clipped low, high, either, responses this window
        # L_ref of the length-scaled clip range (epsilon_length_scaling), None for the plain range: every statistic
        # that judges clipping reads it here (length_scaled_epsilons).
        self.epsilon_reference_length = args.resolved_epsilon_reference_length
        steps = args.epsilon_calibration_steps
        self.calibration = (
            EpsilonCalibration(steps, args.epsilon_target_clip, reference_length=self.epsilon_reference_length)
            if steps
            else None
        )
        self.adaptive_clip = None  # epsilon_adaptive: the range follows the run (trainer/adaptive_clip.py)
        if getattr(args, "epsilon_adaptive", False):
            from gspo_recipes.trainer.adaptive_clip import AdaptiveClipRange

            self.adaptive_clip = AdaptiveClipRange(self)
        # Groups that carry signal: gspo/groups/* always, dynamic sampling when asked (trainer/dynamic_sampling.py)
        self.group_health = GroupHealth(self)
        self.dynamic_sampler = None
        if getattr(args, "dynamic_sampling", False):
            from gspo_recipes.trainer.dynamic_sampling import DynamicSampler

            self.dynamic_sampler = DynamicSampler(self)
        if getattr(args, "routing_replay", False):  # refuses dense models and routers it cannot replay exactly
            _trl.attach_routing(self, replay=True)
        if args.gspo_diagnostics:
            from gspo_recipes.callbacks import default_callbacks  # the callbacks sit above the trainer: imported on use

            for callback in default_callbacks(self):
                self.add_callback(callback)

    def _features_outside_gspo_loss(self) -> list[str]:
        """Settings our loss does not implement; with any of them the loss is TRL's own."""
        reasons = []
        if self.importance_sampling_level != "sequence":
            reasons.append(f"importance_sampling_level='{self.importance_sampling_level}'")
        if self.loss_type != "grpo":
            reasons.append(f"loss_type='{self.loss_type}'")
        return reasons

    def _hand_loss_to_trl(self, args) -> None:
        if self.importance_sampling_level == "sequence":
            logger.warning(
                "GSPOTrainer hands the loss to TRL's GRPOTrainer because of %s: the ratio is still sequence-level, but "
                "GSPO-token (per-token advantages) and the log-ratio clamp are off.",
                ", ".join(self._handed_to_trl),
            )
        if getattr(args, "token_log_ratio_clip", None) is not None:  # GSPOConfig refuses it first; belt and braces
            raise ValueError(
                "token_log_ratio_clip clamps token log-ratios in GSPOTrainer's own loss, which is off because of "
                f"{', '.join(self._handed_to_trl)}. Remove those settings or set token_log_ratio_clip=None."
            )
        if getattr(args, "epsilon_length_scaling", False):
            raise ValueError(
                "epsilon_length_scaling works with GSPOTrainer's own loss, which is off because of "
                f"{', '.join(self._handed_to_trl)}: TRL's loss would clip with the plain range. Remove those settings "
                "or set epsilon_length_scaling=False."
            )
        if args.epsilon_calibration_steps:
            raise ValueError(
                "epsilon_calibration_steps works with GSPOTrainer's own loss, which is off because of "
                f"{', '.join(self._handed_to_trl)}. Remove those settings or set epsilon_calibration_steps=0."
            )
        if getattr(args, "epsilon_adaptive", False):
            raise ValueError(
                "epsilon_adaptive controls GSPOTrainer's own loss, which is off because of "
                f"{', '.join(self._handed_to_trl)}. Remove those settings or set epsilon_adaptive=False."
            )
        # TRL's loss on this instance; a diagnostics callback records around it as for a plain GRPOTrainer.
        self._compute_loss = self._trl_loss
        self.records_response_stats = False

    # Generation side, only for the sampler features (gspo_recipes/sampler/; hooks listed in gspo_recipes/_trl.py).
    def _generate_and_score_completions(self, inputs):
        sampler = self.dynamic_sampler
        if sampler is not None and sampler.should_fill():  # its rounds call this hook again, each a plain round
            return sampler.fill(inputs)
        output = self.sampler_logprobs.generate_and_score(super()._generate_and_score_completions, inputs)
        self.group_health.after_round(filling=sampler is not None and sampler.filling)
        return output

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        take_unreadable_golds()  # only this batch's rows count: forget what rewards called elsewhere noted
        take_past_bound()
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.group_health.capture(rewards)  # every process's rows: the signal reward of each group
        rows, examples = take_unreadable_golds()  # the math rewards' None rows, said in the diagnostics file
        if rows:
            record_warning(self, GOLD_WARNING, unreadable_gold_message(rows, examples))
        items, examples = take_past_bound()  # math answers scored 0 past the cost bound, before any sympy work
        if items:
            record_warning(self, COST_WARNING, past_bound_message(items, examples))
        return rewards

    def _generate(self, prompts):
        return self.sampler_logprobs.generate(super()._generate, prompts)

    def _generate_single_turn(self, *args, **kwargs):
        return self.sampler_logprobs.generate_single_turn(super()._generate_single_turn, *args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        original = super()._get_per_token_logps_and_entropies
        return self.sampler_logprobs.per_token_logps(original, model, *args, **kwargs)

    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        end_gloo_process_group_at_exit()  # after a run that finished: no collective is pending
        return output

    def _maybe_log_save_evaluate(self, *args, **kwargs):
        # Every callback's on_step_end has run: a log forced by one registered after the diagnostics callbacks closes
        # their window too, so each window follows the logs that actually happen (close_window is once per step).
        if window_ends(self.state, self.control):
            for callback in self.callback_handler.callbacks:
                if hasattr(callback, "close_window"):
                    callback.close_window(self.args, self.state)
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # keep_sampling_mask: the loss's scoring pass takes this minibatch's kept sets (a no-op with the mask off)
        with self.sampler_logprobs.kept_sets(inputs.get(KEPT_IDS_KEY)):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    # Automatic calibration of the clip range (epsilon_calibration_steps): gspo_recipes/stats/calibration.py.
    def _calibrate_if_due(self) -> None:
        if self.calibration is None or self.calibration.done or self.state.global_step < self.calibration.steps:
            return
        current = (self.epsilon_low, self.epsilon_high)
        self.epsilon_low, self.epsilon_high = self.calibration.finish(self.accelerator, current)
        if not self.accelerator.is_main_process:  # calibrated from every process's samples, alike everywhere
            return
        logger.warning(
            "Calibrated the clip range after %d optimizer steps to clip %.0f%% of the off-policy responses per side: "
            "epsilon=%.3g, epsilon_high=%.3g (was %.3g, %.3g)%s.",
            self.state.global_step,
            100 * self.calibration.target_clip,
            self.epsilon_low,
            self.epsilon_high,
            *current,
            ""
            if self.epsilon_reference_length is None
            else f" at the reference length {self.epsilon_reference_length}, scaled by sqrt(L_ref / L) per response",
        )

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.calibration is not None:  # every process: the samples of all of them are saved
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self.calibration.save(folder, self.accelerator, write=self.args.should_save)
        if self.dynamic_sampler is not None and self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self.dynamic_sampler.save(folder)
        if self.adaptive_clip is not None:  # every process: the open rollout of all of them is saved
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self.adaptive_clip.save(folder, write=self.args.should_save)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        if self.dynamic_sampler is not None:
            self.dynamic_sampler.load(checkpoint)
        if self.calibration is not None and self.calibration.load(
            checkpoint, is_main_process=self.accelerator.is_main_process
        ):
            if self.calibration.done:
                self.epsilon_low, self.epsilon_high = self.calibration.epsilons
        if self.adaptive_clip is not None:  # after calibration's: the range it last chose is the one in force
            self.adaptive_clip.load(checkpoint)

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
            if self.adaptive_clip is not None:  # decides at the first micro-step of a generation batch only
                self.adaptive_clip.at_micro_step(calibrating=self.calibration is not None and not self.calibration.done)
        mask = _trl.loss_mask(inputs)
        per_token_logps, entropies, aux_loss = _trl.score_completions(
            self, model, inputs, compute_entropy=True, compute_aux_loss=self.aux_loss_enabled
        )
        old_per_token_logps = inputs.get("old_per_token_logps")
        if old_per_token_logps is None:  # exactly on-policy: TRL skips the old forward pass
            old_per_token_logps = per_token_logps.detach()
        # A sampler may pad its log-probs with -inf or NaN; TRL's masks below average them as our loss would.
        old_per_token_logps = zero_where_masked(old_per_token_logps, mask)
        off_policy_mask, entropy_mask = policy_masks(
            self, inputs, per_token_logps, old_per_token_logps, entropies, inputs["advantages"], mask
        )
        use_is_weights = self.use_vllm and self.vllm_importance_sampling_correction
        step = gspo_batch_loss(
            per_token_logps,
            old_per_token_logps,
            inputs["advantages"],
            mask,
            self.epsilon_low,
            self.epsilon_high,
            reference_length=self.epsilon_reference_length,
            delta=self.args.delta,
            token_log_ratio_clip=self.args.token_log_ratio_clip,
            off_policy_mask=off_policy_mask,
            entropy_mask=entropy_mask,
            importance_weights=inputs["importance_sampling_ratio"] if use_is_weights else None,
            ref_per_token_logps=inputs.get("ref_per_token_logps"),
            beta=self.beta,
            bias_corrected_kl=self.args.use_bias_correction_kl,
            accumulation_steps=self.current_gradient_accumulation_steps if mode == "train" else 1,
            # O(B T) on detached values, only while a callback consumes them
            measure_one_token=mode == "train" and (self.response_stats is not None or self.adaptive_clip is not None),
            num_responses=counted_responses(inputs, mask),
        )
        loss = step.loss
        if _trl.entropy_bonus_enabled(self):
            loss = add_entropy_bonus(self, loss, step.policy_loss, entropies, mask, entropy_mask, mode)
        if self.aux_loss_enabled:  # scaled for accumulation like the policy loss, as TRL does
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            _trl.metric_store(self, mode)["aux_loss"].append(self.accelerator.gather(aux_loss.detach()).mean().item())

        self._log_loss_metrics(mode, mask, entropies, step.low, step.high, step.lengths, step.per_token_kl)
        metrics = _trl.metric_store(self, mode)
        for name, value in masked_shares(self, mask, off_policy_mask, entropy_mask, step, self._global_mean).items():
            metrics[name].append(value)
        if mode == "train":
            self._record_responses(step.log_s, step.lengths, step.response_adv, step.low, step.high, step.one_token)
        return loss

    def _global_mean(self, values: torch.Tensor, weights: torch.Tensor) -> float:
        """The weighted mean of `values` over every process."""
        local = torch.stack([(values * weights).sum(), weights.sum()]).float()
        total = self.accelerator.reduce(local, reduction="sum")
        return (total[0] / total[1].clamp(min=1.0)).item()

    def _record_responses(self, log_s, lengths, response_adv, low, high, one_token=None) -> None:
        minibatch = _trl.minibatch_index(self)
        if self.response_stats is not None:
            self.response_stats.record(log_s, lengths, response_adv, low, high, minibatch, one_token=one_token)
        if self.calibration is not None and not self.calibration.done and minibatch > 1:
            self.calibration.collect(log_s, response_adv, lengths > 0, lengths=lengths)
        if self.adaptive_clip is not None:
            self.adaptive_clip.record(log_s, lengths, response_adv, minibatch, one_token=one_token)

    def _log_clip_shares(self, metrics, mode, low, high, has_tokens) -> None:
        """clip_ratio/{low,high,region}_mean: the shares of the logging window's responses with tokens, pooled over
        its micro-steps and processes, so that they equal gspo/clip_frac{_low,_high,}. TRL's rule, the mean over
        micro-steps of each one's share, weighs a micro-step thinned by dynamic sampling's filler rows like a full one
        (0.0714 against 0.0833 for one clip in micro-steps of 7 and 5 responses). The list holds one value: the
        window's share so far."""
        local = torch.stack(
            [(side.float() * has_tokens).sum() for side in (low, high, low | high)] + [has_tokens.sum()]
        )
        counts = self.accelerator.reduce(local.float(), reduction="sum").cpu()
        if "clip_ratio/region_mean" in metrics:  # TRL clears the store at each log: its absence starts a window
            counts = counts + self._clip_counts[mode]
        self._clip_counts[mode] = counts
        if counts[3] > 0:  # a window of filler rows only has no share
            for index, name in enumerate(("low_mean", "high_mean", "region_mean")):
                metrics[f"clip_ratio/{name}"] = [(counts[index] / counts[3]).item()]

    def _log_loss_metrics(self, mode, mask, entropies, low, high, lengths, per_token_kl) -> None:
        """TRL's metric names and meanings, so existing dashboards keep working; clip ratios count responses."""
        metrics = _trl.metric_store(self, mode)
        global_mean = self._global_mean
        token_mask = mask.float()
        if per_token_kl is not None:
            metrics["kl"].append(global_mean(per_token_kl.detach(), token_mask))
        metrics["entropy"].append(global_mean(entropies.detach(), token_mask))
        self._log_clip_shares(metrics, mode, low, high, (lengths > 0).float())
        # TRL: the smallest low-clipped and the largest high-clipped share among the gathered responses.
        metrics["clip_ratio/low_min"].append(self.accelerator.gather(low.float()).min().item())
        metrics["clip_ratio/high_max"].append(self.accelerator.gather(high.float()).max().item())
        if self.calibration is not None or self.adaptive_clip is not None:
            metrics["gspo/epsilon_low"].append(self.epsilon_low)
            metrics["gspo/epsilon_high"].append(self.epsilon_high)


def counted_responses(inputs, mask) -> int:
    """The responses the loss averages over: the micro-batch's rows, as TRL counts (a truncated response masked by
    `mask_truncated_completions` counts as zero), less dynamic sampling's padding rows, which would shrink the
    gradient of the kept responses by the kept share."""
    fillers = inputs.get(FILLER_KEY)
    return mask.size(0) - (0 if fillers is None else int(fillers.sum()))
