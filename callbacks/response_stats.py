"""Per-response GSPO statistics, collected inside the loss and handed to the diagnostics callbacks.

`GSPOTrainer` records into a `ResponseStats` from its loss. For a plain `trl.GRPOTrainer`, `attach_response_stats`
wraps the trainer's own loss on that instance, without changing what it computes, and records the same numbers.

Copy this file together with any callback that imports it; it needs only torch.
"""

from __future__ import annotations

import torch

# Statistics per response, each a 1-D tensor of the same length.
FIELDS = ("log_s", "length", "advantage", "clipped_low", "clipped_high", "minibatch")


def sequence_log_ratio(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i, the mean token log-ratio of each response (0 for a response with no tokens)."""
    mask = mask.to(logp.dtype)
    return ((logp - logp_old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def minibatch_index(trainer) -> int:
    """1-based index of the current optimizer step inside its generation batch: 1 is on-policy, 2.. are not."""
    args = trainer.args
    generate_every = args.steps_per_generation * getattr(trainer, "num_iterations", 1)
    return (trainer._step % generate_every) // max(1, args.gradient_accumulation_steps) + 1


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
            local = _gather(local, accelerator)
        self._window_step, self._window = step, local
        return local


def gather_columns(values: torch.Tensor, accelerator) -> torch.Tensor:
    """Concatenate (fields, n) tensors across processes along n; processes may hold different n."""
    values = values.to(accelerator.device)
    counts = accelerator.gather(torch.tensor([values.shape[1]], device=accelerator.device)).tolist()
    padded = accelerator.pad_across_processes(values, dim=1)
    gathered = accelerator.gather(padded.unsqueeze(0)).cpu()  # (processes, fields, n_max)
    return torch.cat([gathered[rank, :, :n] for rank, n in enumerate(counts)], dim=1)


def _gather(local: dict[str, torch.Tensor], accelerator) -> dict[str, torch.Tensor]:
    merged = gather_columns(torch.stack([local[name] for name in FIELDS]), accelerator)
    return {name: merged[i] for i, name in enumerate(FIELDS)}


def attach_response_stats(trainer) -> ResponseStats:
    """The trainer's `ResponseStats`, created on first use (nothing is recorded before, so nothing accumulates
    without a consumer). `GSPOTrainer` records into it from its loss; on a plain `GRPOTrainer` a recorder is
    installed.

    The recorder wraps this trainer instance's `_compute_loss` and `_get_per_token_logps_and_entropies`: it keeps
    the log-probabilities the loss computed, and after the loss reads them with the batch's old log-probabilities,
    mask and advantages. The loss value and its gradient are untouched.
    """
    stats = getattr(trainer, "response_stats", None)
    if stats is not None:
        return stats
    stats = trainer.response_stats = ResponseStats()
    if getattr(trainer, "records_response_stats", False):  # GSPOTrainer's own loss records once this is set
        return stats
    compute_loss = trainer._compute_loss
    get_logps = trainer._get_per_token_logps_and_entropies
    captured = {}

    def get_logps_and_keep(*args, **kwargs):
        out = get_logps(*args, **kwargs)
        if kwargs.get("compute_entropy"):  # only the loss asks for entropies; generation-time passes do not
            captured["logps"] = out[0].detach()
        return out

    def compute_loss_and_record(model, inputs):
        loss = compute_loss(model, inputs)
        logps = captured.pop("logps", None)
        if logps is not None and trainer.model.training:
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            old = inputs.get("old_per_token_logps")
            log_s = sequence_log_ratio(logps, logps if old is None else old, mask)
            advantages = inputs["advantages"]
            if advantages.dim() == 2:
                advantages = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            s = torch.exp(log_s)
            low = (s < 1 - trainer.epsilon_low) & (advantages < 0)
            high = (s > 1 + trainer.epsilon_high) & (advantages > 0)
            stats.record(log_s, mask.sum(-1), advantages, low, high, minibatch_index(trainer))
        return loss

    trainer._get_per_token_logps_and_entropies = get_logps_and_keep
    trainer._compute_loss = compute_loss_and_record
    return stats


# ---------------------------------------------------------------------------------------------- shared by callbacks


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


def is_on_policy_setup(trainer) -> bool:
    """One optimizer step per generation batch: every response is on-policy."""
    args = trainer.args
    return args.steps_per_generation * getattr(trainer, "num_iterations", 1) <= args.gradient_accumulation_steps


def off_policy(window: dict[str, torch.Tensor], trainer) -> torch.Tensor:
    """Mask of the responses from minibatches 2.., whose log s_i is not 0 by construction.

    In a fully on-policy setup, where there are no such responses, all of them are kept instead.
    """
    if is_on_policy_setup(trainer):
        return torch.ones_like(window["minibatch"], dtype=torch.bool)
    return window["minibatch"] > 1


def add_to_trainer_logs(trainer, metrics: dict[str, float]) -> None:
    """Hand metrics to TRL's metric store; `GRPOTrainer.log` sends them to every tracker and the log history."""
    store = trainer._metrics["train"]
    for name, value in metrics.items():
        store[name] = [float(value)]
