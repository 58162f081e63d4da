"""The sampler's log-probabilities as the old policy (`old_logps_source="sampler"`), and the per-generation-batch
coordination of the three sampler features.

GSPO's ratio needs pi_old's log-probability of every sampled token. TRL recomputes them with a forward pass over every
rollout (`"recompute"`, the default). The generator has already computed them while sampling, and the GSPO paper
argues that a sequence-level ratio tolerates the small numerical differences between engines, so `"sampler"` uses
the generator's values (transformers: gspo_recipes/sampler/generation_logprobs.py; vLLM: the log-probabilities TRL
already collects) and skips that pass. Only where TRL runs the pass (off-policy minibatches, or vLLM's correction)
do the sampler's values take its place. Tokens the sampler could not score (vLLM reports NaN) are filled from a
forward pass over that batch. With vLLM, TRL's correction then compares the sampler with itself and is exactly 1.

Each generation batch gets one explicit `GenerationRound`: what it asks for (capture, intercept) and what happened.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from dataclasses import dataclass

import torch

from gspo_recipes import _trl
from gspo_recipes.sampler.generation_logprobs import AlignmentError, GenerationLogprobRecorder, generation_module
from gspo_recipes.sampler.mask_settings import truncation_settings
from gspo_recipes.sampler.mismatch import MismatchMonitor, dropout_cause, log_sampling_mask_stats
from gspo_recipes.sampler.sampling_mask import KEPT_IDS_KEY, SamplingMaskScorer, pad_kept_rows, vllm_kept_rows
from gspo_recipes.sampler.vllm_is_weight import apply_geometric_mean_weight

logger = logging.getLogger(__name__)


@dataclass
class GenerationRound:
    """One call of `_generate_and_score_completions`."""

    capture: bool  # record the transformers generator's log-probabilities
    intercept: bool  # answer TRL's old-policy pass with the sampler's log-probabilities
    monitor: bool  # compare both sources on this batch
    captured: bool = False  # we added the log-probabilities (TRL's transformers path returns none)
    intercepted: bool = False
    sampler_logps: list | None = None  # per completion, as `_generate` returned them
    record_kept: bool = False  # record the sampler's kept sets (truncated sampling: the mask, or the monitor's mass)
    kept_rows: list | None = None  # per completion: (n, K) kept ids (-1 padded); see sampling_mask.py
    log_mass_rows: list | None = None  # per completion: (n,) log of the kept mass S (transformers generation)
    overflow_rows: list | None = None  # per completion: (n,) sets above sampling_mask_max_tokens


class SamplerLogprobs:
    """What `GSPOTrainer`'s generation-side overrides delegate to (see gspo_recipes/_trl.py for the hooks)."""

    def __init__(self, trainer):
        self.trainer = trainer
        args = trainer.args
        # A plain GRPOConfig has none of these fields: behave exactly like TRL.
        self.sampler_mode = getattr(args, "old_logps_source", "recompute") == "sampler"
        self.monitor = MismatchMonitor(trainer, getattr(args, "sampler_mismatch_steps", 0), self.sampler_mode)
        self.is_ratio = getattr(args, "vllm_importance_sampling_sequence_ratio", "product")
        self.truncated = bool(truncation_settings(args))
        self.max_kept = getattr(args, "sampling_mask_max_tokens", 512)
        keep = getattr(args, "keep_sampling_mask", False)
        self.sampling_mask = SamplingMaskScorer(trainer) if keep else None  # None: TRL's scoring, untouched
        self.old_policy_passes_skipped = 0  # generation batches whose old-policy forward pass was skipped
        self.round: GenerationRound | None = None
        self._warned: set[str] = set()
        if self.sampler_mode:
            self._check_sampler_setup()

    def _check_sampler_setup(self) -> None:
        t = self.trainer
        if not _trl.recomputes_old_logps(t):
            logger.info(
                "old_logps_source='sampler' has no forward pass to skip: with one optimizer step per generation "
                "batch TRL already takes the old log-probabilities from the loss's own pass."
            )
            return
        if not t.accelerator.is_main_process:  # setup warnings: the same on every process, shown once
            return
        dropout = dropout_cause(t.model)
        if dropout:
            logger.warning(
                "old_logps_source='sampler' with dropout on: pi_old becomes the log-probabilities of one random "
                "dropout draw during generation, and every s_i starts away from 1 by dropout noise alone. %s",
                dropout,
            )
        if t.use_vllm and self.truncated and self.sampling_mask is None:
            logger.warning(
                "old_logps_source='sampler' with vLLM and top_p=%s, top_k=%s, min_p=%s: vLLM's log-probabilities are "
                "renormalised after filtering, so they are systematically higher than the trainer's and every log s_i "
                "starts below 0. Set keep_sampling_mask=True (both sides over the kept set), check "
                "gspo/sampler_mismatch/log_s_mean against the clip range, or sample without filtering.",
                t.top_p,
                t.top_k,
                t.min_p,
            )

    def _warn_once(self, key: str, message: str, *args) -> None:
        """Once per run, from the main process (callers decide alike on every process)."""
        if key not in self._warned:
            self._warned.add(key)
            if self.trainer.accelerator.is_main_process:
                logger.warning(message, *args)

    # ------------------------------------------------------------------ the hooks

    def generate_and_score(self, original, inputs):
        """Around `_generate_and_score_completions`: decide what this batch needs, then post-process its output."""
        t = self.trainer
        train = t.model.training
        monitor = train and self.monitor.due()
        intercept = self.sampler_mode and _trl.recomputes_old_logps(t)
        masked = self.sampling_mask is not None
        self.round = round_ = GenerationRound(
            capture=intercept or monitor or masked,
            intercept=intercept,
            monitor=monitor,
            record_kept=masked or (monitor and self.truncated and not t.use_vllm),
        )
        try:
            with self.kept_sets(round_):  # TRL's old-policy and reference passes score over the sets
                output = original(inputs)
        finally:
            self.round = None
        if masked:
            output[KEPT_IDS_KEY] = pad_kept_rows(
                round_.kept_rows, output["completion_ids"].size(1), output["completion_ids"].device
            )
        if round_.record_kept:
            log_sampling_mask_stats(t, output, round_, masked)
        if round_.intercepted:
            self.old_policy_passes_skipped += 1
        elif t.use_vllm and t.vllm_importance_sampling_correction and self.is_ratio == "geometric_mean":
            apply_geometric_mean_weight(t, output, "train" if train else "eval")
        if monitor and output.get("sampling_per_token_logps") is not None:
            with self.kept_sets(output.get(KEPT_IDS_KEY)):
                trainer_logps = self._trainer_logps_as_sampler_mode_sees_them(output, round_)
            self.monitor.compare(output, trainer_logps, round_, masked)
        if round_.captured and not round_.intercepted:  # recorded for the monitor only: leave TRL's inputs alone
            output.pop("sampling_per_token_logps", None)
        return output

    def generate(self, original, prompts):
        """Around `_generate`: keep the sampler's per-token log-probabilities of this batch (any generator)."""
        result = original(prompts)
        if self.round is not None:
            self.round.sampler_logps = result[_trl.GENERATE_LOGPROBS_INDEX]
        return result

    def generate_single_turn(self, original, *args, **kwargs):
        """Around `_generate_single_turn`: with transformers generation, also return per-token log-probabilities."""
        t, round_ = self.trainer, self.round
        if round_ is not None and round_.record_kept and t.use_vllm:
            completion_ids, logprobs = original(*args, **kwargs)
            round_.kept_rows, round_.overflow_rows = vllm_kept_rows(t.vllm_generation, completion_ids, self.max_kept)
            return completion_ids, logprobs
        if round_ is None or not round_.capture or t.use_vllm or t.use_transformers_continuous_batching:
            return original(*args, **kwargs)
        masked = self.sampling_mask is not None
        recorder = GenerationLogprobRecorder(
            t.temperature, record_kept=round_.record_kept, renormalise=masked, max_kept=self.max_kept
        )
        # As the old policy, the generator samples with the positions the trainer scores with (see the module
        # generation_logprobs); for the monitor alone, generation is left exactly as TRL runs it.
        with recorder.attached(generation_module(t.model), trainer_positions=round_.intercept):
            completion_ids, logprobs = original(*args, **kwargs)
        if logprobs is not None:  # a generator that returns its own
            return completion_ids, logprobs
        try:
            logprobs = recorder.logprobs_for(completion_ids)
        except AlignmentError as err:
            if masked:
                raise RuntimeError(
                    f"keep_sampling_mask=True could not read the kept sets from transformers' generate ({err}); it "
                    "needs one forward call and one logits-processor call per sampled token. Set "
                    "keep_sampling_mask=False."
                ) from err
            if round_.intercept:
                raise RuntimeError(
                    f"old_logps_source='sampler' could not read the log-probabilities from transformers' generate "
                    f"({err}); it needs one forward call per sampled token (no prefill chunking, assisted decoding or "
                    "beam search). Set old_logps_source='recompute'."
                ) from err
            self._warn_once("align", "The sampler mismatch monitor is skipped: %s.", err)
            logprobs = [[math.nan] * len(ids) for ids in completion_ids]
        round_.captured = True
        if round_.record_kept:
            round_.kept_rows, round_.log_mass_rows = recorder.kept_rows, recorder.log_mass_rows
            round_.overflow_rows = recorder.overflow_rows
        return completion_ids, logprobs

    def kept_sets(self, kept):
        """While `kept` (a batch's kept sets, or the generation round filling them) is current, the trainer's
        log-probabilities are taken over them (keep_sampling_mask); otherwise, and with the mask off, nothing."""
        if self.sampling_mask is None or kept is None:
            return contextlib.nullcontext()
        return self.sampling_mask.use(kept)

    def per_token_logps(self, original, model, *args, **kwargs):
        """Around `_get_per_token_logps_and_entropies`: answer TRL's old-policy pass from the sampler; with
        keep_sampling_mask, every scoring is over the kept sets."""
        t, round_ = self.trainer, self.round
        if self.sampling_mask is not None:
            original = functools.partial(self.sampling_mask.score, original)
        if (
            round_ is None
            or not round_.intercept
            or round_.intercepted
            or model is not t.model
            or _trl.is_loss_scoring_call(kwargs)
        ):
            return original(model, *args, **kwargs)
        # TRL's first scoring call of a generation batch with the policy itself is the old-policy pass (the reference
        # pass under a PEFT adapter comes after it); `recomputes_old_logps` told us it is coming.
        round_.intercepted = True
        input_ids, logits_to_keep = _trl.scoring_call_parts(args, kwargs)
        if round_.sampler_logps is None:
            raise ValueError(
                "old_logps_source='sampler' but the generator returned no per-token log-probabilities (a rollout_func "
                "must fill 'logprobs'). Set old_logps_source='recompute'."
            )
        old = self._sampler_tensor(round_.sampler_logps, input_ids.device)
        if old.shape != (input_ids.size(0), logits_to_keep):
            raise RuntimeError(
                f"The sampler's log-probabilities have shape {tuple(old.shape)}, the completions "
                f"{(input_ids.size(0), logits_to_keep)}. Set old_logps_source='recompute'."
            )
        missing = torch.isnan(old)
        # Every process passes here at the same call (TRL's old-policy pass): if any has a gap, all run the pass
        # (a sharded model's forward is collective) and the main process says so.
        any_missing = t.accelerator.gather(missing.any().long().reshape(1).to(old.device)).sum().item() > 0
        if any_missing:  # vLLM could not score these tokens: take them from the training engine
            self._warn_once(
                "nan",
                "The sampler returned no log-probability for some tokens; those tokens are taken from a forward pass "
                "of the trainer over their batch (shown once).",
            )
            recomputed, _, _ = original(model, *args, **kwargs)
            old = torch.where(missing, recomputed.to(old.dtype), old)
        return old, None, None

    # ------------------------------------------------------------------ helpers

    def _sampler_tensor(self, logprobs: list, device) -> torch.Tensor:
        """TRL's padding of `sampling_per_token_logps` (None -> NaN, right-padded with 0)."""
        from trl.trainer.utils import pad

        rows = [torch.tensor([math.nan if x is None else x for x in row], dtype=torch.float32) for row in logprobs]
        padded = pad(rows, padding_value=0.0, padding_side="right", pad_to_multiple_of=self.trainer.pad_to_multiple_of)
        return padded.to(device)

    def _trainer_logps_as_sampler_mode_sees_them(self, output, round_: GenerationRound) -> torch.Tensor:
        """The trainer's side of the monitor's comparison, so that it measures what `"sampler"` mode would see.

        In sampler mode transformers generation runs with the trainer's positions, so the two sources differ only by
        the engines. Generation as TRL runs it (recompute mode, or nothing to intercept) numbers positions from each
        prompt's first real token; with left-padded prompts a model with learned absolute positions (GPT-2) then
        scores differently from TRL's pass, a gap sampler mode does not have. There the trainer's side is scored with
        generation's positions (one pass); elsewhere TRL's old-policy values serve when it computed them. vLLM keeps
        its own positions in both modes, so it is compared with TRL's pass as it is.
        """
        t = self.trainer
        generation_positions = not round_.intercept and not t.use_vllm and bool((output["prompt_mask"] == 0).any())
        trainer_logps = None if round_.intercepted else output.get("old_per_token_logps")
        if trainer_logps is None or generation_positions:
            return self._recompute(output, generation_positions)
        return trainer_logps

    def _recompute(self, output, generation_positions: bool = False) -> torch.Tensor:
        """The training engine's log-probabilities of the batch's completions (one forward pass, no gradient); with
        `generation_positions`, numbered as `generate` numbers them."""
        from trl.models.utils import disable_gradient_checkpointing

        t = self.trainer
        handle = (
            t.model.register_forward_pre_hook(_generation_position_ids, with_kwargs=True)
            if generation_positions
            else None
        )
        # The monitor's own pass: its dropout draws (if any) must not move the random state training continues from.
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        try:
            with (
                torch.random.fork_rng(devices=devices),
                torch.no_grad(),
                disable_gradient_checkpointing(t.model, t.args.gradient_checkpointing_kwargs),
            ):
                logps, _, _ = _trl.score_completions(t, t.model, output, batch_size=t.args.per_device_train_batch_size)
        finally:
            if handle is not None:
                handle.remove()
        return logps


def _generation_position_ids(module, args, kwargs):
    """Positions as transformers' `generate` numbers them: from each row's first attended token (padding gets 0)."""
    mask = kwargs.get("attention_mask")
    if mask is None or kwargs.get("position_ids") is not None:
        return None
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return args, {**kwargs, "position_ids": positions}
