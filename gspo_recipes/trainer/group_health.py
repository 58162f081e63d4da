"""The trainer's group health: the signal reward of every scored batch, and per generation batch the `gspo/groups/*`
metrics, the diagnostics file's `groups` section and the low-signal warning (the statistics: gspo/stats/groups.py).

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
        # Dynamic sampling refuses instead; like every warning, this one is given once, by the main process.
        no_signal = self.index is None and not getattr(args, "dynamic_sampling", False)
        if no_signal and trainer.accelerator.is_main_process:
            logger.warning("gspo/groups/* are off: %s", no_signal_reward(self.names))

    @property
    def signal_name(self) -> str | None:
        return None if self.index is None else self.names[self.index]

    def capture(self, rewards_per_func: torch.Tensor) -> None:
        """From TRL's `_calculate_rewards`: (rows of every process, reward functions)."""
        if self.index is not None:
            self.signal = rewards_per_func[:, self.index].detach().float().cpu()

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
            metrics[name].append(value)
        sections = self.trainer.__dict__.get("gspo_diagnostics_sections")
        if sections is not None:  # the diagnostics file is written (gspo_diagnostics on): sums since the last line
            sections["groups"] = add_counts(sections.get("groups"), {"batches": 1, **counts})
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
