"""Router weight rules: how each MoE family turns router logits into the weights of the chosen experts.

Routing Replay keeps the experts chosen under the old policy but must weight them with the CURRENT router, exactly
as that router would weight them had it chosen them itself, so that gradients reach the router rows of the chosen
experts and the recorded pass is reproduced bit for bit. Each rule below copies the arithmetic of the router's own
`forward` in transformers 5.24 (same dtypes, same order of operations) after its top-k selection; group routing and
DeepSeek's correction bias only affect which experts are chosen, not their weights, so replay needs neither.

Every supported router returns `(router_logits, top_k_weights, top_k_index)`; a rule maps
`(router, router_logits, top_k_index) -> top_k_weights`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

WeightRule = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def softmax_then_topk(router: torch.nn.Module, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Qwen2-MoE, Qwen3-MoE, OLMoE: softmax over all experts in float32, optional `norm_topk_prob` renormalisation."""
    probs = F.softmax(logits, dtype=torch.float, dim=-1)
    weights = probs.gather(-1, index)
    if router.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype)


def softmax_then_topk_renormalised(router: torch.nn.Module, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Mixtral: softmax over all experts, always renormalised over the top-k (the softmax of the top-k logits), fp32."""
    probs = F.softmax(logits.float(), dim=-1)
    weights = probs.gather(-1, index)
    return weights / weights.sum(dim=-1, keepdim=True)


def topk_then_softmax(router: torch.nn.Module, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """GPT-OSS: softmax over the chosen experts' logits only (unchosen experts get exactly zero gradient)."""
    return F.softmax(logits.gather(-1, index), dim=1, dtype=logits.dtype)


def sigmoid_scaled(router: torch.nn.Module, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V3, GLM-4-MoE: sigmoid scores of the chosen experts, optional renormalisation, routed scaling factor."""
    weights = logits.sigmoid().gather(1, index)
    if router.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * router.routed_scaling_factor


# Router class name -> weight rule. Only classes whose forward was read and matched against the rule are listed;
# anything else is refused by `check_routing_replay_supported` rather than replayed with a guessed rule.
ROUTER_WEIGHT_RULES: dict[str, WeightRule] = {
    "Qwen3MoeTopKRouter": softmax_then_topk,
    "Qwen2MoeTopKRouter": softmax_then_topk,
    "OlmoeTopKRouter": softmax_then_topk,
    "MixtralTopKRouter": softmax_then_topk_renormalised,
    "GptOssTopKRouter": topk_then_softmax,
    "DeepseekV3TopkRouter": sigmoid_scaled,
    "Glm4MoeTopkRouter": sigmoid_scaled,
}
