"""Diagnostics callbacks for GSPO runs, installed as `gspo_recipes.callbacks`.

Each drops into any TRL `GRPOTrainer` with `importance_sampling_level="sequence"`:
`trainer.add_callback(ClipFractionByLengthCallback(trainer))`. `GSPOTrainer` registers `default_callbacks` itself.
"""

from gspo_recipes._trl import attach_response_stats
from gspo_recipes.callbacks.clip_fraction import ClipFractionByLengthCallback
from gspo_recipes.callbacks.entropy_collapse import EntropyCollapseCallback
from gspo_recipes.callbacks.heldout_eval import HeldoutEvalCallback
from gspo_recipes.callbacks.log_ratio_histogram import LogRatioHistogramCallback
from gspo_recipes.callbacks.reward_hacking import CODE_REWARDS, RewardHackingCallback
from gspo_recipes.callbacks.routing_volatility import RoutingVolatilityCallback
from gspo_recipes.moe import is_moe_model
from gspo_recipes.runfiles.diagnostics import DIAGNOSTICS_FILE
from gspo_recipes.stats.health import HealthWarnings
from gspo_recipes.stats.response_stats import ResponseStats


def default_callbacks(trainer) -> list:
    """The callbacks `GSPOTrainer` registers when `gspo_diagnostics` is on: reward hacking with a code reward,
    routing volatility for MoE models only. The entropy check comes before the diagnostics file's writer, so that a
    warning it gives at a log lands in that step's line."""
    callbacks = [
        ClipFractionByLengthCallback(trainer),
        EntropyCollapseCallback(trainer),
        LogRatioHistogramCallback(trainer),
    ]
    if any(name in CODE_REWARDS for name in getattr(trainer, "reward_func_names", [])):
        callbacks.append(RewardHackingCallback(trainer))
    if is_moe_model(trainer.model):
        callbacks.append(RoutingVolatilityCallback(trainer))
    return callbacks


__all__ = [
    "DIAGNOSTICS_FILE",
    "ClipFractionByLengthCallback",
    "EntropyCollapseCallback",
    "HealthWarnings",
    "HeldoutEvalCallback",
    "LogRatioHistogramCallback",
    "ResponseStats",
    "RewardHackingCallback",
    "RoutingVolatilityCallback",
    "attach_response_stats",
    "default_callbacks",
]
