"""Every TRL loss type on GSPOTrainer: equal to TRL's GRPOTrainer or refused with the fix named; and the clip
statistics and health warnings speak only about the clip the loss applies."""

import logging

import pytest
from support import digit_count_reward, tiny_config
from test_loss_options import assert_same_loss_and_grads
from test_trainer import crafted_batch, make_pair, with_old_logps

from gspo_recipes import GSPOConfig, GSPOTrainer, _trl
from gspo_recipes.callbacks import ClipFractionByLengthCallback

# What each loss type needs on a GSPOConfig beyond loss_type; the README's loss-type table says the same.
NEEDS = {
    "grpo": {},
    "luspo": {},
    "sapo": {},
    "bnpo": dict(allow_length_weighted_loss=True),
    "dr_grpo": dict(allow_length_weighted_loss=True),
    "dapo": dict(allow_length_weighted_loss=True),
    "cispo": dict(allow_length_weighted_loss=True, epsilon_high=5.0),
    "vespo": dict(importance_sampling_level="token"),
}


def test_every_trl_loss_type_is_covered():
    assert sorted(NEEDS) == sorted(_trl.TRL_LOSS_TYPES)


@pytest.mark.parametrize("loss_type", sorted(NEEDS))
def test_loss_type_trains_as_trl_trains_it(tmp_path, tiny, prompt_dataset, loss_type):
    gspo, trl = make_pair(tmp_path, tiny, prompt_dataset, loss_type=loss_type, **NEEDS[loss_type])
    inputs = with_old_logps(gspo, crafted_batch(tiny[1]))
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum()  # the token-summing types normalise by it
    assert_same_loss_and_grads(gspo, trl, inputs)


def test_cispo_with_gspos_clip_range_is_refused_naming_the_cap(tmp_path):
    with pytest.raises(ValueError, match="epsilon_high=5.0"):
        GSPOConfig(output_dir=str(tmp_path), loss_type="cispo", allow_length_weighted_loss=True, report_to="none")


def train_with_clip_callback(cfg, model, tokenizer, prompt_dataset):
    """Train with a clip callback that judges every step; return the trainer and the health warnings it gave."""
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    trainer.add_callback(ClipFractionByLengthCallback(trainer, quiet_steps=1, min_responses=1))
    records = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logging.getLogger("gspo_recipes.stats.health"), "warning", lambda msg, *a: records.append(msg))
        trainer.train()
    return trainer, records


@pytest.mark.parametrize(
    "settings,clip",
    [
        (dict(importance_sampling_level="token", epsilon=0.2, epsilon_high=0.28), "token"),
        (dict(loss_type="sapo"), None),
        (dict(loss_type="cispo", allow_length_weighted_loss=True, epsilon_high=5.0), None),
        ({}, "sequence"),
    ],
)
def test_trainer_says_which_clip_its_loss_applies(tmp_path, tiny, prompt_dataset, settings, clip):
    gspo, _ = make_pair(tmp_path, tiny, prompt_dataset, **settings)
    assert gspo.applied_clip == clip


@pytest.mark.parametrize(
    "settings",
    [dict(importance_sampling_level="token", epsilon=0.2, epsilon_high=0.28), dict(loss_type="sapo")],
    ids=["token", "sapo"],
)
def test_no_sequence_clip_statistics_or_warnings_without_the_sequence_clip(tmp_path, tiny, prompt_dataset, settings):
    """A token-level GRPO baseline and a SAPO run: the sequence clip is never applied, so nothing is said about it
    (on a sequence-clip run the same callback warns, test_callbacks.py)."""
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, max_steps=4, gspo_diagnostics=False, **settings)
    trainer, records = train_with_clip_callback(cfg, model, tokenizer, prompt_dataset)
    assert records == []
    assert not any("gspo/clip_frac" in entry for entry in trainer.state.log_history)


def test_sequence_clip_run_still_gets_statistics_and_warnings(tmp_path, tiny, prompt_dataset):
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, max_steps=4, gspo_diagnostics=False, epsilon=0.5, epsilon_high=0.5)
    trainer, records = train_with_clip_callback(cfg, model, tokenizer, prompt_dataset)
    assert any("nothing clipped" in message for message in records)
    assert any("gspo/clip_frac" in entry for entry in trainer.state.log_history)
