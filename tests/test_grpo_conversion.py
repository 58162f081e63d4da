"""A plain trl.GRPOConfig handed to GSPOTrainer (gspo_recipes/trainer/grpo_conversion.py): what the caller passed is
kept, even where it equals GRPO's default; only what they left alone takes GSPO's value."""

import logging

import pytest
from conftest import TINY_RUN, digit_count_reward, plain_grpo_config
from trl import GRPOConfig, TrlParser

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.trainer.grpo_conversion import from_grpo_config


def convert(tmp_path, caplog, **given):
    with caplog.at_level(logging.WARNING):
        return from_grpo_config(plain_grpo_config(tmp_path, **given))


def test_an_explicit_grpo_default_is_kept(tmp_path, caplog):
    converted = convert(tmp_path, caplog, epsilon=0.2)
    assert converted.epsilon == 0.2 and converted.epsilon_high is None  # a range chosen: both sides kept
    assert converted.importance_sampling_level == "sequence" and converted.loss_type == "grpo"


def test_explicit_token_level_grpo_is_left_as_trl_trains_it(tmp_path, caplog):
    converted = convert(tmp_path, caplog, importance_sampling_level="token", loss_type="dapo")
    assert (converted.importance_sampling_level, converted.loss_type) == ("token", "dapo")
    assert (converted.epsilon, converted.epsilon_high) == (0.2, None)
    assert converted.steps_per_generation == TINY_RUN.get("gradient_accumulation_steps", 1)
    assert "nothing was changed" in caplog.text
    assert "GSPO equals GRPO" not in caplog.text  # TRL's on-policy default is no mistake for token-level GRPO


@pytest.mark.parametrize("loss_type", ["bnpo", "dr_grpo", "dapo"])
def test_sequence_ratios_with_a_token_summing_loss_get_trls_warning(tmp_path, tiny, prompt_dataset, caplog, loss_type):
    model, tokenizer = tiny
    args = plain_grpo_config(tmp_path, importance_sampling_level="sequence", loss_type=loss_type)
    with caplog.at_level(logging.WARNING):
        trainer = GSPOTrainer(
            model=model,
            reward_funcs=digit_count_reward,
            args=args,
            train_dataset=prompt_dataset,
            processing_class=tokenizer,
        )
    assert trainer.loss_type == loss_type and trainer.importance_sampling_level == "sequence"
    assert "weights each sequence by its completion length" in caplog.text  # TRL's own warning


def test_a_field_assigned_after_construction_counts_as_given(tmp_path, caplog):
    args = plain_grpo_config(tmp_path)
    args.loss_type = "dapo"  # equal to GRPO's default, but set
    converted = from_grpo_config(args)
    assert converted.loss_type == "dapo" and converted.allow_length_weighted_loss


def test_what_was_left_alone_takes_gspos_values(tmp_path, caplog):
    converted = convert(tmp_path, caplog)
    assert (converted.importance_sampling_level, converted.loss_type) == ("sequence", "grpo")
    assert (converted.epsilon, converted.epsilon_high) == (3e-4, 4e-4)
    assert converted.steps_per_generation == 4 * converted.gradient_accumulation_steps


def test_cispo_left_without_a_cap_gets_trls_recommended_one(tmp_path, caplog):
    converted = convert(tmp_path, caplog, loss_type="cispo")
    assert converted.epsilon_high == 5.0 and converted.importance_sampling_level == "sequence"


def test_parsed_config_falls_back_to_comparing_values(tmp_path):
    """HfArgumentParser passes every field, so what was typed is unknown: GRPO's defaults count as unset."""
    (args,) = TrlParser((GRPOConfig,)).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--report_to", "none", "--use_cpu", "true", "--bf16", "false"]
    )
    converted = from_grpo_config(args)
    assert isinstance(converted, GSPOConfig) and converted.importance_sampling_level == "sequence"
    assert (converted.epsilon, converted.epsilon_high) == (3e-4, 4e-4)


def test_no_reward_source_is_trls_error(tmp_path, tiny, prompt_dataset):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="No reward source provided"):
        GSPOTrainer(
            model=model, args=plain_grpo_config(tmp_path), train_dataset=prompt_dataset, processing_class=tokenizer
        )
