"""`RoutingMonitor`: one trainer's routing state across a rollout: the old-policy routes, the replay of those routes
in the training passes, and the volatility counts per minibatch.

TRL-free: gspo_recipes/_trl.py (`attach_routing`) decides which call is the old-policy pass and which the loss's
forward, and hands them here as callables to run.
"""

from __future__ import annotations

import logging

import torch

from gspo_recipes.moe.discovery import check_routing_replay_supported, find_moe_layers
from gspo_recipes.moe.routing import RouteRecorder, RoutingReplay
from gspo_recipes.moe.volatility import completion_routes, routing_change

logger = logging.getLogger(__name__)

# Columns of a minibatch's counts, followed by one column of changed sets per MoE layer.
COUNT_COLUMNS = ("changed_sets", "changed_slots", "num_sets", "num_slots", "num_tokens")
ROUTING_NOT_MEASURED = "routing_not_measured"  # the kind of the warnings that say volatility is not measured


class RoutingMonitor:
    """Records routes, replays them, and counts route changes for one model.

    Args:
        model: the policy (an MoE causal LM).
        replay: use the recorded old-policy routes in every training forward and backward (`open_replay`); checks at
            construction that every MoE layer can be replayed exactly (ValueError otherwise).

    `measure` (off until a consumer turns it on) makes `score_current` record the loss forward's routes and count
    changes against the old routes; `take_counts` hands the counts over and clears them.
    """

    def __init__(self, model: torch.nn.Module, replay: bool = False) -> None:
        self.layers = check_routing_replay_supported(model) if replay else find_moe_layers(model)
        if not self.layers:
            raise ValueError(f"RoutingMonitor: {type(model).__name__} has no transformers MoE layer.")
        self.model = model
        self.replay = replay
        self.measure = False
        self._replay: RoutingReplay | None = None
        self._counts: dict[int, torch.Tensor] = {}  # minibatch -> COUNT_COLUMNS + changed sets per layer
        self.on_warning = None  # called as on_warning(kind, message) when a warning fires (run_warnings.py)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def record_old_pass(self, run):
        """Run `run()` (the old policy's scoring pass, any number of forward calls) recording its routes.

        Returns (its result, routes (rows, seq, moe_layers, k)), or routes None when `run` called no model forward."""
        with RouteRecorder(self.model, self.layers) as recorder:
            result = run()
        calls = recorder.calls
        return result, (torch.cat(calls, dim=0) if calls else None)

    def open_replay(self, routes: torch.Tensor | None) -> None:
        """From now until `close_replay`, MoE layers use `routes` (one minibatch's rows, in order)."""
        self.close_replay()
        if self.replay and routes is not None:
            self._replay = RoutingReplay(self.model, routes, self.layers)
            self._replay.__enter__()

    def close_replay(self, exc_type=None) -> None:
        replay, self._replay = self._replay, None
        if replay is not None:
            replay.__exit__(exc_type, None, None)

    def score_current(self, run, old_routes: torch.Tensor | None, token_mask: torch.Tensor, minibatch: int):
        """Run the loss's scoring pass `run()`; when measuring, count its route changes against `old_routes`.

        `token_mask` is (rows, completion tokens), the tokens the loss covers. `old_routes` None means the setup is
        exactly on-policy (no old pass): nothing can have changed, so the tokens count with no change and no hook
        runs. Under replay the recorder sees the current router's own choice, not the replayed experts."""
        if not self.measure:
            return run()
        if old_routes is None:
            tokens = int(token_mask.sum())
            self._add(minibatch, [0, 0, tokens * self.num_layers, tokens * self.num_layers * self._top_k(), tokens])
            return run()
        with RouteRecorder(self.model, self.layers) as recorder:
            result = run()
        calls = recorder.calls
        if not calls:  # a kernel bypassed the experts' forward hooks: nothing to compare, say so once
            self.measure = False
            message = "Routing volatility is off: the MoE layers' hooks saw no forward call (a hub kernel?)."
            logger.warning(message)
            if self.on_warning is not None:
                self.on_warning(ROUTING_NOT_MEASURED, message)
            return result
        current = torch.cat(calls, dim=0)
        completion = token_mask.shape[1]
        change = routing_change(
            completion_routes(old_routes, completion), completion_routes(current, completion), token_mask
        )
        self._add(minibatch, [change[name] for name in COUNT_COLUMNS], change["changed_sets_per_layer"])
        return result

    def _top_k(self) -> int:
        # Only for the slot count of an exactly on-policy setup, where every share is 0 whatever k is.
        config = getattr(self.model, "config", None)
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        return int(getattr(text_config, "num_experts_per_tok", None) or 1)

    def _add(self, minibatch: int, counts: list, per_layer: list | None = None) -> None:
        row = torch.tensor(counts + (per_layer or [0] * self.num_layers), dtype=torch.float64)
        self._counts[minibatch] = self._counts.get(minibatch, torch.zeros_like(row)) + row

    def take_counts(self, max_minibatch: int) -> torch.Tensor:
        """(max_minibatch, len(COUNT_COLUMNS) + moe_layers) float64, row k-1 for minibatch k; clears the counts.

        A fixed shape, so every process can sum it with the others (collective) before shares are taken."""
        table = torch.zeros(max_minibatch, len(COUNT_COLUMNS) + self.num_layers, dtype=torch.float64)
        for minibatch, row in self._counts.items():
            table[min(minibatch, max_minibatch) - 1] += row
        self._counts.clear()
        return table


def routing_shares(table: torch.Tensor) -> dict:
    """Shares from a `take_counts` table (summed over processes): overall, per minibatch and per MoE layer.

    Minibatches with no token are left out of `per_minibatch`; every share of an empty table is 0.0."""
    changed_sets, changed_slots, num_sets, num_slots, num_tokens = table[:, : len(COUNT_COLUMNS)].sum(0).tolist()
    per_layer = table[:, len(COUNT_COLUMNS) :].sum(0)
    per_minibatch = {}
    for k, row in enumerate(table.tolist(), start=1):
        if row[2] > 0:
            per_minibatch[k] = {"changed_frac": row[0] / row[2], "changed_slot_frac": row[1] / row[3], "sets": row[2]}
    return {
        "changed_frac": changed_sets / num_sets if num_sets else 0.0,
        "changed_slot_frac": changed_slots / num_slots if num_slots else 0.0,
        "per_layer": (per_layer / num_tokens).tolist() if num_tokens else [0.0] * len(per_layer),
        "per_minibatch": per_minibatch,
        "num_sets": num_sets,
    }
