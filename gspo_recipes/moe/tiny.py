"""Tiny MoE causal LMs of each supported family, built from configs offline, for tests and benchmarks."""

from __future__ import annotations

import torch
import transformers

# family -> (config class, family-specific config fields); the shared sizes are filled in by tiny_moe_config.
_FAMILIES: dict[str, tuple[str, dict]] = {
    "qwen3_moe": ("Qwen3MoeConfig", {"norm_topk_prob": True}),
    "qwen2_moe": ("Qwen2MoeConfig", {"norm_topk_prob": False, "shared_expert_intermediate_size": 32}),
    "olmoe": ("OlmoeConfig", {"norm_topk_prob": False}),
    "mixtral": ("MixtralConfig", {"num_local_experts": None}),
    "gpt_oss": (
        "GptOssConfig",
        {"num_local_experts": None, "head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        {
            "n_routed_experts": None,
            "n_shared_experts": 1,
            "first_k_dense_replace": 0,
            "n_group": 2,
            "topk_group": 1,
            "routed_scaling_factor": 2.5,
            "norm_topk_prob": True,
            "kv_lora_rank": 16,
            "q_lora_rank": None,
            "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 8,
            "v_head_dim": 8,
            "num_key_value_heads": 4,  # multi-head latent attention keeps one key head per query head
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},  # the hub default is YaRN at 4k
        },
    ),
    "glm4_moe": (
        "Glm4MoeConfig",
        {
            "n_routed_experts": None,
            "n_shared_experts": 1,
            "first_k_dense_replace": 0,
            "n_group": 2,
            "topk_group": 1,
            "routed_scaling_factor": 1.5,
            "norm_topk_prob": True,
        },
    ),
}
MOE_FAMILIES = tuple(_FAMILIES)


def tiny_moe_config(
    family: str,
    num_layers: int = 2,
    hidden_size: int = 32,
    num_experts: int = 8,
    top_k: int = 2,
    vocab_size: int = 64,
    **overrides,
) -> transformers.PretrainedConfig:
    """A config of `family` (one of MOE_FAMILIES) with every layer MoE, sized to run in milliseconds on CPU."""
    if family not in _FAMILIES:
        raise ValueError(f"tiny_moe_config: unknown family {family!r}; choose one of {', '.join(MOE_FAMILIES)}.")
    class_name, specific = _FAMILIES[family]
    fields = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "moe_intermediate_size": hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts_per_tok": top_k,
        "num_experts": num_experts,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    # Fields set to None above take the expert count under the family's own name.
    fields.update({key: (num_experts if value is None else value) for key, value in specific.items()})
    fields.update(overrides)
    return getattr(transformers, class_name)(**fields)


def build_tiny_moe(family: str, seed: int = 0, **config_fields) -> transformers.PreTrainedModel:
    """A freshly initialised tiny causal LM of `family`, float32, in eval mode.

    Routers whose transformers init is all zeros (ties every expert) get random rows, and DeepSeek-style correction
    biases random values, so routing is non-trivial and tests see real top-k choices.
    """
    config = tiny_moe_config(family, **config_fields)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith((".gate.weight", ".router.weight")) and param.dim() == 2:
                param.normal_(0.0, 0.5)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0.0, 0.05)
    return model.eval()
