"""Length shaping: DAPO's soft overlong punishment, on token counts (computed by `trl.rewards`)."""

from __future__ import annotations

import warnings
from typing import Any

from trl.rewards import get_soft_overlong_punishment

from .registry import ConfiguredReward

DEFAULT_MAX_COMPLETION_LEN = 512  # TRL's GRPOConfig.max_completion_length default
DEFAULT_SOFT_PUNISH_CACHE = 128


def soft_overlong_punishment(
    completions: list | None = None,
    completion_ids: list | None = None,
    *,
    max_completion_len: int = DEFAULT_MAX_COMPLETION_LEN,
    soft_punish_cache: int = DEFAULT_SOFT_PUNISH_CACHE,
    **kwargs: Any,
) -> list[float | None]:
    """DAPO's soft overlong punishment (eq. 13) on the number of completion tokens |y|:
    0 while |y| <= L_max - L_cache, then falling linearly to -1 at L_max, and -1 beyond.

    Set L_max (`max_completion_len`) to the trainer's `max_completion_length`: use
    `make_soft_overlong_punishment(...)` or registry options, since the registered default assumes 512 and 128.
    Needs `completion_ids` (TRL passes them by name); called with the ids alone, positionally, as TRL's own
    `get_soft_overlong_punishment(...)(completion_ids)` is, it reads them. Without ids every score is None.
    """
    if completion_ids is None and _are_token_ids(completions):
        completion_ids = completions  # soft_overlong_punishment(completion_ids), as TRL's tests call its own
    if completion_ids is None:
        warnings.warn("soft_overlong_punishment needs completion_ids; returning None", RuntimeWarning, stacklevel=2)
        return [None] * len(completions or [])
    # TRL's implementation of DAPO's formula; ours adds the registry name, options from YAML and None without ids.
    return get_soft_overlong_punishment(max_completion_len, soft_punish_cache)(completion_ids)


def _are_token_ids(values: Any) -> bool:
    """A list of token-id sequences (lists of ints), as opposed to completions (strings or chat messages)."""
    if not isinstance(values, (list, tuple)) or not values:
        return False
    return all(isinstance(ids, (list, tuple)) and all(isinstance(t, int) for t in ids) for ids in values)


def make_soft_overlong_punishment(max_completion_len: int, soft_punish_cache: int) -> ConfiguredReward:
    """`soft_overlong_punishment` with L_max and L_cache fixed; it keeps the name `soft_overlong_punishment`."""
    if not 0 < soft_punish_cache <= max_completion_len:
        raise ValueError("need 0 < soft_punish_cache <= max_completion_len")
    return ConfiguredReward(
        soft_overlong_punishment, max_completion_len=max_completion_len, soft_punish_cache=soft_punish_cache
    )
