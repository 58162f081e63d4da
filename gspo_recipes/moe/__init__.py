"""Mixture-of-Experts routing for GSPO training: record routes, measure their volatility, replay them.

No TRL in here: plain torch and transformers 5.x, whose MoE families all call their experts as
`experts(hidden, top_k_index, top_k_weights)` (`@use_experts_implementation`). How a trainer wires it:

1. Detect once: `is_moe_model(model)` (one pass over the modules; dense models then pay nothing more). For Routing
   Replay call `check_routing_replay_supported(model)` at init: it raises ValueError naming an unsupported family,
   router class, hub kernel or experts implementation, with the fix.

2. Record where the old policy scores the rollout (TRL: the first `_get_per_token_logps_and_entropies` call of a
   generation batch, which runs in chunks of rows)::

       with RouteRecorder(model) as recorder:
           old_logps = ...  # the old-policy scoring pass, any number of chunks
       routes = recorder.routes()  # (responses, prompt+completion seq, moe_layers, k), compact integer dtype

   Keep `routes` as one more per-response tensor of the batch (e.g. `inputs["old_routes"]`): rows are responses,
   so TRL's shuffle and split into minibatches carry it along with the other row-indexed tensors
   (`split_routes_per_response` / `stack_routes` for stores that keep one entry per response).

3. Volatility (metric on by default): record the training forward of each minibatch the same way, then
   `routing_change(completion_routes(old, C), completion_routes(new, C), completion_mask)` with C the number of
   completion tokens; sum its counts (`changed_sets / num_sets`, ...) across processes before dividing. The recorder
   reports the current router's own choice even while replay forces other experts.

4. Replay (`routing_replay=True`): wrap the training forward AND backward of a minibatch (in TRL, around
   `training_step`, whose loss forward is one model call)::

       with RoutingReplay(model, inputs["old_routes"]):
           loss = compute_loss(...); loss.backward()

   Every MoE layer then uses the recorded experts, weighted by the current router with its own weight rule, so
   gradients reach those experts' router rows and the recorded pass's log-probabilities are reproduced exactly.
   Gradient checkpointing (reentrant or not) recomputes layers during backward; replay serves them the same routes,
   which is why the context must stay open until backward returns.

`RoutingMonitor` (gspo_recipes/moe/monitor.py) holds steps 2-4 for one trainer; gspo_recipes/_trl.py
`attach_routing` wires it into TRL, and callbacks/routing_volatility.py logs its counts.

`tiny_moe_config(family)` / `build_tiny_moe(family)` build tiny models of each supported family (MOE_FAMILIES).
"""

from gspo_recipes.moe.discovery import (
    MoELayer,
    check_routing_replay_supported,
    find_moe_layers,
    is_experts_module,
    is_moe_model,
)
from gspo_recipes.moe.monitor import RoutingMonitor, routing_shares
from gspo_recipes.moe.routing import RouteRecorder, RoutingReplay, route_dtype
from gspo_recipes.moe.rules import ROUTER_WEIGHT_RULES
from gspo_recipes.moe.tiny import MOE_FAMILIES, build_tiny_moe, tiny_moe_config
from gspo_recipes.moe.volatility import completion_routes, routing_change, split_routes_per_response, stack_routes

__all__ = [
    "MOE_FAMILIES",
    "ROUTER_WEIGHT_RULES",
    "MoELayer",
    "RouteRecorder",
    "RoutingMonitor",
    "RoutingReplay",
    "build_tiny_moe",
    "check_routing_replay_supported",
    "completion_routes",
    "find_moe_layers",
    "is_experts_module",
    "is_moe_model",
    "route_dtype",
    "routing_change",
    "routing_shares",
    "split_routes_per_response",
    "stack_routes",
    "tiny_moe_config",
]
