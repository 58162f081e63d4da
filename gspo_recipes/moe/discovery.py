"""Find the MoE layers of a transformers causal LM, and decide whether Routing Replay can drive them.

transformers 5.x builds the experts of every MoE family with `@use_experts_implementation`
(`transformers/integrations/moe.py`): the experts module is called as `experts(hidden, top_k_index, top_k_weights)`
whatever kernel runs inside (eager, batched_mm, grouped_mm, ...). Such a module is recognised by the attributes the
decorator sets; its parent is the MoE block, and the block's sibling router (`gate` or `router`) picks the experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo_recipes.moe.rules import ROUTER_WEIGHT_RULES, WeightRule

# Attributes `use_experts_implementation` sets on every experts instance.
_EXPERTS_MARKERS = ("has_gate", "is_transposed", "is_concatenated", "_is_expert_parallel")
_ROUTER_ATTRIBUTE_NAMES = ("gate", "router")
# Implementations that receive (hidden, top_k_index, top_k_weights) from the block, so the hooks see the routes.
_HOOKED_IMPLEMENTATIONS = ("eager", "batched_mm", "grouped_mm", "deepgemm", "sonicmoe")
_FIX = (
    "Routing Replay supports the routers of Qwen3-MoE, Qwen2-MoE, OLMoE, Mixtral, GPT-OSS, DeepSeek-V3 and GLM-4-MoE "
    "with transformers' own MoE blocks; train this model with routing_replay=False (GSPO's sequence ratio does not "
    "need it), or add the router's weight rule to gspo_recipes.moe.rules.ROUTER_WEIGHT_RULES once checked exact."
)


@dataclass
class MoELayer:
    """One MoE layer: its block, experts and router modules, and the router's weight rule (None when unknown)."""

    index: int  # position among the model's MoE layers (not among all decoder layers)
    name: str  # qualified name of the MoE block, e.g. "model.layers.3.mlp"
    block: torch.nn.Module
    experts: torch.nn.Module
    router: torch.nn.Module | None
    weight_rule: WeightRule | None


def is_experts_module(module: torch.nn.Module) -> bool:
    """True for an experts module built with transformers' `@use_experts_implementation`."""
    return all(hasattr(module, attr) for attr in _EXPERTS_MARKERS)


def is_moe_model(model: torch.nn.Module) -> bool:
    """Whether `model` has at least one transformers MoE experts module (one pass over the modules, no forward)."""
    return any(is_experts_module(module) for module in model.modules())


def _find_router(block: torch.nn.Module) -> torch.nn.Module | None:
    for child in block.children():
        if type(child).__name__ in ROUTER_WEIGHT_RULES:
            return child
    for attr in _ROUTER_ATTRIBUTE_NAMES:
        candidate = getattr(block, attr, None)
        if isinstance(candidate, torch.nn.Module):
            return candidate
    return None


def find_moe_layers(model: torch.nn.Module) -> list[MoELayer]:
    """Every MoE layer of `model`, in forward order; an empty list for a dense model."""
    layers = []
    for name, block in model.named_modules():
        experts = [child for child in block.children() if is_experts_module(child)]
        if not experts:
            continue
        router = _find_router(block)
        rule = ROUTER_WEIGHT_RULES.get(type(router).__name__) if router is not None else None
        layers.append(MoELayer(len(layers), name, block, experts[0], router, rule))
    return layers


def _overridden_forward(module: torch.nn.Module) -> bool:
    # Hub kernels (`kernels.kernelize`) swap `forward` on the instance; the class forward is then never run.
    return "forward" in vars(module)


def _check_layer(layer: MoELayer) -> None:
    if layer.router is None:
        raise ValueError(
            f"Routing Replay: MoE block {layer.name} ({type(layer.block).__name__}) has no router submodule named "
            f"{' or '.join(_ROUTER_ATTRIBUTE_NAMES)}, so its expert choice cannot be replayed. {_FIX}"
        )
    if layer.weight_rule is None:
        raise ValueError(
            f"Routing Replay: unknown router class {type(layer.router).__name__} in {layer.name}; its weight rule "
            f"(how logits become expert weights) is not known, and replaying with a guessed rule would be silently "
            f"wrong. {_FIX}"
        )
    for module in (layer.block, layer.router, layer.experts):
        if _overridden_forward(module):
            kernel = getattr(module, "kernel_layer_name", None) or type(module).__name__
            raise ValueError(
                f"Routing Replay: {layer.name} runs a hub kernel ({kernel}) that replaces the transformers forward "
                f"and bypasses the routing hooks. Load the model without kernels (use_kernels=False) to use "
                f"routing_replay=True, or train with routing_replay=False."
            )
    implementation = getattr(layer.experts.config, "_experts_implementation", None) or "eager"
    if implementation not in _HOOKED_IMPLEMENTATIONS:
        raise ValueError(
            f"Routing Replay: experts implementation {implementation!r} of {layer.name} is not one whose routing "
            f"inputs the hooks are known to control ({', '.join(_HOOKED_IMPLEMENTATIONS)}). Call "
            f"model.set_experts_implementation('eager') (or 'grouped_mm'), or train with routing_replay=False."
        )
    if getattr(layer.block, "jitter_noise", 0):
        raise ValueError(
            f"Routing Replay: {layer.name} multiplies its input by random router jitter in training "
            f"(router_jitter_noise={layer.block.jitter_noise}), so no pass can be reproduced exactly. Set "
            f"config.router_jitter_noise=0 before loading the model, or train with routing_replay=False."
        )


def check_routing_replay_supported(model: torch.nn.Module) -> list[MoELayer]:
    """Return the MoE layers of `model` if Routing Replay can drive all of them; raise a ValueError naming why not."""
    layers = find_moe_layers(model)
    if not layers:
        raise ValueError(
            f"Routing Replay: {type(model).__name__} has no transformers MoE layer (no experts module built with "
            f"@use_experts_implementation), so there are no routes to replay. Set routing_replay=False for dense "
            f"models."
        )
    for layer in layers:
        _check_layer(layer)
    return layers
