"""The recipes end to end, offline and tiny: each script runs as a user runs it, in a subprocess."""

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
import torch
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = os.path.join(ROOT, "recipes")
FAST = [
    "--max_steps",
    "4",
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "12",
    "--logging_steps",
    "1",
    "--report_to",
    "none",
]


@pytest.fixture(scope="module")
def coldstart_cache(tmp_path_factory):
    """A cache holding an (untrained) tiny model where the embedded default looks for its cold-start model, so the
    tests exercise the embedded path without spending minutes on the cold start."""
    from gspo_recipes.builtin.coldstart import coldstart_dir
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    cache = tmp_path_factory.mktemp("cache")
    model, tokenizer = build_tiny_model_and_tokenizer()
    model.save_pretrained(coldstart_dir(cache))
    tokenizer.save_pretrained(coldstart_dir(cache))
    return str(cache)


def run(args, cwd, cache=None, launcher=None, check=True, timeout=600):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if cache:
        env["GSPO_RECIPES_CACHE"] = cache
    command = (launcher or [sys.executable]) + args
    result = subprocess.run(command, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def load_recipe(recipe):
    """The recipe file as a module (its `main()` does not run)."""
    spec = importlib.util.spec_from_file_location(recipe.removesuffix(".py"), os.path.join(RECIPES, recipe))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECIPE_ARGUMENTS = {
    "gsm8k_gspo.py": "RecipeArguments",
    "math_gspo.py": "RecipeArguments",
    "code_gspo.py": "CodeArguments",
}


def parse_recipe(recipe, argv, monkeypatch):
    """(script args, GSPOConfig, ModelConfig) exactly as `recipe` parses them from the command line `argv`."""
    module = load_recipe(recipe)
    monkeypatch.setattr(sys, "argv", [recipe, *argv])
    return module.parse_args(getattr(module, RECIPE_ARGUMENTS[recipe]), module.OFFLINE_CONFIG)


def diagnostics_steps(output_dir):
    with open(os.path.join(output_dir, "gspo_diagnostics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f]


def logged_steps(output_dir):
    with open(os.path.join(output_dir, "trainer_state.json")) as f:
        return [entry["step"] for entry in json.load(f)["log_history"] if "loss" in entry]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["math_gspo.py", "code_gspo.py"])
def test_offline_default_runs_end_to_end(recipe, tmp_path):
    out = tmp_path / "out"
    result = run(
        [
            os.path.join(RECIPES, recipe),
            "--config",
            os.path.join(RECIPES, "configs", recipe.replace(".py", "_offline.yaml")),
            "--output_dir",
            str(out),
            *FAST,
        ],
        cwd=tmp_path,
    )
    assert "Real recipe:" in result.stdout and "gspo report" in result.stdout
    # save_strategy "no" in the offline YAML: the closing banner says what was written, and no checkpoint.
    assert "checkpoints: none" in result.stdout and "Logs and checkpoints" not in result.stdout
    assert "model:       saved" in result.stdout and not list(out.glob("checkpoint-*"))
    assert diagnostics_steps(out) == [1, 2, 3, 4]
    with open(out / "trainer_state.json") as f:
        history = json.load(f)["log_history"]
    reward_name = "rewards/math_accuracy/mean" if recipe == "math_gspo.py" else "rewards/code_execution/mean"
    assert any(reward_name in entry for entry in history), "scored with the real reward function"


@pytest.mark.slow
def test_gsm8k_stopped_and_resumed_ends_like_an_uninterrupted_run(tmp_path, coldstart_cache):
    """Also the embedded default (no model, no dataset): the cold-start path with a pre-built cache."""
    common = [
        os.path.join(RECIPES, "gsm8k_gspo.py"),
        *FAST,
        "--lr_scheduler_type",
        "constant",
        "--save_strategy",
        "steps",
        "--save_steps",
        "4",
        "--save_total_limit",
        "3",
    ]  # keep checkpoint-4
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    result = run([*common, "--max_steps", "8", "--output_dir", str(whole)], cwd=tmp_path, cache=coldstart_cache)
    assert "cold-start tiny model" in result.stdout and "recipes/configs/gsm8k_gspo.yaml" in result.stdout
    # Stopped after step 6: the last checkpoint is step 4, and the diagnostics already hold steps 5 and 6.
    run([*common, "--max_steps", "6", "--output_dir", str(resumed)], cwd=tmp_path, cache=coldstart_cache)
    assert diagnostics_steps(resumed) == list(range(1, 7))
    run(
        [
            *common,
            "--max_steps",
            "8",
            "--output_dir",
            str(resumed),
            "--resume_from_checkpoint",
            str(resumed / "checkpoint-4"),
        ],
        cwd=tmp_path,
        cache=coldstart_cache,
    )

    assert diagnostics_steps(resumed) == diagnostics_steps(whole) == list(range(1, 9))
    assert logged_steps(resumed) == logged_steps(whole) == list(range(1, 9))
    from safetensors.torch import load_file

    final_whole = load_file(whole / "model.safetensors")
    final_resumed = load_file(resumed / "model.safetensors")
    assert all(torch.equal(final_whole[name], final_resumed[name]) for name in final_whole)


def files_and_contents(folder):
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_a_second_run_into_a_finished_run_refuses_and_changes_nothing(tmp_path, coldstart_cache):
    out = tmp_path / "out"
    command = [os.path.join(RECIPES, "gsm8k_gspo.py"), *FAST, "--max_steps", "2", "--output_dir", str(out)]
    run(command, cwd=tmp_path, cache=coldstart_cache)
    first = files_and_contents(out)
    result = run(command, cwd=tmp_path, cache=coldstart_cache, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {out} holds a finished run (2 steps). Give another --output_dir, or --overwrite_output_dir to "
        "replace it."
    ]
    assert files_and_contents(out) == first, "the first run's files are left exactly as they were"
    result = run([*command, "--max_steps", "1", "--overwrite_output_dir"], cwd=tmp_path, cache=coldstart_cache)
    assert f"starting over in {out}" in result.stdout
    assert diagnostics_steps(out) == [1] and logged_steps(out) == [1], "nothing of the first run is read as the new one"


@pytest.mark.slow
def test_an_interrupted_run_resumes_by_itself_and_extends_its_diagnostics(tmp_path, coldstart_cache):
    out = tmp_path / "out"
    command = [
        *(sys.executable, os.path.join(RECIPES, "gsm8k_gspo.py"), *FAST),
        *("--max_steps", "8", "--save_strategy", "steps", "--save_steps", "4", "--output_dir", str(out)),
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", GSPO_RECIPES_CACHE=coldstart_cache, TOKENIZERS_PARALLELISM="false")
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # killed once step 5 is logged: checkpoint-4 is then complete, and the diagnostics hold a step past it
        deadline = time.monotonic() + 600
        while not (out / "gspo_diagnostics.jsonl").exists() or max(diagnostics_steps(out), default=0) < 5:
            assert process.poll() is None and time.monotonic() < deadline, "the run ended before step 5"
            time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    with open(out / "gspo_diagnostics.jsonl") as f:
        up_to_checkpoint = [line for line in f if json.loads(line)["step"] <= 4]

    result = run(command[1:], cwd=tmp_path, cache=coldstart_cache)  # the very same command
    assert f"Resuming the unfinished run in {out} from checkpoint-4 (step 4 of 8)" in result.stdout
    assert diagnostics_steps(out) == logged_steps(out) == list(range(1, 9))
    with open(out / "gspo_diagnostics.jsonl") as f:
        assert f.readlines()[:4] == up_to_checkpoint, "the lines before the checkpoint are kept as written"


@pytest.mark.slow
def test_gsm8k_real_path_with_a_local_dataset_and_model(tmp_path):
    """--model_name_or_path and a local .jsonl, with renamed columns: the chat template path of the real recipe."""
    from gspo_recipes.builtin.data.synthetic_gsm import make_gsm_problems
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    with open(tmp_path / "data.jsonl", "w") as f:
        f.writelines(
            json.dumps({"q": row["question"], "answer": row["answer"]}) + "\n" for row in make_gsm_problems(32)
        )
    out = tmp_path / "out"
    run(
        [
            os.path.join(RECIPES, "gsm8k_gspo.py"),
            *FAST,
            "--max_steps",
            "2",
            "--model_name_or_path",
            str(tmp_path / "model"),
            "--dataset_name",
            str(tmp_path / "data.jsonl"),
            "--column_map",
            "question=q",
            "--output_dir",
            str(out),
            "--use_peft",
            "--lora_target_modules",
            "q_proj",
            "v_proj",
        ],
        cwd=tmp_path,
    )
    assert diagnostics_steps(out) == [1, 2]
    assert os.path.exists(out / "adapter_config.json"), "LoRA through ModelConfig"


def test_missing_column_fails_before_loading_a_model(tmp_path):
    with open(tmp_path / "data.jsonl", "w") as f:
        f.write(json.dumps({"problem_text": "1+1?", "answer": "#### 2"}) + "\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")  # a model folder that fails to load, were it loaded
    result = run(
        [
            os.path.join(RECIPES, "gsm8k_gspo.py"),
            "--dataset_name",
            str(tmp_path / "data.jsonl"),
            "--model_name_or_path",
            str(tmp_path / "model"),
            "--output_dir",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0
    assert "no column 'question'" in result.stderr
    assert "['problem_text', 'answer']" in result.stderr and "--column_map question=" in result.stderr
    assert "Traceback" not in result.stderr and str(tmp_path / "model") not in result.stderr


def test_bad_yaml_key_names_the_field(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("output_dir: out\nlearning_rat: 0.1\n")
    result = run([os.path.join(RECIPES, "math_gspo.py"), "--config", str(config)], cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "learning_rat" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_gsm8k_on_two_cpu_processes(tmp_path, coldstart_cache):
    out = tmp_path / "out"
    launcher = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        os.path.join(RECIPES, "accelerate_configs", "cpu_2proc.yaml"),
    ]
    run(
        [os.path.join(RECIPES, "gsm8k_gspo.py"), *FAST, "--output_dir", str(out)],
        cwd=tmp_path,
        cache=coldstart_cache,
        launcher=launcher,
    )
    with open(out / "gspo_diagnostics.jsonl") as f:
        lines = [json.loads(line) for line in f]
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    # Each process holds 8 responses per step; the diagnostics gather both.
    assert all(line["responses"] == 16 for line in lines)


@pytest.mark.parametrize("recipe", list(RECIPE_ARGUMENTS))
def test_flags_override_the_offline_default_value_by_value(recipe, tmp_path, monkeypatch):
    """`recipe.py --output_dir X --max_steps 3 --report_to tensorboard`: the three flags win, and every other value of
    the offline YAML (model, data, learning rate, batch, ...) is kept, not replaced by TRL's defaults."""
    from gspo_recipes import GSPOConfig

    flags = {"output_dir": str(tmp_path / "x"), "max_steps": "3", "report_to": "tensorboard"}
    parsed = parse_recipe(recipe, [arg for key, value in flags.items() for arg in (f"--{key}", value)], monkeypatch)
    _script_args, training_args, _model_args = parsed
    assert (training_args.output_dir, training_args.max_steps) == (str(tmp_path / "x"), 3)
    assert training_args.report_to == ["tensorboard"]
    with open(os.path.join(RECIPES, "configs", recipe.replace(".py", "_offline.yaml"))) as f:
        offline = yaml.safe_load(f)
    assert offline["learning_rate"] != GSPOConfig.learning_rate  # so keeping it is not an accident of defaults
    kept = {key: value for key, value in offline.items() if key not in flags}
    for key, value in kept.items():
        holder = next(args for args in parsed if hasattr(args, key))
        got = getattr(holder, key)
        assert got == value or got == [value], f"{key}: the offline YAML says {value!r}, the run got {got!r}"
    assert {"learning_rate", "model_name_or_path", "dataset_name", "per_device_train_batch_size"} <= set(kept)


def test_a_model_or_a_config_replaces_the_offline_default(tmp_path, monkeypatch):
    """The offline YAML is the base only when neither names the model: a real run does not inherit the tiny one's
    learning rate or data."""
    from gspo_recipes import GSPOConfig

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # offline, a hub name not in the cache fails before parsing

    _, training_args, model_args = parse_recipe(
        "gsm8k_gspo.py", ["--model_name_or_path=some/model", "--output_dir", str(tmp_path)], monkeypatch
    )
    assert model_args.model_name_or_path == "some/model" and training_args.learning_rate == GSPOConfig.learning_rate
    real = os.path.join(RECIPES, "configs", "gsm8k_gspo.yaml")
    script_args, training_args, model_args = parse_recipe(
        "gsm8k_gspo.py", ["--config", real, "--max_steps", "7"], monkeypatch
    )
    assert (model_args.model_name_or_path, script_args.dataset_name) == ("Qwen/Qwen2.5-0.5B-Instruct", "openai/gsm8k")
    assert training_args.max_steps == 7 and training_args.learning_rate == 1e-6


def test_builtin_names_resolve_through_the_recipe_loaders(monkeypatch):
    """The offline YAML's `builtin:` names load through the same functions as a hub name or a local path."""
    from trl import ModelConfig

    from gspo_recipes.builtin.coldstart import CHAT_TEMPLATE
    from gspo_recipes.builtin.data.synthetic_gsm import make_gsm_dataset
    from gspo_recipes.recipe import RecipeArguments, load_train_dataset, model_and_tokenizer

    monkeypatch.setenv("GSPO_RECIPES_CACHE", "/nonexistent")  # the copy shipped with the package, not a local cache
    args = RecipeArguments(dataset_name="builtin:gsm8k-generated", max_train_samples=100)
    dataset = load_train_dataset(args, seed=3)
    assert dataset.to_list() == make_gsm_dataset(2048, seed=10_003, with_prompt=False).to_list()[:100]
    model, tokenizer = model_and_tokenizer(ModelConfig(model_name_or_path="builtin:coldstart-gsm8k"), None)
    assert sum(p.numel() for p in model.parameters()) == 998_528 and tokenizer.chat_template == CHAT_TEMPLATE


@pytest.mark.parametrize("recipe, task", [("math_gspo.py", "math"), ("code_gspo.py", "code")])
def test_math_and_code_prompts_are_the_plain_prompts_their_cold_start_was_trained_on(recipe, task, monkeypatch):
    """The offline default of each recipe names its own cold-start model, and the recipe's chat messages (system
    prompt, task text as the recipe writes it) render token for token as the prompt that model was trained on."""
    from gspo_recipes.builtin import load_model
    from gspo_recipes.builtin.tasks import TASKS
    from gspo_recipes.recipe import as_prompt

    monkeypatch.setenv("GSPO_RECIPES_CACHE", "/nonexistent")  # the copy shipped with the package
    script_args, _, model_args = parse_recipe(recipe, [], monkeypatch)
    assert model_args.model_name_or_path == f"builtin:coldstart-{task}" and script_args.use_chat_template
    _, tokenizer = load_model(model_args.model_name_or_path)
    module = load_recipe(recipe)
    problems = TASKS[task].make_problems(8, 5)
    # The user message exactly as the recipe builds it from a dataset row.
    texts = [module.FORMATS["mbpp"][1](p) if task == "code" else p["problem"] for p in problems]
    chat = tokenizer.apply_chat_template(
        [as_prompt(text, module.SYSTEM_PROMPT, chat=True) for text in texts],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    assert chat == tokenizer(text=[TASKS[task].prompt(p) for p in problems])["input_ids"]


def test_unknown_builtin_name_lists_the_known_ones():
    from gspo_recipes.recipe import RecipeArguments, load_train_dataset

    with pytest.raises(SystemExit) as error:
        load_train_dataset(RecipeArguments(dataset_name="builtin:gsm9k"))
    assert "dataset_name=builtin:gsm9k" in str(error.value) and "builtin:gsm8k-generated" in str(error.value)


def test_embedded_prompt_tokens_are_the_plain_prompt_the_cold_start_was_trained_on(monkeypatch):
    """The embedded default sends chat messages like any chat model; the cold-start tokenizer renders them as the
    plain `question + "\\nAnswer: "` the model was trained on, token for token as TRL tokenizes each form."""
    from gspo_recipes.builtin import load_model
    from gspo_recipes.builtin.data.synthetic_gsm import format_prompt, make_gsm_problems
    from gspo_recipes.recipe import as_prompt

    monkeypatch.setenv("GSPO_RECIPES_CACHE", "/nonexistent")
    _, tokenizer = load_model("builtin:coldstart-gsm8k")
    questions = [problem["question"] for problem in make_gsm_problems(8, seed=5)]
    system_prompt = load_recipe("gsm8k_gspo.py").SYSTEM_PROMPT
    chat = tokenizer.apply_chat_template(
        [as_prompt(q, system_prompt, chat=True) for q in questions],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    plain = tokenizer(text=[format_prompt(q) for q in questions])["input_ids"]
    assert chat == plain


def embedded_default_section():
    """The README's paragraph on the embedded default, where its measured figures are."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    start = readme.index("- **Embedded default**")
    return readme[start : readme.index("- **Real recipe**", start)]


def test_readme_figures_were_measured_with_the_shipped_clip_range(monkeypatch):
    """The README's reward, time and clip figures hold for one clip range: the offline YAML must still ship it."""
    _, training_args, _ = parse_recipe("gsm8k_gspo.py", [], monkeypatch)
    section = embedded_default_section()
    assert f"`epsilon: {training_args.epsilon:g}`" in section
    assert f"`epsilon_high: {training_args.epsilon_high:g}`" in section


def minibatch_clip_fractions(output_dir):
    """Per minibatch, the share of its responses clipped (both sides) over the whole run."""
    totals = {}
    with open(os.path.join(output_dir, "gspo_diagnostics.jsonl")) as f:
        for line in f:
            for k, counts in json.loads(line).get("minibatches", {}).items():  # a line may hold only sections
                seen, clipped = totals.get(int(k), (0, 0))
                totals[int(k)] = (seen + counts["responses"], clipped + counts["clipped_low"] + counts["clipped_high"])
    return {k: clipped / seen for k, (seen, clipped) in sorted(totals.items())}


@pytest.mark.slow
def test_embedded_default_learns_with_a_healthy_trust_region(tmp_path):
    """The newcomer's first run, exactly as shipped (3.5 minutes on 2 free cores): no health warning, at most a
    quarter of the responses clipped on each off-policy minibatch, and a visible rise of the reward."""
    out = tmp_path / "out"
    result = run(
        [os.path.join(RECIPES, "gsm8k_gspo.py"), "--output_dir", str(out)],
        cwd=tmp_path,
        cache=str(tmp_path / "empty-cache"),
        timeout=1800,
    )
    assert "GSPO health:" not in result.stdout + result.stderr
    fractions = minibatch_clip_fractions(out)
    assert sorted(fractions) == [1, 2, 3, 4] and fractions[1] == 0.0
    assert all(0.0 < fractions[k] <= 0.25 for k in (2, 3, 4)), fractions
    with open(out / "trainer_state.json") as f:
        rewards = [entry["reward"] for entry in json.load(f)["log_history"] if "reward" in entry]
    fifth = len(rewards) // 5
    assert sum(rewards[-fifth:]) / fifth - sum(rewards[:fifth]) / fifth >= 0.15


def rewards_and_warnings(recipe, tmp_path):
    """Run `recipe` with no arguments but the output folder: (its logged batch rewards, whether a health warning
    fired)."""
    out = tmp_path / "out"
    result = run(
        [os.path.join(RECIPES, recipe), "--output_dir", str(out)],
        cwd=tmp_path,
        cache=str(tmp_path / "empty-cache"),  # the model shipped with the package, as a newcomer gets it
        timeout=1800,
    )
    with open(out / "trainer_state.json") as f:
        rewards = [entry["reward"] for entry in json.load(f)["log_history"] if "reward" in entry]
    return rewards, "GSPO health:" in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["math_gspo.py", "code_gspo.py"])
def test_math_and_code_offline_defaults_learn_with_no_health_warning(recipe, tmp_path):
    """`accelerate launch recipes/math_gspo.py` (or code_gspo.py) as shipped, graded by the recipe's real reward
    (math_accuracy's contract, code_execution in the sandbox): the batch reward of the last fifth of the run is
    visibly above the first fifth's, and no health warning fires."""
    rewards, warned = rewards_and_warnings(recipe, tmp_path)
    assert not warned
    fifth = len(rewards) // 5
    first, last = sum(rewards[:fifth]) / fifth, sum(rewards[-fifth:]) / fifth
    assert 0.1 <= first <= 0.6, f"the cold start should solve some but not most: {first:.2f}"
    assert last - first >= 0.15, (first, last)
