"""A plain `trl.GRPOConfig` turned into a `GSPOConfig`, for `GSPOTrainer(args=GRPOConfig(...))` (a class swap).

The rule: a converted field whose value equals GRPO's default takes GSPO's value; any other value is kept. A dataclass
cannot tell a value typed from a default, and gspo_recipes does not patch TRL's class to find out, so the result depends
on the values alone (not on what was imported first, on `copy.copy` or on `HfArgumentParser`). To keep a value equal to
GRPO's default (`epsilon=0.2`, `loss_type="dapo"`), pass a `GSPOConfig`, or use trl.GRPOTrainer for GRPO.

What "GSPO's value" is, given the fields that differ from GRPO's defaults:

- `importance_sampling_level="token"` with `loss_type="vespo"` (whose weights are sequence-level by construction):
  TRL's own loss, nothing is converted.
- `importance_sampling_level` "sequence", `loss_type` "grpo", `beta` 0.0.
- The clip range, if neither side differs: GSPO's [1 - 3e-4, 1 + 4e-4] for a two-sided clip; for CISPO, whose
  `epsilon_high` is a cap on the ratio, TRL's recommended 5.0; SAPO and VESPO do not use it.
- A token-summing `loss_type` the caller chose (bnpo, dr_grpo), with sequence ratios: TRL's behaviour, its own warning
  (`allow_length_weighted_loss=True` on the converted config, a field GRPOConfig does not have).
- `steps_per_generation` and `generation_batch_size` as TRL derives them from the batch size: num_minibatches (4) x
  gradient_accumulation_steps.
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


def chosen_fields(args: GRPOConfig, values: dict, grpo_defaults: dict) -> set[str]:
    """The converted fields whose values differ from GRPO's defaults: the ones the conversion keeps."""
    chosen = {name for name in CONVERTED_FIELDS if values[name] != grpo_defaults[name]}
    if values["steps_per_generation"] == args.gradient_accumulation_steps and values["generation_batch_size"] == (
        args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    ):  # TRL's __post_init__ derived both from the batch size
        chosen -= {"steps_per_generation", "generation_batch_size"}
    return chosen


def from_grpo_config(args: GRPOConfig) -> GSPOConfig:
    """A plain `trl.GRPOConfig` as a `GSPOConfig` (module docstring); a warning lists every field changed."""
    grpo_defaults = {f.name: f.default for f in fields(GRPOConfig)}
    gspo_defaults = {f.name: f.default for f in fields(GSPOConfig)}
    values = {f.name: getattr(args, f.name) for f in fields(GRPOConfig) if f.init}
    chosen = chosen_fields(args, values, grpo_defaults)
    changed = []

    def take(name, value):
        if values[name] != value:
            changed.append(f"{name}={values[name]!r} -> {value!r}")
            values[name] = value

    token_level = values["importance_sampling_level"] == "token" and values["loss_type"] == "vespo"
    if not token_level:
        for name in ("importance_sampling_level", "loss_type", "beta"):
            if name not in chosen:
                take(name, gspo_defaults[name])
        if not chosen & {"epsilon", "epsilon_high"}:
            if values["loss_type"] == "cispo":
                take("epsilon_high", CISPO_RECOMMENDED_CAP)
            elif values["loss_type"] in _trl.TWO_SIDED_CLIP_LOSS_TYPES:
                take("epsilon", gspo_defaults["epsilon"])
                take("epsilon_high", gspo_defaults["epsilon_high"])
        if values["loss_type"] in TOKEN_SUM_LOSS_TYPES:  # chosen by the caller: TRL warns about the length weighting
            values["allow_length_weighted_loss"] = True
        if not chosen & {"steps_per_generation", "generation_batch_size"}:
            values["steps_per_generation"] = None
            changed.append(
                f"steps_per_generation -> num_minibatches ({gspo_defaults['num_minibatches']}) x "
                "gradient_accumulation_steps"
            )
    # TRL derives the one not chosen from the other, and refuses both set.
    if "generation_batch_size" in chosen and "steps_per_generation" not in chosen:
        values["steps_per_generation"] = None
    else:
        values["generation_batch_size"] = None
    names = {f.name for f in fields(GSPOConfig)}
    converted = GSPOConfig(**{name: value for name, value in values.items() if name in names})
    if token_level:
        summary = "loss_type='vespo' with importance_sampling_level='token', so nothing was changed (TRL's loss)"
    else:
        summary = "; ".join(changed) or "no field was left at a GRPO default"
    logger.warning(
        "GSPOTrainer got a plain trl.GRPOConfig, whose defaults train token-level GRPO. Converted it to a GSPOConfig: "
        "%s. Every converted field at GRPO's default value takes GSPO's, whether you typed it or not; to keep one, "
        "pass a gspo_recipes.GSPOConfig (which also silences this), or use trl.GRPOTrainer for GRPO.",
        summary,
    )
    return converted
