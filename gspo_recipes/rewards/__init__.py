"""Verifiable rewards for GSPO/GRPO recipes, in TRL's contract: `fn(completions, **columns) -> list[float | None]`.

None means "cannot be judged" (an unparseable gold answer, an infrastructure failure); a wrong answer is 0.0.
Find them by name with `get_reward("gsm8k_accuracy")` or any importable `module:function`.
"""

from .code import code_execution, code_execution_binary, extract_code
from .format import format_reward, format_strict_reward
from .length import make_soft_overlong_punishment, soft_overlong_punishment
from .math import gsm8k_accuracy, math_accuracy
from .registry import ConfiguredReward, available_rewards, get_reward, get_rewards, register_reward

__all__ = [
    "ConfiguredReward",
    "available_rewards",
    "code_execution",
    "code_execution_binary",
    "extract_code",
    "format_reward",
    "format_strict_reward",
    "get_reward",
    "get_rewards",
    "gsm8k_accuracy",
    "make_soft_overlong_punishment",
    "math_accuracy",
    "register_reward",
    "soft_overlong_punishment",
]
