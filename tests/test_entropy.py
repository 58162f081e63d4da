"""The entropy collapse warning: the rule on crafted series, and real tiny runs that collapse (it fires, also after a
kill-and-resume, on a plain GRPOTrainer with a token-level loss logging per epoch) or stay healthy (it is silent)."""

import json
import logging
import math

import pytest
from datasets import Dataset
from support import digit_count_reward, plain_grpo_config, tiny_config
from trl import GRPOTrainer

from gspo_recipes import GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
from gspo_recipes.callbacks import EntropyCollapseCallback
from gspo_recipes.runfiles.run_warnings import recorded_warnings
from gspo_recipes.stats.entropy import EntropyCollapseCheck

# ----------------------------------------------------------------------------------------- the rule


def fired_at(check, series):
    return [i for i, value in enumerate(series, start=1) if check.update(value, i)]


def test_fires_once_the_whole_window_is_under_the_line_and_again_only_after_it_cleared():
    check = EntropyCollapseCheck(fraction=0.3, early_windows=2, window=3)
    # early level 2.0, line 0.6: windows 3-5 under it fire at 5; one back above (6) clears; 7-9 under fire at 9.
    series = [2.1, 1.9, 0.5, 0.4, 0.3, 0.7, 0.5, 0.5, 0.5, 0.5]
    assert fired_at(check, series) == [5, 9]
    assert check.early_level == pytest.approx(2.0) and check.early_steps() == (1, 2)


def test_one_noisy_window_and_a_slow_decline_do_not_fire():
    check = EntropyCollapseCheck(fraction=0.3, early_windows=2, window=3)
    assert fired_at(check, [2.0, 2.0, 0.1, 1.5, 0.1, 1.5, 0.1, 1.2, 0.9, 0.7, 0.61]) == []


def test_warm_up_windows_and_windows_without_tokens_are_left_out():
    check = EntropyCollapseCheck(fraction=0.5, early_windows=2, window=2, warmup_windows=2)
    # The warm-up's 9.0s would put the line at 4.5 and fire at once; NaN windows count for nothing.
    assert fired_at(check, [9.0, 9.0, 2.0, float("nan"), 2.0, 1.5, 1.5, float("nan"), 0.9, 0.9]) == [10]
    assert check.early_level == pytest.approx(2.0)


BAD_SETTINGS = [
    dict(fraction=0.0),
    dict(fraction=1.0),
    dict(window=0),
    dict(early_windows=1.5),
    dict(warmup_windows=-1),
]


@pytest.mark.parametrize("settings", BAD_SETTINGS)
def test_bad_settings_name_the_field(settings):
    with pytest.raises(ValueError, match=next(iter(settings))):
        EntropyCollapseCheck(**settings)


# ----------------------------------------------------------------------------------------- real runs


def sevens(completions, **kwargs):
    """Pays one fixed answer: the share of 7s. With a high learning rate the policy collapses onto it."""
    return [c.count("7") / max(1, len(c)) for c in completions]


PROMPTS = [{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)]
# On-policy steps (GSPO's clip does not hold the update back) at a learning rate 20 times the tests' usual one: the
# entropy falls from 4.6 nats to under 0.3 within 10 steps on the tiny model.
COLLAPSE = dict(learning_rate=2e-2, steps_per_generation=1)


def entropy_warnings(output_dir):
    with open(output_dir / "gspo_diagnostics.jsonl") as f:
        lines = [json.loads(line) for line in f]
    return [w for w in recorded_warnings(lines) if w["kind"] == "entropy_collapse"]


def gspo_run(output_dir, reward, resume=None, **overrides):
    model, tokenizer = build_tiny_model_and_tokenizer()
    cfg = tiny_config(output_dir, max_steps=14, **overrides)
    trainer = GSPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=Dataset.from_list(PROMPTS),
                          processing_class=tokenizer)  # fmt: skip
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.mark.slow
def test_a_collapsing_run_warns_once_naming_the_fixes_and_a_resumed_run_reaches_the_same_verdict(tmp_path, caplog):
    """The shipped defaults (GSPOTrainer registers the callback): fires once, with the message in the log and the
    diagnostics file. Resumed from step 10, inside the window of low entropy, it fires at the same step: the early
    level and the window come back from the checkpoint (a fresh check would take steps 11-14 as its early level)."""
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.callbacks.entropy_collapse"):
        trainer = gspo_run(tmp_path, sevens, save_strategy="steps", save_steps=10, **COLLAPSE)
    shown = [r.getMessage() for r in caplog.records if "entropy_collapse" in r.name]
    assert len(shown) == 1 and shown[0].startswith("GSPO health: token entropy")
    for fix in ("entropy_coef", "use_adaptive_entropy", "temperature (now 1)", "epsilon_high (now 0.0004)"):
        assert fix in shown[0], fix
    recorded = entropy_warnings(tmp_path)
    assert [w["message"] for w in recorded] == shown
    step = recorded[0]["step"]
    entropy = {e["step"]: e["entropy"] for e in trainer.state.log_history if "entropy" in e}
    early = sum(entropy[s] for s in range(1, 6)) / 5
    assert all(entropy[s] < 0.3 * early for s in range(step - 4, step + 1)), entropy
    assert not all(entropy[s] < 0.3 * early for s in range(step - 5, step)), "it should fire at the first such window"
    assert 10 < step <= 14, "the resume below must start inside the low window"

    gspo_run(tmp_path, sevens, resume=str(tmp_path / "checkpoint-10"), save_strategy="steps", save_steps=10,
             **COLLAPSE)  # fmt: skip
    assert [w["step"] for w in entropy_warnings(tmp_path)] == [step]


def test_a_healthy_run_gives_no_entropy_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        trainer = gspo_run(tmp_path, digit_count_reward)  # the tests' usual learning rate, GSPO's minibatches
    entropy = [e["entropy"] for e in trainer.state.log_history if "entropy" in e]
    assert len(entropy) == 14 and min(entropy) > 0.5 * entropy[0]
    assert "token entropy" not in caplog.text and entropy_warnings(tmp_path) == []


def test_drop_in_on_a_plain_grpo_trainer_with_a_token_level_loss_logging_per_epoch(tmp_path, caplog):
    """TRL's own loss (DAPO, token ratios) and one log per epoch (one optimizer step each): it fires, and the fixes
    quote the trainer's clip."""
    model, tokenizer = build_tiny_model_and_tokenizer()
    cfg = plain_grpo_config(tmp_path, loss_type="dapo", logging_strategy="epoch", num_train_epochs=14,
                            epsilon_high=0.28, **COLLAPSE)  # fmt: skip
    dataset = Dataset.from_list(PROMPTS[:2])  # one generation batch of 8 completions: one step per epoch
    trainer = GRPOTrainer(model=model, reward_funcs=sevens, args=cfg, train_dataset=dataset, processing_class=tokenizer)
    callback = EntropyCollapseCallback(trainer)
    trainer.add_callback(callback)
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.callbacks.entropy_collapse"):
        trainer.train()
    assert trainer.state.global_step == 14
    assert [w["kind"] for w in callback.history] == ["entropy_collapse"]
    assert "epsilon_high (now 0.28)" in callback.history[0]["message"]
    assert caplog.text.count("GSPO health: token entropy") == 1
    assert math.isfinite(callback.check.early_level)
