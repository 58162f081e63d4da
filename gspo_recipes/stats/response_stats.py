"""Per-response GSPO statistics between two logging steps, and the length buckets they are reported in.

The loss records every micro-batch's responses into a `ResponseStats`; at a logging step (and at the run's last
step, see `window_ends`) the diagnostics callbacks take the window of responses since the previous one, gathered from
every process. The responses of a window still open at a checkpoint are saved with it, so a resumed run's next line
holds them too. Needs only torch.
"""

from __future__ import annotations

import json
import os

import torch

# Statistics per response, each a 1-D tensor of the same length.
FIELDS = ("log_s", "length", "advantage", "clipped_low", "clipped_high", "minibatch", "one_token")


STATE_FILE = "gspo_response_stats.json"  # in a checkpoint folder: the responses of the window still open there


def window_ends(state, control) -> bool:
    """Whether a logging window closes at this optimizer step (call from `on_step_end`): at a logging step, and at the
    run's last step, which the Trainer does not log unless it is one; the Trainer's closing summary log follows it, and
    carries the last window's metrics and diagnostics line."""
    return bool(control.should_log or control.should_training_stop or state.global_step >= state.max_steps)


def checkpoint_folder(args, state) -> str:
    """The folder the Trainer saves this step's checkpoint in, and resumes from (transformers' "checkpoint-N")."""
    return os.path.join(args.output_dir, f"checkpoint-{state.global_step}")


class ResponseStats:
    """Responses seen since the last logging step: small per-response tensors on the CPU.

    Memory grows with the number of responses in a logging window, never with their length.
    """

    def __init__(self) -> None:
        self._chunks: list[dict[str, torch.Tensor]] = []
        self._window_step: int | None = None
        self._window: dict[str, torch.Tensor] | None = None
        self._saved_step: int | None = None  # callbacks sharing these stats save and restore them once
        self._restored = False

    def record(self, log_s, lengths, advantages, clipped_low, clipped_high, minibatch: int, one_token=None) -> None:
        """Add one micro-batch of responses; responses with no completion tokens are left out. `one_token`: for the
        one-token clips the driving token's |log-ratio| (`loss.one_token_clip_drivers`), 0 elsewhere; None: none."""
        lengths = lengths.detach().reshape(-1)
        kept = lengths > 0
        chunk = {
            "log_s": log_s.detach().float().reshape(-1),
            "length": lengths.float(),
            "advantage": advantages.detach().float().reshape(-1),
            "clipped_low": clipped_low.detach().float().reshape(-1),
            "clipped_high": clipped_high.detach().float().reshape(-1),
        }
        if one_token is None:
            one_token = torch.zeros_like(chunk["log_s"])
        chunk["one_token"] = one_token.detach().float().reshape(-1)
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

    def save_open_window(self, folder: str, step: int, accelerator=None, write: bool = True) -> None:
        """Save the responses recorded since the last window into checkpoint `folder` (collective: every process
        calls it; the process with `write` writes all of them). A second call for the same step does nothing."""
        if self._saved_step == step:
            return
        self._saved_step = step
        local = torch.stack([self._local(name) for name in FIELDS]) if self._chunks else torch.zeros(len(FIELDS), 0)
        if accelerator is not None and accelerator.num_processes > 1:
            local = gather_columns(local, accelerator)
        if write and os.path.isdir(folder):
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump({"step": step, **{name: local[i].tolist() for i, name in enumerate(FIELDS)}}, f)

    def restore_open_window(self, folder: str, is_main_process: bool = True) -> bool:
        """On resume from checkpoint `folder`: the responses its open window held, to the main process only (windows
        are gathered, so each counts once). A second call does nothing."""
        path = os.path.join(folder, STATE_FILE)
        if self._restored or not os.path.exists(path):
            return False
        self._restored = True
        if is_main_process:
            with open(path) as f:
                saved = json.load(f)
            # A checkpoint from before a field existed (one_token) restores it as zeros.
            empty = [0.0] * len(saved["log_s"])
            chunk = {name: torch.tensor(saved.get(name, empty), dtype=torch.float32) for name in FIELDS}
            if chunk["log_s"].numel():
                self._chunks.insert(0, chunk)
        return True

    def _local(self, name: str) -> torch.Tensor:
        return torch.cat([c[name] for c in self._chunks])


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
