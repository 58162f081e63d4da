"""What a user sees when a recipe cannot start: one short message naming the cause and the fix, fast, no traceback;
and what a recipe does with an output_dir that already holds a run (resume, refuse, start over)."""

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from gspo_recipes.recipe_setup import claim_output_dir, describe_error
from gspo_recipes.runfiles.output_dir import previous_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GSM8K = os.path.join(ROOT, "recipes", "gsm8k_gspo.py")
CODE = os.path.join(ROOT, "recipes", "code_gspo.py")


def run_recipe(args, cwd, script=GSM8K, **env):
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", **env)
    environment.pop("GSPO_DEBUG", None)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, script, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=300
    )
    return result, time.monotonic() - start


def assert_short_error(result, *hints):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
    assert result.stderr.startswith("error: ")
    for hint in hints:
        assert hint in result.stderr, result.stderr


def test_a_bad_model_path_is_named_before_torch_is_imported(tmp_path):
    result, seconds = run_recipe(
        ["--model_name_or_path", "/nonexistent/model-xyz", "--dataset_name", "builtin:gsm8k-generated"], tmp_path
    )
    assert_short_error(result, "--model_name_or_path /nonexistent/model-xyz: no such model folder", "hub name")
    assert result.returncode == 2
    # No model, no torch: the check runs before the slow imports (about 0.4 s here; 5 s leaves room for a busy CI).
    assert seconds < 5


def test_a_folder_that_is_not_a_model_and_a_missing_dataset_file(tmp_path):
    (tmp_path / "empty").mkdir()
    result, _ = run_recipe(["--model_name_or_path", str(tmp_path / "empty")], tmp_path)
    assert_short_error(result, "no config.json", "save_pretrained")
    result, _ = run_recipe(["--dataset_name", "data/missing.jsonl"], tmp_path)
    assert_short_error(result, "--dataset_name data/missing.jsonl: no such dataset file", "openai/gsm8k")
    result, _ = run_recipe(["--model_name_or_path", "builtin:coldstart-gsm9k"], tmp_path)
    assert_short_error(result, "no such built-in", "builtin:coldstart-gsm8k")


def test_a_code_reward_without_its_sandbox_refuses_before_the_model_is_loaded(tmp_path):
    """The rewards come before the model: with a bwrap that cannot confine (GSPO_BWRAP names one that fails its probe),
    the code recipe ends on the sandbox's refusal, not on the model folder that would fail to load next."""
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    args = ["--model_name_or_path", str(model), "--dataset_name", "builtin:mbpp-generated"]
    result, _ = run_recipe(args, tmp_path, script=CODE, GSPO_BWRAP="/bin/false")
    assert_short_error(result, "no sandbox for model code", "/bin/false")
    assert "config" not in result.stderr and "tokenizer" not in result.stderr


def test_an_offline_hub_name_not_in_the_cache(tmp_path):
    result, _ = run_recipe(
        ["--model_name_or_path", "nobody/no-such-model", "--dataset_name", "builtin:gsm8k-generated"],
        tmp_path,
        HF_HOME=str(tmp_path / "hf"),
    )
    assert_short_error(result, "not in the local hub cache", "HF_HUB_OFFLINE", "hf download nobody/no-such-model")


def test_a_misspelled_flag_and_yaml_key_get_did_you_mean(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "model_name_or_path: builtin:tiny-untrained\ndataset_name: builtin:gsm8k-generated\nlerning_rate: 1\n"
    )
    result, _ = run_recipe(["--config", str(config), "--max_stpes", "2"], tmp_path)
    assert_short_error(result, "--max_stpes: did you mean --max_steps?", "lerning_rate (YAML key): did you mean")
    assert "--max-steps" not in result.stderr, "the dashed alias is not suggested beside the field's own name"
    assert "FutureWarning" not in result.stderr


def test_a_missing_tracker_names_the_install_command(tmp_path, monkeypatch):
    from gspo_recipes import recipe_setup

    monkeypatch.setattr(recipe_setup.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit):
        recipe_setup.check_extras(SimpleNamespace(report_to=["tensorboard"], use_vllm=False))


def test_set_up_errors_are_one_paragraph_unless_debugging(capsys, monkeypatch):
    from gspo_recipes.recipe_setup import setup_errors

    monkeypatch.delenv("GSPO_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stop, setup_errors():
        raise RuntimeError("no sandbox can start here: install X.\n\nDetails nobody needs.")
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: RuntimeError: no sandbox can start here: install X.",
        "(set GSPO_DEBUG=1 to see the traceback)",
    ]
    monkeypatch.setenv("GSPO_DEBUG", "1")
    with pytest.raises(RuntimeError), setup_errors():
        raise RuntimeError("shown with its traceback")


def test_a_missing_module_names_the_extra():
    error = ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    assert describe_error(error) == "matplotlib is not installed. Install it with: pip install 'gspo-recipes[report]'"


# ------------------------------------------------------------------------------------------ an output_dir with a run


def args_for(output_dir, **changes):
    return SimpleNamespace(output_dir=str(output_dir), resume_from_checkpoint=None, max_steps=8, **changes)


def make_checkpoint(output_dir, step):
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_a_run_cut_short_resumes_from_its_last_checkpoint(tmp_path, capsys):
    make_checkpoint(tmp_path, 2)
    make_checkpoint(tmp_path, 4)
    (tmp_path / "checkpoint-6").mkdir()  # a save cut short: no trainer state in it
    (tmp_path / "gspo_diagnostics.jsonl").write_text('{"step": 1}\n')
    (tmp_path / "gspo_heldout.png").write_text("an earlier report's figure")
    args = args_for(tmp_path)
    claim_output_dir(args, overwrite=False)
    assert args.resume_from_checkpoint == str(tmp_path / "checkpoint-4")
    assert f"Resuming the unfinished run in {tmp_path} from checkpoint-4 (step 4 of 8)" in capsys.readouterr().out
    assert (tmp_path / "gspo_diagnostics.jsonl").read_text() == '{"step": 1}\n', "kept for the resumed run to extend"
    assert not (tmp_path / "gspo_heldout.png").exists(), "the old report described the run before it was resumed"


def test_a_finished_run_is_refused_and_left_as_it_is(tmp_path, capsys):
    make_checkpoint(tmp_path, 8)
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 8}))
    (tmp_path / "gspo_diagnostics.jsonl").write_text('{"step": 8}\n')
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as stop:
        claim_output_dir(args_for(tmp_path), overwrite=False)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a finished run (8 steps)" in err and "--overwrite_output_dir" in err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_overwrite_removes_what_a_new_run_would_misread(tmp_path):
    make_checkpoint(tmp_path, 8)
    for name in ("trainer_state.json", "gspo_diagnostics.jsonl", "gspo_report.txt", "gspo_reward.png", "notes.md"):
        (tmp_path / name).write_text("{}")
    claim_output_dir(args_for(tmp_path), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"], "only the run's own files go"
    assert previous_run(str(tmp_path)) is None


def test_a_run_with_no_checkpoint_is_refused_not_restarted(tmp_path, capsys):
    (tmp_path / "gspo_diagnostics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(SystemExit):
        claim_output_dir(args_for(tmp_path), overwrite=False)
    assert "stopped before its first checkpoint" in capsys.readouterr().err
    assert (tmp_path / "gspo_diagnostics.jsonl").read_text() == '{"step": 1}\n'


def test_a_folder_without_a_run_is_used_as_it_is(tmp_path):
    (tmp_path / "notes.md").write_text("mine")
    args = args_for(tmp_path)
    claim_output_dir(args, overwrite=False)
    assert args.resume_from_checkpoint is None and (tmp_path / "notes.md").exists()


def test_a_model_folder_without_a_tokenizer_names_the_flag_and_the_fix(tmp_path):
    from trl import ModelConfig

    from gspo_recipes.recipe import model_and_tokenizer

    (tmp_path / "config.json").write_text("{}")
    args = SimpleNamespace(trust_remote_code=False, model_init_kwargs=None)
    with pytest.raises(SystemExit) as stop:
        model_and_tokenizer(ModelConfig(model_name_or_path=str(tmp_path)), args)
    message = str(stop.value)
    assert message.startswith(f"error: --model_name_or_path {tmp_path}: its tokenizer did not load (")
    assert "save_pretrained()" in message and "\n" not in message
