"""A clip range that follows the run: `GSPOConfig(epsilon_adaptive=True)`.

How far log s_i moves per minibatch changes during a run (learning-rate schedule, length, entropy, staleness), so a
fixed range drifts away from the share it was chosen to clip. At each rollout boundary, and only there (the loss of
one generation batch keeps one range), the controller pools the off-policy log s_i of the last `WINDOW` rollouts,
gathered from every process so every process decides the same, and per side:

- measures the share the range in force clips (low: A < 0 below 1 - epsilon; high: A > 0 above 1 + epsilon_high);
- does nothing while that share lies in the dead band [target / 1.5, target x 1.5], or while the side has fewer than
  `min_responses` responses;
- else takes the epsilon that would clip the target share of the window (`calibrate_epsilons`' quantile rule) and
  moves toward it in log space with gain `GAIN`, by at most x`MAX_STEP` per decision, within
  [start / `BOUND_FACTOR`, start x `BOUND_FACTOR`] around the configured or calibrated start.

Guards: a wider range can hide a broken sampler, so the controller freezes (moves neither side) and says why when any
of these holds over the window, until none has held for `WINDOW` decisions: the on-policy minibatch alone clips
beyond half the target (sampler/trainer mismatch); one side clips wholesale while the other barely clips (a one-sided
bias); most clips are one-token clips; a side has sat at its bound, still pushing past it, for `WINDOW` decisions;
MoE routing volatility above `ROUTING_CHANGED_LIMIT` without routing replay. Log-ratios are length-normalised before
they enter (see `length_normalised`), so with `epsilon_length_scaling` the controlled epsilons are those at L_ref.

Pure math on torch tensors; gathering, logging and checkpoint folders are the trainer's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch

from gspo_recipes.loss import clipped_sides
from gspo_recipes.stats.calibration import calibrate_epsilons

WINDOW = 4  # rollouts pooled per decision
GAIN = 0.5  # share of the log-space distance to the target epsilon covered per decision
MAX_STEP = 1.5  # largest factor one decision may change an epsilon by
BOUND_FACTOR = 10.0  # epsilon stays within [start / 10, start x 10]
DEAD_BAND = 1.5  # no move while the share lies in [target / 1.5, target x 1.5]
MIN_RESPONSES = 32  # per side in the window
# Guards (module docstring). One-sided: the thresholds of the `one_sided` health warning (stats/health.py).
WHOLESALE, BARELY = 0.5, 0.05
ONE_TOKEN_SHARE = 0.5  # of the clipped off-policy responses, as the `one_token_clips` health warning
ROUTING_CHANGED_LIMIT = 0.1  # share of (token, MoE layer) expert sets that changed per step
SIDES = ("low", "high")
COLUMNS = ("log_s", "sign", "minibatch", "one_token")  # one row per response in a rollout's table

CHECK = {
    "sampler_mismatch": "compare the sampler's and the trainer's log-probabilities (old_logps_source='recompute', "
    "gspo/sampler_mismatch/*): the on-policy minibatch should not clip",
    "one_sided": "a systematic bias between the sampler's and the trainer's log-probabilities shifts log s_i one way",
    "one_token": "outlier tokens drive the ratio: token_log_ratio_clip clamps them (gspo/clip_frac/one_token)",
    "at_bound": "the range wanted lies beyond 10x the start: recalibrate the start (epsilon_calibration_steps or "
    "`gspo calibrate`), or check the learning rate",
    "routing": "MoE routes change between minibatches: routing_replay=True, or a lower learning rate",
}


@dataclass
class Decision:
    """What one rollout boundary decided."""

    epsilons: tuple[float, float]  # (epsilon_low, epsilon_high) in force from now on
    shares: dict[str, float] = field(default_factory=dict)  # per side: the window's share under the previous range
    factors: dict[str, float] = field(default_factory=dict)  # per side: new / old epsilon (1.0: no move)
    skipped: list[str] = field(default_factory=list)  # sides with too few responses
    frozen: dict[str, str] = field(default_factory=dict)  # guard -> message, when frozen
    newly_frozen: dict[str, str] = field(default_factory=dict)  # guards that fired at this decision


def rollout_table(log_s, sign, minibatch, one_token=None) -> torch.Tensor:
    """(4, n) float64: one rollout's responses, in the order of `COLUMNS` (one_token: 1 for one-token clips)."""
    log_s = torch.as_tensor(log_s, dtype=torch.float64).reshape(-1)
    rows = [log_s, torch.as_tensor(sign, dtype=torch.float64).reshape(-1)]
    rows.append(torch.as_tensor(minibatch, dtype=torch.float64).reshape(-1).expand_as(log_s))
    rows.append(torch.zeros_like(log_s) if one_token is None else torch.as_tensor(one_token, dtype=torch.float64))
    return torch.stack([r.reshape(-1) for r in rows])


def clipped_shares(log_s, sign, epsilons: tuple[float, float]) -> tuple[dict[str, float], dict[str, int]]:
    """Per side, the share of that side's responses the range clips, and how many responses it has."""
    low, high = clipped_sides(log_s, sign, *epsilons)
    negative, positive = sign < 0, sign > 0
    counts = {"low": int(negative.sum()), "high": int(positive.sum())}
    shares = {
        "low": low[negative].double().mean().item() if counts["low"] else math.nan,
        "high": high[positive].double().mean().item() if counts["high"] else math.nan,
    }
    return shares, counts


class AdaptiveClipController:
    """The controller of the module docstring. Feed it one gathered rollout table at each boundary (`decide`)."""

    def __init__(
        self,
        target: float,
        start: tuple[float, float] | None = None,
        min_responses: int = MIN_RESPONSES,
        window: int = WINDOW,
    ):
        if not 0.0 < target < 1.0:
            raise ValueError(f"epsilon_target_clip={target} must lie strictly between 0 and 1.")
        self.target, self.min_responses, self.window_size = target, min_responses, window
        self.start = start  # None until the first decision (after calibration, when there is one)
        self.epsilons = start
        self.window: deque[torch.Tensor] = deque(maxlen=window)
        self.decisions = 0
        self.at_bound = {side: 0 for side in SIDES}  # consecutive decisions at a bound, pushing past it
        self.frozen: dict[str, str] = {}
        self.clear_decisions = 0  # consecutive decisions without a guard holding
        self.last_direction = {side: 0 for side in SIDES}
        self.reversals = {side: 0 for side in SIDES}

    def decide(self, rollout: torch.Tensor, current: tuple[float, float], routing_changed: float | None = None):
        """Add one rollout's (gathered) table and decide the range for the next generation batch."""
        if self.start is None:
            self.start = tuple(current)
        self.epsilons = tuple(current)
        if rollout.numel():
            self.window.append(rollout.double())
        self.decisions += 1
        pooled = torch.cat(list(self.window), dim=1) if self.window else torch.zeros(len(COLUMNS), 0)
        off = pooled[:, pooled[2] > 1]
        shares, counts = clipped_shares(off[0], off[1], self.epsilons)
        wanted = dict(zip(SIDES, calibrate_epsilons(off[0], off[1], self.target)))
        decision = Decision(epsilons=self.epsilons, shares=shares)
        skipped = [side for side in SIDES if counts[side] < self.min_responses]
        decision.skipped = skipped
        guards = self._guards(pooled, off, shares, counts, wanted, skipped, routing_changed)
        decision.newly_frozen = {k: v for k, v in guards.items() if k not in self.frozen}
        # A defect that comes and goes (noise near a guard's threshold) must not let the range widen in its gaps:
        # a freeze lasts until no guard has held for a whole window of decisions.
        self.clear_decisions = 0 if guards else self.clear_decisions + 1
        if guards:
            self.frozen = {**self.frozen, **guards}
        elif self.clear_decisions >= self.window_size:
            self.frozen = {}
        decision.frozen = dict(self.frozen)
        new = dict(zip(SIDES, self.epsilons))
        for side in SIDES:
            decision.factors[side] = 1.0
            if self.frozen or side in skipped or math.isnan(wanted[side]):
                continue
            if self.target / DEAD_BAND <= shares[side] <= self.target * DEAD_BAND:
                continue
            new[side] = self._step(side, new[side], wanted[side])
            decision.factors[side] = new[side] / self.epsilons[SIDES.index(side)]
            direction = (decision.factors[side] > 1) - (decision.factors[side] < 1)
            if direction and self.last_direction[side] and direction != self.last_direction[side]:
                self.reversals[side] += 1
            if direction:
                self.last_direction[side] = direction
        self.epsilons = (new["low"], new["high"])
        decision.epsilons = self.epsilons
        return decision

    def _step(self, side: str, epsilon: float, wanted: float) -> float:
        start = self.start[SIDES.index(side)]
        # A wanted epsilon of 0 (the side's quantile lies past 1: the policy moved the other way) pulls to the floor.
        wanted = max(wanted, start / BOUND_FACTOR / 2)
        log_move = GAIN * (math.log(wanted) - math.log(epsilon))
        log_move = max(-math.log(MAX_STEP), min(math.log(MAX_STEP), log_move))
        return min(start * BOUND_FACTOR, max(start / BOUND_FACTOR, epsilon * math.exp(log_move)))

    def _guards(self, pooled, off, shares, counts, wanted, skipped, routing_changed) -> dict[str, str]:
        guards = {}
        # A defect is judged on the newest rollout as well as on the window, which lags a growing one by two rollouts.
        worst = max(self._on_policy_share(pooled), self._on_policy_share(self.window[-1] if self.window else pooled))
        if worst > self.target / 2:
            guards["sampler_mismatch"] = (
                f"the on-policy minibatch alone clips {worst:.0%} of a side (more than half the target "
                f"{self.target:.0%})"
            )
        judged = [s for s in SIDES if s not in skipped]
        if len(judged) == 2:
            low, high = shares["low"], shares["high"]
            if (low > WHOLESALE and high < BARELY) or (high > WHOLESALE and low < BARELY):
                guards["one_sided"] = f"one side clips wholesale (low {low:.0%}, high {high:.0%})"
        clipped = self._clipped(off)
        if clipped.sum() >= self.min_responses:
            one_token = (off[3][clipped] > 0).double().mean().item()
            if one_token > ONE_TOKEN_SHARE:
                guards["one_token"] = f"{one_token:.0%} of the clipped responses are one-token clips"
        for side in SIDES:
            start, epsilon = self.start[SIDES.index(side)], self.epsilons[SIDES.index(side)]
            floor, ceiling = start / BOUND_FACTOR, start * BOUND_FACTOR
            # At a bound and still pushing past it (a wanted epsilon of 0 pushes past the floor).
            pushing = (math.isclose(epsilon, floor) and not wanted[side] > floor) or (
                math.isclose(epsilon, ceiling) and wanted[side] > ceiling
            )
            self.at_bound[side] = self.at_bound[side] + 1 if side not in skipped and pushing else 0
            if self.at_bound[side] >= self.window_size:
                guards["at_bound"] = (
                    f"epsilon_{side} has sat at its bound {epsilon:.3g} (start {start:.3g} x 10 or / 10) for "
                    f"{self.at_bound[side]} decisions, wanting {wanted[side]:.3g}"
                )
        if routing_changed is not None and routing_changed > ROUTING_CHANGED_LIMIT:
            guards["routing"] = (
                f"MoE routing changes {routing_changed:.0%} of expert sets per step without routing replay "
                f"(limit {ROUTING_CHANGED_LIMIT:.0%})"
            )
        return guards

    def _on_policy_share(self, table: torch.Tensor) -> float:
        """The larger side's share the range clips on the on-policy minibatch (s_i = 1 up to sampler mismatch)."""
        on = table[:, table[2] == 1]
        shares, counts = clipped_shares(on[0], on[1], self.epsilons)
        return max((shares[s] for s in SIDES if counts[s] >= self.min_responses), default=0.0)

    def _clipped(self, off: torch.Tensor) -> torch.Tensor:
        low, high = clipped_sides(off[0], off[1], *self.epsilons)
        return low | high

    def state_dict(self) -> dict:
        return {
            "target": self.target,
            "min_responses": self.min_responses,
            "window_size": self.window_size,
            "start": self.start,
            "epsilons": self.epsilons,
            "window": [table.tolist() for table in self.window],
            "decisions": self.decisions,
            "at_bound": self.at_bound,
            "frozen": self.frozen,
            "clear_decisions": self.clear_decisions,
            "last_direction": self.last_direction,
            "reversals": self.reversals,
        }

    def load_state_dict(self, state: dict) -> None:
        self.target, self.min_responses = state["target"], state["min_responses"]
        self.window_size = state["window_size"]
        self.start = tuple(state["start"]) if state["start"] is not None else None
        self.epsilons = tuple(state["epsilons"]) if state["epsilons"] is not None else None
        tables = [torch.tensor(t, dtype=torch.float64).reshape(len(COLUMNS), -1) for t in state["window"]]
        self.window = deque(tables, maxlen=self.window_size)
        self.decisions = state["decisions"]
        self.at_bound, self.frozen = dict(state["at_bound"]), dict(state["frozen"])
        self.clear_decisions = state["clear_decisions"]
        self.last_direction, self.reversals = dict(state["last_direction"]), dict(state["reversals"])


def frozen_message(frozen: dict[str, str]) -> str:
    """One line: why the controller froze and what to check."""
    reasons = "; ".join(f"{why} (check: {CHECK[kind]})" for kind, why in frozen.items())
    return f"Adaptive clip range frozen: {reasons}."
