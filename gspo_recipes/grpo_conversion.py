"""A plain `trl.GRPOConfig` turned into a `GSPOConfig`, for `GSPOTrainer(args=GRPOConfig(...))`."""

from __future__ import annotations

import logging
from dataclasses import fields

from trl import GRPOConfig

from .config import GSPOConfig

logger = logging.getLogger(__name__)


# The fields where TRL's GRPOConfig defaults are GRPO's and GSPOConfig's are the paper's. The clip range is one group:
# a user who set either side chose a range, and both sides are kept.
GSPO_DEFAULTS = (("importance_sampling_level",), ("loss_type",), ("beta",), ("epsilon", "epsilon_high"))


def from_grpo_config(args: GRPOConfig) -> GSPOConfig:
    """A plain `trl.GRPOConfig` as a `GSPOConfig`: every field the user set is kept; the fields still at GRPO's
    defaults (token-level ratios, the DAPO loss, GRPO's clip range) take GSPO's, and a warning lists each change.
    A GRPO-sized range that the user set explicitly is kept, and GSPOConfig's checks then speak about it."""
    grpo_defaults = {f.name: f.default for f in fields(GRPOConfig)}
    gspo_defaults = {f.name: f.default for f in fields(GSPOConfig)}
    values = {f.name: getattr(args, f.name) for f in fields(GRPOConfig) if f.init}
    changed = []
    for group in GSPO_DEFAULTS:
        if any(values[name] != grpo_defaults[name] for name in group):
            continue
        for name in group:
            if values[name] != gspo_defaults[name]:
                changed.append(f"{name}={values[name]!r} -> {gspo_defaults[name]!r}")
                values[name] = gspo_defaults[name]
    world = args.world_size
    if values["steps_per_generation"] == args.gradient_accumulation_steps and values["generation_batch_size"] == (
        args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    ):  # TRL derived both from the batch size: one optimizer step per generation batch
        values["steps_per_generation"] = None
        changed.append(
            f"steps_per_generation -> num_minibatches ({gspo_defaults['num_minibatches']}) x "
            "gradient_accumulation_steps"
        )
    values["generation_batch_size"] = None  # derived by TRL from steps_per_generation (it refuses both set)
    values = {name: value for name, value in values.items() if name in {f.name for f in fields(GSPOConfig)}}
    converted = GSPOConfig(**values)
    logger.warning(
        "GSPOTrainer got a plain trl.GRPOConfig, whose defaults train token-level GRPO. Converted it to a GSPOConfig: "
        "%s. Fields you set yourself are kept. Pass gspo_recipes.GSPOConfig to silence this, or use trl.GRPOTrainer "
        "for GRPO.",
        "; ".join(changed) or "no field was at a GRPO default",
    )
    return converted
