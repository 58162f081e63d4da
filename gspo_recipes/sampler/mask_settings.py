"""The config checks of `keep_sampling_mask` (called from `GSPOConfig.__post_init__`; no torch, no TRL internals)."""

from __future__ import annotations


def truncation_settings(args) -> dict:
    """The generation settings that truncate the sampled distribution, as {name: value}; empty when none do.

    Read from the config fields and from `generation_kwargs`, which TRL passes on to the generator and which win.
    """
    extra = getattr(args, "generation_kwargs", None) or {}
    top_p = extra.get("top_p", getattr(args, "top_p", 1.0))
    top_k = extra.get("top_k", getattr(args, "top_k", 0))
    min_p = extra.get("min_p", getattr(args, "min_p", None))
    found = {}
    if top_p is not None and top_p < 1.0:
        found["top_p"] = top_p
    if top_k is not None and top_k > 0:
        found["top_k"] = top_k
    if min_p:
        found["min_p"] = min_p
    return found


def check_sampling_mask_settings(args) -> None:
    cap = args.sampling_mask_max_tokens
    if cap < 1:
        raise ValueError(
            f"sampling_mask_max_tokens={cap}: at least 1 kept-set entry per token is needed (512 default)."
        )
    if not args.keep_sampling_mask:
        return
    truncation = truncation_settings(args)
    if not truncation:
        raise ValueError(
            "keep_sampling_mask=True but sampling is not truncated (top_p=1.0, top_k unset, min_p unset): every token "
            "is drawn from the full softmax the trainer already scores, so there is no kept set to keep. Set "
            "keep_sampling_mask=False, or sample with top_p < 1, top_k > 0 or min_p."
        )
    if (args.generation_kwargs or {}).get("num_beams", 1) > 1:
        raise ValueError(
            "keep_sampling_mask=True needs the set each token was sampled from, and beam search (generation_kwargs "
            "num_beams > 1) does not sample one token per response and step. Remove num_beams, or set "
            "keep_sampling_mask=False."
        )
    top_k = truncation.get("top_k")
    if top_k is not None and top_k > cap:
        raise ValueError(
            f"keep_sampling_mask=True with top_k={top_k} keeps up to {top_k} tokens per step, more than "
            f"sampling_mask_max_tokens={cap} can store. Raise sampling_mask_max_tokens to {top_k} (memory: "
            "4 bytes x responses x tokens x that many per generation batch) or lower top_k."
        )
    if args.use_transformers_continuous_batching and not args.use_vllm:
        raise ValueError(
            "keep_sampling_mask=True reads the kept set inside transformers' generate, which continuous batching does "
            "not expose. Set use_transformers_continuous_batching=False, or keep_sampling_mask=False."
        )
    if getattr(args, "dynamic_sampling", False):
        raise ValueError(
            "keep_sampling_mask=True with dynamic_sampling=True is not supported yet: dynamic sampling merges rounds "
            "whose kept-set tensors have different widths. Set one of them to False."
        )
