"""vLLM's importance-sampling correction for GSPO (`vllm_importance_sampling_sequence_ratio`).

TRL's sequence modes weight a response by exp(sum_t [log pi_train - log pi_vllm]), which collapses to 0 or blows up
on long responses however small the per-token mismatch (TRL issues 4772 and 5814). "geometric_mean" uses
exp(mean_t [...]) instead, the same length normalisation as s_i; "product" keeps TRL's. The bounds
`vllm_importance_sampling_clip_min/max` then apply to the per-token geometric mean.
"""

from __future__ import annotations

import math

import torch

from gspo_recipes._trl import loss_mask, metric_store

IS_SEQUENCE_RATIOS = ("geometric_mean", "product")
# TRL's names for the importance-sampling weights; overwritten with the weights actually applied.
TRL_IS_METRICS = {
    "min": "sampling/importance_sampling_ratio/min",
    "mean": "sampling/importance_sampling_ratio/mean",
    "max": "sampling/importance_sampling_ratio/max",
}


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


def apply_geometric_mean_weight(trainer, output: dict, mode: str) -> None:
    """Replace TRL's sequence weight in `output` by the geometric-mean one, and log the weights actually applied."""
    if not trainer.vllm_importance_sampling_mode.startswith("sequence"):
        return
    old, sampling = output.get("old_per_token_logps"), output.get("sampling_per_token_logps")
    if old is None or sampling is None:
        return
    raw = torch.exp(sequence_is_log_weight(old, sampling, loss_mask(output), "geometric_mean"))
    weight = bound_is_weight(
        raw,
        trainer.vllm_importance_sampling_mode,
        trainer.vllm_importance_sampling_clip_min,
        trainer.vllm_importance_sampling_clip_max,
    )
    output["importance_sampling_ratio"] = weight
    gathered = trainer.accelerator.gather(weight.reshape(-1))
    bounded = trainer.accelerator.gather((weight != raw).reshape(-1).float())
    metrics = metric_store(trainer, mode)
    for stat, value in (("min", gathered.min()), ("mean", gathered.mean()), ("max", gathered.max())):
        name = TRL_IS_METRICS[stat]
        if metrics[name]:  # TRL logged the product for this batch: show the weight actually applied
            metrics[name][-1] = value.item()
        else:
            metrics[name].append(value.item())
    metrics["gspo/is_correction/bounded_frac"].append(bounded.mean().item())
