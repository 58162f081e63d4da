"""RewardHackingCallback: how many completions make a known reward-hacking move, per pattern, and a warning when that
share rises over the run.

Drop-in for any TRL `GRPOTrainer` whose rewards include `code_execution` or `code_execution_binary`:

    trainer.add_callback(RewardHackingCallback(trainer))

The code rewards scan every completion's code (`gspo_recipes.rewards.code.hacking.scan_code`, AST only) and count the
findings in-process; at each logging step this callback drains those counts, sums them over processes, and stages
`{"completions", "suspicious", "patterns": {name: count}}` as the `reward_hacking` section of that step's line in the
diagnostics file. The reward itself logs the share as `rewards/<reward>/suspicious_frac`.
"""

from __future__ import annotations

import logging
from collections import deque

import torch
from transformers import TrainerCallback

from gspo_recipes.rewards.code.hacking import PATTERNS, SUSPICIOUS_COUNTS
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.response_stats import window_ends

logger = logging.getLogger(__name__)

CODE_REWARDS = ("code_execution", "code_execution_binary")


class RewardHackingCallback(TrainerCallback):
    """Per-pattern counts of suspicious completions in the diagnostics file, and a health warning.

    Args:
        trainer: the trainer whose code rewards are scanned.
        min_completions: judge each share (the run's start, the recent past) over at least this many completions,
            pooled across logging steps.
        rise_factor: warn when the recent share is at least this many times the share at the start of the run...
        min_rise: ...and at least this much higher in absolute terms (so 0% -> 1% is not a rise worth a warning).
        min_suspicious: ...and the recent window holds at least this many suspicious completions.
    """

    def __init__(self, trainer, min_completions: int = 256, rise_factor: float = 2.0, min_rise: float = 0.05,
                 min_suspicious: int = 8):  # fmt: skip
        self.trainer = trainer
        self.warnings = SuspiciousShareWarning(min_completions, rise_factor, min_rise, min_suspicious)
        self.warnings.emit = trainer.accelerator.is_main_process  # counts are summed over processes: judged alike

    def on_step_end(self, args, state, control, **kwargs):
        if not window_ends(state, control):
            return
        section = self.collect()
        if section["completions"] == 0:
            return
        self.trainer.__dict__.setdefault("gspo_diagnostics_sections", {})["reward_hacking"] = section
        given = len(self.warnings.history)
        self.warnings.observe(section)
        for warning in self.warnings.history[given:]:  # for gspo report's list of the run's warnings
            record_warning(self.trainer, warning["kind"], warning["message"])

    def collect(self) -> dict:
        """The counts since the last logging step, summed over processes (a collective: every rank calls it)."""
        drained = SUSPICIOUS_COUNTS.drain()
        fields = ("completions", "suspicious", *PATTERNS)
        local = [drained.get(reward, {}).get(field, 0) for reward in CODE_REWARDS for field in fields]
        accelerator = self.trainer.accelerator
        total = accelerator.reduce(torch.tensor(local, dtype=torch.float64, device=accelerator.device), reduction="sum")
        total = total.cpu()
        rows = total.view(len(CODE_REWARDS), len(fields)).long().tolist()
        # Both code rewards scan the same completions when a run uses both: report the one that saw the most.
        counts = dict(zip(fields, max(rows, key=lambda row: row[0])))
        return {
            "completions": counts["completions"],
            "suspicious": counts["suspicious"],
            "patterns": {pattern: counts[pattern] for pattern in PATTERNS},
        }


class SuspiciousShareWarning:
    """Warns once when the suspicious share rises well above the run's starting share; again only after it cleared.

    The starting share is pooled over the first logging steps until `min_completions`; the recent share over the
    latest logging steps, back until `min_completions`."""

    def __init__(self, min_completions: int = 256, rise_factor: float = 2.0, min_rise: float = 0.05,
                 min_suspicious: int = 8):  # fmt: skip
        self.min_completions, self.rise_factor = min_completions, rise_factor
        self.min_rise, self.min_suspicious = min_rise, min_suspicious
        self.baseline = [0, 0]  # completions, suspicious at the start of the run
        self.baseline_done = False
        self.recent: deque[tuple[int, int, dict]] = deque()
        self.active = False
        self.history: list[dict] = []  # every warning given: {"kind", "message"}
        self.emit = True  # whether this process shows the warnings (the main process only, in a multi-process run)

    def observe(self, section: dict) -> None:
        completions, suspicious = section["completions"], section["suspicious"]
        if not self.baseline_done:
            self.baseline[0] += completions
            self.baseline[1] += suspicious
            self.baseline_done = self.baseline[0] >= self.min_completions
            return
        self.recent.append((completions, suspicious, section["patterns"]))
        while len(self.recent) > 1 and sum(c for c, _, _ in list(self.recent)[1:]) >= self.min_completions:
            self.recent.popleft()
        recent_completions = sum(c for c, _, _ in self.recent)
        if recent_completions < self.min_completions:
            return
        recent_suspicious = sum(s for _, s, _ in self.recent)
        start, now = self.baseline[1] / self.baseline[0], recent_suspicious / recent_completions
        rising = (now >= self.rise_factor * start and now - start >= self.min_rise
                  and recent_suspicious >= self.min_suspicious)  # fmt: skip
        if rising and not self.active:
            message = self._message(start, now)
            if self.emit:
                logger.warning(message)
            self.history.append({"kind": "suspicious_share_rising", "message": message})
        self.active = rising

    def _message(self, start: float, now: float) -> str:
        totals: dict[str, int] = {}
        for _, _, patterns in self.recent:
            for pattern, count in patterns.items():
                totals[pattern] = totals.get(pattern, 0) + count
        ranked = [f"{p} ({c})" for p, c in sorted(totals.items(), key=lambda kv: -kv[1]) if c > 0][:3]
        top = ", ".join(ranked) or "none"
        return (
            f"Reward hacking health: {now:.0%} of recent completions make a known reward-hacking move, up from "
            f"{start:.0%} at the start of the run (most: {top}). The policy may be learning to game the code reward. "
            "Fix: inspect the flagged samples (the completions table, or scan_code on them); tighten or hide the "
            "tests; penalise the moves (a reward term on scan_code's findings)."
        )
