"""Math, format and length rewards, and the registry: what a user of `reward_funcs: [...]` would notice."""

import pickle
import threading
import time

import pytest

from gspo_recipes import rewards
from gspo_recipes.rewards import (
    format_reward,
    format_strict_reward,
    get_reward,
    gsm8k_accuracy,
    make_soft_overlong_punishment,
    math_accuracy,
    soft_overlong_punishment,
)
from gspo_recipes.rewards.math import verifier as math_rewards

GSM8K_GOLD = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 18"


# ----------------------------------------------------------------------------------------------------------------
# gsm8k_accuracy


@pytest.mark.parametrize(
    "completion",
    [
        "So she has \\boxed{18} clips.",
        "48 - 30 = 18\n#### 18",
        "The answer is 18.",
        "Final answer: 18",
        "**Answer:** 18",
        "The answer is $18.",
        "The answer is 18.00",
        "The answer is 18%",
        "The final answer is: **18**",
        "So the answer is \\boxed{\\$18}",
    ],
)
def test_gsm8k_reads_the_answer_in_every_common_format(completion):
    assert gsm8k_accuracy([completion], answer=[GSM8K_GOLD]) == [1.0]


def test_gsm8k_thousands_separators_and_negative_numbers():
    assert gsm8k_accuracy(["The answer is 1,000"], answer=["#### 1000"]) == [1.0]
    assert gsm8k_accuracy(["Answer: -5"], answer=["#### -5"]) == [1.0]
    assert gsm8k_accuracy(["Answer: 5"], answer=["#### -5"]) == [0.0]


def test_gsm8k_marked_answer_beats_later_numbers():
    # The box is the answer even though a stray number follows it; an answer line must end the completion.
    assert gsm8k_accuracy(["\\boxed{18}. (I checked it 2 times.)"], answer=[GSM8K_GOLD]) == [1.0]
    assert gsm8k_accuracy(["The answer is 18. (I checked it 2 times.)"], answer=[GSM8K_GOLD]) == [0.0]
    # The last marker is the answer; the last number of a text without a marker pays nothing (issue 44).
    retracted, uncommitted = "The answer is 17, no wait: \\boxed{18}", "First 3 + 5 = 8, then 8 + 10 = 18"
    assert gsm8k_accuracy([retracted, uncommitted], answer=[GSM8K_GOLD] * 2) == [1.0, 0.0]
    assert gsm8k_accuracy([retracted, uncommitted], answer=[GSM8K_GOLD] * 2, contract=False) == [1.0, 1.0]


def test_gsm8k_wrong_missing_and_unjudgeable():
    scores = gsm8k_accuracy(
        ["The answer is 17", "I don't know", "The answer is 18"],
        answer=[GSM8K_GOLD, GSM8K_GOLD, "no number here"],
    )
    assert scores == [0.0, 0.0, None]


def test_gsm8k_plain_numbers_never_reach_sympy(monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("plain numbers must be judged without math-verify")

    monkeypatch.setattr(math_rewards, "get_pool", no_pool)
    completions = ["The answer is 18", "#### 1,000", "Answer: 18.00", "I think 7"] * 50
    assert gsm8k_accuracy(completions, answer=[GSM8K_GOLD] * 200) == [1.0, 0.0, 1.0, 0.0] * 50


def test_gsm8k_latex_answer_goes_to_math_verify():
    # An expression for the number is more complex than the gold (issue 44); LaTeX dress around it is not.
    completions = ["\\boxed{\\frac{36}{2}}", "\\boxed{\\frac{1}{2}}", "\\boxed{\\mathbf{18}}"]
    assert gsm8k_accuracy(completions, answer=[GSM8K_GOLD] * 3) == [0.0, 0.0, 1.0]


def test_gsm8k_accepts_chat_message_completions():
    completions = [[{"role": "assistant", "content": "The answer is 18"}]]
    assert gsm8k_accuracy(completions, answer=[GSM8K_GOLD]) == [1.0]


# ----------------------------------------------------------------------------------------------------------------
# math_accuracy


def test_math_gold_from_a_worked_solution_column():
    solution = "We have $x = \\frac{2}{4}$, so the answer is $\\boxed{\\dfrac{1}{2}}$."
    completions = ["So $x = \\boxed{0.5}$", "\\boxed{\\frac{2}{4}}", "\\boxed{\\frac{1}{3}}", "no idea"]
    # 2/4 equals the gold, but unreduced it is more complex than it (issue 44's form rule)
    assert math_accuracy(completions, solution=[solution] * 4) == [1.0, 0.0, 0.0, 0.0]


def test_math_gold_from_a_bare_answer_column():
    completions = ["\\boxed{3\\sqrt{2}}", "The answer is $\\sqrt{2}\\cdot 3$", "\\boxed{(1, 2)}", "\\boxed{4}"]
    answers = ["3\\sqrt{2}", "3\\sqrt{2}", "(1,2)", "4"]
    assert math_accuracy(completions, answer=answers) == [1.0, 1.0, 1.0, 1.0]
    assert math_accuracy(["The answer is $\\sqrt{18}$"], answer=["3\\sqrt{2}"]) == [0.0]  # unsimplified


def test_math_boxed_answer_wins_over_other_expressions():
    completion = "Suppose $x = 7$. Then $y = 12$ and finally $\\boxed{5}$. Check: $3 + 4 = 7$."
    assert math_accuracy([completion, completion], answer=["5", "7"]) == [1.0, 0.0]


def test_math_verify_gets_the_gold_first():
    # math-verify is asymmetric: an inequality gold accepts an interval answer, not the reverse.
    assert math_accuracy(["\\boxed{(1, 2)}"], answer=["1 < x < 2"]) == [1.0]
    assert math_accuracy(["\\boxed{1 < x < 2}"], answer=["(1, 2)"]) == [0.0]


def test_math_unparseable_gold_is_none_not_a_reward():
    assert math_accuracy(["\\boxed{1}", "\\boxed{1}"], answer=["\\", None]) == [None, None]


def test_math_gsm8k_style_answer_column_is_read_after_the_hashes():
    assert math_accuracy(["\\boxed{18}"], answer=[GSM8K_GOLD]) == [1.0]


def test_math_pathological_answers_score_zero_and_the_batch_returns_on_time():
    hang = "the answer is \\boxed{9^{9^{9^{9}}}}"  # math-verify issue 65: hangs sympy in C
    completions = [hang, "\\boxed{\\frac{1}{2}}", hang, "\\boxed{0.5}", "\\boxed{\\frac{1}{3}}", "\\boxed{1/2}"]
    math_accuracy(["\\boxed{\\frac{1}{2}}"], answer=["0.5"])  # warm the pool: start-up is not what is measured
    start = time.monotonic()
    scores = math_accuracy(completions, answer=["\\frac{1}{2}"] * 6, timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert scores == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert elapsed < 8.0, elapsed  # two 1 s overruns on two workers, then replacement workers start
    assert gsm8k_accuracy([hang, "The answer is 18"], answer=[GSM8K_GOLD] * 2, timeout_s=1.0) == [0.0, 1.0]


def test_math_rewards_work_from_a_thread_that_is_not_the_main_thread():
    results = {}

    def score():
        results["math"] = math_accuracy(["\\boxed{\\frac{1}{2}}", "\\boxed{2}"], answer=["0.5", "3"])
        results["gsm8k"] = gsm8k_accuracy(["\\boxed{\\mathbf{18}}"], answer=[GSM8K_GOLD])

    thread = threading.Thread(target=score)
    thread.start()
    thread.join(60)
    assert results == {"math": [1.0, 0.0], "gsm8k": [1.0]}


# ----------------------------------------------------------------------------------------------------------------
# format and soft_overlong_punishment


@pytest.mark.parametrize(
    "completion, lenient, strict",
    [
        ("<think>\nadd them\n</think>\nThe answer is 4.", 1.0, 1.0),
        ("add them\n</think>\nThe answer is 4.", 1.0, 0.0),  # template pre-filled <think>
        ("<think>add them</think>", 0.0, 0.0),  # no answer
        ("<think></think>4", 0.0, 0.0),  # no reasoning
        ("The answer is 4.", 0.0, 0.0),
        ("<think>a</think>4<think>b</think>4", 0.0, 0.0),
        ("Sure. <think>a</think>4", 0.0, 0.0),
    ],
)
def test_format_rewards(completion, lenient, strict):
    assert format_reward([completion]) == [lenient]
    assert format_strict_reward([completion]) == [strict]


def test_soft_overlong_punishment_follows_dapo():
    reward = make_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)
    ids = [[0] * 80, [0] * 90, [0] * 100, [0] * 101]
    assert reward(["x"] * 4, completion_ids=ids) == [0.0, -0.5, -1.0, -1.0]
    assert reward.__name__ == "soft_overlong_punishment"
    assert soft_overlong_punishment(["x"], completion_ids=[[0] * 512]) == [-1.0]  # the 512/128 default
    with pytest.warns(RuntimeWarning):
        assert soft_overlong_punishment(["x"]) == [None]


# ----------------------------------------------------------------------------------------------------------------
# registry


def test_registry_names_paths_and_options():
    assert get_reward("gsm8k_accuracy") is gsm8k_accuracy
    assert get_reward("format") is format_reward
    assert get_reward("gspo_recipes.rewards.math:math_accuracy") is math_accuracy
    configured = get_reward({"soft_overlong_punishment": {"max_completion_len": 10, "soft_punish_cache": 5}})
    assert configured(["x"], completion_ids=[[0] * 8]) == [-0.6]
    with pytest.raises(KeyError):
        get_reward("no_such_reward")


@pytest.mark.parametrize("name", rewards.available_rewards())
def test_every_registered_reward_keeps_a_name_and_pickles(name):
    reward = get_reward(name)
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == reward.__name__ and reward.__name__ not in ("<lambda>", "__call__")
    assert reward.__doc__


def test_configured_rewards_pickle_and_keep_their_name():
    reward = get_reward("math_accuracy", timeout_s=2.0)
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == "math_accuracy"
    assert clone(["\\boxed{2}"], answer=["2"]) == [1.0]


def test_math_identical_boxes_are_judged_once_but_unreadable_boxes_on_their_own_text():
    # Under the final-answer contract an unreadable box is an unreadable answer (0.0); the lenient reading looks
    # past it, so there two unreadable boxes must not share a verdict.
    completions = [
        "So $x = \\frac{1}{2}$. \\boxed{???}",  # math-verify reads past an unreadable box...
        "So $x = \\frac{1}{3}$. \\boxed{???}",  # ...so these two must not share a verdict
        "First \\boxed{\\frac{1}{2}}",
        "Second \\boxed{\\frac{1}{2}}",
    ]
    assert math_accuracy(completions, answer=["1/2"] * 4, contract=False) == [1.0, 0.0, 1.0, 1.0]
    assert math_accuracy(completions, answer=["1/2"] * 4) == [0.0, 0.0, 1.0, 1.0]
