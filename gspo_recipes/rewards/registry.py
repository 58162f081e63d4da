"""Find reward functions by name, so that recipes and YAML can say `reward_funcs: [gsm8k_accuracy, format]`.

A name is either registered here or an importable `module:function` (or `module:Class.attribute`). Options turn a
reward into a configured one: `get_reward("soft_overlong_punishment", max_completion_len=4096)`, or in YAML a
one-key mapping `{soft_overlong_punishment: {max_completion_len: 4096}}`.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

# Names map to import paths, so looking one up imports only the module it lives in.
_REGISTRY: dict[str, str] = {
    "gsm8k_accuracy": "gspo_recipes.rewards.math:gsm8k_accuracy",
    "math_accuracy": "gspo_recipes.rewards.math:math_accuracy",
    "gsm8k_accuracy_lenient": "gspo_recipes.rewards.math:gsm8k_accuracy_lenient",
    "math_accuracy_lenient": "gspo_recipes.rewards.math:math_accuracy_lenient",
    "format": "gspo_recipes.rewards.format:format_reward",
    "format_strict": "gspo_recipes.rewards.format:format_strict_reward",
    "soft_overlong_punishment": "gspo_recipes.rewards.length:soft_overlong_punishment",
    "code_execution": "gspo_recipes.rewards.code.reward:code_execution",
    "code_execution_binary": "gspo_recipes.rewards.code.reward:code_execution_binary",
}


# What a reward measures, for the group statistics and dynamic sampling (gspo_recipes/stats/groups.py): "accuracy"
# scores whether the task was solved (1) or not (0); "shaping" pays for form. A function of one's own says it with
# an attribute, `my_reward.reward_kind = "accuracy"`; TRL's own accuracy rewards are known by their import path.
REWARD_KIND_ATTRIBUTE = "reward_kind"
_KINDS: dict[str, str] = {
    "gsm8k_accuracy": "accuracy",
    "math_accuracy": "accuracy",
    "gsm8k_accuracy_lenient": "accuracy",
    "math_accuracy_lenient": "accuracy",
    "code_execution": "accuracy",
    "code_execution_binary": "accuracy",
    "format": "shaping",
    "format_strict": "shaping",
    "soft_overlong_punishment": "shaping",
}
_TRL_ACCURACY_REWARDS = (
    "trl.rewards.accuracy_rewards:accuracy_reward",
    "trl.rewards.accuracy_rewards:reasoning_accuracy_reward",
)


def reward_kind(func: Callable) -> str | None:
    """ "accuracy", "shaping" or None (unknown): the function's `reward_kind` attribute, else its registry entry's kind
    (a registered function, or one configured from it), else TRL's accuracy rewards by import path."""
    kind = getattr(func, REWARD_KIND_ATTRIBUTE, None)
    if kind is not None:
        return kind
    target = getattr(func, "func", func)  # a ConfiguredReward's function
    for name, kind in _KINDS.items():
        registered = _REGISTRY.get(name)
        if not callable(registered):  # a path: resolved only if its module is loaded (target's module is)
            module = sys.modules.get(str(registered).partition(":")[0])
            registered = _resolve(name) if module is not None else None
        if registered is target:
            return kind
    path = f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', '')}"
    return "accuracy" if path in _TRL_ACCURACY_REWARDS else None


class ConfiguredReward:
    """A reward with some keyword options fixed: a `functools.partial` that keeps a `__name__` (TRL logs by it) and
    pickles (TRL may ship rewards to a spawned process)."""

    def __init__(self, func: Callable, name: str | None = None, **options: Any):
        functools.update_wrapper(self, func)
        self.func, self.options = func, options
        self.__name__ = name or func.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        # Positional arguments pass through as given: TRL's own tests call a length reward with the ids alone.
        return self.func(*args, **{**kwargs, **self.options})

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self.options.items())
        return f"<reward {self.__name__}({options})>"


def register_reward(name: str, target: str | Callable, kind: str | None = None) -> None:
    """Make `name` resolve to `target` (a callable or a `module:function` path); `kind`: "accuracy" or "shaping"."""
    _REGISTRY[name] = target
    if kind is not None:
        _KINDS[name] = kind


def available_rewards() -> list[str]:
    """The registered names."""
    return sorted(_REGISTRY)


def get_reward(spec: str | Mapping[str, Mapping[str, Any]] | Callable, **options: Any) -> Callable:
    """The reward function for a registered name, a `module:function` path, a one-key `{name: options}` mapping (as
    YAML gives), or a callable; with `options`, a `ConfiguredReward` that passes them on every call."""
    if isinstance(spec, Mapping):
        if len(spec) != 1:
            raise ValueError(f"a reward given as a mapping needs exactly one key (its name), got {list(spec)}")
        [(name, mapping_options)] = spec.items()
        return get_reward(name, **{**dict(mapping_options or {}), **options})
    func = spec if callable(spec) else _resolve(spec)
    if not options:
        return func
    return ConfiguredReward(func, **options)


def get_rewards(specs: list) -> list[Callable]:
    """`get_reward` over a list, as in a recipe's `reward_funcs`."""
    return [get_reward(spec) for spec in specs]


def _resolve(name: str) -> Callable:
    target = _REGISTRY.get(name, name)
    if callable(target):
        return target
    if ":" not in target:
        raise KeyError(f"unknown reward {name!r}: registered are {available_rewards()}, or give 'module:function'")
    module_name, _, attribute_path = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attribute in attribute_path.split("."):
        obj = getattr(obj, attribute)
    if not callable(obj):
        raise TypeError(f"{target!r} is not callable")
    return obj
