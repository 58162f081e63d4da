"""The transformers generator's own log-probability of every sampled token, read during `generate`.

For every sampled token: log_softmax(logits / temperature) of the model's raw logits, taken before any logits
processor (repetition penalty, top-k, top-p, min-p). That is what the trainer scores: TRL's fused LM head divides the
same logits by the same temperature and never filters.

Positions. `generate` numbers positions from each prompt's first real token (position ids from the attention mask);
TRL's scoring pass passes no position ids, so the model numbers them from the first (left-padding) token. Rotary
models see only relative positions and do not care; models with learned absolute positions (GPT-2, OPT, ...) give
different log-probabilities for left-padded prompts. While the sampler is the old policy, generation therefore runs
with the trainer's positions (`trainer_positions`): then what is sampled, what is recorded and what the trainer
scores are one distribution, for every architecture.

Kept sets (`record_kept`, truncated sampling). A logits processor appended after transformers' own (top-k, top-p,
min-p) reads each step's processed scores: the sampler's kept set is the tokens with a finite processed score. The
recorder keeps its log-mass log S under the unfiltered distribution and, with `renormalise` (keep_sampling_mask),
the set's ids (at most `max_kept`, -1 padded) and records log_softmax over the set instead; a set larger than
`max_kept` is not stored and that token keeps its full-vocabulary value (`overflow`).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


class AlignmentError(RuntimeError):
    """The recorded log-probabilities do not line up with the generated tokens."""


class GenerationLogprobRecorder:
    """Forward hook recording, during `generate`, each sampled token's log_softmax(logits / temperature).

    Every forward call's last-position logits give the distribution of the next token; that token is read from the
    next call's `input_ids` (or, for the last step, from the returned completions). Only one (batch, vocab) row is kept.
    """

    def __init__(self, temperature: float, record_kept: bool = False, renormalise: bool = False, max_kept: int = 512):
        self.temperature = temperature
        self.record_kept, self.renormalise, self.max_kept = record_kept or renormalise, renormalise, max_kept
        self._pending_kept: tuple | None = None  # (ids (B, K), log S (B,), overflow (B,)) of the pending step
        self._kept: list[tuple] = []  # per step, aligned with _logps
        # Filled by `logprobs_for` when record_kept: per completion, (n, K) int32 ids (-1 padded), (n,) log S, overflow
        self.kept_rows: list[torch.Tensor] | None = None
        self.log_mass_rows: list[torch.Tensor] | None = None
        self.overflow_rows: list[torch.Tensor] | None = None
        self._pending: torch.Tensor | None = None  # log-softmax row of the step whose token is not known yet
        self._logps: list[torch.Tensor] = []  # per step, (B, 1)
        self._tokens: list[torch.Tensor] = []  # per step, (B, 1): the token each step's log-probability belongs to
        self._error: str | None = None

    @contextmanager
    def attached(self, module: torch.nn.Module, trainer_positions: bool = False):
        handles = [module.register_forward_hook(self._hook, with_kwargs=True)]
        if trainer_positions:
            handles.append(module.register_forward_pre_hook(_drop_position_ids, with_kwargs=True))
        if self.record_kept:  # instance attribute: this module's `generate` appends our processor after its own
            build = module._get_logits_processor

            def with_recorder(*args, **kwargs):
                processors = build(*args, **kwargs)
                processors.append(_KeptSetProcessor(self))
                return processors

            module._get_logits_processor = with_recorder
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()
            if self.record_kept:
                del module._get_logits_processor

    def _on_processed(self, scores: torch.Tensor) -> None:
        """The pending step's processed scores: its kept set, log S, and (renormalise) the renormalised row."""
        if self._pending is None:
            self._error = "a logits-processor call came before any forward call"
            return
        with torch.no_grad():
            kept = torch.isfinite(scores).to(self._pending.device)
            full = self._pending
            log_mass = torch.logsumexp(full.masked_fill(~kept, -torch.inf), dim=-1)
            overflow = kept.sum(-1) > self.max_kept
            ids = full.new_zeros((full.size(0), 0), dtype=torch.int32)
            if self.renormalise:
                width = int(kept.sum(-1).masked_fill(overflow, 0).max().clamp(min=1))
                values, order = scores.to(full.device).float().topk(width, dim=-1)
                usable = torch.isfinite(values) & ~overflow[:, None]
                ids = torch.where(usable, order, -1).to(torch.int32)
                renormalised = (full - log_mass[:, None]).masked_fill(~kept, -torch.inf)
                self._pending = torch.where(overflow[:, None], full, renormalised)
            self._pending_kept = (ids, log_mass, overflow)

    def _hook(self, module, args, kwargs, output) -> None:
        logits = output.logits if hasattr(output, "logits") else output[0]
        if self._pending is not None:
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            if input_ids is None:
                self._error = "a forward call during generation had no input_ids"
            else:
                tokens = input_ids[:, -1:].to(self._pending.device)
                self._logps.append(self._pending.gather(-1, tokens))
                self._tokens.append(tokens)
                self._take_kept()
        with torch.no_grad():
            scaled = logits[:, -1, :].float()
            if self.temperature != 1.0:
                scaled = scaled / self.temperature
            self._pending = torch.log_softmax(scaled, dim=-1)

    def _take_kept(self) -> None:
        if not self.record_kept:
            return
        if self._pending_kept is None:
            self._error = "a generation step passed no logits processor (the kept set is unknown)"
            self._pending_kept = (None, None, None)
        self._kept.append(self._pending_kept)
        self._pending_kept = None

    def logprobs_for(self, completion_ids: list[list[int]]) -> list[list[float]]:
        """Per-completion log-probabilities, aligned with TRL's completions (cut after the first EOS)."""
        if self._error:
            raise AlignmentError(self._error)
        lengths = [len(c) for c in completion_ids]
        steps = max(lengths, default=0)
        logps, tokens = list(self._logps), list(self._tokens)
        if len(logps) < steps and self._pending is not None:  # the last step: its token is in the completions
            last = torch.tensor(
                [[c[steps - 1] if len(c) == steps else 0] for c in completion_ids], device=self._pending.device
            )
            logps.append(self._pending.gather(-1, last))
            tokens.append(last)
            self._take_kept()
        if len(logps) < steps:
            raise AlignmentError(f"{len(logps)} forward calls recorded for {steps} generated tokens")
        if steps == 0:
            return [[] for _ in completion_ids]
        rows = {step.size(0) for step in logps[:steps]}
        if rows != {len(completion_ids)}:  # beam search: batch x beams rows per step, one per completion at the end
            raise AlignmentError(
                f"the forward calls during generation had {sorted(rows)} rows for {len(completion_ids)} completions "
                "(beam search, or another generation that does not sample one row per completion)"
            )
        logps = torch.cat(logps[:steps], dim=1).cpu()
        tokens = torch.cat(tokens[:steps], dim=1).cpu()
        if logps.size(0) != len(completion_ids):
            raise AlignmentError(f"recorded {logps.size(0)} rows for {len(completion_ids)} completions")
        for row, ids in enumerate(completion_ids):
            if tokens[row, : len(ids)].tolist() != list(ids):
                raise AlignmentError("the tokens seen by the model differ from the returned completions")
        if self.record_kept:
            self._split_kept(lengths, steps)
        return [logps[row, :n].tolist() for row, n in enumerate(lengths)]

    def _split_kept(self, lengths: list[int], steps: int) -> None:
        if self._error:
            raise AlignmentError(self._error)
        kept = self._kept[:steps]
        width = max(ids.size(1) for ids, _, _ in kept)
        ids = torch.stack([torch.nn.functional.pad(i, (0, width - i.size(1)), value=-1) for i, _, _ in kept], 1)
        log_mass = torch.stack([m for _, m, _ in kept], 1).cpu()
        overflow = torch.stack([o for _, _, o in kept], 1).cpu()
        ids = ids.cpu()
        self.kept_rows = [ids[row, :n] for row, n in enumerate(lengths)]
        self.log_mass_rows = [log_mass[row, :n] for row, n in enumerate(lengths)]
        self.overflow_rows = [overflow[row, :n] for row, n in enumerate(lengths)]


class _KeptSetProcessor:
    """The last logits processor of `generate`: shows the recorder the processed scores, changes nothing."""

    def __init__(self, recorder: GenerationLogprobRecorder):
        self.recorder = recorder

    def __call__(self, input_ids, scores):
        self.recorder._on_processed(scores)
        return scores


def _drop_position_ids(module, args, kwargs):
    """Let the model number positions itself, as it does in TRL's scoring pass (which passes none)."""
    if kwargs.get("position_ids") is not None:
        kwargs = {**kwargs, "position_ids": None}
        return args, kwargs
    return None


def generation_module(model) -> torch.nn.Module:
    """The module whose forward `generate` calls: the model, or the base model under a PEFT adapter."""
    from accelerate.utils import is_peft_model

    return model.get_base_model() if is_peft_model(model) else model
