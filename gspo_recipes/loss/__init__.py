"""The objective layer: the GSPO loss, the clip rule, the masks of TRL's loss options, one-token statistics.

`gspo_batch_loss` (batch.py) is the one call the trainer makes per micro-batch; `objective.py` holds the pieces.
Math on tensors with no TRL in it. The public names are re-exported here: `from gspo_recipes.loss import gspo_loss`.
"""

from gspo_recipes.loss.batch import BatchLoss, gspo_batch_loss
from gspo_recipes.loss.objective import (
    EPS_HIGH,
    EPS_LOW,
    MAX_LOG_RATIO,
    clamp_to_range,
    clamp_token_log_ratios,
    clipped_sides,
    grpo_token_loss,
    gspo_loss,
    gspo_token_objective,
    length_scaled_epsilons,
    mean_over_responses,
    one_token_clip_drivers,
    one_token_clips,
    outside_clip_range,
    response_advantage,
    sequence_log_ratio,
)

__all__ = [
    "BatchLoss",
    "gspo_batch_loss",
    "EPS_LOW",
    "EPS_HIGH",
    "MAX_LOG_RATIO",
    "sequence_log_ratio",
    "length_scaled_epsilons",
    "response_advantage",
    "gspo_token_objective",
    "clamp_token_log_ratios",
    "one_token_clips",
    "one_token_clip_drivers",
    "clamp_to_range",
    "outside_clip_range",
    "clipped_sides",
    "mean_over_responses",
    "gspo_loss",
    "grpo_token_loss",
]
