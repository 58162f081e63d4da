"""Beam search: the default recompute mode trains with the mismatch monitor switched off for the round (one warning);
sampler mode refuses it at config time."""

import logging

import pytest
from support import digit_count_reward, tiny_config

from gspo_recipes import GSPOConfig, GSPOTrainer

BEAMS = {"num_beams": 2}


def test_beam_search_trains_in_recompute_mode_with_one_warning(tmp_path, tiny, prompt_dataset, caplog):
    model, tokenizer = tiny
    cfg = tiny_config(
        tmp_path,
        max_steps=4,
        steps_per_generation=2,  # two generation rounds, one warning
        gspo_diagnostics=False,
        sampler_mismatch_steps=1,
        generation_kwargs=BEAMS,
    )
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.sampler"):
        trainer.train()
    assert trainer.state.global_step == 4
    skipped = [r for r in caplog.records if "mismatch monitor is skipped" in r.getMessage()]
    assert len(skipped) == 1 and "beam search" in skipped[0].getMessage()


def test_sampler_mode_refuses_beam_search(tmp_path):
    with pytest.raises(ValueError, match="num_beams"):
        GSPOConfig(output_dir=str(tmp_path), old_logps_source="sampler", generation_kwargs=BEAMS, report_to="none")
