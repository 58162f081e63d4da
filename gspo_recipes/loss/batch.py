"""The whole GSPO loss of one micro-batch, in one call: what `GSPOTrainer._compute_loss` hands TRL's batch to.

`gspo_batch_loss` takes tensors and settings, never the trainer: the objective (GSPO-token, with the optional
per-token clamp and `delta` cap), TRL's masks applied as TRL applies them with a sequence ratio, the vLLM importance
weights, the KL term, the normalisation and the statistics every metric and callback reads. What needs the trainer's
state or other processes (TRL's mask functions, the entropy bonus and its controller, averaging over processes) stays
in the trainer layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_recipes.loss.objective import (
    MAX_LOG_RATIO,
    Epsilon,
    clamp_token_log_ratios,
    clipped_sides,
    gspo_token_objective,
    length_scaled_epsilons,
    mean_over_responses,
    one_token_clip_drivers,
    response_advantage,
    sequence_log_ratio,
    zero_where_masked,
)


@dataclass
class BatchLoss:
    """The loss and what was measured on the way, all per response (N,) unless said otherwise."""

    loss: torch.Tensor  # scalar, divided by `accumulation_steps`
    policy_loss: torch.Tensor  # scalar, detached, before the division: TRL's `policy_loss`
    log_s: torch.Tensor  # log s_i, detached
    response_adv: torch.Tensor  # one advantage per response (the sign decides the clip side)
    lengths: torch.Tensor  # completion tokens per response
    eps_low: Epsilon  # the range each response was clipped with (floats, or (N,) when length-scaled)
    eps_high: Epsilon
    low: torch.Tensor  # bool: clipped below (s_i < 1 - eps_low with A < 0)
    high: torch.Tensor  # bool: clipped above (s_i > 1 + eps_high with A > 0)
    per_token_kl: torch.Tensor | None  # (N, T), when beta != 0
    one_token: torch.Tensor | None  # |log-ratio| of the token that alone clips each response, when measured


def response_share(token_mask: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, 1): each response's share of its completion tokens that `token_mask` keeps."""
    mask = mask.to(torch.float32)
    return ((token_mask * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)


def k3_kl(
    per_token_logps: torch.Tensor,
    ref_per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    mask: torch.Tensor,
    bias_corrected: bool = False,
) -> torch.Tensor:
    """TRL's k3 estimator of KL(pi_theta || pi_ref) per token; with `bias_corrected` (`use_bias_correction_kl`), times
    the sequence ratio with its gradient (TRL's `coef_1`), so the gradient equals TRL's in every setting."""
    per_token_kl = torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
    if bias_corrected:
        log_s = sequence_log_ratio(per_token_logps, old_per_token_logps, mask)
        per_token_kl = per_token_kl * torch.exp(log_s.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)).unsqueeze(-1)
    return per_token_kl


def gspo_batch_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
    *,
    reference_length: int | None = None,
    delta: float | None = None,
    token_log_ratio_clip: float | None = None,
    off_policy_mask: torch.Tensor | None = None,
    entropy_mask: torch.Tensor | None = None,
    importance_weights: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    bias_corrected_kl: bool = False,
    accumulation_steps: int = 1,
    measure_one_token: bool = False,
    num_responses: int | None = None,
) -> BatchLoss:
    """GSPO's loss of one micro-batch and its statistics.

    The loss is the mean over each response's tokens, then over the micro-batch's responses (its size, as TRL counts:
    a truncated response with no tokens counts as zero and leaves its neighbours' weight alone), divided by
    `accumulation_steps` (TRL turns off the Trainer's own scaling). `num_responses` replaces that count (dynamic
    sampling's padding rows do not count). `reference_length` turns on the length-scaled
    range: response i gets eps * sqrt(reference_length / L_i). Log-probabilities at masked positions are never read
    (a sampler may pad them with -inf or NaN).
    """
    per_token_logps = zero_where_masked(per_token_logps, mask)
    old_per_token_logps = zero_where_masked(old_per_token_logps, mask)
    if ref_per_token_logps is not None:
        ref_per_token_logps = zero_where_masked(ref_per_token_logps, mask)
    lengths = mask.sum(-1)
    eps_low, eps_high = length_scaled_epsilons(eps_low, eps_high, lengths, reference_length)
    surrogate, log_s, _ = gspo_token_objective(
        per_token_logps,
        old_per_token_logps,
        advantages,
        mask,
        eps_low,
        eps_high,
        delta=delta,
        token_log_ratio_clip=token_log_ratio_clip,
    )
    per_token_loss = -surrogate
    if off_policy_mask is not None:
        per_token_loss = per_token_loss * off_policy_mask
    if entropy_mask is not None:  # TRL's mask with one ratio per response weighs each response by its share
        per_token_loss = per_token_loss * response_share(entropy_mask, mask).to(per_token_loss.dtype)
    if importance_weights is not None:
        per_token_loss = per_token_loss * importance_weights
    per_token_kl = None
    if beta != 0.0:
        per_token_kl = k3_kl(per_token_logps, ref_per_token_logps, old_per_token_logps, mask, bias_corrected_kl)
        per_token_loss = per_token_loss + beta * per_token_kl
    count = mask.size(0) if num_responses is None else num_responses
    loss = mean_over_responses(per_token_loss, mask, num_responses=count)
    policy_loss = loss.detach()

    response_adv = response_advantage(advantages, mask)
    low, high = clipped_sides(log_s, response_adv, eps_low, eps_high)
    one_token = None
    if measure_one_token:  # O(N T) on detached values, judged on what the loss averaged
        log_ratio = per_token_logps.detach() - old_per_token_logps
        if token_log_ratio_clip is not None:
            log_ratio = clamp_token_log_ratios(log_ratio, response_adv, token_log_ratio_clip)[0]
        one_token = one_token_clip_drivers(log_ratio, mask, low, high, eps_low, eps_high)
    return BatchLoss(
        loss=loss / accumulation_steps,
        policy_loss=policy_loss,
        log_s=log_s,
        response_adv=response_adv,
        lengths=lengths,
        eps_low=eps_low,
        eps_high=eps_high,
        low=low,
        high=high,
        per_token_kl=per_token_kl,
        one_token=one_token,
    )
