"""GSPO's failure modes as warnings that name the fix, judged over windows of per-response statistics.

`ClipFractionByLengthCallback` feeds it during a run; `gspo report` replays it over a run's diagnostics file.
Needs only torch.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

# "Short responses dominate the clip" (the explainer): the spread of log s_i shrinks like 1/sqrt(L), so for the same
# per-token drift a fixed range clips short responses more. It matters when length goes with advantage, for then the
# clip decides which kind of response learns. Judged on the off-policy responses with A != 0 pooled since the clip
# range last changed (a structural property of the run: pooling it all lets the shares converge instead of flipping
# with each window's handful of clips), once at least two length buckets hold >= min_responses. It fires when
# - the shortest such bucket clips >= SHORT_CLIP_FACTOR times the share of the longest: the 1/sqrt(L) law alone gives
#   10x and more between buckets a factor 16 apart at a clip of a few percent, so 3x is a clear skew;
# - that share is at least SHORT_CLIP_MIN_SHARE (0.3% against 0.1% skews nothing);
# - the difference is no sampling noise: two-proportion z >= SHORT_CLIP_MIN_Z (one-sided p < 0.006);
# - |Pearson r| of log2(length) and the advantage over the same responses is >= LENGTH_ADVANTAGE_MIN_CORRELATION. The
#   advantage itself, not its sign: GRPO centres it within each group, so the pooled covariance is the mean
#   within-group covariance (a prompt's difficulty and its responses' length cannot fake it); 0.2 is over two
#   standard errors (1/sqrt(n)) once n >= 128, and weak enough to catch a real but modest link.
# The embedded default has r ~ 0.6 (longer answers score better) but clips its two length buckets alike (16% and 13%
# over its run, z <= 1.2 at every step): silent. Judged window by window instead, one window's 3 clips out of 64
# made it 16% against 5% there.
# A one-token clip counts towards the warning only when its token moved by at least this much in log-ratio (a factor
# e in probability): a peaked model's few uncertain tokens carry all of its ordinary drift, so most of its clips are
# one-token clips by small moves that a clamp would only distort (the embedded default: 115 of its first 117 clips,
# by tokens that moved a median 0.11 and at most 0.92). The explainer's
# outlier, 0.001 -> 0.1, is log 100 = 4.6; GMPO's own clamp is 0.4.
ONE_TOKEN_OUTLIER_LOG_RATIO = 1.0
SHORT_CLIP_FACTOR = 3.0
SHORT_CLIP_MIN_SHARE = 0.05
SHORT_CLIP_MIN_Z = 2.5
LENGTH_ADVANTAGE_MIN_CORRELATION = 0.2


def pearson_from_moments(m: torch.Tensor) -> float:
    """Pearson r from pooled moments [n, sum x, sum y, sum x^2, sum y^2, sum xy]; 0 when either spread is 0."""
    n, sx, sy, sxx, syy, sxy = m.tolist()
    var_x, var_y = sxx - sx * sx / n, syy - sy * sy / n
    if var_x <= 1e-12 * max(sxx, 1.0) or var_y <= 1e-12 * max(syy, 1.0):
        return 0.0
    return (sxy - sx * sy / n) / (var_x * var_y) ** 0.5


def two_proportion_z(clipped_a: float, n_a: float, clipped_b: float, n_b: float) -> float:
    """z of share a minus share b under the pooled null of one common share (0 when nothing or everything clips)."""
    pooled = (clipped_a + clipped_b) / (n_a + n_b)
    variance = pooled * (1.0 - pooled) * (1.0 / n_a + 1.0 / n_b)
    return (clipped_a / n_a - clipped_b / n_b) / variance**0.5 if variance > 0 else 0.0


def default_length_buckets() -> list[tuple[int, int]]:
    """Power-of-two buckets 1-8, 9-16, ...: the callbacks' default buckets for any max_completion_length."""
    from gspo_recipes.stats.response_stats import length_buckets

    return length_buckets(1 << 20)


class HealthWarnings:
    """The explainer's failure modes, each warned once per occurrence (again only after it has cleared)."""

    def __init__(
        self, quiet_steps: int = 20, min_responses: int = 64, length_buckets: list[tuple[int, int]] | None = None
    ):
        self.quiet_steps = quiet_steps
        self.min_responses = min_responses
        self.pending: torch.Tensor | None = None  # off-policy [positives, clipped high, negatives, clipped low]
        self.pending_one_token: list[torch.Tensor] = []  # per window: (one-token flag, length) of clipped responses
        self.quiet_windows = 0
        self.active: set[str] = set()
        self.history: list[dict] = []  # every warning given: {"kind", "message"}
        self.clip_range: tuple[float, float] | None = None  # (epsilon_low, epsilon_high) of the windows judged
        self.emit = True  # False on all but the main process: each judges the same gathered window, one shows it
        self.on_warning = None  # called as on_warning(kind, message) when a warning fires (run_warnings.py)
        self.length_buckets = length_buckets or default_length_buckets()  # (lo, hi) inclusive
        # Pooled since the last restart: per bucket [n, clipped], and the moments of (log2 length, advantage).
        self.length_pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def _set(self, kind: str, condition: bool, message: str) -> None:
        if condition and kind not in self.active:
            if self.emit:
                logger.warning(message)
            self.history.append({"kind": kind, "message": message})
            if self.on_warning is not None:
                self.on_warning(kind, message)
        self.active = (self.active | {kind}) if condition else (self.active - {kind})

    def check_setup(self, on_policy: bool) -> None:
        self._set(
            "on_policy",
            on_policy,
            "GSPO health: training is fully on-policy (one optimizer step per generation batch), so every s_i is "
            "1 and GSPO equals GRPO. Fix: steps_per_generation = 4 x gradient_accumulation_steps.",
        )

    def restart(self) -> None:
        """Forget what the clip judgements pooled so far (after a change of the clip range, or while it is being
        calibrated): responses clipped under one range say nothing about another."""
        self.pending = None
        self.pending_one_token = []
        self.quiet_windows = 0
        self.length_pending = None
        self.active -= {"never_clips", "wasted_rollouts", "one_sided", "one_token_clips", "short_responses_clipped"}

    def check_window(
        self, window: dict[str, torch.Tensor], args, clip_range: tuple[float, float] | None = None
    ) -> None:
        """Judge one logging window. `clip_range` (epsilon_low, epsilon_high) in force over the whole window: when it
        differs from the previous window's, the judgement starts afresh from this window."""
        if clip_range is not None and clip_range != self.clip_range:
            if self.clip_range is not None:
                self.restart()
            self.clip_range = clip_range
        later = window["minibatch"] > 1
        if not later.any():
            return
        positive, negative = later & (window["advantage"] > 0), later & (window["advantage"] < 0)
        self.quiet_windows = (
            self.quiet_windows + 1 if (window["clipped_low"] + window["clipped_high"])[later].sum() == 0 else 0
        )
        self._set(
            "never_clips",
            self.quiet_windows >= self.quiet_steps,
            f"GSPO health: nothing clipped for {self.quiet_windows} consecutive logging steps with off-policy "
            "minibatches: the trust region does nothing. Fix: narrow epsilon/epsilon_high, or take fewer, larger "
            "steps per rollout batch.",
        )
        self._check_one_token_clips(window, later, args)
        self.check_short_responses(window, later, args)
        # The shares are judged over at least `min_responses` responses per side, pooled across logging steps:
        # a handful of responses (logging every step of a small run) would make them flip back and forth.
        counts = torch.tensor(
            [
                positive.sum(),
                window["clipped_high"][positive].sum(),
                negative.sum(),
                window["clipped_low"][negative].sum(),
            ],
            dtype=torch.float64,
        )
        self.pending = counts if self.pending is None else self.pending + counts
        if min(self.pending[0], self.pending[2]) < self.min_responses:
            return
        high, low = (self.pending[1] / self.pending[0]).item(), (self.pending[3] / self.pending[2]).item()
        self.pending = None
        # The range in force (the trainer's, after any calibration), not the configured one.
        epsilon_high = self.clip_range[1] if self.clip_range is not None else args.epsilon_high
        self._set(
            "wasted_rollouts",
            high > 0.5,
            f"GSPO health: {high:.0%} of positive-advantage responses are clipped on minibatches 2..k, so most "
            f"rollouts are wasted. Fix: widen epsilon_high (now {epsilon_high:g}) or lower the learning rate "
            f"(now {args.learning_rate}); `gspo calibrate` picks a range from data.",
        )
        one_sided = (low > 0.5 and high < 0.05) or (high > 0.5 and low < 0.05)
        self._set(
            "one_sided",
            one_sided,
            f"GSPO health: one side is clipped wholesale (low {low:.0%} of negative-advantage responses, high "
            f"{high:.0%} of positive ones): log s_i is shifted one way, typically a systematic bias between the "
            "sampler's and the trainer's log-probabilities. Fix: recompute the old log-probabilities "
            "(old_logps_source='recompute') or compare both sources before trusting the clip.",
        )

    def _check_one_token_clips(self, window, later, args) -> None:
        """Most clipped responses clipped by one token each (explainer: "a few tokens drive the ratio"), judged over
        at least `min_responses` clipped off-policy responses pooled across windows. A window without the one_token
        field (an old diagnostics file) is not judged."""
        if "one_token" not in window:
            return
        clipped = later & ((window["clipped_low"] + window["clipped_high"]) > 0)
        self.pending_one_token.append(torch.stack([window["one_token"][clipped], window["length"][clipped]]).double())
        pooled = torch.cat(self.pending_one_token, dim=1)
        if pooled.shape[1] < self.min_responses:
            return
        self.pending_one_token = []
        # One-token clips by an outlier token: the field holds the driving token's |log-ratio| (0: not one-token).
        one_token = pooled[0] >= ONE_TOKEN_OUTLIER_LOG_RATIO
        share = one_token.double().mean().item()
        if share <= 0.5:
            self._set("one_token_clips", False, "")
            return
        eps_low, eps_high = self.clip_range or (getattr(args, "epsilon", args.epsilon_high), args.epsilon_high)
        epsilon = min(eps_low, eps_high)
        length = pooled[1][one_token].median().item()
        moved = pooled[0][one_token].median().item()
        current = getattr(args, "token_log_ratio_clip", None)
        self._set(
            "one_token_clips",
            True,
            f"GSPO health: {share:.0%} of the clipped off-policy responses ({int(one_token.sum())} of "
            f"{pooled.shape[1]}) are one-token clips by an outlier token (median |log-ratio| {moved:.2g}): with "
            "that token left out, log s_i would be inside the clip range, so one token's log-ratio drops the whole "
            "response. Fix: "
            f"token_log_ratio_clip={length * epsilon:.2g} (clamps each token's log-ratio before the mean, GMPO-style; "
            f"median one-token-clipped length {length:.0f} x epsilon {epsilon:g}, so one token alone moves log s_i by "
            "at most the clip range)" + (f"; it is {current} now, lower it." if current is not None else "."),
        )

    def check_short_responses(self, window: dict[str, torch.Tensor], later: torch.Tensor, args) -> None:
        """Short responses dominating the clip while length goes with advantage (the constants above)."""
        selected = later & (window["advantage"] != 0)  # the responses the clip can remove
        length = window["length"][selected].double()
        clipped = (window["clipped_low"] + window["clipped_high"])[selected].double()
        advantage = window["advantage"][selected].double()
        per_bucket = torch.tensor(
            [
                [float(in_bucket.sum()), clipped[in_bucket].sum().item()]
                for in_bucket in ((length >= lo) & (length <= hi) for lo, hi in self.length_buckets)
            ],
            dtype=torch.float64,
        ).reshape(-1, 2)
        x = torch.log2(length.clamp(min=1.0))
        moments = torch.stack(
            [x.new_tensor(float(x.numel())), x.sum(), advantage.sum(), (x * x).sum(), (advantage**2).sum(),
             (x * advantage).sum()]
        )  # fmt: skip
        if self.length_pending is not None:
            per_bucket, moments = per_bucket + self.length_pending[0], moments + self.length_pending[1]
        self.length_pending = (per_bucket, moments)
        populated = [i for i in range(len(self.length_buckets)) if per_bucket[i, 0] >= self.min_responses]
        if len(populated) < 2:
            return
        (short_n, short_clipped), (long_n, long_clipped) = (
            per_bucket[populated[0]].tolist(),
            per_bucket[populated[-1]].tolist(),
        )
        short_share, long_share = short_clipped / short_n, long_clipped / long_n
        z = two_proportion_z(short_clipped, short_n, long_clipped, long_n)
        r = pearson_from_moments(moments)
        (short_lo, short_hi), (long_lo, long_hi) = self.length_buckets[populated[0]], self.length_buckets[populated[-1]]
        if getattr(args, "epsilon_length_scaling", False):
            fix = (
                "The range is already length-scaled, so the drift does not follow the 1/sqrt(L) law here: recalibrate "
                "it (`gspo calibrate RUN_DIR --length-scaled`) or set a smaller epsilon_reference_length."
            )
        else:
            fix = (
                "Fix: epsilon_length_scaling=True (response i gets epsilon * sqrt(L_ref / L_i)), its range chosen by "
                "`gspo calibrate RUN_DIR --length-scaled` or epsilon_calibration_steps."
            )
        self._set(
            "short_responses_clipped",
            short_share >= SHORT_CLIP_MIN_SHARE
            and short_share >= SHORT_CLIP_FACTOR * long_share
            and z >= SHORT_CLIP_MIN_Z
            and abs(r) >= LENGTH_ADVANTAGE_MIN_CORRELATION,
            f"GSPO health: short responses dominate the clip: {short_share:.0%} of the off-policy responses of "
            f"{short_lo}-{short_hi} tokens are clipped against {long_share:.0%} of those of {long_lo}-{long_hi} "
            "tokens (pooled since the clip range last changed), and length goes with advantage "
            f"(r = {r:+.2f}: {'longer' if r > 0 else 'shorter'} responses score better), so the clip decides which "
            "kind of response learns. The spread of log s_i shrinks like "
            f"1/sqrt(length), so a fixed range clips short responses more for the same drift. {fix}",
        )
