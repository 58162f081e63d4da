"""The trainer layer: GSPOConfig, its checks, the GRPOConfig conversion, dynamic sampling, group health, GSPOTrainer.

`gspo_recipes.trainer.GSPOTrainer` and `.GSPOConfig` load on first use, as at the package's top.
"""

import importlib

_HOMES = {"GSPOConfig": "gspo_recipes.trainer.config", "GSPOTrainer": "gspo_recipes.trainer.gspo_trainer"}


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
