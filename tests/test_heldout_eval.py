"""HeldoutEvalCallback on real tiny runs: what it logs and writes, fail-closed grading, the reward-hacking warning
both ways, resume, other features, two processes."""

from __future__ import annotations

import json
import logging

import pytest
from support import launch_two_cpu_processes, tiny_config

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.callbacks import HeldoutEvalCallback
from gspo_recipes.callbacks.heldout_eval import default_heldout_rewards, final_answer_key
from gspo_recipes.runfiles.diagnostics import diagnostics_path, read_diagnostics
from gspo_recipes.runfiles.run_warnings import recorded_warnings


def has_digit(completions, **kwargs):
    """The held-out grader of the hacking runs: a completion with a digit passes (about half do at first)."""
    return [float(any(ch.isdigit() for ch in c)) for c in completions]


def no_digit(completions, **kwargs):
    """A training reward the policy games: it pays exactly what the held-out grader fails."""
    return [1.0 - float(any(ch.isdigit() for ch in c)) for c in completions]


def sums(n, op="+"):
    from datasets import Dataset

    rows = [{"prompt": f"{a}{op}{b}=", "question": f"{a}{op}{b}?", "answer": f"#### {eval(f'{a}{op}{b}')}"}
            for a in range(n) for b in range(n)]  # fmt: skip
    return Dataset.from_list(rows)


def run(tmp_path, reward, heldout_grader, steps=4, eval_steps=2, callback_kwargs=None, trainer_kwargs=None,
        **overrides):  # fmt: skip
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    args = tiny_config(tmp_path, max_steps=steps, **overrides)
    trainer = GSPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=sums(8),
                          processing_class=tokenizer, **(trainer_kwargs or {}))  # fmt: skip
    callback = HeldoutEvalCallback(trainer, sums(8, "*"), reward_funcs=heldout_grader, eval_steps=eval_steps,
                                   **{"num_samples": 4, "max_prompts": 8, **(callback_kwargs or {})})  # fmt: skip
    trainer.add_callback(callback)
    return trainer, callback


def heldout_logs(trainer) -> dict[int, dict]:
    return {e["step"]: e for e in trainer.state.log_history if any(key.startswith("heldout/") for key in e)}


def test_logs_every_figure_writes_the_same_to_the_diagnostics_file_and_gspo_report_draws_it(tmp_path):
    trainer, _ = run(tmp_path, has_digit, [has_digit, "gsm8k_accuracy"], steps=3, eval_steps=2)
    trainer.train()
    logs = heldout_logs(trainer)
    assert sorted(logs) == [2, 3]  # every 2 steps, and the last
    expected = {f"heldout/{r}/{m}" for r in ("has_digit", "gsm8k_accuracy") for m in ("pass@1", "pass@4", "greedy")}
    expected |= {"heldout/gsm8k_accuracy/maj@4", "heldout/mean_length", "heldout/seconds"}
    assert expected <= set(logs[2]) and "heldout/has_digit/maj@4" not in logs[2]  # maj only for math graders
    assert 0 < logs[2]["heldout/has_digit/pass@1"] <= logs[2]["heldout/has_digit/pass@4"] <= 1
    assert 0 < logs[2]["heldout/mean_length"] <= 8
    sections = {
        line["step"]: line["heldout"] for line in read_diagnostics(diagnostics_path(tmp_path)) if "heldout" in line
    }
    assert sorted(sections) == [2, 3]
    assert sections[2]["rewards"]["has_digit"]["pass@1"] == logs[2]["heldout/has_digit/pass@1"]
    assert sections[2]["prompts"] == 8 and len(sections[2]["samples"]) == 4
    assert len(sections[2]["samples"][0]["sampled_text"]) == 4 and sections[2]["train_reward"] is not None
    assert trainer.model.training  # evaluation puts the model back in train mode
    # Before the first step, the evaluation every series starts from: in the first line, not logged to trackers.
    first_line = read_diagnostics(diagnostics_path(tmp_path))[0]
    start = first_line["heldout_start"]
    assert first_line["step"] == 1 and start["step"] == 0 and start["prompts"] == 8 and "train_reward" not in start

    # gspo report on this run: the figure beside the training reward, and one summary line per grader.
    pytest.importorskip("matplotlib")
    from gspo_recipes.commands.report import report

    trainer.save_state()
    assert report(str(tmp_path)) == 0
    assert (tmp_path / "gspo_heldout.png").stat().st_size > 0
    summary = (tmp_path / "gspo_report.txt").read_text()
    held = [line for line in summary.splitlines() if line.startswith("held-out ")]
    assert [line.split()[1] for line in held] == ["has_digit", "gsm8k_accuracy"]
    pass1 = start["rewards"]["has_digit"]["pass@1"], logs[3]["heldout/has_digit/pass@1"]
    assert f"pass@1 {pass1[0]:.3f} -> {pass1[1]:.3f}" in held[0] and "maj@4" in held[1]
    assert "steps 0-3, 3 evaluations" in held[0]


def test_evaluation_leaves_the_training_run_unchanged(tmp_path):
    """Generation runs in a forked RNG: with the callback, the run samples and learns exactly as without it."""
    with_eval, _ = run(tmp_path / "a", has_digit, [has_digit], steps=3, eval_steps=1)
    with_eval.train()
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    plain = GSPOTrainer(model=model, reward_funcs=[has_digit], args=tiny_config(tmp_path / "b", max_steps=3),
                        train_dataset=sums(8), processing_class=tokenizer)  # fmt: skip
    plain.train()

    def rewards(trainer):
        return [e["reward"] for e in trainer.state.log_history if "reward" in e]

    assert rewards(with_eval) == rewards(plain)


def test_graders_that_raise_or_return_none_score_zero_with_one_warning(tmp_path, caplog):
    def broken(completions, **kwargs):
        raise RuntimeError("grader down")

    def undecided(completions, **kwargs):
        return [None] * len(completions)

    trainer, callback = run(tmp_path, has_digit, [broken, undecided, has_digit])
    with caplog.at_level(logging.WARNING):
        _, first = callback.evaluate(step=1)
        _, second = callback.evaluate(step=2)
    for scores in (first["rewards"]["broken"], first["rewards"]["undecided"], second["rewards"]["broken"]):
        assert scores == {"pass@1": 0.0, "pass@4": 0.0, "greedy": 0.0}
    assert first["rewards"]["has_digit"]["pass@4"] > 0  # the other graders still score
    warned = [r.getMessage() for r in caplog.records if "held-out grader" in r.getMessage()]
    assert len(warned) == 2 and "RuntimeError: grader down" in warned[0] and "returned None" in warned[1]


def test_default_graders_follow_the_columns_and_name_them_when_none_fits():
    assert default_heldout_rewards(["prompt", "question", "answer"]) == ["gsm8k_accuracy"]
    assert default_heldout_rewards(["prompt", "problem", "solution"]) == ["math_accuracy"]
    assert default_heldout_rewards(["prompt", "problem", "answer"]) == ["math_accuracy"]
    assert default_heldout_rewards(["prompt", "tests"]) == ["code_execution"]
    with pytest.raises(ValueError, match=r"no default grader for columns \['label', 'prompt'\]"):
        default_heldout_rewards(["prompt", "label"])


def test_final_answers_compare_as_the_strict_grader_reads_them():
    row = {"prompt": "Tom has 5 eggs. How many?", "answer": "#### 18"}
    assert final_answer_key("gsm8k_accuracy", "9+9=18\n#### 18", row) == "18"
    assert final_answer_key("gsm8k_accuracy", "The answer is 18.00", row) == "18"
    assert final_answer_key("gsm8k_accuracy", "The answer is 17.", row) == "17"
    assert final_answer_key("gsm8k_accuracy", "9+9=18", row) is None  # no committed answer
    assert final_answer_key("gsm8k_accuracy", "#### 18 or maybe 17", row) is None  # a hedge
    assert final_answer_key("gsm8k_accuracy", "#### 17\nThe answer is 18", row) == "18"  # the last commitment
    assert final_answer_key("gsm8k_accuracy", "\\boxed{17} \\boxed{18}", row) is None  # boxes that disagree
    math_row = {"prompt": "Halve one.", "solution": "So it is $\\boxed{\\frac{1}{2}}$."}
    assert final_answer_key("math_accuracy", "\\boxed{\\frac{1}{2}}", math_row) is not None


@pytest.mark.parametrize(
    "field, value, message",
    [("heldout_eval_steps", -1, "heldout_eval_steps=-1"), ("heldout_num_samples", 0, "heldout_num_samples=0"),
     ("heldout_max_prompts", 0, "heldout_max_prompts=0")],
)  # fmt: skip
def test_config_errors_name_the_field(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        GSPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{field: value})


@pytest.mark.slow  # about 20 s: two short runs that learn
@pytest.mark.parametrize("reward, fires", [(no_digit, True), (has_digit, False)])
def test_reward_hacking_warning_fires_on_a_gamed_reward_and_not_on_an_honest_one(tmp_path, reward, fires):
    """Trained on no_digit, the policy stops writing digits: training reward up, held-out has_digit down. Trained on
    has_digit itself, both rise together: no warning."""
    trainer, callback = run(tmp_path, reward, [has_digit], steps=15, eval_steps=3, learning_rate=1e-2,
                            num_minibatches=1, callback_kwargs={"max_prompts": 32})  # fmt: skip
    trainer.train()
    warnings = [w for w in recorded_warnings(read_diagnostics(diagnostics_path(tmp_path)))
                if w["kind"] == "heldout_divergence"]  # fmt: skip
    series = callback.judge.series
    assert len(series) == 5
    if fires:
        assert series[-1]["train"] > series[0]["train"] and series[-1]["heldout"] < series[0]["heldout"]
        assert len(warnings) == 1 and "reward hacking?" in warnings[0]["message"]
        assert "gspo audit-reward" in warnings[0]["message"] and warnings[0]["step"] % 3 == 0
    else:
        assert series[-1]["heldout"] > series[0]["heldout"]  # it did learn, and the held-out score followed
        assert warnings == []


@pytest.mark.slow
def test_resume_keeps_each_evaluation_once_and_the_judges_window(tmp_path):
    full, _ = run(tmp_path / "full", has_digit, [has_digit], steps=4, eval_steps=2, save_strategy="steps",
                  save_steps=2)  # fmt: skip
    full.train()
    # A run killed after its step-3 evaluation was written but before the checkpoint at 4: resume from 2.
    out = tmp_path / "killed"
    first, _ = run(out, has_digit, [has_digit], steps=4, eval_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    lines = read_diagnostics(diagnostics_path(out))
    resumed, callback = run(out, has_digit, [has_digit], steps=4, eval_steps=2, save_strategy="steps", save_steps=2)
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    after = read_diagnostics(diagnostics_path(out))
    raw = [json.loads(text) for text in open(diagnostics_path(out))]
    assert [line["step"] for line in raw if "heldout" in line] == [2, 4]  # none lost, none twice in the file
    assert [p["step"] for p in callback.judge.series] == [2, 4]  # step 2's point came back with the checkpoint
    full_lines = read_diagnostics(diagnostics_path(tmp_path / "full"))
    full_sections = {line["step"]: line["heldout"]["rewards"] for line in full_lines if "heldout" in line}
    assert {line["step"]: line["heldout"]["rewards"] for line in after if "heldout" in line} == full_sections
    assert lines  # the killed run had written its lines before the resume rewrote the file


@pytest.mark.parametrize("feature", ["num_iterations", "peft"])
def test_other_features(tmp_path, feature):
    overrides, trainer_kwargs = {}, {}
    if feature == "num_iterations":
        overrides = {"num_iterations": 2}
    else:
        from peft import LoraConfig

        trainer_kwargs = {"peft_config": LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")}
    trainer, _ = run(tmp_path, has_digit, [has_digit], steps=2, eval_steps=1, trainer_kwargs=trainer_kwargs,
                     **overrides)  # fmt: skip
    trainer.train()
    assert sorted(heldout_logs(trainer)) == [1, 2] and trainer.model.training


@pytest.mark.slow
def test_two_processes_give_the_figures_of_one(tmp_path):
    launch_two_cpu_processes("two_process_heldout.py", str(tmp_path / "two"), cwd=tmp_path)
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    trainer = GSPOTrainer(model=model, reward_funcs=[has_digit], args=tiny_config(tmp_path / "one", max_steps=1),
                          train_dataset=sums(8), processing_class=tokenizer)  # fmt: skip
    callback = HeldoutEvalCallback(trainer, sums(8, "*"), reward_funcs=[has_digit, "gsm8k_accuracy"],
                                   num_samples=4, max_prompts=20, chunk_prompts=4)  # fmt: skip
    metrics, _ = callback.evaluate(step=0)
    two = json.loads((tmp_path / "two" / "rank0.json").read_text())
    other = json.loads((tmp_path / "two" / "rank1.json").read_text())
    metrics.pop("heldout/seconds"), two.pop("heldout/seconds"), other.pop("heldout/seconds")
    assert two == other == metrics


def test_evaluations_between_logs_leave_every_window_as_without_them(tmp_path):
    """logging_steps=4 with an evaluation due every 3 steps: the evaluation waits for the Trainer's logs (4, and the
    last step 6), so the gspo/ windows, TRL's metrics and the entropy check see the logs a run without it sees."""
    trainer, _ = run(tmp_path / "a", has_digit, [has_digit], steps=6, eval_steps=3, logging_steps=4)
    trainer.train()
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    plain = GSPOTrainer(model=model, reward_funcs=[has_digit], args=tiny_config(tmp_path / "b", max_steps=6,
                        logging_steps=4), train_dataset=sums(8), processing_class=tokenizer)  # fmt: skip
    plain.train()

    def windows(run_trainer, key):
        return {e["step"]: e[key] for e in run_trainer.state.log_history if key in e}

    assert sorted(heldout_logs(trainer)) == [4, 6]  # due at 3 and 6: evaluated at the logs on or after them
    for key in ("gspo/clip_frac", "clip_ratio/region_mean", "entropy", "reward"):
        assert windows(trainer, key) == windows(plain, key), key
    clip, trl_clip = windows(trainer, "gspo/clip_frac"), windows(trainer, "clip_ratio/region_mean")
    assert sorted(clip) == [4, 6] and clip == pytest.approx(trl_clip)  # sequence ratios: TRL counts responses too


def test_resume_from_a_checkpoint_outside_output_dir_keeps_the_judge_and_the_open_window(tmp_path):
    """Logs at 2 and 4, a checkpoint at 3 (step 3's responses still in the open window), moved out of output_dir and
    resumed into a new one: the judge's step-2 point and step 3's responses come back from where train() read."""
    import shutil

    settings = dict(steps=4, eval_steps=2, logging_steps=2, save_strategy="steps", save_steps=3)
    full, full_callback = run(tmp_path / "full", has_digit, [has_digit], **settings)
    full.train()
    moved = tmp_path / "elsewhere" / "my-checkpoint"
    shutil.copytree(tmp_path / "full" / "checkpoint-3", moved)
    resumed, callback = run(tmp_path / "resumed", has_digit, [has_digit], **settings)
    resumed.train(resume_from_checkpoint=str(moved))
    assert [p["step"] for p in callback.judge.series] == [p["step"] for p in full_callback.judge.series] == [2, 4]

    def last_line(out):
        return read_diagnostics(diagnostics_path(out))[-1]

    assert last_line(tmp_path / "resumed")["step"] == last_line(tmp_path / "full")["step"] == 4
    assert last_line(tmp_path / "resumed")["responses"] == last_line(tmp_path / "full")["responses"]  # steps 3 and 4
