"""The mismatch monitor (`sampler_mismatch_steps`): the sampler's and the trainer's log-probabilities compared.

Every N optimizer steps (on the next generation batch), in either mode, whenever the generator provides
log-probabilities, both sources are compared on the same responses: log s_i = mean_t [trainer - sampler] is the
ratio every response would start from on its first minibatch with `old_logps_source="sampler"`. Logged:
`gspo/sampler_mismatch/log_s_mean`, `log_s_std`, `token_max_abs` (largest |trainer - sampler| over tokens) and
`outside_clip_frac` (responses whose mismatch alone is outside the clip range). A warning names the side when the
mismatch alone would clip: its mean is outside the range, or more than `WARN_OUTSIDE_FRAC` of the responses are, and
names dropout first when the model applies it (each pass draws its own mask: TRL's `disable_dropout=False`). Warnings
come from the main process only, with figures gathered from every process.

Truncated sampling (top_p/top_k/min_p). Whenever the sampler's kept sets are recorded (transformers generation on
the monitor's batches; every batch with `keep_sampling_mask`), the kept mass S of each sampled token under the full
softmax is logged: `kept_mass` (mean S) and `log_kept_mass` (mean log S), the log-ratio every token starts from when
one side is renormalised over the set and the other is not. Without the mask, a mean log S beyond the clip range gets
a warning naming `keep_sampling_mask` (kind "truncated_sampling_bias"). With the mask on, `log_s_*` are the mismatch
that remains once both sides are renormalised over the same set; `gspo/sampling_mask/overflow_frac` is the share of
tokens whose set was above `sampling_mask_max_tokens` (scored over the full vocabulary) and `width` the stored K.
"""

from __future__ import annotations

import logging
import math

import torch

from gspo_recipes._trl import loss_mask, metric_store
from gspo_recipes.loss import length_scaled_epsilons, outside_clip_range
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.sampler.mask_settings import truncation_settings

logger = logging.getLogger(__name__)

MISMATCH_PREFIX = "gspo/sampler_mismatch/"
SAMPLING_MASK_PREFIX = "gspo/sampling_mask/"
TRUNCATION_WARNING = "truncated_sampling_bias"
# Share of responses whose mismatch alone leaves the clip range above which the monitor warns. A random mismatch
# (bf16 rounding) of the clip range's size clips a large share of responses without moving the mean out of it.
WARN_OUTSIDE_FRAC = 0.1
MISMATCH_KIND = "sampler_mismatch_clips"


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


def active_dropout(model) -> float:
    """The largest dropout rate a forward pass of `model` in training mode applies (0.0: none). TRL's
    `disable_dropout=True` zeroes every `nn.Dropout`; a config's `attention_dropout` is applied functionally."""
    rates = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    config_rate = getattr(getattr(model, "config", None), "attention_dropout", 0.0)
    rates.append(config_rate if isinstance(config_rate, float) else 0.0)
    return max(rates)


def dropout_cause(model) -> str:
    """The sentence that names dropout as a cause of the mismatch, or "" when the model applies none in training (the
    mode the monitor compares in and sampler mode samples in)."""
    rate = active_dropout(model)
    if not rate:
        return ""
    return (
        f"The model applies dropout (rate up to {rate:g}): generation and the trainer's pass each draw their own "
        "random mask, so their log-probabilities differ at random by far more than rounding. Fix that first: "
        "disable_dropout=True. "
    )


def clipping_side(log_s: torch.Tensor, eps_low: float, eps_high: float) -> str | None:
    """The side(s) the mismatch alone clips: "high", "low", "both" or None.

    A side counts when the mean mismatch is beyond its bound, or more than `WARN_OUTSIDE_FRAC` of the responses are.
    With a length-scaled range (one bound per response) the mean is held against the mean bound.
    """
    below, above = outside_clip_range(log_s, eps_low, eps_high)
    mean_low, mean_high = (float(eps.mean()) if isinstance(eps, torch.Tensor) else eps for eps in (eps_low, eps_high))
    mean_below, mean_above = (flag.item() for flag in outside_clip_range(log_s.mean().reshape(1), mean_low, mean_high))
    high = mean_above or above.float().mean().item() > WARN_OUTSIDE_FRAC
    low = mean_below or below.float().mean().item() > WARN_OUTSIDE_FRAC
    return {(True, True): "both", (True, False): "high", (False, True): "low"}.get((high, low))


def _global_token_mean(trainer, values: torch.Tensor, mask: torch.Tensor) -> float:
    local = torch.stack([(values * mask).sum(), mask.sum()]).float()
    total = trainer.accelerator.reduce(local.to(trainer.accelerator.device), reduction="sum")
    return (total[0] / total[1].clamp(min=1.0)).item()


def _rows_to_batch(rows: list[torch.Tensor], like: torch.Tensor, fill) -> torch.Tensor:
    out = torch.full(like.shape, fill, dtype=torch.float32)
    for i, row in enumerate(rows):
        n = min(row.numel(), like.size(1))
        out[i, :n] = row[:n].float()
    return out.to(like.device)


def log_sampling_mask_stats(trainer, output: dict, round_, masked: bool) -> None:
    """Kept mass S of the sampled tokens, the mask's overflow share and width; the truncation-bias warning."""
    mask = loss_mask(output).float()
    metrics = metric_store(trainer, "train" if trainer.model.training else "eval")
    if masked and round_.overflow_rows is not None:
        overflow = _rows_to_batch(round_.overflow_rows, mask, 0.0)
        metrics[SAMPLING_MASK_PREFIX + "overflow_frac"].append(_global_token_mean(trainer, overflow, mask))
        metrics[SAMPLING_MASK_PREFIX + "width"].append(float(output["sampling_kept_ids"].size(-1)))
    if round_.log_mass_rows is None:  # vLLM's masks carry no mass
        return
    log_mass = _rows_to_batch(round_.log_mass_rows, mask, 0.0)
    mean_log_mass = _global_token_mean(trainer, log_mass, mask)
    metrics[MISMATCH_PREFIX + "kept_mass"].append(_global_token_mean(trainer, log_mass.exp(), mask))
    metrics[MISMATCH_PREFIX + "log_kept_mass"].append(mean_log_mass)
    if not masked:
        _warn_truncation_bias(trainer, mean_log_mass)


def _warn_truncation_bias(trainer, mean_log_mass: float) -> None:
    """Once per run: the kept mass alone puts the ratio outside the clip range."""
    if mean_log_mass >= -trainer.epsilon_low or getattr(trainer, "_gspo_warned_truncation", False):
        return
    trainer._gspo_warned_truncation = True
    settings = ", ".join(f"{k}={v}" for k, v in truncation_settings(trainer.args).items())
    message = (
        f"Truncated sampling ({settings}) keeps a mean mass S = {math.exp(mean_log_mass):.3g} per sampled token "
        f"(mean log S = {mean_log_mass:.3g}, beyond the clip range's 1 - epsilon = {1 - trainer.epsilon_low:.6g}): "
        "the sampler draws each token from p / S over its kept set while the trainer scores p over the full "
        "vocabulary. Every ratio with a renormalised side (vLLM's log-probabilities as pi_old, TRL's "
        "importance-sampling weight) starts at log S and clips or shrinks on that bias alone; transformers "
        "generation records pi_old unfiltered, so s_i hides it, but the objective is not the one sampled. Fix: "
        "keep_sampling_mask=True (both sides over the kept set), or sample without truncation. Watch "
        "gspo/sampler_mismatch/log_kept_mass."
    )
    record_warning(trainer, TRUNCATION_WARNING, message)
    if trainer.accelerator.is_main_process:
        logger.warning(message)


class MismatchMonitor:
    def __init__(self, trainer, steps: int, sampler_mode: bool):
        self.trainer, self.steps, self.sampler_mode = trainer, steps, sampler_mode
        self._next_step = 0
        self._warned_side: str | None = None
        self._clip_range = None  # (eps_low, eps_high) of the batch compared last: floats, or one per response

    def due(self) -> bool:
        """Whether this generation batch is compared (every `steps` optimizer steps)."""
        step = self.trainer.state.global_step
        if self.steps <= 0 or step < self._next_step:
            return False
        self._next_step = step + self.steps
        return True

    def compare(self, output: dict, trainer_logps: torch.Tensor, round_=None, masked: bool = False) -> None:
        t = self.trainer
        sampler_logps = output.get("sampling_per_token_logps")
        if sampler_logps is None:  # this generator gives none (transformers continuous batching)
            return
        mask = loss_mask(output)
        log_s, has_tokens, token_max = mismatch_log_ratio(trainer_logps, sampler_logps, mask)
        log_s = t.accelerator.gather(log_s)
        has_tokens = t.accelerator.gather(has_tokens.long()).bool()  # no bool collectives on some backends
        lengths = t.accelerator.gather(mask.sum(-1))[has_tokens]  # the clip range the loss gives each response
        token_max = t.accelerator.gather(token_max.reshape(1)).max().item()
        log_s = log_s[has_tokens]
        if log_s.numel() == 0:
            return
        self._clip_range = length_scaled_epsilons(
            t.epsilon_low, t.epsilon_high, lengths, getattr(t, "epsilon_reference_length", None)
        )
        below, above = outside_clip_range(log_s, *self._clip_range)
        metrics = metric_store(t)
        metrics[MISMATCH_PREFIX + "log_s_mean"].append(log_s.mean().item())
        metrics[MISMATCH_PREFIX + "log_s_std"].append(log_s.std(correction=0).item())
        metrics[MISMATCH_PREFIX + "token_max_abs"].append(token_max)
        metrics[MISMATCH_PREFIX + "outside_clip_frac"].append((below | above).float().mean().item())
        self._warn_if_clipping(log_s, masked)

    def _warn_if_clipping(self, log_s: torch.Tensor, masked: bool = False) -> None:
        """Warn when the mismatch alone would clip; again only after it has gone back inside."""
        t = self.trainer
        side = clipping_side(log_s, *self._clip_range)
        if side == self._warned_side:
            return
        self._warned_side = side
        if side is None:
            return
        below, above = outside_clip_range(log_s, *self._clip_range)
        high_bound, low_bound = f"1 + epsilon_high = {1 + t.epsilon_high:.6g}", f"1 - epsilon = {1 - t.epsilon_low:.6g}"
        if getattr(t, "epsilon_reference_length", None) is not None:
            high_bound, low_bound = (f"{b} (at length {t.epsilon_reference_length})" for b in (high_bound, low_bound))
        share, bound, responses = {
            "high": (above.float().mean().item(), high_bound, "a positive advantage"),
            "low": (below.float().mean().item(), low_bound, "a negative advantage"),
            "both": ((above | below).float().mean().item(), f"{low_bound} or {high_bound}", "either advantage"),
        }[side]
        when = "" if self.sampler_mode else "with old_logps_source='sampler', "
        mean = log_s.mean().item()
        truncation = ""
        if masked:
            truncation = "This is what remains with keep_sampling_mask on (both sides over the kept sets). "
        elif t.use_vllm and truncation_settings(t.args):
            truncation = (
                "With top_p/top_k/min_p, vLLM's log-probabilities are renormalised over the kept set and the trainer's "
                "are not: set keep_sampling_mask=True. "
            )
        widest = max(abs(log_s.min().item()), abs(log_s.max().item()))
        message = (
            f"Mismatch between the sampler's and the trainer's log-probabilities at step {t.state.global_step}: mean "
            f"log s_i (trainer - sampler) = {mean:.3g} (s_i starts at {math.exp(mean):.6g}) and {100 * share:.0f}% of "
            f"the responses start beyond {bound}, so {when}responses with {responses} are clipped on the first "
            f"minibatch of every rollout batch by the mismatch alone. {truncation}{dropout_cause(t.model)}Fix: keep "
            "old_logps_source='recompute', remove the mismatch (same dtype and kernels in both engines, float32 "
            f"rather than bf16 where you can, unfiltered sampling), or widen the clip range beyond |{widest:.3g}|. "
            "Watch gspo/sampler_mismatch/log_s_mean and outside_clip_frac."
        )
        record_warning(t, MISMATCH_KIND, message)  # for gspo report's list of the run's warnings
        if t.accelerator.is_main_process:  # every process decided the same from the gathered figures
            logger.warning(message)
