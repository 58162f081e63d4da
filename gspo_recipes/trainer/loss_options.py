"""TRL's loss options inside `GSPOTrainer`'s own loss, applied as TRL 1.16's `GRPOTrainer._compute_loss` applies them,
so that GSPO-token, the log-ratio clamp and the clip-range calibration stay on with them:

- `off_policy_mask_threshold` (OPSM, DeepSeek-V3.2): drops negative-advantage responses whose mean KL from the
  sampler exceeds the threshold; `gspo/opsm/masked_frac` is the share of responses it drops.
- `top_entropy_quantile`: masks the policy term of all but the highest-entropy tokens; `gspo/top_entropy/masked_frac`
  is the share of completion tokens it masks. With one ratio per response, TRL's mask weights each response by its
  share of high-entropy tokens (the ratio is the response's, so its gradient still reaches every token), and so does
  `gspo_recipes.loss.batch.response_share`; for per-token advantages too.
- `delta` (INTELLECT-2): caps the unclipped ratio (in `gspo_token_objective`); `gspo/delta/masked_frac` is the share of
  responses whose gradient the cap removes (s_i > delta with A < 0).
- The entropy bonus (`entropy_coef`, `use_adaptive_entropy`): TRL's term and controller, unchanged.

TRL logs none of the three shares. Masks and bonus call TRL's own `get_high_entropy_mask` and `get_off_policy_mask`;
they read the trainer's state, so they live in the trainer layer, and the masks go into `gspo_batch_loss` as tensors.
"""

from __future__ import annotations

import torch

from gspo_recipes import _trl
from gspo_recipes.loss import MAX_LOG_RATIO


def policy_masks(trainer, inputs, per_token_logps, old_per_token_logps, entropies, advantages, mask):
    """(off-policy mask (B, 1) or (B, T), entropy mask (B, T)), each None when its option is off."""
    entropy_mask = None
    if trainer.top_entropy_quantile < 1.0:
        entropy_mask = trainer.get_high_entropy_mask(entropies, mask, 1 - trainer.top_entropy_quantile)
    off_policy_mask = None
    if trainer.off_policy_mask_threshold is not None:
        # TRL: the sampler's log-probabilities when there are any (vLLM), so both sources of drift count.
        sampling_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)
        off_policy_mask = trainer.get_off_policy_mask(
            advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
            per_token_logps,
            sampling_logps,
            mask,
            trainer.off_policy_mask_threshold,
        )
    return off_policy_mask, entropy_mask


def masked_shares(trainer, mask, off_policy_mask, entropy_mask, step, global_mean) -> dict[str, float]:
    """The share each option masks, over all processes (module docstring); `step` is the micro-batch's `BatchLoss`."""
    shares = {}
    has_tokens = (mask.sum(-1) > 0).float()
    if off_policy_mask is not None:
        dropped = ((off_policy_mask.expand_as(mask) * mask).sum(-1) == 0).float() * has_tokens
        shares["gspo/opsm/masked_frac"] = global_mean(dropped, has_tokens)
    if entropy_mask is not None:
        shares["gspo/top_entropy/masked_frac"] = global_mean(1.0 - entropy_mask.float(), mask.float())
    if trainer.args.delta is not None:
        capped = (torch.exp(step.log_s.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)) > trainer.args.delta) & (
            step.response_adv < 0
        )
        shares["gspo/delta/masked_frac"] = global_mean(capped.float(), has_tokens)
    return shares


def add_entropy_bonus(trainer, loss, policy_loss, entropies, mask, entropy_mask, mode):
    """TRL's entropy bonus and adaptive controller (`GRPOTrainer._compute_loss`, TRL 1.16), on our loss."""
    metrics = _trl.metric_store(trainer, mode)
    effective_mask = mask if entropy_mask is None else mask * entropy_mask
    accumulation_factor = trainer.current_gradient_accumulation_steps if mode == "train" else 1.0
    entropy_loss = (entropies * effective_mask).sum() / effective_mask.sum().clamp(min=1.0) / accumulation_factor
    # The coefficient and gate of the previous optimizer step, so every micro-batch of a window applies the same bonus.
    if trainer.use_adaptive_entropy:
        apply_coef = trainer.entropy_coef if trainer._last_world_entropy <= trainer.args.entropy_target else 0.0
    else:
        apply_coef = trainer.entropy_coef
    loss = loss - apply_coef * entropy_loss
    metrics["policy_loss"].append(trainer.accelerator.gather(policy_loss).nanmean().item())
    if trainer.use_adaptive_entropy and mode == "train":
        stats = torch.stack([(entropies * effective_mask).sum(), effective_mask.sum()]).detach()
        window = trainer._entropy_window_stats
        trainer._entropy_window_stats = stats if window is None else window + stats
        if trainer.accelerator.sync_gradients:
            totals = trainer.accelerator.reduce(trainer._entropy_window_stats, reduction="sum")
            world_entropy = (totals[0] / totals[1].clamp(min=1.0)).item()
            args = trainer.args
            if world_entropy <= args.entropy_target:
                trainer.entropy_coef = min(trainer.entropy_coef + args.entropy_coef_delta, args.entropy_coef_max)
            else:
                trainer.entropy_coef = max(trainer.entropy_coef - args.entropy_coef_delta, args.entropy_coef_min)
            trainer._last_world_entropy = world_entropy
            trainer._entropy_window_stats = None
    if mode == "train" and trainer.accelerator.sync_gradients:
        metrics["entropy_coef"].append(trainer.entropy_coef)
    return loss
