"""The GSPO objective with no TRL in it.

GSPO (Zheng et al. 2025) gives every response one importance ratio, the geometric mean of its token ratios,

    s_i = exp( mean_t [ log pi_theta(y_it) - log pi_old(y_it) ] ),

and applies PPO's clipped surrogate once per response: min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i).

Everything here is written in the GSPO-token form (the paper's stop-gradient variant, and Tinker's): each token
carries the value s_i but the gradient of its own log-probability,

    s_it = sg[s_i] * pi_theta(y_it) / sg[pi_theta(y_it)],

so per-token advantages A_it work too. With one advantage per response it equals GSPO in value, clip and gradient,
which is why `GSPOTrainer` uses this one function for both.

`GSPOTrainer` computes its loss with these functions; other trainers and the experiments can call them directly.
"""

from __future__ import annotations

import torch

# Paper defaults (Zheng et al. 2025, and Tinker's GSPO loss): the clip range is three orders of magnitude narrower
# than GRPO's because the mean of many token log-ratios concentrates like 1/sqrt(length).
EPS_LOW = 3e-4
EPS_HIGH = 4e-4
# The mean log-ratio is clamped to this before exp: s_i stays within [4.5e-5, 2.2e4], so no response yields inf or
# NaN. Far outside any clip range, so the clamp never changes which responses are clipped.
MAX_LOG_RATIO = 10.0

# A clip-range bound: one float for every response, or one value per response, shape (N,) (a length-scaled range).
Epsilon = float | torch.Tensor


def zero_where_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`values` with 0 wherever `mask` is 0, selected rather than multiplied: a sampler may pad log-probs with -inf or
    NaN, and 0 * inf is NaN (in the value, and in the gradient of everything computed from it). The gradient at the
    masked positions is 0."""
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def sequence_log_ratio(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i: the mean token log-ratio over each response's masked tokens, shape (N,).

    A response with no tokens gets 0 (s_i = 1) instead of a 0/0. Values at masked positions are never read.
    """
    mask = mask.to(logp.dtype)
    log_ratio = zero_where_masked(logp, mask) - zero_where_masked(logp_old, mask)
    return (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def length_scaled_epsilons(
    eps_low: float, eps_high: float, lengths: torch.Tensor, reference_length: int | None
) -> tuple[Epsilon, Epsilon]:
    """The clip range each response gets: (eps_low, eps_high) unchanged when `reference_length` is None (the plain
    range), else per response eps * sqrt(reference_length / L), both sides, shape (N,).

    Why: under independent per-token drift the spread of log s_i falls like 1/sqrt(L) (the explainer's simulation), so
    a fixed range clips short responses far more often than long ones. Scaling both bounds by the same law keeps the
    share clipped the same at every length; at L = reference_length the range is the configured one. A response with
    no tokens is treated as one token long (it is never counted in the statistics).
    """
    if reference_length is None:
        return eps_low, eps_high
    scale = torch.sqrt(reference_length / lengths.detach().double().clamp(min=1.0))
    return eps_low * scale, eps_high * scale


def response_advantage(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One advantage per response: itself for (N,), the mean over the response's tokens for (N, T).

    Used only to decide on which side a response counts as clipped in the statistics.
    """
    if advantages.dim() == 1:
        return advantages
    return zero_where_masked(advantages, mask).sum(-1) / mask.to(advantages.dtype).sum(-1).clamp(min=1.0)


def gspo_token_objective(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: Epsilon = EPS_LOW,
    eps_high: Epsilon = EPS_HIGH,
    max_log_ratio: float = MAX_LOG_RATIO,
    delta: float | None = None,
    token_log_ratio_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate (to be maximised) in the GSPO-token form.

    Args:
        logp: (N, T) log-probabilities of the sampled tokens under the current policy (with gradient).
        logp_old: (N, T) the same under the policy that sampled them (no gradient).
        advantages: (N,) one per response, or (N, T) one per token.
        mask: (N, T) 1 on completion tokens, 0 on padding.
        eps_low, eps_high: the clip range [1 - eps_low, 1 + eps_high]: floats, or (N,) tensors of one range per
            response (`length_scaled_epsilons`).
        delta: TRL's `delta` (INTELLECT-2): the unclipped ratio is capped at it, so a negative-advantage response with
            s_i > delta has no gradient. None (default) caps nothing.
        token_log_ratio_clip: GMPO's per-token clamp c (`clamp_token_log_ratios`): before the mean, each token's
            log-ratio is clamped to c (A > 0) or -c (A < 0), and a clamped token gets no gradient. None (default) is
            plain GSPO, computed exactly as without the argument.

    Returns:
        surrogate (N, T), log s_i (N,, detached and unclamped) and the per-token ratio value s_it (N, T, detached).
        With `token_log_ratio_clip`, log s_i is the mean of the clamped token log-ratios: the ratio the clip judges.
        Values at masked positions (of logp, logp_old, advantages) are never read: -inf or NaN padding is harmless.
    """
    logp, logp_old = zero_where_masked(logp, mask), zero_where_masked(logp_old, mask)
    if advantages.dim() == 2:
        advantages = zero_where_masked(advantages, mask)
    if token_log_ratio_clip is None:
        log_s = sequence_log_ratio(logp.detach(), logp_old, mask)
        # Value: the (clamped) sequence ratio. Gradient: that of each token's own log-probability.
        log_s_token = log_s.clamp(-max_log_ratio, max_log_ratio).unsqueeze(-1) + logp - logp.detach()
    else:
        log_ratio, active = clamp_token_log_ratios(
            logp.detach() - logp_old, response_advantage(advantages.detach(), mask), token_log_ratio_clip
        )
        log_s = sequence_log_ratio(log_ratio, torch.zeros_like(log_ratio), mask)
        own_gradient = (logp - logp.detach()) * active.to(logp.dtype)  # GMPO: no gradient where the clamp holds
        log_s_token = log_s.clamp(-max_log_ratio, max_log_ratio).unsqueeze(-1) + own_gradient
    ratio = torch.exp(log_s_token)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    unclipped = ratio if delta is None else torch.clamp(ratio, max=delta)
    surrogate = torch.minimum(unclipped * adv, clamp_to_range(ratio, eps_low, eps_high) * adv)
    return surrogate, log_s, ratio.detach()


def clamp_token_log_ratios(
    log_ratio: torch.Tensor, response_adv: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GMPO's pessimistic per-token clamp (Zhao et al. 2025, Algorithm 1) on log w_it = log pi_theta - log pi_old:
    (clamped log-ratios, mask of the tokens left as they were), both (N, T).

    Only the side that would raise the objective is clamped, as PPO's min does: with A > 0 a token's log-ratio is
    capped at +clip, with A <= 0 (GMPO's sign rule) floored at -clip. A token that moved against its response's
    advantage keeps its value, so the clamp never makes a response look better than it is. The sign is the response's
    (the mean over its tokens for per-token advantages), so that each response keeps one ratio and one clip decision.
    """
    positive = (response_adv > 0).unsqueeze(-1)
    clamped = torch.where(positive, log_ratio.clamp(max=clip), log_ratio.clamp(min=-clip))
    return clamped, clamped == log_ratio


def one_token_clips(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    clipped_low: torch.Tensor,
    clipped_high: torch.Tensor,
    eps_low: Epsilon,
    eps_high: Epsilon,
) -> torch.Tensor:
    """Which clipped responses are clipped because of one token, shape (N,) bool.

    A response clipped high (low) is a one-token clip when, with its largest (smallest) token log-ratio left out, the
    mean of the others is no longer above 1 + eps_high (below 1 - eps_low): the token pushing in the clipped direction
    alone takes log s_i out of the range. Not the largest |log-ratio|, which may push the other way, and is not the
    token GMPO's pessimistic clamp caps. A one-token response has nothing left to compare and never counts.
    `log_ratio` is what the loss averaged (the clamped values when `token_log_ratio_clip` is on). O(N T), no gradient.
    """
    return one_token_clip_drivers(log_ratio, mask, clipped_low, clipped_high, eps_low, eps_high) > 0


def one_token_clip_drivers(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    clipped_low: torch.Tensor,
    clipped_high: torch.Tensor,
    eps_low: Epsilon,
    eps_high: Epsilon,
) -> torch.Tensor:
    """For each one-token clip (`one_token_clips`), the |log-ratio| of the token that alone clips it; 0 elsewhere.
    Shape (N,) float. The size tells an outlier token (the explainer's 0.001 -> 0.1 is log 100 = 4.6) from the
    ordinary drift of a peaked model, whose few uncertain tokens carry all of log s_i."""
    drivers = torch.zeros_like(clipped_low, dtype=torch.float32)
    rows = (clipped_low | clipped_high).nonzero().squeeze(-1)  # only the clipped responses are looked at
    if rows.numel() == 0:
        return drivers
    log_ratio = log_ratio.detach()[rows].float()
    mask = mask[rows].bool()
    lengths = mask.sum(-1)
    total = (log_ratio * mask).sum(-1)
    largest = log_ratio.masked_fill(~mask, float("-inf")).amax(-1)
    smallest = log_ratio.masked_fill(~mask, float("inf")).amin(-1)
    rest = (lengths - 1).clamp(min=1).to(total.dtype)
    # A length-scaled range has one bound per response: those of the rows looked at.
    eps_low, eps_high = (e[rows] if isinstance(e, torch.Tensor) and e.dim() else e for e in (eps_low, eps_high))
    _, rest_above = outside_clip_range((total - largest.clamp(min=-1e30)) / rest, eps_low, eps_high)
    rest_below, _ = outside_clip_range((total - smallest.clamp(max=1e30)) / rest, eps_low, eps_high)
    high = clipped_high[rows] & ~rest_above & (lengths >= 2)
    low = clipped_low[rows] & ~rest_below & (lengths >= 2)
    # A token that alone takes the mean out of the range has moved, so its |log-ratio| is > 0 wherever it counts.
    drivers[rows] = torch.where(high, largest.abs(), torch.where(low, smallest.abs(), torch.zeros_like(largest)))
    return drivers


def clamp_to_range(ratio: torch.Tensor, eps_low: Epsilon, eps_high: Epsilon) -> torch.Tensor:
    """clip(ratio, 1 - eps_low, 1 + eps_high) for ratios of shape (N,) or (N, T), with float or (N,) bounds."""
    if not isinstance(eps_low, torch.Tensor) and not isinstance(eps_high, torch.Tensor):
        return torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)  # the plain range, exactly as before

    def bound(offset: torch.Tensor) -> torch.Tensor:
        # 1 +- eps in float64, then rounded once to the ratio's dtype, as torch.clamp rounds a float bound.
        offset = (1.0 + torch.as_tensor(offset, dtype=torch.float64, device=ratio.device)).to(ratio.dtype)
        return offset.reshape(offset.shape + (1,) * (ratio.dim() - offset.dim())) if offset.dim() else offset

    return torch.clamp(ratio, bound(-torch.as_tensor(eps_low)), bound(torch.as_tensor(eps_high)))


def outside_clip_range(log_s: torch.Tensor, eps_low: Epsilon, eps_high: Epsilon) -> tuple[torch.Tensor, torch.Tensor]:
    """Where s_i = exp(log_s) lies outside [1 - eps_low, 1 + eps_high]: (below, above) boolean masks. The bounds are
    floats or (N,) tensors, one per response (`length_scaled_epsilons`).

    The one definition of the clip range on a ratio; `clipped_sides` adds the advantage's sign.
    """
    s = torch.exp(log_s.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))
    return s < 1.0 - eps_low, s > 1.0 + eps_high


def clipped_sides(
    log_s: torch.Tensor, response_adv: torch.Tensor, eps_low: Epsilon, eps_high: Epsilon
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which responses the clip removes from the gradient: (low, high) boolean masks of shape (N,).

    High: s_i > 1 + eps_high with A > 0. Low: s_i < 1 - eps_low with A < 0 (PPO's definition, as in TRL).
    This is the clip rule every statistic, file and command of the project uses.
    """
    below, above = outside_clip_range(log_s, eps_low, eps_high)
    return below & (response_adv < 0), above & (response_adv > 0)


def mean_over_responses(per_token: torch.Tensor, mask: torch.Tensor, num_responses: int | None = None) -> torch.Tensor:
    """Mean over each response's tokens, then over responses (TRL's `loss_type="grpo"`).

    Responses with no completion tokens contribute nothing to the sum. By default they do not count either (the mean
    of this batch's non-empty responses); `num_responses` fixes the count instead. `GSPOTrainer` passes the size of
    the micro-batch, as TRL does, so that a response's weight does not depend on how many of the responses that
    happened to share its micro-batch were truncated (`mask_truncated_completions`).
    """
    mask = mask.to(per_token.dtype)
    lengths = mask.sum(-1)
    per_response = (zero_where_masked(per_token, mask) * mask).sum(-1) / lengths.clamp(min=1.0)
    count = (lengths > 0).sum().clamp(min=1) if num_responses is None else torch.tensor(max(num_responses, 1))
    return per_response.sum() / count.to(per_token.dtype)


def gspo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: Epsilon = EPS_LOW,
    eps_high: Epsilon = EPS_HIGH,
) -> tuple[torch.Tensor, dict]:
    """The GSPO loss (to be minimised) and its statistics.

    Args:
        logp, logp_old, mask: (N, T); see `gspo_token_objective`.
        advantages: (N,) group-normalised, one per response (GSPO), or (N, T) per token (GSPO-token).
        eps_low, eps_high: the clip range [1 - eps_low, 1 + eps_high] for s_i: floats, or (N,) tensors of one range
            per response (`length_scaled_epsilons`).

    Returns:
        loss: a scalar, minus the mean over responses of the per-response mean surrogate.
        stats: floats `clip_frac`, `clip_frac_low`, `clip_frac_high` (fractions of responses), `log_s_mean`,
            `log_s_std`; and per-response tensors `log_s`, `clipped_low`, `clipped_high`, `lengths` for diagnostics.
            Responses with no completion tokens are left out of the statistics.
    """
    surrogate, log_s, _ = gspo_token_objective(logp, logp_old, advantages, mask, eps_low, eps_high)
    loss = -mean_over_responses(surrogate, mask)
    lengths = mask.sum(-1).long()
    low, high = clipped_sides(log_s, response_advantage(advantages.detach(), mask), eps_low, eps_high)
    kept = lengths > 0
    log_s_kept = log_s[kept].float()
    count = max(int(kept.sum()), 1)
    stats = {
        "clip_frac_low": low[kept].sum().item() / count,
        "clip_frac_high": high[kept].sum().item() / count,
        "clip_frac": (low | high)[kept].sum().item() / count,
        "log_s_mean": log_s_kept.mean().item() if log_s_kept.numel() else 0.0,
        "log_s_std": log_s_kept.std(correction=0).item() if log_s_kept.numel() else 0.0,
        "log_s": log_s.detach(),
        "clipped_low": low,
        "clipped_high": high,
        "lengths": lengths,
    }
    return loss, stats


def grpo_token_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> tuple[torch.Tensor, dict]:
    """GRPO's loss for contrast: a ratio and a clip per token, reduced like `gspo_loss`.

    Returns the loss and `clip_frac`, the fraction of completion tokens clipped, and the token `log_ratio`.
    """
    logp, logp_old = zero_where_masked(logp, mask), zero_where_masked(logp_old, mask)  # -inf/NaN padding unread
    log_w = (logp - logp_old).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # no inf from one wild token
    ratio = torch.exp(log_w)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv)
    ratio = ratio.detach()
    clipped = (((ratio > 1.0 + eps_high) & (adv > 0)) | ((ratio < 1.0 - eps_low) & (adv < 0))) & mask.bool()
    stats = {"clip_frac": clipped.sum().item() / max(mask.sum().item(), 1.0), "log_ratio": log_w.detach()}
    return -mean_over_responses(surrogate, mask), stats
