"""The clip range from data, at run time: `GSPOConfig.epsilon_calibration_steps`.

The explainer's advice: measure log s_i on the first batches before fixing epsilon, because a range copied from the
paper can clip most responses in a setting with more per-token drift. Calibration takes the off-policy responses
(minibatches 2..k, where s_i can leave 1) and picks, per side, the epsilon that clips the target fraction of the
responses that side can clip: epsilon_high from the responses with A > 0, epsilon_low from those with A < 0.
`gspo calibrate` (gspo_recipes/commands/calibrate.py) does the same from a finished run's diagnostics file.

With a length-scaled range (`epsilon_length_scaling`) a response of L tokens is clipped with eps * sqrt(L_ref / L),
so it is clipped exactly when its length-normalised log-ratio log s_i * sqrt(L / L_ref) lies outside the range at
L_ref: the quantiles are taken over those normalised values, and the target share then holds at every length
wherever the 1/sqrt(L) law does.
"""

from __future__ import annotations

import json
import math
import os

import torch

from gspo_recipes.stats.response_stats import gather_columns


def calibrate_epsilons(log_s: torch.Tensor, advantage_sign: torch.Tensor, target_clip: float) -> tuple[float, float]:
    """(epsilon_low, epsilon_high) that clip `target_clip` of the negative- and of the positive-advantage responses.

    High side: s_i > 1 + epsilon_high for a fraction `target_clip` of the responses with A > 0, so
    1 + epsilon_high = exp(quantile_{1 - target}(log s | A > 0)). Low side likewise with
    quantile_{target}(log s | A < 0).
    A side whose quantile lies on the wrong side of 0 (the policy moved the other way) gets epsilon 0: even the
    tightest range clips fewer than the target there. A side with no responses keeps `nan`.
    """
    if not 0.0 < target_clip < 1.0:
        raise ValueError(f"target_clip must lie strictly between 0 and 1, got {target_clip}")
    log_s = log_s.double()
    positive, negative = log_s[advantage_sign > 0], log_s[advantage_sign < 0]
    eps_high = (
        math.expm1(max(torch.quantile(positive, 1.0 - target_clip).item(), 0.0)) if positive.numel() else math.nan
    )
    eps_low = -math.expm1(min(torch.quantile(negative, target_clip).item(), 0.0)) if negative.numel() else math.nan
    return eps_low, eps_high


def length_normalised(log_s: torch.Tensor, lengths: torch.Tensor, reference_length: int | None) -> torch.Tensor:
    """log s_i * sqrt(L / L_ref): the log-ratio a response would have at the reference length under the 1/sqrt(L) law
    (log s_i itself when `reference_length` is None). Small log-ratios only: log(1 + eps) ~ eps, as in the range."""
    if reference_length is None:
        return log_s
    return log_s.double() * torch.sqrt(lengths.double().clamp(min=1.0) / reference_length)


def nan_to(value: float, fallback: float = 0.0) -> float:
    return fallback if math.isnan(value) else value


class EpsilonCalibration:
    """Collect off-policy log s_i during the first `steps` optimizer steps, then fix the clip range from their
    quantiles. The state is saved with each checkpoint, so a resumed run keeps the calibrated range, or the samples
    collected so far by every process, and calibrates exactly as an uninterrupted run would."""

    STATE_FILE = "gspo_calibration.json"

    def __init__(self, steps: int, target_clip: float, reference_length: int | None = None):
        self.steps, self.target_clip = steps, target_clip
        self.reference_length = reference_length  # L_ref of a length-scaled range, None for the plain one
        self.log_s: list[float] = []
        self.sign: list[int] = []
        self.length: list[int] = []
        self.epsilons: tuple[float, float] | None = None  # set once calibrated

    @property
    def done(self) -> bool:
        return self.epsilons is not None

    def collect(
        self,
        log_s: torch.Tensor,
        advantages: torch.Tensor,
        off_policy: torch.Tensor,
        lengths: torch.Tensor | None = None,
    ) -> None:
        self.log_s += log_s[off_policy].float().tolist()
        self.sign += torch.sign(advantages[off_policy]).long().tolist()
        if lengths is None:  # a caller without lengths: only the plain range can be calibrated from these
            lengths = torch.zeros_like(log_s)
        self.length += lengths[off_policy].long().tolist()

    def _all_samples(self, accelerator) -> torch.Tensor:
        """(3, n): every process's samples (log s_i, advantage sign, length; collective when several processes run)."""
        values = torch.tensor([self.log_s, self.sign, self.length], dtype=torch.float64).reshape(3, -1)
        if accelerator is not None and accelerator.num_processes > 1:
            values = gather_columns(values, accelerator)
        return values

    def finish(self, accelerator, current: tuple[float, float]) -> tuple[float, float]:
        """Gather the samples of every process and fix the range; a side with no samples keeps `current`."""
        values = self._all_samples(accelerator)
        log_s = length_normalised(values[0], values[2], self.reference_length)
        eps_low, eps_high = calibrate_epsilons(log_s, values[1], self.target_clip)
        self.epsilons = (nan_to(eps_low, current[0]), nan_to(eps_high, current[1]))
        self.log_s, self.sign, self.length = [], [], []
        return self.epsilons

    def save(self, folder: str, accelerator=None, write: bool = True) -> None:
        """Every process calls this (the samples are gathered); the process with `write` writes the union."""
        values = self._all_samples(accelerator) if not self.done else torch.zeros(3, 0)
        if not write:
            return
        state = {
            "steps": self.steps,
            "target_clip": self.target_clip,
            "epsilons": self.epsilons,
            "log_s": values[0].tolist(),
            "sign": [int(v) for v in values[1].tolist()],
            "length": [int(v) for v in values[2].tolist()],
            "reference_length": self.reference_length,
        }
        with open(os.path.join(folder, self.STATE_FILE), "w") as f:
            json.dump(state, f)

    def load(self, folder: str, is_main_process: bool = True) -> bool:
        """Restore the state; the pooled samples go to the main process only, so that `finish` counts each once."""
        path = os.path.join(folder, self.STATE_FILE)
        if not os.path.exists(path):
            return False
        with open(path) as f:
            state = json.load(f)
        if state.get("reference_length") != self.reference_length:
            raise ValueError(
                f"{path} was calibrated with epsilon_reference_length={state.get('reference_length')} (None: the plain "
                f"range), but this run uses {self.reference_length}: its epsilons would mean another range. Resume "
                "with the same epsilon_length_scaling and epsilon_reference_length, or start a fresh run."
            )
        self.epsilons = tuple(state["epsilons"]) if state["epsilons"] is not None else None
        lengths = state.get("length", [0] * len(state["log_s"]))
        self.log_s, self.sign, self.length = (
            (state["log_s"], state["sign"], lengths) if is_main_process else ([], [], [])
        )
        return True
