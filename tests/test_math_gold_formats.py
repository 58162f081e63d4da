"""Issue 38, item 8: every gold of GSM8K's test split and MATH-500 is credited in every answer format the graders
support (each with and without a check paragraph after the answer), and a correction to a wrong value appended to
any of them scores 0 on every row, while a correction to the right value after a wrong one scores 1.

Runs on the shared data files (`../shared/data`, see tests/gold_formats.py). Every row is the slow tier (about a
minute on 2 loaded cores, the MATH-500 corrections most of it, since each wrong value goes to math-verify); the fast
tier takes every tenth row of each file.
"""

import pytest
from gold_formats import (
    CHECK,
    FORMATS,
    GSM8K_FILE,
    INSTRUCTION,
    MATH500_FILE,
    check_line,
    gsm8k_parts,
    math_reasoning,
    rows,
)

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy

pytestmark = pytest.mark.skipif(
    not (GSM8K_FILE.exists() and MATH500_FILE.exists()),
    reason=f"the shared data files are not at {GSM8K_FILE.parent} (set GSPO_SHARED_DATA)",
)
CORRECTIONS = [  # how a completion withdraws its answer: each must be read as the new commitment
    "\n\nEDIT: the answer is {value}.",
    "\n\nEDIT: {value}",
    "\n\nCorrection: {value}.",
    "\n\nActually, it is {value}.",
    "\n\nWait, the answer should be {value}.",
    "\n\nNo wait, {value}.",
    "\n\n**Answer:** {value}",
    "\n\n<answer>{value}</answer>",
]


EVERY_ROW = pytest.param(1, marks=pytest.mark.slow, id="every-row")
SAMPLE = pytest.param(10, id="every-tenth-row")


@pytest.fixture(scope="module", params=[SAMPLE, EVERY_ROW])
def step(request):
    return request.param


@pytest.fixture(scope="module")
def gsm8k(step):
    return rows(GSM8K_FILE)[::step]


@pytest.fixture(scope="module")
def math500(step):
    return rows(MATH500_FILE)[::step]


def _rejected(scores, expected=1.0):
    return [index for index, score in enumerate(scores) if score != expected]


def test_every_gsm8k_gold_is_credited_in_every_format(gsm8k):
    golds, questions = [row["answer"] for row in gsm8k], [row["question"] for row in gsm8k]
    failures = {"as written": _rejected(gsm8k_accuracy(golds, answer=golds, prompts=questions))}
    for name, write in FORMATS.items():
        for check in (False, True):
            completions = []
            for row in gsm8k:
                reasoning, number = gsm8k_parts(row)
                completions.append(write(reasoning, number) + (CHECK.format(line=check_line(reasoning)) * check))
            failures[name + " + check" * check] = _rejected(
                gsm8k_accuracy(completions, answer=golds, prompts=questions)
            )
    assert {name: rejected for name, rejected in failures.items() if rejected} == {}


def test_a_correction_after_a_gsm8k_gold_is_read_both_ways(gsm8k):
    golds = [row["answer"] for row in gsm8k]
    numbers = [int(gsm8k_parts(row)[1].replace(",", "")) for row in gsm8k]
    failures = {}
    for correction in CORRECTIONS:
        wrong = [gold + correction.format(value=number + 1) for gold, number in zip(golds, numbers)]
        failures[f"wrong {correction!r}"] = _rejected(gsm8k_accuracy(wrong, answer=golds), expected=0.0)
        retracted = [f"#### {number + 1}" + correction.format(value=number) for number in numbers]
        failures[f"right {correction!r}"] = _rejected(gsm8k_accuracy(retracted, answer=golds))
    assert {name: rows for name, rows in failures.items() if rows} == {}


def test_every_math500_worked_solution_and_gold_is_credited_in_every_format(math500):
    problems = [row["problem"].replace(INSTRUCTION, "") for row in math500]
    solutions, answers = [row["solution"] for row in math500], [row["answer"] for row in math500]
    failures = {"worked solution": _rejected(math_accuracy(solutions, solution=solutions, prompts=problems))}
    for name, write in FORMATS.items():
        for check in (False, True):
            completions = []
            for row in math500:
                reasoning = math_reasoning(row["solution"])
                completions.append(write(reasoning, row["answer"]) + CHECK.format(line=check_line(reasoning)) * check)
            failures[name + " + check" * check] = _rejected(
                math_accuracy(completions, answer=answers, prompts=problems)
            )
    assert {name: rejected for name, rejected in failures.items() if rejected} == {}


def test_a_correction_after_a_math500_solution_is_read_both_ways(math500):
    solutions, answers = [row["solution"] for row in math500], [row["answer"] for row in math500]
    wrong_value = "-98765"  # no MATH-500 answer, and a number: decided in-process where the gold is one too
    failures = {}
    for correction in CORRECTIONS[:3] + CORRECTIONS[-2:]:
        wrong = [solution + correction.format(value=f"${wrong_value}$") for solution in solutions]
        failures[f"wrong {correction!r}"] = _rejected(math_accuracy(wrong, answer=answers), expected=0.0)
        right = [f"\\boxed{{{wrong_value}}}" + correction.format(value=f"${answer}$") for answer in answers]
        failures[f"right {correction!r}"] = _rejected(math_accuracy(right, answer=answers))
    assert {name: rows for name, rows in failures.items() if rows} == {}
