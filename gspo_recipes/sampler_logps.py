"""The sampler's log-probabilities as the old policy, a GSPO-shaped vLLM correction, and a mismatch monitor.

GSPO's ratio s_i = exp(mean_t [log pi_theta(y_it) - log pi_old(y_it)]) needs pi_old's log-probability of every
sampled token. TRL recomputes them with an extra forward pass over every rollout in the training engine
(`old_logps_source="recompute"`, the default). The generator has already computed them while sampling, and the GSPO
paper argues that a sequence-level ratio tolerates the small numerical differences between the two engines, so
`old_logps_source="sampler"` uses the generator's values and skips that forward pass.

Where the sampler's log-probabilities come from

- transformers generation: for every sampled token, log_softmax(logits / temperature) of the model's raw logits,
  taken *before* any logits processor (repetition penalty, top-k, top-p, min-p filtering). That is exactly what the
  trainer scores: TRL's fused LM head divides the same logits by the same temperature and never filters. So with
  top-k/top-p the tokens are drawn from the filtered distribution but scored, in both modes, under the unfiltered
  one, and switching the source does not change the objective. The values are read from the model's output with a
  forward hook during `generate` (one (batch, vocab) row kept at a time, not the (batch, length, vocab) logits that
  `output_logits=True` would hold), and checked against the returned tokens.
- vLLM: the log-probabilities TRL already collects (`sampling_per_token_logps`). TRL asks vLLM for *processed*
  log-probabilities (after temperature and filtering), so with top-k/top-p/min-p they are systematically higher
  than the trainer's; the monitor shows that as a negative `log_s_mean`.

What "sampler" changes

Only the forward pass TRL would run for the old policy: where TRL runs it (off-policy minibatches, or vLLM's
importance-sampling correction), the sampler's values take its place; where TRL skips it (one optimizer step per
generation batch), nothing changes. Tokens the sampler could not score (vLLM reports NaN) are filled from a forward
pass over that batch. With vLLM, TRL's importance-sampling correction then compares the sampler with itself and is
exactly 1: the GSPO ratio is measured against the sampler, so the mismatch is inside s_i and its clip.

vLLM's importance-sampling correction for GSPO (`vllm_importance_sampling_sequence_ratio`)

TRL's sequence modes weight a response by exp(sum_t [log pi_train - log pi_vllm]), which collapses to 0 or blows up
on long responses however small the per-token mismatch (TRL issues 4772 and 5814). "geometric_mean" uses
exp(mean_t [...]) instead, the same length normalisation as s_i; "product" keeps TRL's. The bounds
`vllm_importance_sampling_clip_min/max` then apply to the per-token geometric mean.

The mismatch monitor (`sampler_mismatch_steps`)

Every N optimizer steps (on the next generation batch), in either mode, whenever the generator provides
log-probabilities, both sources are compared on the same responses: log s_i = mean_t [trainer - sampler] is the
ratio every response would start from on its first minibatch with `old_logps_source="sampler"`. Logged:
`gspo/sampler_mismatch/log_s_mean`, `log_s_std`, `token_max_abs` (largest |trainer - sampler| over tokens) and
`outside_clip_frac` (responses whose mismatch alone is outside the clip range). When the mean alone is outside the
clip range, a warning names the side it would clip wholesale.
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

OLD_LOGPS_SOURCES = ("recompute", "sampler")
IS_SEQUENCE_RATIOS = ("geometric_mean", "product")
MISMATCH_PREFIX = "gspo/sampler_mismatch/"
# TRL's names for the importance-sampling weights; overwritten with the weights actually applied.
TRL_IS_METRICS = {
    "min": "sampling/importance_sampling_ratio/min",
    "mean": "sampling/importance_sampling_ratio/mean",
    "max": "sampling/importance_sampling_ratio/max",
}


# ------------------------------------------------------------------------------------------------ pure functions


def trl_recomputes_old_logps(trainer) -> bool:
    """Whether TRL's `_generate_and_score_completions` runs its old-policy forward pass (the condition of TRL 1.16).

    It does when generation and optimizer steps are misaligned (off-policy minibatches), or for vLLM's
    importance-sampling correction.
    """
    args = trainer.args
    generate_every = args.steps_per_generation * trainer.num_iterations
    return args.gradient_accumulation_steps % generate_every != 0 or bool(
        trainer.use_vllm and trainer.vllm_importance_sampling_correction
    )


def sequence_is_log_weight(
    old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, ratio: str = "geometric_mean"
) -> torch.Tensor:
    """Log of vLLM's sequence-level importance-sampling weight, shape (B, 1).

    "product" is TRL's sum_t (old - sampling); "geometric_mean" divides it by the number of tokens. Tokens the
    sampler could not score (NaN) count as a zero difference, as in TRL, and are left out of the token count.
    """
    if ratio not in IS_SEQUENCE_RATIOS:
        raise ValueError(f"ratio must be one of {IS_SEQUENCE_RATIOS}, got {ratio!r}.")
    diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    total = diff.sum(-1, keepdim=True)
    if ratio == "product":
        return total
    count = (mask.bool() & ~torch.isnan(sampling_logps)).sum(-1, keepdim=True).clamp(min=1)
    return total / count


def bound_is_weight(weight: torch.Tensor, mode: str, clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """TRL's bounds on an importance-sampling weight: clamp for `*_truncate` modes, zero outside for `*_mask`."""
    if mode.endswith("truncate"):
        if clip_min is None and clip_max is None:
            return weight
        return torch.clamp(weight, min=clip_min, max=clip_max)
    if mode.endswith("mask"):
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return weight.masked_fill((weight < low) | (weight > high), 0.0)
    raise ValueError(f"Unknown vllm_importance_sampling_mode {mode!r}.")


def mismatch_log_ratio(
    trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The two sources compared on the same responses.

    Returns log s_i = mean_t (trainer - sampler) per response (N,), which responses have any scored token (N,), and
    the largest |trainer - sampler| over scored tokens (a scalar). Tokens the sampler did not score (NaN) are left out.
    """
    valid = mask.bool() & ~torch.isnan(sampler_logps)
    diff = (trainer_logps.float() - sampler_logps.float()).masked_fill(~valid, 0.0)
    count = valid.sum(-1)
    log_s = diff.sum(-1) / count.clamp(min=1)
    token_max = diff.abs().max() if diff.numel() else diff.new_zeros(())
    return log_s, count > 0, token_max


def clip_side(log_s: float, eps_low: float, eps_high: float) -> str | None:
    """"high" if s = exp(log_s) > 1 + eps_high, "low" if s < 1 - eps_low, else None."""
    if log_s > math.log1p(eps_high):
        return "high"
    if log_s < math.log1p(-eps_low):
        return "low"
    return None


# ------------------------------------------------------------------------------------------------ transformers


class AlignmentError(RuntimeError):
    """The recorded log-probabilities do not line up with the generated tokens."""


class GenerationLogprobRecorder:
    """Forward hook recording, during `generate`, each sampled token's log_softmax(logits / temperature).

    Every forward call's last-position logits give the distribution of the next token; that token is read from the
    next call's `input_ids` (or, for the last step, from the returned completions). Only one (batch, vocab) row is kept.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self._pending: torch.Tensor | None = None  # log-softmax row of the step whose token is not known yet
        self._logps: list[torch.Tensor] = []  # per step, (B, 1)
        self._tokens: list[torch.Tensor] = []  # per step, (B, 1): the token each step's log-probability belongs to
        self._error: str | None = None

    @contextmanager
    def attached(self, module: torch.nn.Module):
        handle = module.register_forward_hook(self._hook, with_kwargs=True)
        try:
            yield self
        finally:
            handle.remove()

    def _hook(self, module, args, kwargs, output) -> None:
        logits = output.logits if hasattr(output, "logits") else output[0]
        if self._pending is not None:
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            if input_ids is None:
                self._error = "a forward call during generation had no input_ids"
            else:
                tokens = input_ids[:, -1:].to(self._pending.device)
                self._logps.append(self._pending.gather(-1, tokens))
                self._tokens.append(tokens)
        with torch.no_grad():
            scaled = logits[:, -1, :].float()
            if self.temperature != 1.0:
                scaled = scaled / self.temperature
            self._pending = torch.log_softmax(scaled, dim=-1)

    def logprobs_for(self, completion_ids: list[list[int]]) -> list[list[float]]:
        """Per-completion log-probabilities, aligned with TRL's completions (cut after the first EOS)."""
        if self._error:
            raise AlignmentError(self._error)
        lengths = [len(c) for c in completion_ids]
        steps = max(lengths, default=0)
        logps, tokens = list(self._logps), list(self._tokens)
        if len(logps) < steps and self._pending is not None:  # the last step: its token is in the completions
            last = torch.tensor(
                [[c[steps - 1] if len(c) == steps else 0] for c in completion_ids], device=self._pending.device
            )
            logps.append(self._pending.gather(-1, last))
            tokens.append(last)
        if len(logps) < steps:
            raise AlignmentError(f"{len(logps)} forward calls recorded for {steps} generated tokens")
        if steps == 0:
            return [[] for _ in completion_ids]
        logps = torch.cat(logps[:steps], dim=1).cpu()
        tokens = torch.cat(tokens[:steps], dim=1).cpu()
        if logps.size(0) != len(completion_ids):
            raise AlignmentError(f"recorded {logps.size(0)} rows for {len(completion_ids)} completions")
        for row, ids in enumerate(completion_ids):
            if tokens[row, : len(ids)].tolist() != list(ids):
                raise AlignmentError("the tokens seen by the model differ from the returned completions")
        return [logps[row, :n].tolist() for row, n in enumerate(lengths)]


def generation_module(trainer) -> torch.nn.Module:
    """The module whose forward `generate` calls: the model, or the base model under a PEFT adapter."""
    from accelerate.utils import is_peft_model

    model = trainer.model
    return model.get_base_model() if is_peft_model(model) else model


# ------------------------------------------------------------------------------------------------ the trainer side


@dataclass
class _Batch:
    """What this generation batch asks for, and what happened."""

    capture: bool  # record the transformers generator's log-probabilities
    intercept: bool  # hand the sampler's log-probabilities to TRL in place of its old-policy forward pass
    captured: bool = False  # we added the log-probabilities (TRL's transformers path returns none)
    intercepted: bool = False
    stashed: bool = False
    sampler_logps: list | None = None  # per completion, as `_generate` returned them


class SamplerLogps:
    """The trainer-side logic; `GSPOTrainer` delegates four TRL methods to it (see gspo_recipes/trainer.py)."""

    def __init__(self, trainer):
        self.trainer = trainer
        args = trainer.args
        # A plain GRPOConfig has none of these fields: behave exactly like TRL.
        self.source = getattr(args, "old_logps_source", "recompute")
        self.monitor_steps = getattr(args, "sampler_mismatch_steps", 0)
        self.is_ratio = getattr(args, "vllm_importance_sampling_sequence_ratio", "product")
        self.old_policy_passes_skipped = 0  # generation batches whose old-policy forward pass was skipped
        self._batch: _Batch | None = None
        self._next_monitor_step = 0
        self._warned_side: str | None = None
        self._warned: set[str] = set()
        if self.source == "sampler":
            self._check_sampler_setup()

    @property
    def sampler_mode(self) -> bool:
        return self.source == "sampler"

    def _check_sampler_setup(self) -> None:
        t = self.trainer
        if not trl_recomputes_old_logps(t):
            logger.info(
                "old_logps_source='sampler' has no forward pass to skip: with one optimizer step per generation "
                "batch TRL already takes the old log-probabilities from the loss's own pass."
            )
        if t.use_vllm and (t.top_p < 1.0 or (t.top_k or 0) > 0 or t.min_p):
            logger.warning(
                "old_logps_source='sampler' with vLLM and top_p=%s, top_k=%s, min_p=%s: vLLM's log-probabilities are "
                "renormalised after filtering, so they are systematically higher than the trainer's and every log s_i "
                "starts below 0. Check gspo/sampler_mismatch/log_s_mean against the clip range, or sample without "
                "filtering.",
                t.top_p,
                t.top_k,
                t.min_p,
            )

    def _warn_once(self, key: str, message: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    # ------------------------------------------------------------------ hooks GSPOTrainer delegates to

    def generate_and_score(self, original, inputs):
        """Around `_generate_and_score_completions`: decide what this batch needs, then post-process its output."""
        t = self.trainer
        train = t.model.training
        monitor = train and self._monitor_due()
        intercept = self.sampler_mode and trl_recomputes_old_logps(t)
        self._batch = batch = _Batch(capture=intercept or monitor, intercept=intercept)
        try:
            output = original(inputs)
        finally:
            self._batch = None
        if batch.intercepted:
            self.old_policy_passes_skipped += 1
        elif t.use_vllm and t.vllm_importance_sampling_correction:
            self._reweight(output, "train" if train else "eval")
        if monitor:
            self._monitor(output, batch)
        if batch.captured and not batch.intercepted:  # recorded only for the monitor: leave TRL's inputs as they were
            output.pop("sampling_per_token_logps", None)
        return output

    def generate(self, original, prompts):
        """Around `_generate`: keep the sampler's per-token log-probabilities of this batch (any generator)."""
        result = original(prompts)
        if self._batch is not None:
            self._batch.sampler_logps = result[4]
            self._batch.stashed = True
        return result

    def generate_single_turn(self, original, *args, **kwargs):
        """Around `_generate_single_turn`: with transformers generation, also return per-token log-probabilities."""
        t, batch = self.trainer, self._batch
        if batch is None or not batch.capture or t.use_vllm or t.use_transformers_continuous_batching:
            return original(*args, **kwargs)
        recorder = GenerationLogprobRecorder(t.temperature)
        with recorder.attached(generation_module(t)):
            completion_ids, logprobs = original(*args, **kwargs)
        if logprobs is not None:  # a generator that returns its own
            return completion_ids, logprobs
        try:
            logprobs = recorder.logprobs_for(completion_ids)
        except AlignmentError as err:
            if batch.intercept:
                raise RuntimeError(
                    f"old_logps_source='sampler' could not read the log-probabilities from transformers' generate "
                    f"({err}); it needs one forward call per sampled token (no prefill chunking, assisted decoding or "
                    "beam search). Set old_logps_source='recompute'."
                ) from err
            self._warn_once("align", "The sampler mismatch monitor is skipped: %s.", err)
            logprobs = [[math.nan] * len(ids) for ids in completion_ids]
        batch.captured = True
        return completion_ids, logprobs

    def per_token_logps(self, original, model, *args, **kwargs):
        """Around `_get_per_token_logps_and_entropies`: answer TRL's old-policy pass from the sampler."""
        t, batch = self.trainer, self._batch
        if (
            batch is None
            or not batch.intercept
            or batch.intercepted
            or model is not t.model
            or kwargs.get("compute_entropy")
        ):
            return original(model, *args, **kwargs)
        input_ids = args[0] if args else kwargs["input_ids"]
        logits_to_keep = args[2] if len(args) > 2 else kwargs["logits_to_keep"]
        # TRL's first scoring call for this batch with the policy itself is the old-policy pass (the reference pass
        # under a PEFT adapter comes after it); `trl_recomputes_old_logps` told us it is coming.
        batch.intercepted = True
        if not batch.stashed or batch.sampler_logps is None:
            raise ValueError(
                "old_logps_source='sampler' but the generator returned no per-token log-probabilities (a rollout_func "
                "must fill 'logprobs'). Set old_logps_source='recompute'."
            )
        old = self._sampler_tensor(batch.sampler_logps, input_ids.device)
        if old.shape != (input_ids.size(0), logits_to_keep):
            raise RuntimeError(
                f"The sampler's log-probabilities have shape {tuple(old.shape)}, the completions "
                f"{(input_ids.size(0), logits_to_keep)}. Set old_logps_source='recompute'."
            )
        missing = torch.isnan(old)
        if missing.any():  # vLLM could not score these tokens: take them from the training engine
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

    def _monitor_due(self) -> bool:
        if self.monitor_steps <= 0:
            return False
        step = self.trainer.state.global_step
        if step < self._next_monitor_step:
            return False
        self._next_monitor_step = step + self.monitor_steps
        return True

    @staticmethod
    def _loss_mask(output) -> torch.Tensor:
        mask = output["completion_mask"]
        return mask * output["tool_mask"] if "tool_mask" in output else mask

    def _recompute(self, output) -> torch.Tensor:
        """The training engine's log-probabilities of the batch's completions (one forward pass, no gradient)."""
        from trl.models.utils import disable_gradient_checkpointing

        from .trainer import MULTIMODAL_INPUTS

        t = self.trainer
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad(), disable_gradient_checkpointing(t.model, t.args.gradient_checkpointing_kwargs):
            logps, _, _ = t._get_per_token_logps_and_entropies(
                t.model,
                ids,
                mask,
                output["completion_ids"].size(1),
                batch_size=t.args.per_device_train_batch_size,
                **{name: output.get(name) for name in MULTIMODAL_INPUTS},
            )
        return logps

    def _monitor(self, output, batch: _Batch) -> None:
        t = self.trainer
        sampler_logps = output.get("sampling_per_token_logps")
        if sampler_logps is None:  # this generator gives none (transformers continuous batching)
            return
        trainer_logps = None if batch.intercepted else output.get("old_per_token_logps")
        if trainer_logps is None:
            trainer_logps = self._recompute(output)
        log_s, has_tokens, token_max = mismatch_log_ratio(trainer_logps, sampler_logps, self._loss_mask(output))
        log_s = t.accelerator.gather(log_s)
        has_tokens = t.accelerator.gather(has_tokens.long()).bool()  # no bool collectives on some backends
        token_max = t.accelerator.gather(token_max.reshape(1)).max().item()
        log_s = log_s[has_tokens]
        if log_s.numel() == 0:
            return
        mean, std = log_s.mean().item(), log_s.std(correction=0).item()
        outside = (log_s > math.log1p(t.epsilon_high)) | (log_s < math.log1p(-t.epsilon_low))
        metrics = t._metrics["train"]
        metrics[MISMATCH_PREFIX + "log_s_mean"].append(mean)
        metrics[MISMATCH_PREFIX + "log_s_std"].append(std)
        metrics[MISMATCH_PREFIX + "token_max_abs"].append(token_max)
        metrics[MISMATCH_PREFIX + "outside_clip_frac"].append(outside.float().mean().item())
        self._warn_if_biased(mean)

    def _warn_if_biased(self, bias: float) -> None:
        """Warn when the mean mismatch alone puts s_i outside the clip range; again only after it has gone back in."""
        t = self.trainer
        side = clip_side(bias, t.epsilon_low, t.epsilon_high)
        if side == self._warned_side:
            return
        self._warned_side = side
        if side is None:
            return
        if side == "high":
            bound = f"1 + epsilon_high = {1 + t.epsilon_high:.6g}"
        else:
            bound = f"1 - epsilon = {1 - t.epsilon_low:.6g}"
        responses = "positive" if side == "high" else "negative"
        effect = (
            "so on the first minibatch of every rollout batch, responses with a %s advantage are clipped wholesale"
            if self.sampler_mode
            else "so with old_logps_source='sampler', responses with a %s advantage would be clipped wholesale on "
            "the first minibatch of every rollout batch"
        ) % responses
        logger.warning(
            "Systematic mismatch between the sampler's and the trainer's log-probabilities at step %s: mean log s_i "
            "(trainer - sampler) = %.3g, so s_i starts at %.6g, beyond %s, %s. Fix: keep old_logps_source='recompute', "
            "remove the bias (same dtype and kernels in both engines; unfiltered sampling), or widen the clip range "
            "beyond |%.3g|. Watch gspo/sampler_mismatch/log_s_mean.",
            t.state.global_step,
            bias,
            math.exp(bias),
            bound,
            effect,
            bias,
        )

    def _reweight(self, output, mode: str) -> None:
        """vLLM's sequence-level importance-sampling weight as a geometric mean (TRL's is the product)."""
        t = self.trainer
        if self.is_ratio != "geometric_mean" or not t.vllm_importance_sampling_mode.startswith("sequence"):
            return
        old, sampling = output.get("old_per_token_logps"), output.get("sampling_per_token_logps")
        if old is None or sampling is None:
            return
        raw = torch.exp(sequence_is_log_weight(old, sampling, self._loss_mask(output), "geometric_mean"))
        weight = bound_is_weight(
            raw,
            t.vllm_importance_sampling_mode,
            t.vllm_importance_sampling_clip_min,
            t.vllm_importance_sampling_clip_max,
        )
        output["importance_sampling_ratio"] = weight
        gathered = t.accelerator.gather(weight.reshape(-1))
        bounded = t.accelerator.gather((weight != raw).reshape(-1).float())
        metrics = t._metrics[mode]
        for stat, value in (("min", gathered.min()), ("mean", gathered.mean()), ("max", gathered.max())):
            name = TRL_IS_METRICS[stat]
            if metrics[name]:  # TRL logged the product for this batch: show the weight actually applied
                metrics[name][-1] = value.item()
            else:
                metrics[name].append(value.item())
        metrics["gspo/is_correction/bounded_frac"].append(bounded.mean().item())
