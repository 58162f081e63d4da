"""Grade-school word problems in GSM8K's format, generated offline from templates.

Each problem is a dict with GSM8K's two columns: `question` (a short word problem) and `answer` (the worked
reasoning, one calculation per line, then `#### N`). The numbers are small and each problem takes one or two
operations (addition, subtraction without borrowing, multiplication of one-digit factors); two thirds take two.
Six operation patterns, 15 templates, 16 names and 16 kinds of item keep the questions varied. A tiny
character-level model learns the format and the arithmetic in a few minutes of CPU (see
`gspo_recipes.builtin.coldstart`).

The prompt the model sees is `question + PROMPT_SUFFIX`; the completion it must write is `answer` followed by EOS:

    Mia has 12 apples and buys 7 more. How many apples does Mia have now?
    Answer: 12+7=19
    #### 19

or, with two operations:

    Tom has 5 eggs and buys 3 packs of 4. How many eggs now?
    Answer: 3*4=12
    12+5=17
    #### 17

Generation is deterministic: the same `(n, seed)` always gives the same problems.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

# The cue between question and answer. It ends in a space so the completion starts straight with the calculation.
PROMPT_SUFFIX = "\nAnswer: "

NAMES = [
    "Mia", "Tom", "Ana", "Ben", "Lily", "Sam", "Zoe", "Max",
    "Emma", "Leo", "Ivy", "Jack", "Nora", "Omar", "Ruby", "Eli",
]  # fmt: skip
ITEMS = [
    "apples", "pencils", "stickers", "marbles", "cookies", "books", "shells", "cards",
    "stamps", "eggs", "oranges", "coins", "toys", "flowers", "candies", "beads",
]  # fmt: skip


@dataclass(frozen=True)
class Operation:
    """An arithmetic pattern: how to draw its numbers, and the calculation lines that solve it."""

    draw: Callable[[random.Random], dict]  # returns the numbers {a, b[, c]} named in the templates
    templates: tuple[str, ...]
    weight: float = 1.0  # how often it is drawn, relative to the others


def _lines_and_result(kind: str, a: int, b: int, c: int | None) -> tuple[list[str], int]:
    """The worked calculation, one `x op y=z` line per operation, and the final result."""
    if kind == "add":
        return [f"{a}+{b}={a + b}"], a + b
    if kind == "sub":
        return [f"{a}-{b}={a - b}"], a - b
    if kind == "mul":
        return [f"{a}*{b}={a * b}"], a * b
    if kind == "mul_add":
        return [f"{a}*{b}={a * b}", f"{a * b}+{c}={a * b + c}"], a * b + c
    if kind == "add_sub":
        return [f"{a}+{b}={a + b}", f"{a + b}-{c}={a + b - c}"], a + b - c
    if kind == "mul_sub":
        return [f"{a}*{b}={a * b}", f"{a * b}-{c}={a * b - c}"], a * b - c
    raise ValueError(f"unknown operation {kind!r}")


# Number ranges: every sum and difference is a number up to 81 plus or minus a one-digit number, with no borrowing
# in subtractions, and every product is of two one-digit factors. A tiny character-level model learns these skills
# in a few hundred steps (subtraction with borrowing takes it several times longer).
def _no_borrow_subtrahend(rng: random.Random, x: int) -> int:
    """A one-digit number to take from `x` without borrowing: at most x's last digit (which must be >= 2)."""
    return rng.randint(1, x % 10)


def _draw_add(rng: random.Random) -> dict:
    return {"a": rng.randint(2, 20), "b": rng.randint(2, 9)}


def _draw_sub(rng: random.Random) -> dict:
    a = rng.choice([x for x in range(12, 40) if x % 10 >= 2])
    return {"a": a, "b": _no_borrow_subtrahend(rng, a)}


def _draw_mul(rng: random.Random) -> dict:
    return {"a": rng.randint(2, 9), "b": rng.randint(2, 9)}


def _draw_mul_add(rng: random.Random) -> dict:
    return {**_draw_mul(rng), "c": rng.randint(2, 9)}


def _draw_add_sub(rng: random.Random) -> dict:
    while (numbers := _draw_add(rng))["a"] + numbers["b"] < 12 or (numbers["a"] + numbers["b"]) % 10 < 2:
        pass  # redraw until the sum has a last digit to subtract from
    return {**numbers, "c": _no_borrow_subtrahend(rng, numbers["a"] + numbers["b"])}


def _draw_mul_sub(rng: random.Random) -> dict:
    while (numbers := _draw_mul(rng))["a"] * numbers["b"] < 12 or (numbers["a"] * numbers["b"]) % 10 < 2:
        pass  # redraw until the product has a last digit to subtract from
    return {**numbers, "c": _no_borrow_subtrahend(rng, numbers["a"] * numbers["b"])}


# Two-step problems are drawn twice as often as one-step ones (two thirds of all problems): they are where a model
# that knows each step can still fail, by stopping early or by carrying a wrong intermediate result.
OPERATIONS: dict[str, Operation] = {
    "add": Operation(
        draw=_draw_add,
        templates=(
            "{name} has {a} {items} and buys {b} more. How many {items} does {name} have now?",
            "A box has {a} {items} and a bag has {b}. How many {items} are there in all?",
            "{name} picked {a} {items}, then {b} more. How many {items} did {name} pick?",
        ),
    ),
    "sub": Operation(
        draw=_draw_sub,
        templates=(
            "{name} had {a} {items} and gave away {b}. How many {items} are left?",
            "A shop had {a} {items} and sold {b}. How many {items} are left?",
            "{name} needs {a} {items} and has {b}. How many more {items} does {name} need?",
        ),
    ),
    "mul": Operation(
        draw=_draw_mul,
        templates=(
            "{name} buys {a} bags of {b} {items}. How many {items} does {name} buy?",
            "Each box holds {b} {items}. How many {items} are in {a} boxes?",
            "{name} gets {b} {items} a day for {a} days. How many {items} is that?",
        ),
    ),
    "mul_add": Operation(
        draw=_draw_mul_add,
        templates=(
            "{name} has {c} {items} and buys {a} packs of {b}. How many {items} now?",
            "There are {a} rows of {b} {items} and {c} more. How many {items} in all?",
        ),
        weight=2.0,
    ),
    "add_sub": Operation(
        draw=_draw_add_sub,
        templates=(
            "{name} had {a} {items}, found {b} and lost {c}. How many {items} now?",
            "A jar has {a} {items}. {name} adds {b} and takes {c}. How many {items} are left?",
        ),
        weight=2.0,
    ),
    "mul_sub": Operation(
        draw=_draw_mul_sub,
        templates=(
            "{name} buys {a} boxes of {b} {items} and gives away {c}. How many {items} are left?",
            "{name} makes {a} piles of {b} {items} and loses {c}. How many {items} are left?",
        ),
        weight=2.0,
    ),
}


def make_gsm_problem(rng: random.Random) -> dict[str, str]:
    """One problem drawn with `rng`: {"question": ..., "answer": "<calculation lines>\\n#### N"}."""
    kind = rng.choices(list(OPERATIONS), weights=[op.weight for op in OPERATIONS.values()])[0]
    operation = OPERATIONS[kind]
    numbers = operation.draw(rng)
    name = rng.choice(NAMES)
    question = rng.choice(operation.templates).format(name=name, items=rng.choice(ITEMS), **numbers)
    lines, result = _lines_and_result(kind, numbers["a"], numbers["b"], numbers.get("c"))
    return {"question": question, "answer": "\n".join(lines) + f"\n#### {result}"}


def make_gsm_problems(n: int, seed: int = 0) -> list[dict[str, str]]:
    """`n` problems, the same ones for the same seed."""
    rng = random.Random(seed)
    return [make_gsm_problem(rng) for _ in range(n)]


def format_prompt(question: str) -> str:
    """The prompt text the model is trained on and the RL recipe samples from."""
    return question + PROMPT_SUFFIX


_FINAL_ANSWER = re.compile(r"####\s*(-?[\d,]*\.?\d+)")


def extract_final_answer(text: str) -> str | None:
    """The number after the first `####` (commas dropped), or None when there is none."""
    match = _FINAL_ANSWER.search(text)
    return match.group(1).replace(",", "") if match else None


def is_correct(completion: str, answer: str) -> bool:
    """Exact match of the `#### N` numbers in a sampled completion and in the gold answer."""
    predicted = extract_final_answer(completion)
    return predicted is not None and predicted == extract_final_answer(answer)


def make_gsm_dataset(n: int, seed: int = 0, with_prompt: bool = True):
    """A `datasets.Dataset` with `question` and `answer` columns, plus `prompt` (question + PROMPT_SUFFIX) for TRL."""
    from datasets import Dataset  # imported here so the generator itself needs only the standard library

    problems = make_gsm_problems(n, seed)
    if with_prompt:
        problems = [{"prompt": format_prompt(p["question"]), **p} for p in problems]
    return Dataset.from_list(problems)
