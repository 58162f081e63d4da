"""The trainer's group health: the signal reward of every scored batch, and per generation batch the `gspo/groups/*`
metrics, the diagnostics file's `groups` section and the low-signal warning (the statistics: gspo/stats/groups.py).

Judged on the signal (accuracy) reward when one is known; when none is (a plain reward function with no
`reward_kind`), on the total reward TRL trains on, the weighted sum over the reward functions: a group whose total is
the same for every response has zero advantages whatever the rewards mean. The start of the run says which in one
line, and every `groups` section of the diagnostics file names it (`"reward"`: the function's name, or "total"). On
the total only `zero_std_frac` and `effective_frac` are logged: "solved" needs a 0/1 success reward.
Dynamic sampling still needs a signal reward (it refuses without one): filtering on a total that includes shaping
terms keeps groups that teach nothing about the task.

Always on and cheap: one slice of the reward tensor TRL already gathered from every process, and a few sums over it.
"""

from __future__ import annotations

import logging

import torch

from gspo_recipes import _trl
from gspo_recipes.rewards.registry import reward_kind
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.groups import (
    LowSignalWarning,
    add_counts,
    group_counts,
    group_fractions,
    no_signal_reward,
    signal_reward_index,
)

logger = logging.getLogger(__name__)

TOTAL_REWARD = "total"  # the name the groups section gives the total reward when no signal reward is known
SOLVED = "/solve_"  # solve_all_frac, solve_none_frac: logged only on a signal reward


def total_reward(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """TRL's total reward per row, the weighted sum over the reward functions skipping None (NaN); NaN (unscorable)
    where no function scored the row, where TRL's nansum gives 0."""
    scored = ~torch.isnan(rewards_per_func)
    total = (rewards_per_func * weights.to(rewards_per_func).unsqueeze(0)).nansum(dim=1)
    return torch.where(scored.any(dim=1), total, torch.full_like(total, float("nan")))


class GroupHealth:
    """Reads the signal reward out of TRL's rewards and reports each training generation batch's groups."""

    def __init__(self, trainer):
        self.trainer = trainer
        args = trainer.args
        self.names = list(trainer.reward_func_names)
        self.kinds = [reward_kind(func) for func in trainer.reward_funcs]
        self.index = signal_reward_index(self.names, self.kinds, getattr(args, "dynamic_sampling_reward", None))
        self.eps = float(getattr(args, "zero_std_epsilon", 1e-6))
        self.warning = LowSignalWarning(dynamic_sampling=bool(getattr(args, "dynamic_sampling", False)))
        self.warning.emit = trainer.accelerator.is_main_process  # judged on rewards gathered from every process
        self.signal: torch.Tensor | None = None  # signal rewards of the last scored batch, all processes, in order
        # Without a signal reward the groups are judged on the total; dynamic sampling refuses instead.
        self.on_total = self.index is None and not getattr(args, "dynamic_sampling", False)
        if self.on_total and trainer.accelerator.is_main_process:  # once, by the main process
            logger.warning("gspo/groups/* are judged on the total reward: %s", no_signal_reward(self.names))

    @property
    def signal_name(self) -> str | None:
        """The reward the groups are judged on: a reward function's name, "total", or None (none: dynamic sampling
        refuses)."""
        if self.index is not None:
            return self.names[self.index]
        return TOTAL_REWARD if self.on_total else None

    def capture(self, rewards_per_func: torch.Tensor) -> None:
        """From TRL's `_calculate_rewards`: (rows of every process, reward functions)."""
        if self.index is not None:
            self.signal = rewards_per_func[:, self.index].detach().float().cpu()
        elif self.on_total:
            self.signal = total_reward(rewards_per_func.detach().float().cpu(), self.trainer.reward_weights)

    def take_signal(self, num_generations: int) -> torch.Tensor | None:
        """The last captured signal as (groups, num_generations), and forget it."""
        signal, self.signal = self.signal, None
        return None if signal is None else signal.view(-1, num_generations)

    def report(self, signal: torch.Tensor, masked: torch.Tensor | None = None) -> dict[str, int]:
        """Log one training generation batch: `signal` (groups, G) of the batch that trains, `masked` the groups in it
        that do not reach the loss."""
        counts = group_counts(signal, self.eps, masked)
        metrics = _trl.metric_store(self.trainer)
        for name, value in group_fractions(counts).items():
            if self.on_total and SOLVED in name:  # solved means 1 on a 0/1 success reward, which a total is not
                continue
            metrics[name].append(value)
        sections = self.trainer.__dict__.get("gspo_diagnostics_sections")
        if sections is not None:  # the diagnostics file is written (gspo_diagnostics on): sums since the last line
            sections["groups"] = add_counts(sections.get("groups"), {"batches": 1, **counts})
            sections["groups"]["reward"] = self.signal_name
        message = self.warning.update(counts)
        if message is not None:  # for gspo report's list of the run's warnings
            record_warning(self.trainer, "low_signal", message)
        return counts

    def after_round(self, filling: bool) -> None:
        """After a plain (not dynamic-sampling) generation batch: report it as it was generated."""
        if filling or not self.trainer.model.training:
            return
        signal = self.take_signal(self.trainer.num_generations)
        if signal is not None:
            self.report(signal)
