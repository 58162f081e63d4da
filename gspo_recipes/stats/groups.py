"""Group health: which prompt groups carry signal, judged on the signal (accuracy) reward.

A group is the `num_generations` responses to one prompt. When they all get the same reward, every advantage is
zero and the group teaches nothing; with `loss_type="grpo"` its responses still count in the mean over responses and
dilute the step. These statistics say how much of a batch is like that, on the reward that measures success (the
"signal"), never on a shaping term such as `format` or `soft_overlong_punishment`: a group where every answer is
wrong but the formats differ still teaches nothing about the task. Needs only torch.

Which reward is the signal is decided by what each reward is, never guessed from its name: `dynamic_sampling_reward`
when given, else the first reward of kind "accuracy" (`rewards.registry.reward_kind`: the function's `reward_kind`
attribute, a registered accuracy reward, TRL's `accuracy_reward`); when none is, there is no signal reward, and what
needs one (dynamic sampling, `gspo passrate`) says so and stops.

Rewards are read as in [0, 1] (1 = solved): a group is solved-all when every response reaches 1 - eps, solved-none
when every one is at most eps. Unscorable responses (None from the reward, NaN here) carry no signal: they never
count as effective, and a group with fewer than two scorable responses has zero std.
"""

from __future__ import annotations

import logging
from collections import deque

import torch

logger = logging.getLogger(__name__)

# The package's shaping rewards, by the names TRL logs them under (the function's __name__) and their registry names.
# They pay for form, not success: they never decide which groups carry signal.
SHAPING_REWARDS = frozenset(
    {"format", "format_reward", "format_strict", "format_strict_reward", "soft_overlong_punishment"}
)
GROUP_METRICS = ("solve_all_frac", "solve_none_frac", "zero_std_frac", "effective_frac")


def signal_reward_index(names: list[str], kinds: list[str | None], requested: str | None = None) -> int | None:
    """The index in `names` of the reward that decides: `requested` when given (ValueError if it is missing or a
    shaping term), else the first reward whose kind is "accuracy"; None when no reward is known to be one."""
    if requested is not None:
        if requested not in names:
            raise ValueError(
                f"dynamic_sampling_reward='{requested}' is not one of the trainer's rewards {names}. Use one of "
                "those names (a reward function's __name__)."
            )
        if requested in SHAPING_REWARDS or kinds[names.index(requested)] == "shaping":
            raise ValueError(
                f"dynamic_sampling_reward='{requested}' is a shaping term: it pays for form, not success, and "
                "filtering on it keeps groups that teach nothing about the task (verl-recipe#125). Name the accuracy "
                "reward instead."
            )
        return names.index(requested)
    return next((i for i, kind in enumerate(kinds) if kind == "accuracy"), None)


def no_signal_reward(names: list[str]) -> str:
    """Why no reward decides, and the two ways to say which one does."""
    return (
        f"no reward of {', '.join(names)} is known to measure success (an accuracy reward: 1 solved, 0 not), and "
        "which groups carry signal is judged on that one, never guessed. Name it with dynamic_sampling_reward=NAME, "
        "or mark your function: my_reward.reward_kind = 'accuracy' (the registry's accuracy rewards and TRL's "
        "accuracy_reward are known)."
    )


def group_std(signal: torch.Tensor) -> torch.Tensor:
    """Population std of each group's scorable rewards; 0 for a group with fewer than two. `signal`: (groups, G)."""
    valid = ~torch.isnan(signal)
    count = valid.sum(-1)
    values = torch.where(valid, signal, torch.zeros_like(signal)).double()
    mean = values.sum(-1) / count.clamp(min=1)
    var = (torch.where(valid, values - mean.unsqueeze(-1), torch.zeros_like(values)) ** 2).sum(-1) / count.clamp(min=1)
    return torch.where(count >= 2, var.sqrt(), torch.zeros_like(var))


def has_signal(signal: torch.Tensor, eps: float) -> torch.Tensor:
    """(groups,) bool: the group's signal rewards differ (std above eps), so its advantages are not all zero."""
    return group_std(signal) > eps


def group_counts(signal: torch.Tensor, eps: float, masked: torch.Tensor | None = None) -> dict[str, int]:
    """Counts over the groups of `signal` (groups, G): groups, responses, solve_all, solve_none, zero_std, effective.

    A response is effective when its group has signal and its reward differs from the group mean by more than eps
    (its advantage on the signal is not zero). `masked` (groups,) marks groups that are in the batch but do not reach
    the loss (dynamic sampling's filler): they count as zero-std and never as effective.
    """
    valid = ~torch.isnan(signal)
    signal_groups = has_signal(signal, eps)
    if masked is not None:
        signal_groups = signal_groups & ~masked
    filled = torch.where(valid, signal, torch.zeros_like(signal)).double()
    mean = filled.sum(-1, keepdim=True) / valid.sum(-1, keepdim=True).clamp(min=1)
    effective = valid & signal_groups.unsqueeze(-1) & ((filled - mean).abs() > eps)
    solved = torch.where(valid, signal >= 1 - eps, torch.zeros_like(valid))
    failed = torch.where(valid, signal <= eps, torch.zeros_like(valid))
    any_valid = valid.any(-1)
    return {
        "groups": int(signal.size(0)),
        "responses": int(signal.numel()),
        "solve_all": int((any_valid & (solved | ~valid).all(-1)).sum()),
        "solve_none": int((any_valid & (failed | ~valid).all(-1)).sum()),
        "zero_std": int((~signal_groups).sum()),
        "effective": int(effective.sum()),
    }


def add_counts(total: dict[str, int] | None, counts: dict[str, int]) -> dict[str, int]:
    return dict(counts) if total is None else {key: total.get(key, 0) + value for key, value in counts.items()}


def group_fractions(counts: dict[str, int]) -> dict[str, float]:
    """`gspo/groups/*` from counts (per group, except effective_frac: per response)."""
    groups, responses = max(counts["groups"], 1), max(counts["responses"], 1)
    return {
        "gspo/groups/solve_all_frac": counts["solve_all"] / groups,
        "gspo/groups/solve_none_frac": counts["solve_none"] / groups,
        "gspo/groups/zero_std_frac": counts["zero_std"] / groups,
        "gspo/groups/effective_frac": counts["effective"] / responses,
    }


class LowSignalWarning:
    """Warns once (again only after it has cleared) when the effective share, pooled over the last `window`
    generation batches, stays under `threshold`."""

    def __init__(self, threshold: float = 0.25, window: int = 10, dynamic_sampling: bool = False):
        self.threshold, self.window, self.dynamic_sampling = threshold, window, dynamic_sampling
        self.recent: deque[tuple[int, int]] = deque(maxlen=window)  # (effective, responses) per batch
        self.active = False
        self.history: list[dict] = []
        self.emit = True  # whether this process shows the warning (the main process only, in a multi-process run)

    def update(self, counts: dict[str, int]) -> str | None:
        """Add one generation batch; the warning's message when it fires now, else None."""
        self.recent.append((counts["effective"], counts["responses"]))
        if len(self.recent) < self.window:
            return None
        share = sum(e for e, _ in self.recent) / max(1, sum(r for _, r in self.recent))
        low = share < self.threshold
        message = None
        if low and not self.active:
            message = self.message(share)
            if self.emit:
                logger.warning(message)
            self.history.append({"kind": "low_signal", "message": message})
        self.active = low
        return message

    def message(self, share: float) -> str:
        if self.dynamic_sampling:
            fix = (
                "dynamic sampling is on but cannot fill the batch within its round budget: raise "
                "dynamic_sampling_max_rounds, or filter the data with `gspo passrate --keep 0.1:0.9`"
            )
        else:
            fix = (
                "turn on dynamic sampling (dynamic_sampling=True), filter the prompts with `gspo passrate --keep "
                "0.1:0.9` and train on the kept rows"
            )
        return (
            f"GSPO health: only {share:.0%} of the responses of the last {self.window} generation batches have a "
            f"non-zero advantage on the signal reward (threshold {self.threshold:.0%}): most groups are all solved or "
            f"all failed and teach nothing (gspo/groups/*). Fix: {fix}; or use a harder dataset when most groups are "
            "solved (gspo/groups/solve_all_frac), an easier one when most fail (solve_none_frac)."
        )
