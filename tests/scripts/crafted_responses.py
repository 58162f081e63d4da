"""Crafted per-response statistics for the diagnostics tests, split across two processes."""

import torch


def responses_of_rank(rank: int) -> list[dict]:
    """Rank 0 holds 6 responses over two minibatches, rank 1 holds 3: unequal counts exercise the padding."""
    g = torch.Generator().manual_seed(rank)
    n = 6 if rank == 0 else 3
    log_s = 1e-3 * torch.randn(n, generator=g)
    lengths = torch.tensor([3, 10, 40, 5, 60, 17][:n])
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0][:n])
    low = (log_s < -3e-4) & (advantages < 0)
    high = (log_s > 4e-4) & (advantages > 0)
    half = n // 2
    one_token = (low | high) & (lengths > 4)  # some clipped responses marked one-token clips
    return [
        dict(
            log_s=log_s[:half] * 0,
            lengths=lengths[:half],
            advantages=advantages[:half],
            clipped_low=low[:half] & False,
            clipped_high=high[:half] & False,
            minibatch=1,
            one_token=one_token[:half] & False,
        ),
        dict(
            log_s=log_s[half:],
            lengths=lengths[half:],
            advantages=advantages[half:],
            clipped_low=low[half:],
            clipped_high=high[half:],
            minibatch=2,
            one_token=one_token[half:],
        ),
    ]
