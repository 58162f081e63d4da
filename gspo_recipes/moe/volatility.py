"""Routing volatility: how many (token, MoE layer) expert choices differ between two routings of the same tokens.

Routes are (responses, tokens, moe_layers, k) integer tensors of expert ids, as `RouteRecorder` writes them; the mask
is (responses, tokens) and selects the tokens that count (completion tokens). Set semantics throughout: the order of
the k experts of a token does not matter.
"""

from __future__ import annotations

import torch


def _check_shapes(routes_old: torch.Tensor, routes_new: torch.Tensor, token_mask: torch.Tensor) -> None:
    if routes_old.shape != routes_new.shape or routes_old.dim() != 4:
        raise ValueError(
            f"routing_change: routes_old {tuple(routes_old.shape)} and routes_new {tuple(routes_new.shape)} must both "
            f"be (responses, tokens, moe_layers, k)."
        )
    if token_mask.shape != routes_old.shape[:2]:
        raise ValueError(
            f"routing_change: token_mask {tuple(token_mask.shape)} must be (responses, tokens) = "
            f"{tuple(routes_old.shape[:2])}; slice the routes with completion_routes() first."
        )


def routing_change(routes_old: torch.Tensor, routes_new: torch.Tensor, token_mask: torch.Tensor) -> dict:
    """Share of masked (token, layer) top-k sets and of expert slots that differ between two routings.

    Returns a dict of plain Python numbers (so it logs and gathers as is):
      changed_frac: share of (token, MoE layer) pairs whose top-k expert SET differs;
      changed_slot_frac: share of expert slots (token, layer, one of k) holding an expert absent from the old set;
      changed_frac_per_layer: list with changed_frac of each MoE layer;
      changed_sets, changed_slots, num_sets, num_slots: the counts behind the shares, to sum across processes and
        minibatches before dividing (averaging shares would weight small batches too much);
      changed_sets_per_layer, num_tokens: the counts behind changed_frac_per_layer.
    With no masked token the shares are 0.0.
    """
    _check_shapes(routes_old, routes_new, token_mask)
    old, new = routes_old.long(), routes_new.long()
    # A slot of `new` is unchanged when its expert appears anywhere among the k old experts of that token and layer.
    slot_kept = (new.unsqueeze(-1) == old.unsqueeze(-2)).any(dim=-1)  # (N, T, L, k)
    mask = token_mask.to(device=new.device, dtype=torch.bool)[:, :, None]  # (N, T, 1)
    set_changed = (~slot_kept.all(dim=-1)) & mask  # (N, T, L)
    slots_changed = (~slot_kept).sum(dim=-1) * mask  # (N, T, L)
    num_layers, k = new.shape[2], new.shape[3]
    num_tokens = int(mask.sum())
    changed_per_layer = set_changed.sum(dim=(0, 1)).tolist()
    changed_sets, changed_slots = sum(changed_per_layer), int(slots_changed.sum())
    num_sets, num_slots = num_tokens * num_layers, num_tokens * num_layers * k
    return {
        "changed_frac": changed_sets / num_sets if num_sets else 0.0,
        "changed_slot_frac": changed_slots / num_slots if num_slots else 0.0,
        "changed_frac_per_layer": [c / num_tokens if num_tokens else 0.0 for c in changed_per_layer],
        "changed_sets": changed_sets,
        "changed_slots": changed_slots,
        "num_sets": num_sets,
        "num_slots": num_slots,
        "changed_sets_per_layer": changed_per_layer,
        "num_tokens": num_tokens,
    }


def completion_routes(routes: torch.Tensor, num_completion_tokens: int) -> torch.Tensor:
    """The routes of the positions that predict each completion token, aligned with TRL's `completion_mask`.

    `routes` covers the whole prompt+completion sequence (N, S, L, k); the log-probability of completion token i is
    computed at the position just before it, so these are positions S-C-1 .. S-2 (C = num_completion_tokens). Those
    are the routes that move a completion token's log-probability ratio.
    """
    seq = routes.shape[1]
    if not 0 < num_completion_tokens < seq:
        raise ValueError(
            f"completion_routes: num_completion_tokens={num_completion_tokens} must be in 1..{seq - 1} for routes "
            f"over {seq} positions."
        )
    return routes[:, seq - num_completion_tokens - 1 : seq - 1]


def split_routes_per_response(routes: torch.Tensor) -> list[torch.Tensor]:
    """One (seq, moe_layers, k) tensor per response (row), for stores that keep one entry per response."""
    return list(routes.unbind(dim=0))


def stack_routes(per_response: list[torch.Tensor]) -> torch.Tensor:
    """Inverse of `split_routes_per_response` for a selection or permutation of responses of one batch."""
    return torch.stack(per_response, dim=0)
