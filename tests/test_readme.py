"""The README as a new user reads it: its two commands are the ones CI runs, its quick start prints the banner it
shows, and its "callbacks in an existing TRL run" snippet runs as written."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A CPU run of a few seconds on the tests' tiny model (the sizes every tiny run of the tests uses).
TINY_RUN = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=8, learning_rate=1e-3,
                logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0)  # fmt: skip


def digit_count_reward(completions, **kwargs):
    """A reward with variance on a random model: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def readme_section(title):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    start = readme.index(f"\n## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end > 0 else None]


def code_blocks(section, language=None):
    """The fenced blocks of `section`, in order (those in `language` only, when given)."""
    blocks, current, fence = [], None, ""
    for line in section.splitlines():
        if line.startswith("```") and current is None:
            current, fence = [], line[3:].strip()
        elif line.startswith("```"):
            if language is None or fence == language:
                blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def quick_start_commands():
    """The quick start's commands, without their comments: {"demo": "python3 tasks.py demo", "test": ...}."""
    lines = [line.split("#")[0].strip() for line in code_blocks(readme_section("Quick start"), "bash")[0].splitlines()]
    return {line.split()[-1]: line for line in lines if line}


def test_the_quick_start_shows_two_commands_and_ci_runs_the_test_one_verbatim():
    commands = quick_start_commands()
    assert commands == {"demo": "python3 tasks.py demo", "test": "python3 tasks.py test"}
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    assert commands["test"] in ci, ".ci/run runs the README's test command as written"
    assert "pytest -q" not in ci, "the default tier runs through the README's command, not beside it"


def test_tasks_py_refuses_an_unknown_command_with_its_usage():
    result = subprocess.run([sys.executable, "tasks.py", "deom"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "usage: python3 tasks.py {demo|test}" in result.stderr


def readme_banner():
    block = next(b for b in code_blocks(readme_section("Quick start")) if b.startswith("=" * 100))
    return block.rstrip("\n").splitlines()


@pytest.mark.slow
def test_the_quick_start_demo_prints_the_readme_banner_and_draws_the_figures(tmp_path):
    """The README's demo command, in a short form (2 steps, small batches, into a temporary folder; the test's own
    interpreter for `python3`, so that tasks.py finds its environment ready): its banner is the README's, but for the
    step count and the folder, and gspo report then runs on the run."""
    out = tmp_path / "out"
    short = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    command = quick_start_commands()["demo"].split()
    assert command[0] == "python3"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(
        [sys.executable, *command[1:], *short, "--output_dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    expected = [
        line.replace("200 steps -> outputs/gsm8k_gspo_offline", f"2 steps -> {out}") for line in readme_banner()
    ]
    # Another library's log records are not the banner: DeepSpeed (the dev extra has it; the demo's .venv does not)
    # logs "[date] [WARNING] [real_accelerator.py:...] Setting accelerator to CPU" into stdout when it is imported.
    printed = [
        line for line in result.stdout.splitlines() if not re.match(r"\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\] ", line)
    ]
    start = printed.index(expected[0])
    assert printed[start : start + len(expected)] == expected
    assert f"summary written to {out / 'gspo_report.txt'}" in result.stdout
    assert (out / "gspo_clip_fraction_by_length.png").exists() and (out / "gspo_heldout.png").exists()


def test_the_callbacks_snippet_runs_on_a_plain_grpo_trainer(tiny, prompt_dataset, tmp_path, monkeypatch):
    """The README's lines as written, on the tests' tiny model: only GRPOConfig is given the tiny run's sizes."""
    import trl

    (snippet,) = code_blocks(readme_section("Callbacks in an existing TRL run"), "python")
    real_config = trl.GRPOConfig
    monkeypatch.setattr(trl, "GRPOConfig", lambda **kwargs: real_config(**{**TINY_RUN, "max_steps": 4, **kwargs}))
    monkeypatch.chdir(tmp_path)
    model, tokenizer = tiny
    namespace = {"model": model, "tokenizer": tokenizer, "rewards": digit_count_reward, "dataset": prompt_dataset}
    exec(compile(snippet, "README.md", "exec"), namespace)

    assert type(namespace["trainer"]) is trl.GRPOTrainer, "TRL's own trainer, not GSPOTrainer"
    logged = {key for entry in namespace["trainer"].state.log_history for key in entry}
    assert {"gspo/clip_frac", "gspo/clip_frac/minibatch_2", "gspo/log_s/std"} <= logged
    assert (tmp_path / "out" / "gspo_diagnostics.jsonl").read_text().count("\n") == 4
