"""Diagnostics callbacks for GSPO runs, installed as `gspo_recipes.callbacks`.

Each drops into any TRL `GRPOTrainer` with `importance_sampling_level="sequence"`:
`trainer.add_callback(ClipFractionByLengthCallback(trainer))`. `GSPOTrainer` registers `default_callbacks` itself.
"""

from .response_stats import ResponseStats, attach_response_stats


def default_callbacks(trainer) -> list:
    """The callbacks `GSPOTrainer` registers when `gspo_diagnostics` is on."""
    return []


__all__ = ["ResponseStats", "attach_response_stats", "default_callbacks"]
