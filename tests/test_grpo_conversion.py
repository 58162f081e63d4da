"""A plain trl.GRPOConfig handed to GSPOTrainer (gspo_recipes/trainer/grpo_conversion.py): a converted field at GRPO's
default value takes GSPO's, any other value is kept; nothing patches TRL's class, so import order and copies do not
matter."""

import copy
import logging
import subprocess
import sys

import pytest
from support import TINY_RUN, digit_count_reward, plain_grpo_config
from trl import GRPOConfig, TrlParser

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.trainer.grpo_conversion import from_grpo_config


def convert(tmp_path, caplog, **given):
    with caplog.at_level(logging.WARNING):
        return from_grpo_config(plain_grpo_config(tmp_path, **given))


def test_a_value_other_than_grpos_default_is_kept(tmp_path, caplog):
    converted = convert(tmp_path, caplog, epsilon=0.1, loss_type="bnpo", beta=0.04)
    assert (converted.epsilon, converted.loss_type, converted.beta) == (0.1, "bnpo", 0.04)
    assert converted.epsilon_high is None  # a range chosen: both sides kept
    assert converted.importance_sampling_level == "sequence"


def test_a_value_equal_to_grpos_default_takes_gspos_and_the_warning_says_so(tmp_path, caplog):
    converted = convert(tmp_path, caplog, epsilon=0.2, loss_type="dapo")
    assert (converted.epsilon, converted.epsilon_high, converted.loss_type) == (3e-4, 4e-4, "grpo")
    assert "epsilon=0.2 -> 0.0003" in caplog.text and "loss_type='dapo' -> 'grpo'" in caplog.text
    assert "whether you typed it or not" in caplog.text and "Fields you set yourself are kept" not in caplog.text


CONVERT_IN_A_FRESH_PROCESS = """
import json, sys, logging
{before}
from trl import GRPOConfig
args = GRPOConfig(output_dir=sys.argv[1], use_cpu=True, bf16=False, report_to="none", epsilon=0.1, loss_type="bnpo")
from gspo_recipes.trainer.gspo_trainer import GSPOTrainer
from gspo_recipes.trainer.grpo_conversion import from_grpo_config
c = from_grpo_config(args)
print(json.dumps([c.epsilon, c.epsilon_high, c.loss_type, c.importance_sampling_level, GRPOConfig.__setattr__ is
      object.__setattr__]))
"""


IMPORTED_FIRST = ["", "import gspo_recipes", "from gspo_recipes import GSPOConfig", "import gspo_recipes.trainer"]


@pytest.fixture(scope="module")
def conversions(request, tmp_path_factory):
    """The fresh process of each IMPORTED_FIRST case the session runs, all started at once: each spends seconds
    importing TRL and torch, and they need not wait for one another."""
    name = "test_the_conversion_does_not_depend_on_what_was_imported_first"
    chosen = [item for item in request.session.items if getattr(item, "originalname", None) == name]
    started = {}
    for before in dict.fromkeys(item.callspec.params["before"] for item in chosen):
        command = [sys.executable, "-c", CONVERT_IN_A_FRESH_PROCESS.format(before=before)]
        command.append(str(tmp_path_factory.mktemp("conversion")))
        started[before] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield started
    for process in started.values():  # what a test that stopped early left running, or unread
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.mark.parametrize("before", IMPORTED_FIRST)
def test_the_conversion_does_not_depend_on_what_was_imported_first(conversions, before):
    stdout, stderr = conversions[before].communicate(timeout=600)
    assert conversions[before].returncode == 0, stderr
    assert stdout.strip().splitlines()[-1] == '[0.1, null, "bnpo", "sequence", true]'  # TRL's class unpatched


def test_a_copy_converts_on_its_own_values(tmp_path, caplog):
    original = plain_grpo_config(tmp_path, epsilon=0.1)
    duplicate = copy.copy(original)
    duplicate.epsilon = 0.2  # back to GRPO's default on the copy only
    assert convert_config(original, caplog).epsilon == 0.1
    assert convert_config(duplicate, caplog).epsilon == 3e-4


def convert_config(args, caplog):
    with caplog.at_level(logging.WARNING):
        return from_grpo_config(args)


def test_vespo_at_token_level_is_left_as_trl_trains_it(tmp_path, caplog):
    converted = convert(tmp_path, caplog, loss_type="vespo")
    assert (converted.importance_sampling_level, converted.loss_type) == ("token", "vespo")
    assert converted.steps_per_generation == TINY_RUN.get("gradient_accumulation_steps", 1)
    assert "nothing was changed" in caplog.text
    assert "GSPO equals GRPO" not in caplog.text  # TRL's on-policy default is no mistake for TRL's own loss


@pytest.mark.parametrize("loss_type", ["bnpo", "dr_grpo"])
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


def test_a_field_assigned_after_construction_is_read_by_its_value(tmp_path, caplog):
    args = plain_grpo_config(tmp_path)
    args.loss_type = "bnpo"
    converted = convert_config(args, caplog)
    assert converted.loss_type == "bnpo" and converted.allow_length_weighted_loss


def test_what_was_left_alone_takes_gspos_values(tmp_path, caplog):
    converted = convert(tmp_path, caplog)
    assert (converted.importance_sampling_level, converted.loss_type) == ("sequence", "grpo")
    assert (converted.epsilon, converted.epsilon_high) == (3e-4, 4e-4)
    assert converted.steps_per_generation == 4 * converted.gradient_accumulation_steps


def test_cispo_left_without_a_cap_gets_trls_recommended_one(tmp_path, caplog):
    converted = convert(tmp_path, caplog, loss_type="cispo")
    assert converted.epsilon_high == 5.0 and converted.importance_sampling_level == "sequence"


def test_a_parsed_config_follows_the_same_rule(tmp_path):
    """HfArgumentParser passes every field; the rule reads values only, so it converts as a config built in code."""
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
