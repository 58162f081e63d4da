"""Diagnostics callbacks for GSPO runs, installed as `gspo_recipes.callbacks`.

Each drops into any TRL `GRPOTrainer` with `importance_sampling_level="sequence"`:
`trainer.add_callback(ClipFractionByLengthCallback(trainer))`. `GSPOTrainer` registers `default_callbacks` itself.
"""

from .clip_fraction import ClipFractionByLengthCallback, HealthWarnings
from .log_ratio_histogram import DIAGNOSTICS_FILE, LogRatioHistogramCallback
from .response_stats import ResponseStats, attach_response_stats
from .reward_hacking import RewardHackingCallback


def default_callbacks(trainer) -> list:
    """The callbacks `GSPOTrainer` registers when `gspo_diagnostics` is on."""
    return [ClipFractionByLengthCallback(trainer), LogRatioHistogramCallback(trainer)]


__all__ = [
    "DIAGNOSTICS_FILE",
    "ClipFractionByLengthCallback",
    "HealthWarnings",
    "LogRatioHistogramCallback",
    "ResponseStats",
    "RewardHackingCallback",
    "attach_response_stats",
    "default_callbacks",
]
