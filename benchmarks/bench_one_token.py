"""Cost of the one-token measurement and of `token_log_ratio_clip` in the loss, against the loss itself.

Per shape (responses x tokens), medians over repeats, one torch thread, measured in the same run:
- the GSPO loss (`gspo_token_objective`, its reduction and backward), as `GSPOTrainer` computes it;
- the one-token measurement the trainer adds when a diagnostics callback consumes it (`one_token_clips` on the
  detached token log-ratios: O(B T) over the clipped responses only, no gradient, no forward pass), in its worst
  case, every response clipped;
- the loss with `token_log_ratio_clip` on.
The model's forward and backward, which dominate a real step, are not included: the ratios are upper bounds on the
share of a step.

    python benchmarks/bench_one_token.py            # 3 shapes, 30 repeats
    python benchmarks/bench_one_token.py --quick    # 2 shapes, 10 repeats
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

try:
    from gspo_recipes.loss import clipped_sides, gspo_token_objective, mean_over_responses, one_token_clips
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gspo_recipes.loss import clipped_sides, gspo_token_objective, mean_over_responses, one_token_clips


def batch(n: int, t: int):
    g = torch.Generator().manual_seed(0)
    logp_old = -torch.rand(n, t, generator=g) * 3
    # Worst case for the measurement, which looks only at clipped responses: every response moved up by 0.01 per
    # token with A > 0, so every one is clipped high.
    logp = (logp_old + 0.01 + 1e-3 * torch.randn(n, t, generator=g)).requires_grad_(True)
    return logp, logp_old, torch.randn(n, generator=g).abs(), torch.ones(n, t)


def loss_step(logp, logp_old, adv, mask, clip=None):
    surrogate, log_s, _ = gspo_token_objective(logp, logp_old, adv, mask, token_log_ratio_clip=clip)
    (-mean_over_responses(surrogate, mask)).backward()
    logp.grad = None
    return log_s


def measure(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_shape(n: int, t: int, repeats: int) -> tuple[float, float, float]:
    """Median seconds: (the loss, the one-token measurement, the loss with the clamp on)."""
    logp, logp_old, adv, mask = batch(n, t)
    log_s = loss_step(logp, logp_old, adv, mask)
    low, high = clipped_sides(log_s, adv, 3e-4, 4e-4)
    plain = measure(lambda: loss_step(logp, logp_old, adv, mask), repeats)
    one = measure(lambda: one_token_clips(logp.detach() - logp_old, mask, low, high, 3e-4, 4e-4), repeats)
    clamped = measure(lambda: loss_step(logp, logp_old, adv, mask, clip=0.05), repeats)
    return plain, one, clamped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = [(16, 64), (64, 1024)] if args.quick else [(16, 64), (64, 1024), (64, 4096)]
    repeats = 10 if args.quick else 30
    print(f"{'shape':>12} {'loss fwd+bwd':>13} {'+ one-token':>12} {'ratio':>7} {'loss, clamp on':>15} {'ratio':>7}")
    for n, t in shapes:
        plain, one, clamped = measure_shape(n, t, repeats)
        print(f"{n:>5} x {t:<5} {plain * 1e3:>10.2f} ms {one * 1e3:>9.2f} ms {one / plain:>7.2f} "
              f"{clamped * 1e3:>12.2f} ms {clamped / plain:>7.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
