"""`gspo passrate`: resumable (a killed run continues and writes what an uninterrupted one does), the signal reward
alone decides the pass rate, --keep filters, and two processes each score one shard."""

from __future__ import annotations

import json

import pytest
from support import launch_two_cpu_processes

from gspo_recipes.commands import passrate, passrate_sampling
from gspo_recipes.commands.cli import main as gspo

ARGS = ["--max_train_samples", "12", "--num_generations", "4", "--passrate_batch_size", "4", "--keep", "0.1:0.9"]


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resumed_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    assert gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "whole")]) == 0

    append, calls = passrate.Work.append, []

    def killed_during_the_second_batch(self, lines):
        if len(calls) == 1:  # half of the second batch reaches the disk, then the process dies
            with open(self.path, "a") as f:
                f.write(json.dumps({"batch": lines[0]["batch"], **lines[0]}) + "\n" + json.dumps(lines[1])[:40])
            raise KeyboardInterrupt
        calls.append(lines[0]["batch"])
        append(self, lines)

    monkeypatch.setattr(passrate.Work, "append", killed_during_the_second_batch)
    with pytest.raises(KeyboardInterrupt):
        gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "resumed")])
    monkeypatch.setattr(passrate.Work, "append", append)
    scored = []

    original = passrate_sampling.Sampler.sample_and_score

    def counting(self, examples, *args):
        scored.append(len(examples))
        return original(self, examples, *args)

    monkeypatch.setattr(passrate_sampling.Sampler, "sample_and_score", counting)
    assert gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "resumed")]) == 0
    assert scored == [4, 4]  # batch 0 was kept; batches 1 and 2 scored once each
    for name in (passrate.RESULT_FILE, passrate.KEPT_FILE):
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "whole" / name).read_text()
    whole = rows(tmp_path / "whole" / passrate.RESULT_FILE)
    assert len(whole) == 12 and len({row["question"] for row in whole}) == 12


def test_a_kill_while_the_first_line_of_a_batch_was_written_loses_no_row(tmp_path):
    """The shard ends in half a line, all that reached the disk of its batch: the redo must not append to it (its
    first line would be lost)."""
    import shutil

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert gspo(["passrate", *ARGS, "--output_dir", str(whole)]) == 0
    (resumed / passrate.SHARDS).mkdir(parents=True)
    shutil.copy(whole / passrate.RUN_FILE, resumed / passrate.RUN_FILE)
    (shard,) = (whole / passrate.SHARDS).iterdir()
    lines = shard.read_text().splitlines()
    (resumed / passrate.SHARDS / shard.name).write_text("\n".join(lines[:4]) + "\n" + lines[4][:30])
    assert gspo(["passrate", *ARGS, "--output_dir", str(resumed)]) == 0
    for name in (passrate.RESULT_FILE, passrate.KEPT_FILE):
        assert (resumed / name).read_text() == (whole / name).read_text()


def test_only_the_accuracy_reward_decides_and_keep_filters(tmp_path):
    out = tmp_path / "run"
    assert gspo(["passrate", *ARGS, "--reward_funcs", "format", "gsm8k_accuracy", "--output_dir", str(out)]) == 0
    results = rows(out / passrate.RESULT_FILE)
    assert {row["signal_reward"] for row in results} == {"gsm8k_accuracy"}
    for row in results:
        accuracy = row["sample_rewards"]["gsm8k_accuracy"]
        assert row["pass_rate"] == sum(r == 1.0 for r in accuracy) / 4 and len(row["samples"]) == 4
        assert set(row["sample_rewards"]) == {"format_reward", "gsm8k_accuracy"}
    kept = rows(out / passrate.KEPT_FILE)
    assert [r["question"] for r in kept] == [r["question"] for r in results if 0.1 <= r["pass_rate"] <= 0.9]
    assert all(set(r) == {"question", "answer", "pass_rate"} for r in kept)  # ready for --dataset_name
    assert 0 < len(kept) < len(results)


def test_refusals_name_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit, match="--keep takes LO:HI"):
        gspo(["passrate", "--keep", "0.9:0.1", "--output_dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="known to measure success"):
        gspo(["passrate", *ARGS, "--reward_funcs", "format", "--output_dir", str(tmp_path / "a")])
    assert gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "b")]) == 0
    with pytest.raises(SystemExit, match="num_generations"):  # resuming with other settings would mix two runs
        gspo(["passrate", *ARGS, "--num_generations", "2", "--output_dir", str(tmp_path / "b")])
    for flag, value in (("--system_prompt", "Answer."), ("--prompt_column", "question"),
                        ("--use_chat_template", "false"), ("--dynamic_sampling_reward", "gsm8k_accuracy")):  # fmt: skip
        with pytest.raises(SystemExit, match=flag[2:]):  # another task: never the stale file returned
            gspo(["passrate", *ARGS, flag, value, "--output_dir", str(tmp_path / "b")])


@pytest.mark.slow
def test_two_processes_score_one_shard_each(tmp_path):
    out = tmp_path / "run"
    launch_two_cpu_processes("two_process_passrate.py", *ARGS, "--output_dir", str(out), cwd=tmp_path)
    results = rows(out / passrate.RESULT_FILE)
    assert len(results) == 12 and len({row["question"] for row in results}) == 12
    assert sorted(p.name for p in (out / passrate.SHARDS).iterdir()) == ["shard0of2.jsonl", "shard1of2.jsonl"]


# ------------------------------------------------------------------------- the task and the settings of training


def recipe_constant(recipe: str, name: str):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "recipes", recipe)
    spec = importlib.util.spec_from_file_location(recipe[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_the_recipes_system_prompts_are_the_ones_passrate_uses():
    prompts = passrate_sampling.RECIPE_SYSTEM_PROMPTS
    assert prompts["question"] == recipe_constant("gsm8k_gspo.py", "SYSTEM_PROMPT")
    assert prompts["problem"] == recipe_constant("math_gspo.py", "SYSTEM_PROMPT")


def sampler_and_trainer(tmp_path, chat: bool, **config):
    """passrate's Sampler and a GSPOTrainer over the same model, tokenizer (one that adds BOS, as Llama's does) and
    recipe prompt column."""
    from datasets import Dataset
    from tokenizers.processors import TemplateProcessing

    from gspo_recipes import GSPOConfig, GSPOTrainer
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
    from gspo_recipes.recipe import RecipeArguments, as_prompt

    model, tokenizer = build_tiny_model_and_tokenizer()
    tokenizer._tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    args = GSPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=6, report_to="none", use_cpu=True, bf16=False, **config)  # fmt: skip
    script_args = RecipeArguments(use_chat_template=chat)
    sampler = passrate_sampling.Sampler(model, tokenizer, args, script_args, "question", "cpu")
    system = recipe_constant("gsm8k_gspo.py", "SYSTEM_PROMPT")
    recipe_prompt = as_prompt("2+3?", system, chat)  # what recipes/gsm8k_gspo.py puts in the prompt column
    dataset = Dataset.from_list([{"prompt": recipe_prompt}] * 4)
    trainer = GSPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
    return sampler, trainer, recipe_prompt


@pytest.mark.parametrize("chat", [True, False])
def test_passrate_samples_the_prompts_training_samples(tmp_path, chat):
    sampler, trainer, recipe_prompt = sampler_and_trainer(tmp_path, chat)
    prompt = sampler.prompt_of({"question": "2+3?", "answer": "#### 5"})
    assert prompt == recipe_prompt  # the recipe's SYSTEM_PROMPT, asking for '#### <number>'
    trained_ids = trainer._tokenize_prompts([recipe_prompt])[0][0]
    assert passrate_sampling.prompt_token_ids(sampler.tokenizer, [prompt])[0] == list(trained_ids)
    if not chat:
        assert trained_ids[0] == sampler.tokenizer.bos_token_id  # TRL's plain-text prompts carry BOS


def test_passrate_samples_with_trainings_generation_settings_not_the_models_file(tmp_path):
    """A generation_config.json with a repetition penalty and top_k=1 (Qwen2.5-Instruct ships a penalty) changes
    nothing: the samples are those of the training settings, as a training step draws them."""
    from transformers import GenerationConfig

    from gspo_recipes import GSPOConfig
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
    from gspo_recipes.recipe import RecipeArguments

    args = GSPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, report_to="none", use_cpu=True, bf16=False)  # fmt: skip
    samples = []
    for shipped in ({}, {"repetition_penalty": 5.0, "top_k": 1}):
        model, tokenizer = build_tiny_model_and_tokenizer()
        model.generation_config = GenerationConfig(**{**model.generation_config.to_dict(), **shipped})
        sampler = passrate_sampling.Sampler(model, tokenizer, args, RecipeArguments(), "question", "cpu")
        samples.append(sampler.generate(["1+1=", "2+2="], seed=(0, 1)))
    assert samples[0] == samples[1]
    assert len({text for group in samples[0][0] for text in group}) > 1  # sampled, not one greedy answer


HEAVY = ("torch", "transformers", "trl.trainer.grpo_trainer", "datasets")
HELP_PROBE = """
import sys
from gspo_recipes.commands.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print("IMPORTED:" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("command", [[], ["passrate"], ["report"], ["calibrate"], ["simulate"], ["audit-reward"]])
def test_every_help_is_short_and_imports_no_torch(command):
    """`gspo ... --help` answers at once (no torch, transformers, TRL trainer or datasets import: those take seconds)
    and in under 80 lines, our own options first."""
    import subprocess
    import sys

    probe = HELP_PROBE.format(heavy=HEAVY)
    result = subprocess.run(
        [sys.executable, "-c", probe, *command, "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.stderr.strip().splitlines()[-1] == "IMPORTED:", result.stderr
    lines = result.stdout.splitlines()
    assert 5 < len(lines) < 80 and lines[0].startswith("usage: gspo")


def test_passrate_help_lists_its_own_options_and_points_to_help_all(capsys):
    assert gspo(["passrate", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--model_name_or_path", "--dataset_name", "--reward_funcs", "--num_generations", "--keep"):
        assert option in out, option
    assert "--help-all" in out and "--gradient_accumulation_steps" not in out


def test_passrate_help_all_is_trls_whole_set(capsys):
    with pytest.raises(SystemExit):
        gspo(["passrate", "--help-all"])
    out = capsys.readouterr().out
    assert "--gradient_accumulation_steps" in out and "--keep" in out


def test_a_misspelled_flag_gets_did_you_mean(capsys):
    with pytest.raises(SystemExit) as stop:
        gspo(["passrate", "--num_generation", "4"])
    assert stop.value.code == 2
    assert "--num_generation: did you mean --num_generations or" in capsys.readouterr().err


def test_use_vllm_without_vllm_names_the_install(tmp_path, monkeypatch):
    """`--use_vllm` samples with vLLM's offline engine (tests/vllm_tier/test_vllm_passrate.py runs it); without vLLM
    the command stops before loading anything and names the extra to install."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    with pytest.raises(SystemExit, match=r"--use_vllm needs vllm.*pip install 'gspo-recipes\[vllm\]'"):
        gspo(["passrate", *ARGS, "--use_vllm", "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
