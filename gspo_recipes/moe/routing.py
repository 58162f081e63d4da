"""Record the experts every token is routed to, and replay recorded routes in later forward and backward passes.

Both work by module hooks on the MoE layers found by `find_moe_layers`; nothing is patched, and leaving the context
removes every hook, so a model outside these contexts runs exactly as transformers wrote it.

Gradient checkpointing re-runs each layer's forward during backward. Both classes tell such a recomputation from a
real forward by asking autograd whether a backward pass is running: the recorder ignores it (it would record every
route twice), and replay serves it the routes of the forward call it recomputes, so the context must stay open until
`backward()` has returned.
"""

from __future__ import annotations

import torch

from gspo_recipes.moe.discovery import MoELayer, check_routing_replay_supported, find_moe_layers

# Attribute through which replay hands the router's own choice to a recorder on the same layer.
_ROUTER_CHOICE_ATTR = "_gspo_router_choice"


def _in_backward() -> bool:
    # -1 outside any autograd graph task; a checkpointed layer is recomputed inside one (reentrant or not).
    return torch._C._current_graph_task_id() != -1


def route_dtype(num_experts: int) -> torch.dtype:
    """The smallest integer dtype that holds expert ids below `num_experts` (routes are stored per token and layer)."""
    if num_experts <= 256:
        return torch.uint8
    return torch.int16 if num_experts <= 32767 else torch.int32


def _first_tensor_argument(args: tuple, kwargs: dict, position: int, name: str) -> torch.Tensor:
    return args[position] if len(args) > position else kwargs[name]


class _Hooks:
    """Registers hooks on enter and removes them on exit."""

    def __init__(self) -> None:
        self._handles: list = []

    def _register(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        self._register()
        return self

    def __exit__(self, *exc_info) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class RouteRecorder(_Hooks):
    """Records, for every forward call of the model, the top-k experts of every token in every MoE layer.

    Use as `with RouteRecorder(model) as recorder: model(...)`; afterwards `recorder.calls` holds one long-lived tensor
    per forward call, shaped (batch, seq, moe_layers, k), with each token's expert ids sorted ascending (so equal sets
    compare equal) and stored in `route_dtype(num_experts)`. Outputs are untouched. Under `RoutingReplay` the recorder
    sees the experts the current router would have chosen, not the replayed ones, so volatility can still be measured.
    Recomputations by gradient checkpointing are not recorded.
    """

    def __init__(self, model: torch.nn.Module, layers: list[MoELayer] | None = None) -> None:
        super().__init__()
        self.layers = find_moe_layers(model) if layers is None else layers
        if not self.layers:
            raise ValueError(f"RouteRecorder: {type(model).__name__} has no transformers MoE layer to record.")
        self._block_shapes: list[tuple[int, int] | None] = [None] * len(self.layers)
        self._per_layer: list[list[torch.Tensor]] = [[] for _ in self.layers]

    def _register(self) -> None:
        for layer in self.layers:
            self._handles.append(
                layer.block.register_forward_pre_hook(self._block_pre_hook(layer.index), with_kwargs=True)
            )
            self._handles.append(
                layer.experts.register_forward_pre_hook(self._experts_pre_hook(layer.index), with_kwargs=True)
            )

    def _block_pre_hook(self, index: int):
        def hook(module, args, kwargs):
            hidden = _first_tensor_argument(args, kwargs, 0, "hidden_states")
            # MoE blocks see (batch, seq, hidden); the experts see the same tokens flattened.
            self._block_shapes[index] = tuple(hidden.shape[:2]) if hidden.dim() == 3 else (1, hidden.shape[0])

        return hook

    def _experts_pre_hook(self, index: int):
        def hook(module, args, kwargs):
            router_choice = module.__dict__.pop(_ROUTER_CHOICE_ATTR, None)
            if _in_backward():
                return
            top_k_index = (
                router_choice if router_choice is not None else _first_tensor_argument(args, kwargs, 1, "top_k_index")
            )
            batch, seq = self._block_shapes[index]
            dtype = route_dtype(getattr(module, "num_experts", 256))
            routes = top_k_index.detach().sort(dim=-1).values.to(dtype)
            self._per_layer[index].append(routes.reshape(batch, seq, routes.shape[-1]))

        return hook

    @property
    def calls(self) -> list[torch.Tensor]:
        """One (batch, seq, moe_layers, k) tensor per recorded forward call, in call order."""
        counts = {len(records) for records in self._per_layer}
        if len(counts) != 1:
            raise RuntimeError(f"RouteRecorder: MoE layers recorded unequal numbers of calls {sorted(counts)}.")
        return [torch.stack(records, dim=2) for records in zip(*self._per_layer)]

    def routes(self) -> torch.Tensor:
        """All recorded calls joined along the batch: the routes of a scoring pass made in chunks of rows."""
        calls = self.calls
        if not calls:
            raise RuntimeError("RouteRecorder: no forward call was recorded.")
        return torch.cat(calls, dim=0)

    def clear(self) -> None:
        for records in self._per_layer:
            records.clear()


class RoutingReplay(_Hooks):
    """Makes every MoE layer use recorded experts, weighted by the current router with its own weight rule.

    `routes` is (rows, seq, moe_layers, k), as recorded by `RouteRecorder` (any integer dtype, any device). Forward
    calls inside the context consume rows in order: a call on b sequences takes the next b rows, so a pass made in
    chunks replays the routes of the same chunks. Keep the context open through `backward()`: a layer recomputed by
    gradient checkpointing gets the routes of the forward call it recomputes (one forward call per context when
    checkpointing recomputes; more raise rather than guess). Raises ValueError from
    `check_routing_replay_supported` when a layer cannot be replayed exactly.
    """

    def __init__(self, model: torch.nn.Module, routes: torch.Tensor, layers: list[MoELayer] | None = None) -> None:
        super().__init__()
        self.layers = check_routing_replay_supported(model) if layers is None else layers
        if routes.dim() != 4 or routes.shape[2] != len(self.layers):
            raise ValueError(
                f"RoutingReplay: routes must be (rows, seq, moe_layers={len(self.layers)}, k); got "
                f"{tuple(routes.shape)}. Record them with RouteRecorder on the same model."
            )
        self.model = model
        self.routes = routes
        self._recompute_owed = self._checkpointing = False
        self._row_cursor = [0] * len(self.layers)
        self._forward_rows: list[list[slice]] = [[] for _ in self.layers]

    def _register(self) -> None:
        for handle in self._handles:  # a guard left by the previous use of this object
            handle.remove()
        self._handles.clear()
        self._recompute_owed = False
        # Decoder layers carry `gradient_checkpointing` (transformers' GradientCheckpointingLayer); reading the
        # modules works through DDP/accelerate wrappers too.
        self._checkpointing = any(getattr(m, "gradient_checkpointing", False) is True for m in self.model.modules())
        self._row_cursor = [0] * len(self.layers)
        self._forward_rows = [[] for _ in self.layers]
        for layer in self.layers:
            self._handles.append(layer.router.register_forward_hook(self._router_hook(layer)))

    def __exit__(self, exc_type, *exc_info) -> None:
        super().__exit__(exc_type, *exc_info)
        for layer in self.layers:
            layer.experts.__dict__.pop(_ROUTER_CHOICE_ATTR, None)
        if self._recompute_owed and exc_type is None:
            self._guard_against_late_recompute()

    def _guard_against_late_recompute(self) -> None:
        # A checkpointed forward ran under replay and its backward has not been seen: if backward recomputes a layer
        # now, it would route freely and give silently wrong gradients. Raise then instead; the next plain forward
        # (no backward running) shows the graph was dropped and removes the guard.
        def guard(module, args, output):
            if _in_backward():
                raise RuntimeError(
                    "RoutingReplay: gradient checkpointing recomputed an MoE layer after the replay context was "
                    "closed, so the recomputation would not use the replayed routes. Keep backward() inside "
                    "`with RoutingReplay(...)`."
                )
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

        self._handles = [layer.router.register_forward_hook(guard) for layer in self.layers]

    def _rows_for_call(self, layer_index: int, num_tokens: int) -> slice:
        seq = self.routes.shape[1]
        if _in_backward():
            calls = self._forward_rows[layer_index]
            if len(calls) != 1:
                raise RuntimeError(
                    f"RoutingReplay: gradient checkpointing recomputed MoE layer {layer_index} after {len(calls)} "
                    f"forward calls in one replay context; open one RoutingReplay per forward+backward call."
                )
            return calls[0]
        start = self._row_cursor[layer_index]
        batch = num_tokens // seq
        if num_tokens % seq or start + batch > self.routes.shape[0]:
            raise ValueError(
                f"RoutingReplay: a forward call routes {num_tokens} tokens through MoE layer {layer_index}, but the "
                f"routes hold {self.routes.shape[0] - start} unused rows of {seq} tokens. Replay needs the same "
                f"padded sequences (same rows, same length) as the pass the routes were recorded in."
            )
        rows = slice(start, start + batch)
        self._row_cursor[layer_index] = start + batch
        self._forward_rows[layer_index].append(rows)
        # Reentrant checkpointing runs the forward under no_grad, so grad mode cannot tell whether backward will
        # recompute this call; a checkpointing model in training mode can.
        if self._checkpointing and self.layers[layer_index].block.training:
            self._recompute_owed = True
        return rows

    def _router_hook(self, layer: MoELayer):
        def hook(module, args, output):
            router_logits, _, router_choice = output[:3]
            rows = self._rows_for_call(layer.index, router_logits.shape[0])
            index = self.routes[rows, :, layer.index].reshape(-1, self.routes.shape[-1])
            index = index.to(device=router_logits.device, dtype=torch.long)
            weights = layer.weight_rule(module, router_logits, index)
            setattr(layer.experts, _ROUTER_CHOICE_ATTR, router_choice)
            return (router_logits, weights, index, *output[3:])

        return hook
