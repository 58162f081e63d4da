"""The synthetic GSM8K-format data and the cold-start training loop, on tiny configs (seconds, no network)."""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction

import pytest
import torch

import gspo_recipes.builtin.coldstart as coldstart
from gspo_recipes.builtin.coldstart import (
    COLDSTART_CONFIGS,
    ColdStartConfig,
    encode_for_training,
    load_or_build_coldstart_model,
    train_coldstart,
)
from gspo_recipes.builtin.data import synthetic_code, synthetic_math
from gspo_recipes.builtin.data.synthetic_gsm import (
    PROMPT_SUFFIX,
    extract_final_answer,
    format_prompt,
    is_correct,
    make_gsm_dataset,
    make_gsm_problems,
)
from gspo_recipes.builtin.tasks import TASKS
from gspo_recipes.builtin.tiny import build_model, build_tokenizer


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models train faster on one thread, and far faster than on two when other jobs share the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# A model small enough to train 20 steps in a second or two.
TINY = ColdStartConfig(
    hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, steps=20, batch_size=8,
    learning_rate=1e-2, warmup_steps=5,
)  # fmt: skip


def test_generator_is_deterministic_and_seeded():
    assert make_gsm_problems(50, seed=3) == make_gsm_problems(50, seed=3)
    assert make_gsm_problems(50, seed=3) != make_gsm_problems(50, seed=4)
    assert make_gsm_problems(10, seed=3) == make_gsm_problems(50, seed=3)[:10]


def test_answers_are_gsm8k_format_and_the_arithmetic_is_right():
    line = re.compile(r"^(\d+)([+\-*])(\d+)=(-?\d+)$")
    for problem in make_gsm_problems(500, seed=0):
        *work, final = problem["answer"].split("\n")
        assert final.startswith("#### ") and 1 <= len(work) <= 2
        previous = None
        for calculation in work:
            x, op, y, z = line.match(calculation).groups()
            assert int(z) == {"+": int(x) + int(y), "-": int(x) - int(y), "*": int(x) * int(y)}[op]
            assert int(z) >= 0
            if op == "-":  # subtractions never borrow: the tens stay, the last digit goes down
                assert int(y) <= int(x) % 10
            if previous is not None:  # the second line builds on the first
                assert previous in (x, y)
            previous = z
        assert extract_final_answer(problem["answer"]) == previous
        # the numbers the first line starts from are stated in the question
        first = line.match(work[0]).groups()
        assert re.search(rf"\b{first[0]}\b", problem["question"]) and re.search(rf"\b{first[2]}\b", problem["question"])


def test_problems_vary():
    problems = make_gsm_problems(300, seed=0)
    assert len({p["question"] for p in problems}) > 290
    assert {op for p in problems for op in "+-*" if op in p["answer"]} == {"+", "-", "*"}
    assert {p["answer"].count("\n") for p in problems} == {1, 2}  # one and two operations


def test_exact_match_check():
    assert extract_final_answer("3+4=7\n#### 7") == "7"
    assert extract_final_answer("#### 1,200") == "1200"
    assert extract_final_answer("3+4=7") is None
    assert is_correct("3+4=7\n#### 7", "3+4=7\n#### 7")
    assert is_correct("garbage then #### 7", "3+4=7\n#### 7")
    assert not is_correct("3+4=8\n#### 8", "3+4=7\n#### 7")
    assert not is_correct("3+4=7", "3+4=7\n#### 7")  # no final answer, no credit


def test_dataset_has_gsm8k_columns_and_a_prompt():
    dataset = make_gsm_dataset(8, seed=1)
    assert set(dataset.column_names) == {"prompt", "question", "answer"}
    assert dataset[0]["prompt"] == dataset[0]["question"] + PROMPT_SUFFIX == format_prompt(dataset[0]["question"])
    assert set(make_gsm_dataset(8, seed=1, with_prompt=False).column_names) == {"question", "answer"}


def test_shortcuts_cut_two_step_solutions_after_their_first_step():
    problems = make_gsm_problems(200, seed=0)
    assert coldstart.with_shortcuts(problems, 0.0, seed=1) == problems
    cut = coldstart.with_shortcuts(problems, 1.0, seed=1)
    for before, after in zip(problems, cut):
        assert after["question"] == before["question"]
        lines = before["answer"].split("\n")
        if len(lines) == 2:  # one step: never cut
            assert after == before
        else:
            assert after["answer"] == f"{lines[0]}\n#### {lines[0].split('=')[1]}"
    half = coldstart.with_shortcuts(problems, 0.5, seed=1)
    assert half == coldstart.with_shortcuts(problems, 0.5, seed=1)
    assert 0 < sum(a != b for a, b in zip(half, problems)) < sum(a != b for a, b in zip(cut, problems))


def test_training_labels_cover_the_answer_and_eos_only():
    tokenizer = build_tokenizer()
    problems = make_gsm_problems(4, seed=0)
    batch = encode_for_training(problems, tokenizer)
    for row, problem in enumerate(problems):
        labelled = batch["labels"][row][batch["labels"][row] != -100].tolist()
        assert labelled[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(labelled[:-1]) == problem["answer"]
        length = int(batch["attention_mask"][row].sum())
        prompt = tokenizer.decode(batch["input_ids"][row, : length - len(labelled)].tolist())
        assert prompt == format_prompt(problem["question"])  # no BOS: TRL tokenizes plain prompts the same way


def test_short_training_lowers_the_loss_and_is_deterministic():
    _, _, losses = train_coldstart(TINY, progress=False)
    _, _, again = train_coldstart(TINY, progress=False)
    assert losses == again
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5


def test_cache_is_built_once_and_round_trips(tmp_path, monkeypatch):
    model, tokenizer = load_or_build_coldstart_model(cache_dir=tmp_path, progress=False, config=TINY)
    (cached,) = [p for p in tmp_path.iterdir()]
    assert cached.name.startswith(f"coldstart-gsm8k-{coldstart.COLDSTART_VERSION}-")  # no staging folder left behind

    def no_training(*args, **kwargs):
        raise AssertionError("the cached model should have been loaded, not retrained")

    monkeypatch.setattr(coldstart, "train_coldstart", no_training)
    loaded, loaded_tokenizer = load_or_build_coldstart_model(cache_dir=tmp_path, progress=False, config=TINY)
    prompts = [format_prompt(p["question"]) for p in make_gsm_problems(3, seed=9)]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    assert loaded_tokenizer(prompts)["input_ids"] == tokenizer(prompts)["input_ids"]
    assert loaded_tokenizer.padding_side == "left" and loaded_tokenizer.chat_template == coldstart.CHAT_TEMPLATE
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits)


def test_rebuild_replaces_the_cache_and_leaves_nothing_else(tmp_path):
    load_or_build_coldstart_model(cache_dir=tmp_path, progress=False, config=TINY)
    (cached,) = list(tmp_path.iterdir())
    (cached / "marker").write_text("old copy")
    load_or_build_coldstart_model(cache_dir=tmp_path, rebuild=True, progress=False, config=TINY)
    assert list(tmp_path.iterdir()) == [cached] and not (cached / "marker").exists()


@pytest.mark.parametrize("task", list(COLDSTART_CONFIGS))
def test_each_model_is_the_documented_size(task):
    config = COLDSTART_CONFIGS[task]
    tokenizer = build_tokenizer()
    model = build_model(
        tokenizer, config.hidden_size, config.num_layers, config.num_heads, config.intermediate_size,
        config.max_position_embeddings,
    )  # fmt: skip
    assert sum(p.numel() for p in model.parameters()) == 998_528


def test_chat_prompts_render_as_the_trained_plain_prompt():
    _, tokenizer, _ = train_coldstart(dataclasses.replace(TINY, steps=1), progress=False)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How many?"}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == format_prompt("How many?")


def test_a_changed_config_gets_its_own_cache_folder():
    assert coldstart.coldstart_dir("/c", TINY) != coldstart.coldstart_dir("/c", ColdStartConfig())
    assert coldstart.coldstart_dir("/c") == coldstart.coldstart_dir("/c", ColdStartConfig())
    folders = {coldstart.coldstart_dir("/c", config).name for config in COLDSTART_CONFIGS.values()}
    assert {name.split("-")[1] for name in folders} == set(COLDSTART_CONFIGS)  # one folder per task, named after it


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_accuracy_check_runs_on_an_untrained_model(temperature):
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=16, num_layers=1)
    problems = make_gsm_problems(4, seed=0)
    assert coldstart.evaluate_accuracy(model, tokenizer, problems, temperature, max_new_tokens=4) == 0.0


@pytest.mark.parametrize("task", list(COLDSTART_CONFIGS))
def test_shipped_model_is_the_one_the_code_builds_and_loads_without_training(tmp_path, task):
    """Each copy in gspo_recipes/builtin/assets must match its task's COLDSTART_CONFIGS entry and COLDSTART_VERSION;
    after changing either, rebuild it: python scripts/build_coldstart_model.py --task TASK --out
    gspo_recipes/builtin/assets/$(python scripts/build_coldstart_model.py --task TASK --print-name)."""
    import json

    from gspo_recipes.builtin.coldstart import SHIPPED_DIR, coldstart_dir, load_or_build_coldstart_model

    config = COLDSTART_CONFIGS[task]
    expected = coldstart_dir(tmp_path, config).name
    assert (SHIPPED_DIR / expected / "model.safetensors").exists(), f"no shipped model named {expected}"
    recorded = json.loads((SHIPPED_DIR / expected / "coldstart.json").read_text())
    assert recorded["config"] == dataclasses.asdict(config) and recorded["version"] == coldstart.COLDSTART_VERSION
    model, tokenizer = load_or_build_coldstart_model(cache_dir=tmp_path, progress=False, config=config)
    assert model.config._name_or_path == str(SHIPPED_DIR / expected)
    assert tokenizer.chat_template == coldstart.chat_template(TASKS[task].prompt_suffix)
    assert not any(tmp_path.iterdir()), "nothing was trained into the cache"


def test_every_shipped_folder_is_a_model_the_code_builds():
    """No stale copy left behind after a rebuild (each is 3.9 MB in the wheel)."""
    from gspo_recipes.builtin.coldstart import SHIPPED_DIR, coldstart_dir

    expected = {coldstart_dir("/c", config).name for config in COLDSTART_CONFIGS.values()}
    assert {path.name for path in SHIPPED_DIR.iterdir() if path.is_dir()} == expected


# ----------------------------------------------------------------------------------------------------------------
# The MATH-style and MBPP-style tasks: each is made like the GSM8K one (one or two steps, a flaw that stops early)


def test_math_problems_are_right_and_boxed():
    number = r"(\d+|\\frac\{\d+\}\{\d+\})"
    step = re.compile(rf"^\$(?:x = )?{number} (\+|-|\\times) {number} = (?:\\boxed\{{{number}\}}|{number})\$$")

    def value(text):
        return Fraction(*map(int, re.findall(r"\d+", text))) if "frac" in text else Fraction(int(text))

    problems = synthetic_math.make_math_problems(300, seed=0)
    assert problems == synthetic_math.make_math_problems(300, seed=0) != synthetic_math.make_math_problems(300, 1)
    for problem in problems:
        *work, final = problem["solution"].split("\n")
        assert final.endswith(f"\\boxed{{{problem['answer']}}}$") and len(work) <= 1
        previous = None
        for line in [*work, final]:
            x, op, y, boxed, plain = step.match(line).groups()
            z = boxed or plain
            assert value(z) == {"+": value(x) + value(y), "-": value(x) - value(y), "\\times": value(x) * value(y)}[op]
            assert (boxed is not None) == (line == final)  # only the last step is boxed
            if previous is not None:  # the second step builds on the first
                assert previous in (x, y)
            previous = z
    assert len({p["problem"] for p in problems}) > 200
    assert {len(p["solution"].split("\n")) for p in problems} == {1, 2}
    assert any("frac" in p["answer"] for p in problems)  # answers in LaTeX, not only integers


def test_code_tasks_pass_their_reference_and_ask_for_the_named_function():
    tasks = synthetic_code.make_code_tasks(200, seed=0)
    assert tasks == synthetic_code.make_code_tasks(200, seed=0) != synthetic_code.make_code_tasks(200, seed=1)
    for task in tasks:
        namespace: dict = {}
        exec(task["code"], namespace)
        for test in task["test_list"]:
            exec(test, namespace)  # raises when the reference fails its own test
        assert f"{task['entry_point']}(x)" in task["text"] and task["code"].startswith(f"def {task['entry_point']}(")
    assert {task["shortcut"] is None for task in tasks} == {True, False}  # one-step and two-step tasks


@pytest.mark.parametrize("task", ["gsm8k", "math", "code"])
def test_the_early_stop_scores_0_and_the_finished_solution_1_under_the_recipe_reward(task):
    """The flaw the cold start learns is one the recipe's own reward sees: the whole point of its RL run."""
    spec = TASKS[task]
    problems = spec.make_problems(40, 3)
    stopped = [(problem, spec.stop_early(problem)) for problem in problems]
    two_step = [(problem, early) for problem, early in stopped if early is not None]
    assert 0 < len(two_step) < len(problems)  # one-step problems have no early stop
    assert spec.reward([spec.completion(p) for p in problems], problems) == [1.0] * len(problems)
    early = [spec.completion(early) for _, early in two_step]
    assert spec.reward(early, [problem for problem, _ in two_step]) == [0.0] * len(two_step)
    assert all(spec.prompt(early) == spec.prompt(problem) for problem, early in two_step)  # same question


@pytest.mark.parametrize("task", ["math", "code"])
def test_shortcuts_follow_the_task(task):
    problems = TASKS[task].make_problems(100, 0)
    cut = coldstart.with_shortcuts(problems, 1.0, seed=1, task=task)
    assert cut == [TASKS[task].stop_early(p) or p for p in problems] and cut != problems
    assert coldstart.with_shortcuts(problems, 0.0, seed=1, task=task) == problems


@pytest.mark.parametrize("task", ["math", "code"])
def test_a_short_training_run_lowers_the_loss_on_each_task(task):
    _, tokenizer, losses = train_coldstart(dataclasses.replace(TINY, task=task), progress=False)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    batch = encode_for_training(TASKS[task].make_problems(2, 0), tokenizer, task=task)
    labelled = batch["labels"][0][batch["labels"][0] != -100].tolist()
    assert tokenizer.decode(labelled[:-1]) == TASKS[task].completion(TASKS[task].make_problems(2, 0)[0])
