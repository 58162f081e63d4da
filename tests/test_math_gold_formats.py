"""Issues 38 and 44: every gold of GSM8K's test split and MATH-500 is credited in every answer marker (boxes, `\\fbox`,
`<answer>` tags, a `####` line, answer lines in several labels and languages; the markers that may have prose after
them also followed by a check paragraph and by a "Wait, I should double-check" paragraph), and MATH-500's worked
solutions as written. Prose after the last marker changes nothing: a correction to a wrong value written in prose
keeps the right answer's 1, and a wrong value in a later marker scores 0.

Runs on the shared data files (`../shared/data`, see tests/gold_formats.py). Every row is the slow tier (about a
minute on 2 loaded cores, the MATH-500 corrections most of it, since each wrong value goes to math-verify); the fast
tier takes every tenth row of each file.
"""

import pytest
from gold_formats import (
    CHECK,
    CHECKABLE,
    FORMATS,
    GSM8K_FILE,
    INSTRUCTION,
    MATH500_FILE,
    WAIT,
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
PROSE_CORRECTIONS = [  # prose after the last marker: never read (docs/rewards.md, what the rule gives up)
    "\n\nEDIT: the answer is {value}, not this.",
    "\n\nWait, actually it should be {value}. Let me redo it.",
    "\n\nNo wait, {value}. Hmm, I am not sure.",
]
LATER_MARKERS = [  # a later marker is the answer
    "\n\nAnswer: {value}",
    "\n\n**Final answer:** {value}",
    "\n\n<answer>{value}</answer>",
    "\n\n\\boxed{{{value}}}",
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
        for tail in ("", CHECK, WAIT) if name in CHECKABLE else ("",):
            completions = []
            for row in gsm8k:
                reasoning, number = gsm8k_parts(row)
                completions.append(write(reasoning, number) + tail.format(line=check_line(reasoning)))
            failures[name + tail[:12]] = _rejected(gsm8k_accuracy(completions, answer=golds, prompts=questions))
    assert {name: rejected for name, rejected in failures.items() if rejected} == {}


def test_after_a_gsm8k_gold_prose_changes_nothing_and_a_later_marker_decides(gsm8k):
    golds = [row["answer"] for row in gsm8k]
    numbers = [int(gsm8k_parts(row)[1].replace(",", "")) for row in gsm8k]
    failures = {}
    for correction in PROSE_CORRECTIONS:
        wrong = [gold + correction.format(value=number + 1) for gold, number in zip(golds, numbers)]
        failures[f"prose {correction!r}"] = _rejected(gsm8k_accuracy(wrong, answer=golds))
    for marker in LATER_MARKERS:
        wrong = [gold + marker.format(value=number + 1) for gold, number in zip(golds, numbers)]
        failures[f"wrong {marker!r}"] = _rejected(gsm8k_accuracy(wrong, answer=golds), expected=0.0)
        retracted = [f"#### {number + 1}" + marker.format(value=number) for number in numbers]
        failures[f"right {marker!r}"] = _rejected(gsm8k_accuracy(retracted, answer=golds))
    assert {name: rows for name, rows in failures.items() if rows} == {}


def test_every_math500_worked_solution_and_gold_is_credited_in_every_format(math500):
    problems = [row["problem"].replace(INSTRUCTION, "") for row in math500]
    solutions, answers = [row["solution"] for row in math500], [row["answer"] for row in math500]
    failures = {"worked solution": _rejected(math_accuracy(solutions, solution=solutions, prompts=problems))}
    for name, write in FORMATS.items():
        for tail in ("", CHECK, WAIT) if name in CHECKABLE else ("",):
            completions = []
            for row in math500:
                reasoning = math_reasoning(row["solution"])
                completions.append(write(reasoning, row["answer"]) + tail.format(line=check_line(reasoning)))
            failures[name + tail[:12]] = _rejected(math_accuracy(completions, answer=answers, prompts=problems))
    assert {name: rejected for name, rejected in failures.items() if rejected} == {}


def test_after_a_math500_solution_prose_changes_nothing_and_a_later_marker_decides(math500):
    solutions, answers = [row["solution"] for row in math500], [row["answer"] for row in math500]
    wrong_value = "-98765"  # no MATH-500 answer, and a number: decided in-process where the gold is one too
    failures = {}
    for correction in PROSE_CORRECTIONS:
        after = [solution + correction.format(value=f"${wrong_value}$") for solution in solutions]
        failures[f"prose {correction!r}"] = _rejected(math_accuracy(after, solution=solutions))
    for marker in LATER_MARKERS:
        wrong = [solution + marker.format(value=wrong_value) for solution in solutions]
        failures[f"wrong {marker!r}"] = _rejected(math_accuracy(wrong, answer=answers), expected=0.0)
        right = [f"\\boxed{{{wrong_value}}}" + marker.format(value=answer) for answer in answers]
        failures[f"right {marker!r}"] = _rejected(math_accuracy(right, answer=answers))
    assert {name: rows for name, rows in failures.items() if rows} == {}
