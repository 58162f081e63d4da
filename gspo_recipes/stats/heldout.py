"""Held-out scores and the reward-hacking judge, with no trainer in them: pass@k, maj@k, and the divergence check.

`HeldoutEvalCallback` (callbacks/heldout_eval.py) generates on held-out prompts and calls these; `gspo report` and
the tests call them on plain lists.

- `pass_at_k(n, c, k)`: the unbiased estimator of Chen et al. 2021 (the Codex paper), 1 - C(n-c, k) / C(n, k), the
  chance that at least one of k samples drawn without replacement from n (c of them correct) is correct. Computed as
  the product form 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms a binomial coefficient (no overflow).
- `majority_vote_correct(answers, correct)`: maj@k for one prompt. Unreadable answers (None) never win; a tie for
  the most votes scores 0 (fail closed: the vote did not decide).
- `DivergenceJudge`: "reward hacking?" when the training reward rises while the held-out score falls, or the gap
  between them widens, over a window of evaluations, each beyond the noise of a held-out set of that size.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_vote_correct(answers: list, correct: list[float]) -> float:
    """1.0 when the most frequent readable answer is correct; 0.0 on a tie for the most votes or no readable answer.

    `answers[i]` is the comparable form of sample i's final answer (None: unreadable), `correct[i]` its score. The
    winner counts as correct only if every sample that gave it was scored correct."""
    votes = Counter(answer for answer in answers if answer is not None)
    if not votes:
        return 0.0
    (winner, top), *rest = votes.most_common()
    if rest and rest[0][1] == top:
        return 0.0
    return float(all(score >= 1.0 for answer, score in zip(answers, correct) if answer == winner))


def heldout_scores(sampled: list[list[float]], greedy: list[float], k: int, answers: list[list] | None = None) -> dict:
    """Mean over prompts of pass@1, pass@k, greedy accuracy and (with `answers`) maj@k.

    `sampled[p]` holds prompt p's k sampled scores (1.0 correct; anything else counts as wrong), `greedy[p]` its
    greedy score. pass@1 is the mean sampled accuracy (pass_at_k with k=1)."""
    if not sampled:
        raise ValueError("heldout_scores needs at least one prompt")
    correct = [[float(score >= 1.0) for score in row] for row in sampled]
    scores = {
        "pass@1": float(np.mean([pass_at_k(len(row), int(sum(row)), 1) for row in correct])),
        f"pass@{k}": float(np.mean([pass_at_k(len(row), int(sum(row)), k) for row in correct])),
        "greedy": float(np.mean([float(score >= 1.0) for score in greedy])),
    }
    if answers is not None:
        scores[f"maj@{k}"] = float(np.mean([majority_vote_correct(a, c) for a, c in zip(answers, correct)]))
    return scores


# ----------------------------------------------------------------------------------------------------------------
# The reward-hacking judge


@dataclass
class DivergenceJudge:
    """Judges the series of (training reward, held-out pass@1) at each evaluation.

    Over the last `window` evaluations (from the window's first to its last), it fires when either
    - the training reward rose by at least `min_rise` while the held-out score fell by more than its noise, or
    - the gap (training reward - held-out score) widened by at least `min_gap_widening` and by more than the noise.

    The noise of a held-out score p over n prompts is taken as its largest possible standard error, sqrt(p (1 - p)
    / n) (a per-prompt score in [0, 1] with mean p has variance at most p (1 - p)); a change counts only beyond `z`
    standard errors of the difference of two such scores, so 32 prompts at p = 0.5 need a fall of about 0.25. It
    fires once, and again only after the condition cleared. The state is the series itself (`state_dict`).
    """

    window: int = 3
    min_rise: float = 0.05
    min_gap_widening: float = 0.2
    z: float = 2.0
    series: list[dict] = field(default_factory=list)  # {"step", "train", "heldout", "prompts"} per evaluation
    active: bool = False

    def observe(self, step: int, train: float | None, heldout: float, prompts: int) -> str | None:
        """Add one evaluation; the warning's message when it fires now, else None."""
        self.series = [point for point in self.series if point["step"] < step]  # a redone step replaces its point
        self.series.append({"step": step, "train": train, "heldout": heldout, "prompts": prompts})
        verdict = self.verdict()
        fires = verdict is not None and not self.active
        self.active = verdict is not None
        return verdict if fires else None

    def verdict(self) -> str | None:
        """What diverged over the last window, or None (also while fewer than `window` evaluations have a reward)."""
        points = [point for point in self.series if point["train"] is not None][-self.window :]
        if len(points) < max(2, self.window):
            return None
        first, last = points[0], points[-1]
        noise = self.z * math.hypot(_standard_error(first), _standard_error(last))
        rise = last["train"] - first["train"]
        fall = first["heldout"] - last["heldout"]
        widening = rise + fall
        span = f"steps {first['step']}-{last['step']}"
        if rise >= self.min_rise and fall > noise:
            return (
                f"the training reward rose {first['train']:.3f} -> {last['train']:.3f} while the held-out pass@1 fell "
                f"{first['heldout']:.3f} -> {last['heldout']:.3f} ({span}; noise {noise:.3f})"
            )
        if widening >= self.min_gap_widening and widening > noise:
            return (
                f"the gap between training reward and held-out pass@1 widened by {widening:.3f} "
                f"({first['train'] - first['heldout']:+.3f} -> {last['train'] - last['heldout']:+.3f}, {span}; "
                f"noise {noise:.3f})"
            )
        return None

    def state_dict(self) -> dict:
        return {"series": self.series, "active": self.active}

    def load_state_dict(self, state: dict) -> None:
        self.series, self.active = list(state["series"]), bool(state["active"])


def _standard_error(point: dict) -> float:
    p = min(max(point["heldout"], 0.0), 1.0)
    return math.sqrt(p * (1 - p) / max(1, point["prompts"]))


def check_heldout_settings(config) -> None:
    """`GSPOConfig.__post_init__`'s checks of the heldout_* fields; each error names its field and the fix."""
    if config.heldout_eval_steps < 0:
        raise ValueError(f"heldout_eval_steps={config.heldout_eval_steps} is negative; 0 turns held-out eval off.")
    if config.heldout_num_samples < 1:
        raise ValueError(
            f"heldout_num_samples={config.heldout_num_samples}: pass@k and maj@k need at least 1 sample per prompt."
        )
    if config.heldout_max_prompts < 1:
        raise ValueError(f"heldout_max_prompts={config.heldout_max_prompts}: evaluate at least 1 held-out prompt.")
    if config.heldout_rewards is not None and not all(isinstance(name, str) for name in config.heldout_rewards):
        raise ValueError(f"heldout_rewards={config.heldout_rewards!r}: give reward names from the registry, or None.")
