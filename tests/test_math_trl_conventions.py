"""Issue 38, items 6 and 7: the math rewards as a drop-in for TRL's reward conventions, and robust to any completion.

TRL's own reward tests (`tests/test_rewards.py` of huggingface/trl, 1.16) run through our rewards: each case agrees
or is a documented refusal (`REFUSALS`, with the reason). Then the conventions TRL's datasets rely on: the gold in
a `solution` column, unreadable golds skipped with a warning, `reasoning_delimiters`, and completion objects of
every shape a chat template produces.
"""

import threading
import time
from functools import partial

import pytest

from gspo_recipes.rewards import (
    format_reward,
    get_reward,
    gsm8k_accuracy,
    make_soft_overlong_punishment,
    math_accuracy,
    soft_overlong_punishment,
)
from gspo_recipes.rewards.math import gsm8k_accuracy_lenient, math_accuracy_lenient, verifier
from gspo_recipes.rewards.math.cost import take_past_bound
from gspo_recipes.rewards.math.golds import take_unreadable_golds

ACCURACY = {"math_accuracy": math_accuracy, "math_accuracy_lenient": math_accuracy_lenient}
# TRL's reasoning_accuracy_reward is its accuracy_reward read after the reasoning delimiters (default `</think>`).
REASONING = {name: partial(reward, reasoning_delimiters=["</think>"]) for name, reward in ACCURACY.items()}


def chat(text):
    return [{"content": text}]


# TestAccuracyReward: (completions, solutions, expected)
TRL_ACCURACY = [
    ([r"\boxed{\frac{63}{400}}", r"\boxed{\frac{63}{400}}"], [r"\frac{63}{400}", "63/400"], [1.0, 1.0]),
    ([r"\boxed{\frac{64}{400}}"], [r"\frac{63}{400}"], [0.0]),
    ([r"\boxed{3}"], ["6"], [0.0]),
    (["Answer is forty two.", r"Some other content. \boxed{43}."], ["Answer is forty two.", "Answer is forty three."],
     [None, None]),
]  # fmt: skip
# TestReasoningAccuracyReward
THINK_63 = r"<think> Reasoning content </think> \boxed{\frac{63}{400}}"
TRL_REASONING = [
    ([THINK_63, r"Reasoning content </think> \boxed{\frac{63}{400}}"], [r"\frac{63}{400}"] * 2, {}, [1.0, 1.0]),
    ([r"<REASONING_START> Reasoning content </REASONING_END> \boxed{\frac{63}{400}}"], [r"\frac{63}{400}"],
     {"reasoning_delimiters": ["</REASONING_END>"]}, [1.0]),
    ([THINK_63.replace("63", "64")], [r"\frac{63}{400}"], {}, [0.0]),
    ([r"<think> My answer is \boxed{42} </think> Some other text.",
      r"<think> The answer is \boxed{42} </think> Here's a wrong answer: \boxed{43}."],
     [r"\boxed{42}"] * 2, {}, [0.0, 0.0]),
    ([r"<think> Incomplete reasoning without closing tag",
      r"Correct answer \frac{63}{400} but completely missing reasoning content"],
     [r"\frac{63}{400}"] * 2, {}, [0.0, 0.0]),
    ([r"<think> Reasoning content </think> \boxed{42}"], ["forty two"], {}, [None]),
]  # fmt: skip
# What we refuse on purpose, with the reason (docs/rewards.md says the same).
REFUSALS = {
    "think_format_reward": "our `format` pays 0 for empty reasoning (`<think></think>answer`), which TRL pays 1.0 "
    "and a policy finds at once; every other case of TestThinkFormatReward agrees",
    "get_repetition_penalty_reward, get_cosine_scaled_reward": "not ours: use TRL's by import path "
    "(`trl.rewards:get_cosine_scaled_reward`); the registry resolves any `module:function`",
}


@pytest.mark.parametrize("name", ACCURACY)
def test_trl_accuracy_reward_cases(name):
    for completions, solutions, expected in TRL_ACCURACY:
        assert ACCURACY[name]([chat(text) for text in completions], solutions) == expected, completions


@pytest.mark.parametrize("name", REASONING)
def test_trl_reasoning_accuracy_reward_cases(name):
    for completions, solutions, options, expected in TRL_REASONING:
        reward = partial(REASONING[name], **options)
        assert reward([chat(text) for text in completions], solutions) == expected, completions


def test_trl_accuracy_in_a_worker_thread():
    results = []
    thread = threading.Thread(
        target=lambda: results.extend(math_accuracy([chat(r"\boxed{\frac{1}{3}}")], [r"\frac{1}{3}"]))
    )
    thread.start()
    thread.join()
    assert results == [1.0]


def test_trl_soft_overlong_punishment_cases():
    reward = make_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)
    assert reward(completion_ids=[[1] * 50]) == [0]
    assert reward([[1] * 110]) == [-1]  # positionally, as TRL's tests call theirs
    assert round(abs(reward([[1] * 90])[0] - -0.5), 4) == 0
    assert soft_overlong_punishment([[1] * 50]) == [0.0]
    with pytest.warns(RuntimeWarning, match="needs completion_ids"):  # without ids it cannot judge, and says so
        assert soft_overlong_punishment(["a text, no ids"]) == [None]


def test_trl_think_format_cases_agree_but_for_empty_reasoning():
    valid = ["<think>This is my reasoning.</think>This is my answer.", "<think>\nThis is\nmy reasoning.\n</think>\nok",
             "<think>\nThis is <some tag> my reasoning.</think>\nThis is my answer."]  # fmt: skip
    invalid = ["<think>\nThis is my reasoning.\nThis is my answer.", "This is my reasoning. This is my answer.",
               "This<think>is my reasoning.</think>\nThis is my answer.",
               "<think>This is<think>my reasoning.</think></think>This is my answer.",
               "<think>This is</think>\nmy\n<think>reasoning.</think>\nThis is my answer."]  # fmt: skip
    assert format_reward([chat(text) for text in valid + invalid]) == [1.0] * len(valid) + [0.0] * len(invalid)
    assert format_reward([chat("<think></think>\nThis is my answer.")]) == [0.0]  # REFUSALS["think_format_reward"]


@pytest.mark.parametrize("name", ["gsm8k_accuracy", "gsm8k_accuracy_lenient", "math_accuracy", "math_accuracy_lenient"])
def test_every_reward_reads_the_solution_column_when_answer_is_absent(name):
    reward = get_reward(name)
    golds = ["#### 72", "72", "The total is \\boxed{72}."]
    assert reward(["The answer is \\boxed{72}."] * 3, solution=golds) == [1.0] * 3
    assert reward(["The answer is \\boxed{71}."] * 3, solution=golds) == [0.0] * 3
    # Beside a format reward, TRL passes every column to every reward: the accuracy signal is still there.
    assert reward(["\\boxed{72}"], solution=["72"], prompts=["How many?"], completion_ids=[[1, 2]]) == [1.0]


@pytest.mark.parametrize("name", ["gsm8k_accuracy", "gsm8k_accuracy_lenient", "math_accuracy", "math_accuracy_lenient"])
def test_a_gold_that_says_no_math_is_skipped_with_a_warning(name, caplog):
    take_unreadable_golds()
    reward = get_reward(name)
    golds = ["Answer is forty three.", "???", "forty two", "43"]
    assert reward(["\\boxed{43}", "\\boxed{???}", "\\boxed{42}", "\\boxed{43}"], solution=golds) == [None] * 3 + [1.0]
    rows, examples = take_unreadable_golds()
    assert rows == 3 and "Answer is forty three." in examples
    assert "cannot be judged" in caplog.text


def test_the_trainer_records_unreadable_golds_in_its_diagnostics(monkeypatch):
    from trl import GRPOTrainer

    from gspo_recipes.runfiles.run_warnings import SECTION
    from gspo_recipes.trainer.gspo_trainer import GOLD_WARNING, GSPOTrainer

    take_unreadable_golds()
    # TRL's own scoring calls the rewards; here one call stands for it, and the hook after it is the trainer's.
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, *args: math_accuracy(["1"], solution=["??"]))
    trainer = GSPOTrainer.__new__(GSPOTrainer)
    trainer.group_health = type("Health", (), {"capture": lambda self, rewards: None})()
    assert trainer._calculate_rewards(None, None, None, None) == [None]
    (warning,) = trainer.gspo_diagnostics_sections[SECTION]
    assert warning["kind"] == GOLD_WARNING and "1 reward rows" in warning["message"] and "'??'" in warning["message"]
    trainer._calculate_rewards(None, None, None, None)
    assert len(trainer.gspo_diagnostics_sections[SECTION]) == 2  # counted again each batch it happens


def test_the_trainer_records_answers_past_the_cost_bound_in_its_diagnostics(monkeypatch):
    from trl import GRPOTrainer

    from gspo_recipes.runfiles.run_warnings import SECTION
    from gspo_recipes.trainer.gspo_trainer import COST_WARNING, GSPOTrainer

    take_past_bound()
    monkeypatch.setattr(
        GRPOTrainer,
        "_calculate_rewards",
        lambda self, *args: math_accuracy(["\\boxed{(999^{999})^{999}}"], answer=["3"]),
    )
    trainer = GSPOTrainer.__new__(GSPOTrainer)
    trainer.group_health = type("Health", (), {"capture": lambda self, rewards: None})()
    assert trainer._calculate_rewards(None, None, None, None) == [0.0]
    (warning,) = trainer.gspo_diagnostics_sections[SECTION]
    assert warning["kind"] == COST_WARNING and "1 math answers" in warning["message"]


def test_reasoning_delimiters_are_honoured_or_refused():
    text = "<R>scratch: \\boxed{1}</R> so \\boxed{2}"
    assert math_accuracy([text], solution=["2"], reasoning_delimiters=["</R>"]) == [1.0]
    assert math_accuracy([text], solution=["1"], reasoning_delimiters=["</R>"]) == [0.0]
    assert gsm8k_accuracy([text], answer=["#### 2"], reasoning_delimiters="</R>") == [1.0]
    assert gsm8k_accuracy_lenient([text], answer=["#### 1"], reasoning_delimiters=["</R>"]) == [0.0]
    for bad in ([], [""], [3], 3):
        with pytest.raises(ValueError, match="reasoning_delimiters"):
            math_accuracy([text], solution=["2"], reasoning_delimiters=bad)


ODD_COMPLETIONS = [
    None, 18, 1.5, b"\\boxed{18}", [], {}, [None], object(),
    [{"role": "assistant", "content": None}],
    [{"role": "assistant", "content": [{"type": "text", "text": None}]}],
    [{"role": "assistant", "content": [{"type": "text"}]}],
    [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}],
    [{"role": "tool", "content": "\\boxed{18}"}],
]  # fmt: skip
READABLE = [
    "\\boxed{18}",
    {"content": "\\boxed{18}"},
    [{"role": "assistant", "content": [{"type": "image", "image": object()}, {"type": "text", "text": "\\boxed{18}"}]}],
    [{"role": "assistant", "content": [{"type": "text", "text": None}, {"type": "text", "text": "\\boxed{18}"}]}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "\\boxed{18}"}],
]


@pytest.mark.parametrize(
    "name", ["gsm8k_accuracy", "math_accuracy", "gsm8k_accuracy_lenient", "math_accuracy_lenient", "format"]
)
def test_any_completion_object_scores_without_none_or_exception(name):
    reward = get_reward(name)
    completions = ODD_COMPLETIONS + READABLE
    scores = reward(completions, solution=["18"] * len(completions))
    expected = 0.0 if name == "format" else 1.0
    assert scores == [0.0] * len(ODD_COMPLETIONS) + [expected] * len(READABLE)


BIG_NUMBERS = [
    "\\binom{1234567}{123456}",
    "\\dbinom{9999999}{4999999}",
    "{1234567 \\choose 3}",
    "2^{99 \\cdot 99 \\cdot 99}",
    "\\Gamma(12345678)",
    "\\Gamma\\left(99999\\right)",
    "(12345)!",
    "9^{9^{9^{9}}}",
]


@pytest.mark.parametrize("name", ["math_accuracy", "math_accuracy_lenient"])
def test_big_number_work_is_refused_before_it_starts(name):
    start = time.perf_counter()
    scores = get_reward(name)([f"\\boxed{{{text}}}" for text in BIG_NUMBERS], answer=["\\frac{1}{2}"] * 8)
    assert scores == [0.0] * 8
    # Refused in this process, not cut at the workers' deadline (each of these alone takes sympy seconds or more).
    assert time.perf_counter() - start < 2.0
    # The gold written the same way as the answer needs no evaluation at all.
    assert math_accuracy(["\\boxed{\\binom{1234567}{123456}}"], answer=["\\binom{1234567}{123456}"]) == [1.0]


DEGENERATE = ["(999^{999})^{999}", "(x+y+z+k)^{999}", "(10^{90+k})!", "(10^{91+k})!", "\\prod_{k=1}^{10^6} k",
              "2^{2^{2^{2^{2}}}}", "(a+b)^{100}", "\\binom{10^{7}}{5 \\cdot 10^{6}}"]  # fmt: skip


@pytest.mark.parametrize("reward", [math_accuracy, gsm8k_accuracy])
def test_past_the_cost_bound_scores_zero_before_any_symbolic_work_and_is_counted(reward, monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("an answer past the cost bound reached math-verify")

    take_past_bound()
    monkeypatch.setattr(verifier, "get_pool", no_pool)
    completions = [f"\\boxed{{{text}}}" for text in DEGENERATE]
    assert reward(completions, answer=["#### 18"] * 8) == [0.0] * 8
    items, examples = take_past_bound()
    assert items == 8 and "(999^{999})^{999}" in examples
