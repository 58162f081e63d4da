"""gspo-recipes: GSPO (Group Sequence Policy Optimization) for Hugging Face TRL.

The names most users need: `GSPOConfig`, `GSPOTrainer`, and the TRL-free reference loss `gspo_loss`.
They load on first use, so that `gspo simulate` and `gspo report` start without importing TRL.
"""

import importlib

__version__ = "0.1.0"
__all__ = ["GSPOConfig", "GSPOTrainer", "gspo_loss"]

_HOMES = {
    "GSPOConfig": "gspo_recipes.trainer.config",
    "GSPOTrainer": "gspo_recipes.trainer.gspo_trainer",
    "gspo_loss": "gspo_recipes.loss",
}


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
