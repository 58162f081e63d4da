"""Per-response GSPO statistics between two logging steps, and the length buckets they are reported in.

The loss records every micro-batch's responses into a `ResponseStats`; at a logging step the diagnostics callbacks
take the window of responses since the previous one, gathered from every process. Needs only torch.
"""

from __future__ import annotations

import torch

# Statistics per response, each a 1-D tensor of the same length.
FIELDS = ("log_s", "length", "advantage", "clipped_low", "clipped_high", "minibatch")


class ResponseStats:
    """Responses seen since the last logging step: small per-response tensors on the CPU.

    Memory grows with the number of responses in a logging window, never with their length.
    """

    def __init__(self) -> None:
        self._chunks: list[dict[str, torch.Tensor]] = []
        self._window_step: int | None = None
        self._window: dict[str, torch.Tensor] | None = None

    def record(self, log_s, lengths, advantages, clipped_low, clipped_high, minibatch: int) -> None:
        """Add one micro-batch of responses; responses with no completion tokens are left out."""
        lengths = lengths.detach().reshape(-1)
        kept = lengths > 0
        chunk = {
            "log_s": log_s.detach().float().reshape(-1),
            "length": lengths.float(),
            "advantage": advantages.detach().float().reshape(-1),
            "clipped_low": clipped_low.detach().float().reshape(-1),
            "clipped_high": clipped_high.detach().float().reshape(-1),
        }
        chunk = {name: value[kept].cpu() for name, value in chunk.items()}
        chunk["minibatch"] = torch.full_like(chunk["log_s"], float(minibatch))
        self._chunks.append(chunk)

    def window(self, step: int, accelerator=None) -> dict[str, torch.Tensor]:
        """All responses recorded since the previous window, gathered from every process.

        Every process must call this at the same logging step (collective). Callbacks that log at the same step
        share one window: the first call gathers and clears, later calls for that step get the same tensors.
        """
        if self._window_step == step and self._window is not None:
            return self._window
        local = {
            name: torch.cat([c[name] for c in self._chunks]) if self._chunks else torch.zeros(0) for name in FIELDS
        }
        self._chunks = []
        if accelerator is not None and accelerator.num_processes > 1:
            merged = gather_columns(torch.stack([local[name] for name in FIELDS]), accelerator)
            local = {name: merged[i] for i, name in enumerate(FIELDS)}
        self._window_step, self._window = step, local
        return local


def gather_columns(values: torch.Tensor, accelerator) -> torch.Tensor:
    """Concatenate (fields, n) tensors across processes along n; processes may hold different n (collective)."""
    values = values.to(accelerator.device)
    counts = accelerator.gather(torch.tensor([values.shape[1]], device=accelerator.device)).tolist()
    padded = accelerator.pad_across_processes(values, dim=1)
    gathered = accelerator.gather(padded.unsqueeze(0)).cpu()  # (processes, fields, n_max)
    return torch.cat([gathered[rank, :, :n] for rank, n in enumerate(counts)], dim=1)


def off_policy_responses(window: dict[str, torch.Tensor], on_policy_setup: bool) -> torch.Tensor:
    """Mask of the responses from minibatches 2.., whose log s_i is not 0 by construction.

    In a fully on-policy setup, where there are no such responses, all of them are kept instead.
    """
    if on_policy_setup:
        return torch.ones_like(window["minibatch"], dtype=torch.bool)
    return window["minibatch"] > 1


def length_buckets(max_length: int, upper_bounds: list[int] | None = None) -> list[tuple[int, int]]:
    """Inclusive (lo, hi) response-length buckets.

    By default the upper bounds are powers of two from 8 up to `max_length` (the last bucket ends at `max_length`):
    with max_length 256 that is 1-8, 9-16, 17-32, 33-64, 65-128, 129-256.
    """
    if upper_bounds is None:
        upper_bounds, bound = [], 8
        while bound < max_length:
            upper_bounds.append(bound)
            bound *= 2
        upper_bounds.append(max_length)
    bounds = sorted(set(int(b) for b in upper_bounds))
    if bounds[0] < 1:
        raise ValueError(f"length bucket bounds must be positive token counts, got {upper_bounds}")
    return [(lo, hi) for lo, hi in zip([1] + [b + 1 for b in bounds[:-1]], bounds)]


def bucket_label(lo: int, hi: int) -> str:
    return f"len_{lo}-{hi}"
