"""gspo-recipes: GSPO (Group Sequence Policy Optimization) for Hugging Face TRL.

The names most users need: `GSPOConfig`, `GSPOTrainer`, and the TRL-free reference loss `gspo_loss`.
"""

from .config import GSPOConfig
from .loss import gspo_loss
from .trainer import GSPOTrainer

__all__ = ["GSPOConfig", "GSPOTrainer", "gspo_loss"]
__version__ = "0.1.0"
