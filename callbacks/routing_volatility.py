"""RoutingVolatilityCallback: how many experts chosen for the same tokens change between the old and current policy.

Drop-in for any TRL `GRPOTrainer` (token or sequence ratios) on a transformers Mixture-of-Experts model:

    trainer.add_callback(RoutingVolatilityCallback(trainer))

`GSPOTrainer` registers it itself when the model is MoE and `gspo_diagnostics` is on. It records the top-k experts of
every token in TRL's old-policy pass (kept per response in the batch as `old_routes`) and in the loss's forward, and
at every optimizer step logs, over that step's completion tokens summed across processes:

- `gspo/routing/changed_frac`: share of (completion token, MoE layer) pairs whose top-k expert set differs;
- `gspo/routing/changed_slot_frac`: share of expert slots holding an expert the old policy did not choose;
- `gspo/routing/changed_frac/minibatch_{k}`: the same per minibatch (k-1 optimizer steps since sampling; 0 on the
  on-policy minibatch 1).

Per-layer shares and the per-minibatch counts go into the "routing" section of `gspo_diagnostics.jsonl` (written by
`LogRatioHistogramCallback`, which `GSPOTrainer` registers too). On a dense model it installs nothing and logs
nothing. With Routing Replay on, the metric still reports the current router's own choice. Copy this file into your
project freely; it needs gspo-recipes installed.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

from gspo_recipes._trl import attach_routing, metric_store, micro_steps_per_generation, recomputes_old_logps
from gspo_recipes.moe.monitor import ROUTING_NOT_MEASURED, routing_shares
from gspo_recipes.runfiles.run_warnings import record_warning
from gspo_recipes.stats.response_stats import window_ends

logger = logging.getLogger(__name__)
SECTION = "routing"


class RoutingVolatilityCallback(TrainerCallback):
    """Routing volatility per optimizer step (see the module docstring). Args: trainer: the GRPOTrainer to watch."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.monitor = attach_routing(trainer)
        self.window: torch.Tensor | None = None  # counts since the last logging step, summed over processes
        if self.monitor is None:
            return
        self.monitor.measure = True
        self.monitor.on_warning = lambda kind, message: record_warning(trainer, kind, message)  # for gspo report
        sampler = getattr(trainer.args, "old_logps_source", "recompute") == "sampler"
        if sampler and recomputes_old_logps(trainer):
            message = (
                "Routing volatility is not measured with old_logps_source='sampler': the old policy's routes come "
                "from its forward pass, which the sampler's log-probabilities replace. Use 'recompute' to see it."
            )
            record_warning(trainer, ROUTING_NOT_MEASURED, message)  # listed with the first diagnostics line
            if trainer.accelerator.is_main_process:
                logger.warning(message)

    def on_step_end(self, args, state, control, **kwargs):
        if self.monitor is None:
            return
        # Every process takes part in the sum at every optimizer step (collective), whatever it trained on.
        local = self.monitor.take_counts(micro_steps_per_generation(args) + 1)
        accelerator = self.trainer.accelerator
        total = accelerator.reduce(local.to(accelerator.device), reduction="sum").cpu()
        self._log_step(routing_shares(total))
        self.window = total if self.window is None else self.window + total
        if window_ends(state, control):
            shares = routing_shares(self.window)
            self.window = None
            if shares["num_sets"]:
                sections = self.trainer.__dict__.setdefault("gspo_diagnostics_sections", {})
                sections[SECTION] = diagnostics_section(shares)

    def _log_step(self, shares: dict) -> None:
        if not shares["num_sets"]:
            return
        self.trainer.routing_changed_frac = shares["changed_frac"]  # for the adaptive clip range's routing guard
        # TRL averages each list over the logging window; steps without a minibatch k add nothing to its mean.
        store = metric_store(self.trainer)
        store["gspo/routing/changed_frac"].append(shares["changed_frac"])
        store["gspo/routing/changed_slot_frac"].append(shares["changed_slot_frac"])
        for k, of_k in shares["per_minibatch"].items():
            store[f"gspo/routing/changed_frac/minibatch_{k}"].append(of_k["changed_frac"])


def diagnostics_section(shares: dict) -> dict:
    """The "routing" section of a diagnostics line: overall, per-layer and per-minibatch shares of the window."""
    return {
        "changed_frac": shares["changed_frac"],
        "changed_slot_frac": shares["changed_slot_frac"],
        "per_layer": [round(v, 6) for v in shares["per_layer"]],
        "minibatches": {
            str(k): {
                "changed_frac": v["changed_frac"],
                "changed_slot_frac": v["changed_slot_frac"],
                "sets": int(v["sets"]),
            }
            for k, v in shares["per_minibatch"].items()
        },
    }
