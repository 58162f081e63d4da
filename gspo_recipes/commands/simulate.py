"""`gspo simulate`: why GSPO's clip range is three orders of magnitude narrower than GRPO's.

The noise model of the explainer: every token's log-ratio log w_it = log pi_theta - log pi_old is independent
Gaussian noise of standard deviation sigma. Then log w_it has spread sigma at any length, while
log s_i = mean_t log w_it has spread sigma / sqrt(L). A fixed token-level range therefore clips the same fraction of
tokens at every length, while a fixed sequence-level range clips fewer responses as they get longer, and the
paper's range [1 - 3e-4, 1 + 4e-4] can still leave most responses outside it if sigma is large.

A length-scaled sequence range (`epsilon_length_scaling`: eps * sqrt(L_ref / L) per response) follows that law, so it
clips the same share at every length; the table shows it beside the plain range (`--reference-length`, default the
longest length simulated, as the trainer's default L_ref is max_completion_length).

`simulate(...)` returns the table as data (one `LengthRow` per length); the CLI only formats it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np

DEFAULT_SIGMA = 0.1
DEFAULT_LENGTHS = (16, 64, 256, 1024, 4096)
DEFAULT_COUNT = 20_000
# GRPO's baseline range in the paper, (0.2, 0.27): at sigma = 0.1 it leaves 2.1% of tokens outside, the figure the
# explainer quotes. The symmetric (0.2, 0.2) would leave 4.7%.
DEFAULT_TOKEN_RANGE = (0.2, 0.27)
# The GSPO paper's sequence-level range.
DEFAULT_SEQUENCE_RANGE = (3e-4, 4e-4)
# Noise values drawn per chunk: 4M float32 is 16 MB, against 330 MB for 20,000 x 4,096 at once.
CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class LengthRow:
    """The simulation's result for one response length."""

    length: int
    token_log_ratio_std: float  # spread of log w_it, expected sigma
    log_s_std: float  # spread of log s_i, expected sigma / sqrt(L)
    reference_std: float  # sigma / sqrt(L)
    token_frac_outside: float  # fraction of tokens with w_it outside [1 - eps_low, 1 + eps_high] (token range)
    response_frac_outside: float  # fraction of responses with s_i outside the sequence range, either side
    response_frac_low: float  # ... below 1 - eps_low
    response_frac_high: float  # ... above 1 + eps_high
    # The same responses against the length-scaled range eps * sqrt(reference_length / L) (None when not simulated).
    scaled_frac_outside: float | None = None
    scaled_frac_low: float | None = None
    scaled_frac_high: float | None = None


def log_bounds(eps_low: float, eps_high: float) -> tuple[float, float]:
    """The clip range [1 - eps_low, 1 + eps_high] on a ratio, as bounds on its logarithm (a low bound at or below 0,
    which a length-scaled range gives very short responses, is -inf: nothing is below it)."""
    return (math.log1p(-eps_low) if eps_low < 1 else -math.inf), math.log1p(eps_high)


def simulate_length(
    length: int,
    sigma: float,
    count: int,
    token_range: tuple[float, float],
    sequence_range: tuple[float, float],
    rng: np.random.Generator,
    reference_length: int | None = None,
) -> LengthRow:
    """Draw `count` responses of `length` tokens, in chunks, and summarise their token and sequence log-ratios."""
    tok_lo, tok_hi = log_bounds(*token_range)
    seq_lo, seq_hi = log_bounds(*sequence_range)
    rows_per_chunk = max(1, CHUNK_ELEMENTS // length)
    # Running sums in float64 (the draws are float32 to halve memory and time).
    tok_sum = tok_sq = 0.0
    tok_outside = 0
    log_s_parts = []
    done = 0
    while done < count:
        rows = min(rows_per_chunk, count - done)
        log_w = rng.standard_normal((rows, length), dtype=np.float32)
        log_w *= sigma
        tok_sum += float(log_w.sum(dtype=np.float64))
        tok_sq += float(np.square(log_w).sum(dtype=np.float64))
        tok_outside += int(np.count_nonzero((log_w < tok_lo) | (log_w > tok_hi)))
        log_s_parts.append(log_w.mean(axis=1, dtype=np.float64))
        done += rows
    log_s = np.concatenate(log_s_parts)
    tokens = count * length
    tok_mean = tok_sum / tokens
    low = float(np.mean(log_s < seq_lo))
    high = float(np.mean(log_s > seq_hi))
    scaled = {}
    if reference_length is not None:
        scale = math.sqrt(reference_length / length)
        scaled_lo, scaled_hi = log_bounds(sequence_range[0] * scale, sequence_range[1] * scale)
        scaled_low, scaled_high = float(np.mean(log_s < scaled_lo)), float(np.mean(log_s > scaled_hi))
        scaled = dict(
            scaled_frac_outside=scaled_low + scaled_high, scaled_frac_low=scaled_low, scaled_frac_high=scaled_high
        )
    return LengthRow(
        length=length,
        token_log_ratio_std=math.sqrt(max(tok_sq / tokens - tok_mean**2, 0.0)),
        log_s_std=float(log_s.std()),
        reference_std=sigma / math.sqrt(length),
        token_frac_outside=tok_outside / tokens,
        response_frac_outside=low + high,
        response_frac_low=low,
        response_frac_high=high,
        **scaled,
    )


def sequence_log_ratios(
    lengths: np.ndarray, token_mean: np.ndarray, token_sigma: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """log s_i of responses of these lengths under the noise model, per response a mean and spread of its tokens'
    log-ratios (each token independent Gaussian): the per-token draws of `simulate_length`, averaged over each
    response's own tokens. benchmarks/adaptive_clip.py drives the clip range controller with it."""
    lengths = np.asarray(lengths, dtype=np.int64)
    tokens = rng.standard_normal((lengths.size, int(lengths.max())))
    tokens *= np.asarray(token_sigma, dtype=np.float64).reshape(-1, 1)
    tokens += np.asarray(token_mean, dtype=np.float64).reshape(-1, 1)
    inside = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    return (tokens * inside).sum(axis=1) / lengths


def simulate(
    sigma: float = DEFAULT_SIGMA,
    lengths: tuple[int, ...] | list[int] = DEFAULT_LENGTHS,
    count: int = DEFAULT_COUNT,
    token_range: tuple[float, float] = DEFAULT_TOKEN_RANGE,
    sequence_range: tuple[float, float] = DEFAULT_SEQUENCE_RANGE,
    seed: int = 0,
    reference_length: int | None = None,
) -> list[LengthRow]:
    """The table of `gspo simulate`: one row per response length, in the order given. With `reference_length`, each
    row also holds the fractions outside the length-scaled range (the sequence range at that length)."""
    if sigma < 0 or count < 2 or any(length < 1 for length in lengths):
        raise ValueError("need sigma >= 0, count >= 2 and lengths >= 1")
    if reference_length is not None and reference_length < 1:
        raise ValueError(f"reference_length must be at least 1 token, got {reference_length}")
    rng = np.random.default_rng(seed)
    return [
        simulate_length(length, sigma, count, token_range, sequence_range, rng, reference_length=reference_length)
        for length in lengths
    ]


def format_table(
    rows: list[LengthRow], sigma: float, count: int, token_range, sequence_range, reference_length: int | None = None
) -> str:
    header = (
        f"sigma = {sigma:g} per token, {count:,} responses per length; "
        f"token range (eps_low, eps_high) = ({token_range[0]:g}, {token_range[1]:g}), "
        f"sequence range = ({sequence_range[0]:g}, {sequence_range[1]:g})\n"
        f"{'length':>7} {'std log w':>10} {'std log s':>10} {'sigma/sqrt(L)':>14} "
        f"{'tokens out':>11} {'responses out':>14} {'(low':>7} {'high)':>7}"
    )
    if reference_length is not None:
        header = (
            f"{header.splitlines()[0]}; length-scaled: the sequence range at L = {reference_length}, "
            f"x sqrt({reference_length} / L)\n{header.splitlines()[1]} {'scaled out':>11} {'(low':>7} {'high)':>7}"
        )
    lines = [header]
    for row in rows:
        line = (
            f"{row.length:>7} {row.token_log_ratio_std:>10.4f} {row.log_s_std:>10.5f} {row.reference_std:>14.5f} "
            f"{row.token_frac_outside:>11.2%} {row.response_frac_outside:>14.1%} "
            f"{row.response_frac_low:>7.1%} {row.response_frac_high:>7.1%}"
        )
        if row.scaled_frac_outside is not None:
            line += f" {row.scaled_frac_outside:>11.1%} {row.scaled_frac_low:>7.1%} {row.scaled_frac_high:>7.1%}"
        lines.append(line)
    return "\n".join(lines)


def plot(rows: list[LengthRow], sigma: float, sequence_range, path: str) -> None:
    """Spread of log s_i against length (log-log, with the 1/sqrt(L) line) and the fractions clipped."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    lengths = [row.length for row in rows]
    fig, (ax_std, ax_frac) = plt.subplots(1, 2, figsize=(10, 4))
    ax_std.loglog(lengths, [row.token_log_ratio_std for row in rows], "s-", label="std of token log-ratio")
    ax_std.loglog(lengths, [row.log_s_std for row in rows], "o-", label="std of log $s_i$")
    ax_std.loglog(lengths, [row.reference_std for row in rows], "k--", label=r"$\sigma/\sqrt{L}$")
    ax_std.set(xlabel="response length L (tokens)", ylabel="standard deviation", title=f"sigma = {sigma:g}")
    ax_std.legend()
    ax_frac.semilogx(lengths, [row.token_frac_outside for row in rows], "s-", label="tokens outside token range")
    ax_frac.semilogx(
        lengths,
        [row.response_frac_outside for row in rows],
        "o-",
        label=f"responses outside (1-{sequence_range[0]:g}, 1+{sequence_range[1]:g})",
    )
    ax_frac.set(xlabel="response length L (tokens)", ylabel="fraction outside the clip range", ylim=(0, 1.02))
    ax_frac.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.plot:  # fail before the simulation, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("--plot needs matplotlib: pip install 'gspo-recipes[report]'", file=sys.stderr)
            return 1
    token_range, sequence_range = tuple(args.token_range), tuple(args.sequence_range)
    reference = None if args.reference_length == 0 else (args.reference_length or max(args.lengths))
    rows = simulate(
        args.sigma, args.lengths, args.count, token_range, sequence_range, args.seed, reference_length=reference
    )
    print(format_table(rows, args.sigma, args.count, token_range, sequence_range, reference))
    if args.outlier_shift:  # one-token clips, with and without the clamp (gspo_recipes/commands/simulate_outliers.py)
        from gspo_recipes.commands.simulate_outliers import format_outlier_table, simulate_outliers

        outliers = simulate_outliers(args.sigma, args.lengths, args.count, sequence_range, args.outlier_shift,
                                     args.outlier_rate, args.token_log_ratio_clip, args.seed)  # fmt: skip
        print(format_outlier_table(outliers, args.outlier_shift, args.outlier_rate, args.token_log_ratio_clip))
    if args.plot:
        plot(rows, args.sigma, args.sequence_range, args.plot)
        print(f"figure written to {args.plot}")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "simulate",
        help="how token and sequence log-ratios spread under per-token noise (why GSPO's clip range is tiny)",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--sigma", type=float, default=DEFAULT_SIGMA, help="std of the per-token log-ratio noise")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS), help="response lengths")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help="responses simulated per length")
    parser.add_argument(
        "--token-range",
        type=float,
        nargs=2,
        default=list(DEFAULT_TOKEN_RANGE),
        metavar=("EPS_LOW", "EPS_HIGH"),
        help="token-level clip range [1 - eps_low, 1 + eps_high] (GRPO's)",
    )
    parser.add_argument(
        "--sequence-range",
        type=float,
        nargs=2,
        default=list(DEFAULT_SEQUENCE_RANGE),
        metavar=("EPS_LOW", "EPS_HIGH"),
        help="sequence-level clip range for s_i (GSPO's)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--outlier-shift",
        type=float,
        default=0.0,
        help="add outlier tokens whose log-ratio is raised by this much (4.6: probability 0.001 -> 0.1) and show the "
        "clip fraction and the share of one-token clips per length; 0 shows no outlier table",
    )
    parser.add_argument("--outlier-rate", type=float, default=0.01, help="probability of an outlier, per token")
    parser.add_argument(
        "--token-log-ratio-clip",
        type=float,
        default=None,
        metavar="C",
        help="with --outlier-shift: also show the figures with GSPOConfig.token_log_ratio_clip = C",
    )
    parser.add_argument(
        "--reference-length",
        type=int,
        default=None,
        metavar="L",
        help="L_ref of the length-scaled range shown beside the plain one (default: the longest length; 0: hide it)",
    )
    parser.add_argument("--plot", metavar="PATH", help="also write a figure (PNG) here; needs matplotlib")
    parser.set_defaults(func=run)
    return parser
