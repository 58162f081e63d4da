"""`gspo simulate --outlier-shift`: one-token clips, and what `token_log_ratio_clip` does about them.

The noise model of `gspo simulate` (independent Gaussian token log-ratios of spread sigma) plus outlier tokens: each
token, with probability `outlier_rate`, has its log-ratio raised by `outlier_shift` (4.6 = log(0.1 / 0.001), the
explainer's token whose probability moved from 0.001 to 0.1). Half the responses have A > 0, half A < 0, so the clip
is the loss's (`clipped_sides`: high with A > 0, low with A < 0), and a clipped response is a one-token clip by
`one_token_clips`, the definition the trainer logs as `gspo/clip_frac/one_token`. With `token_clip` the same draws are
judged again after GMPO's clamp (`clamp_token_log_ratios`), as `GSPOConfig.token_log_ratio_clip` trains.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_recipes.loss import clamp_token_log_ratios, clipped_sides, one_token_clips, sequence_log_ratio

CHUNK_ELEMENTS = 1 << 22  # token log-ratios drawn per chunk (16 MB of float32)


@dataclass(frozen=True)
class OutlierRow:
    """Clip fraction and one-token share for one response length, without and with the clamp."""

    length: int
    clip_frac: float  # share of responses clipped (either side, as the loss clips)
    one_token_share: float  # share of the clipped responses that are one-token clips (nan when none is clipped)
    clip_frac_clamped: float | None  # the same after the clamp; None without `token_clip`
    one_token_share_clamped: float | None

    @property
    def one_token_frac(self) -> float:
        """Share of all responses that one token clips."""
        return self.clip_frac * self.one_token_share if self.clip_frac else 0.0

    @property
    def one_token_frac_clamped(self) -> float | None:
        if self.clip_frac_clamped is None:
            return None
        return self.clip_frac_clamped * self.one_token_share_clamped if self.clip_frac_clamped else 0.0


def judge(log_ratio: torch.Tensor, advantage: torch.Tensor, eps_low: float, eps_high: float) -> tuple[int, int]:
    """(clipped, one-token clipped) counts over a chunk of full-length responses."""
    mask = torch.ones_like(log_ratio)
    low, high = clipped_sides(sequence_log_ratio(log_ratio, torch.zeros_like(log_ratio), mask), advantage,
                              eps_low, eps_high)  # fmt: skip
    one = one_token_clips(log_ratio, mask, low, high, eps_low, eps_high)
    return int((low | high).sum()), int(one.sum())


def simulate_length(length, sigma, count, sequence_range, outlier_shift, outlier_rate, token_clip, generator):
    plain = [0, 0]
    clamped = [0, 0]
    rows_per_chunk = max(1, CHUNK_ELEMENTS // length)
    done = 0
    while done < count:
        rows = min(rows_per_chunk, count - done)
        log_ratio = sigma * torch.randn(rows, length, generator=generator, dtype=torch.float64)
        log_ratio += outlier_shift * (torch.rand(rows, length, generator=generator) < outlier_rate).double()
        advantage = torch.where(torch.arange(done, done + rows) % 2 == 0, 1.0, -1.0).double()
        for totals, values in [(plain, log_ratio)] + (
            [(clamped, clamp_token_log_ratios(log_ratio, advantage, token_clip)[0])] if token_clip is not None else []
        ):
            clipped, one = judge(values, advantage, *sequence_range)
            totals[0] += clipped
            totals[1] += one
        done += rows

    def share(totals):
        return totals[1] / totals[0] if totals[0] else float("nan")

    return OutlierRow(
        length=length,
        clip_frac=plain[0] / count,
        one_token_share=share(plain),
        clip_frac_clamped=clamped[0] / count if token_clip is not None else None,
        one_token_share_clamped=share(clamped) if token_clip is not None else None,
    )


def simulate_outliers(
    sigma: float,
    lengths,
    count: int,
    sequence_range: tuple[float, float],
    outlier_shift: float,
    outlier_rate: float,
    token_clip: float | None = None,
    seed: int = 0,
) -> list[OutlierRow]:
    """One `OutlierRow` per length, in the order given (module docstring)."""
    if not 0 <= outlier_rate <= 1:
        raise ValueError(f"outlier_rate={outlier_rate} is a probability per token: between 0 and 1")
    if token_clip is not None and not token_clip > 0:
        raise ValueError(f"token_log_ratio_clip={token_clip} must be positive")
    generator = torch.Generator().manual_seed(seed)
    return [
        simulate_length(length, sigma, count, sequence_range, outlier_shift, outlier_rate, token_clip, generator)
        for length in lengths
    ]


def format_outlier_table(rows: list[OutlierRow], outlier_shift, outlier_rate, token_clip) -> str:
    clamp = f"token_log_ratio_clip = {token_clip:g}" if token_clip is not None else "no --token-log-ratio-clip"
    lines = [
        f"outlier tokens: log-ratio +{outlier_shift:g} with probability {outlier_rate:g} per token; half the responses "
        f"A > 0, half A < 0; {clamp}",
        "clipped: share of responses the clip drops; one-token: share of those a single token clips "
        "(gspo/clip_frac/one_token)",
        f"{'length':>7} {'clipped':>9} {'one-token':>10} {'clipped (clamp)':>16} {'one-token (clamp)':>18}",
    ]

    def percent(value, width):
        return f"{'-':>{width}}" if value is None or value != value else f"{value:>{width}.1%}"  # nan: none clipped

    for row in rows:
        lines.append(
            f"{row.length:>7} {percent(row.clip_frac, 9)} {percent(row.one_token_share, 10)} "
            f"{percent(row.clip_frac_clamped, 16)} {percent(row.one_token_share_clamped, 18)}"
        )
    return "\n".join(lines)
