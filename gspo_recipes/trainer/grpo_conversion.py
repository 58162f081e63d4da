"""A plain `trl.GRPOConfig` turned into a `GSPOConfig`, for `GSPOTrainer(args=GRPOConfig(...))` (a class swap).

What the caller set is kept, every field of it: gspo_recipes records the arguments each `GRPOConfig` is built with
(`_trl.record_given_fields`), so an explicit `epsilon=0.2` or `loss_type="dapo"` counts as chosen even though it equals
GRPO's default. Only the fields left alone take GSPO's values, and only those that fit what was chosen:

- `importance_sampling_level="token"` given: the caller asked for token-level GRPO; nothing is converted and the loss
  is TRL's own (VESPO, whose weights are sequence-level by construction, also keeps TRL's token level).
- `importance_sampling_level` unset: "sequence". `loss_type` unset: "grpo". `beta` unset: 0.0.
- The clip range, if neither side was given: GSPO's [1 - 3e-4, 1 + 4e-4] for a two-sided clip; for CISPO, whose
  `epsilon_high` is a cap on the ratio, TRL's recommended 5.0; SAPO and VESPO do not use it.
- A token-summing `loss_type` the caller gave, with sequence ratios: TRL's behaviour, its own warning
  (`allow_length_weighted_loss=True` on the converted config, a field GRPOConfig does not have).
- `steps_per_generation` and `generation_batch_size` both unset: num_minibatches (4) x gradient_accumulation_steps.

Where what was passed is unknown (a config built before gspo_recipes was imported, or with every field passed, as
`HfArgumentParser` and `dataclasses.replace` do), a value equal to GRPO's default counts as unset.
"""

from __future__ import annotations

import logging
from dataclasses import fields

from trl import GRPOConfig

from gspo_recipes import _trl
from gspo_recipes.trainer.config import GSPOConfig
from gspo_recipes.trainer.config_checks import CISPO_RECOMMENDED_CAP, TOKEN_SUM_LOSS_TYPES

logger = logging.getLogger(__name__)

# The fields where GRPOConfig's defaults are GRPO's and GSPOConfig's are the paper's, and the batch fields from which
# TRL derives the number of optimizer steps per generation batch.
CONVERTED_FIELDS = (
    "importance_sampling_level",
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    "steps_per_generation",
    "generation_batch_size",
)

_trl.record_given_fields(GRPOConfig)


def from_grpo_config(args: GRPOConfig) -> GSPOConfig:
    """A plain `trl.GRPOConfig` as a `GSPOConfig` (module docstring); a warning lists every field changed."""
    grpo_defaults = {f.name: f.default for f in fields(GRPOConfig)}
    gspo_defaults = {f.name: f.default for f in fields(GSPOConfig)}
    values = {f.name: getattr(args, f.name) for f in fields(GRPOConfig) if f.init}
    given = _trl.given_fields(args)
    if given is None:  # unknown: what differs from GRPO's defaults was set
        given = {name for name in CONVERTED_FIELDS if values[name] != grpo_defaults[name]}
        if values["steps_per_generation"] == args.gradient_accumulation_steps and values["generation_batch_size"] == (
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        ):  # TRL derived both from the batch size
            given -= {"steps_per_generation", "generation_batch_size"}
    changed = []

    def take(name, value):
        if values[name] != value:
            changed.append(f"{name}={values[name]!r} -> {value!r}")
            values[name] = value

    token_level = values["importance_sampling_level"] == "token" and (
        "importance_sampling_level" in given or ("loss_type" in given and values["loss_type"] == "vespo")
    )
    if not token_level:
        for name in ("importance_sampling_level", "loss_type", "beta"):
            if name not in given:
                take(name, gspo_defaults[name])
        if not given & {"epsilon", "epsilon_high"}:
            if values["loss_type"] == "cispo":
                take("epsilon_high", CISPO_RECOMMENDED_CAP)
            elif values["loss_type"] in _trl.TWO_SIDED_CLIP_LOSS_TYPES:
                take("epsilon", gspo_defaults["epsilon"])
                take("epsilon_high", gspo_defaults["epsilon_high"])
        if values["loss_type"] in TOKEN_SUM_LOSS_TYPES:  # given by the caller: TRL warns about the length weighting
            values["allow_length_weighted_loss"] = True
        if not given & {"steps_per_generation", "generation_batch_size"}:
            values["steps_per_generation"] = None
            changed.append(
                f"steps_per_generation -> num_minibatches ({gspo_defaults['num_minibatches']}) x "
                "gradient_accumulation_steps"
            )
    # TRL derives the one not given from the other, and refuses both set.
    if "generation_batch_size" in given and "steps_per_generation" not in given:
        values["steps_per_generation"] = None
    else:
        values["generation_batch_size"] = None
    names = {f.name for f in fields(GSPOConfig)}
    converted = GSPOConfig(**{name: value for name, value in values.items() if name in names})
    if token_level:
        summary = "importance_sampling_level='token' was given, so nothing was changed (token-level GRPO, TRL's loss)"
    else:
        summary = "; ".join(changed) or "no field was left at a GRPO default"
    logger.warning(
        "GSPOTrainer got a plain trl.GRPOConfig, whose defaults train token-level GRPO. Converted it to a GSPOConfig: "
        "%s. Fields you set yourself are kept. Pass gspo_recipes.GSPOConfig to silence this, or use trl.GRPOTrainer "
        "for GRPO.",
        summary,
    )
    return converted
