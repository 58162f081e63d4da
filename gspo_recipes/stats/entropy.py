"""Entropy collapse: the completions' token entropy falls far under its early level and stays there.

GSPO keeps GRPO's advantage, so it inherits GRPO's entropy collapse: the policy piles its probability onto a few
answers, the responses of a group agree, their advantages vanish and exploration stops, often for good. TRL (and
`GSPOTrainer`) log the mean per-token entropy of the completions as the `entropy` metric at every logging step; this
check watches that series, one value per logged window.

The rule, defaults in brackets:
- the first `warmup_windows` [0] logged windows are skipped (a run that starts from a policy still settling);
- the early level is the mean entropy of the next `early_windows` [5] logged windows;
- the warning fires when each of the last `window` [5] logged windows is under `fraction` [0.3] of the early level:
  one low window is noise, a window of them is a trend. It fires once per occurrence, again only after the entropy
  has come back above the line.

A collapse faster than the early windows (the early level already low) is not seen: lower `early_windows` for such a
run. Pure Python: no torch, no TRL.
"""

from __future__ import annotations

import math
from collections import deque

KIND = "entropy_collapse"


class EntropyCollapseCheck:
    """Feed one logged window's mean token entropy at a time to `update`; it says when the warning fires."""

    def __init__(self, fraction: float = 0.3, early_windows: int = 5, window: int = 5, warmup_windows: int = 0):
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"EntropyCollapseCheck: fraction={fraction} must be in (0, 1), e.g. 0.3.")
        for name, value, least in (("early_windows", early_windows, 1), ("window", window, 1),
                                   ("warmup_windows", warmup_windows, 0)):  # fmt: skip
            if int(value) != value or value < least:
                raise ValueError(f"EntropyCollapseCheck: {name}={value} must be an integer >= {least}.")
        self.fraction, self.early_windows = fraction, early_windows
        self.window, self.warmup_windows = window, warmup_windows
        self.windows_seen = 0
        self.early: list[tuple[int, float]] = []  # (step, entropy) of the early windows
        self.recent: deque[float] = deque(maxlen=window)
        self.active = False

    @property
    def early_level(self) -> float | None:
        """The mean entropy of the early windows, once all of them are in; None before."""
        if len(self.early) < self.early_windows:
            return None
        return sum(value for _, value in self.early) / len(self.early)

    @property
    def threshold(self) -> float | None:
        level = self.early_level
        return None if level is None else self.fraction * level

    def update(self, entropy: float, step: int | None = None) -> bool:
        """Add one logged window's mean token entropy (at optimizer step `step`); True when the warning fires now.
        A non-finite value (a window without completion tokens) is left out."""
        if entropy is None or not math.isfinite(entropy):
            return False
        self.windows_seen += 1
        if self.windows_seen <= self.warmup_windows:
            return False
        if self.early_level is None:
            self.early.append((step, float(entropy)))
            return False
        self.recent.append(float(entropy))
        below = len(self.recent) == self.window and all(value < self.threshold for value in self.recent)
        fires = below and not self.active
        self.active = below
        return fires

    def early_steps(self) -> tuple[int | None, int | None]:
        """The first and last step of the early windows."""
        return (self.early[0][0], self.early[-1][0]) if self.early else (None, None)
