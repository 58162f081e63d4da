"""Grade-school word problems in GSM8K's format, generated offline from templates.

Each problem is a dict with GSM8K's two columns: `question` (a short word problem) and `answer` (the worked
reasoning, one calculation per line, then `#### N`). The numbers are small and each problem takes one or two
operations (addition, subtraction, multiplication by small factors), so a tiny character-level model can learn the
format quickly but still gets a fair share of the arithmetic wrong: that gap is what the RL recipe closes.

The prompt the model sees is `question + PROMPT_SUFFIX`; the completion it must write is `answer` followed by EOS:

    Mia has 12 apples. She buys 7 more. How many apples does Mia have now?
    Answer: 12+7=19
    #### 19

Generation is deterministic: the same `(n, seed)` always gives the same problems.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

# The cue between question and answer. It ends in a space so the completion starts straight with the calculation.
PROMPT_SUFFIX = "\nAnswer: "

NAMES = [
    ("Mia", "She"), ("Tom", "He"), ("Ana", "She"), ("Ben", "He"), ("Lily", "She"), ("Sam", "He"),
    ("Zoe", "She"), ("Max", "He"), ("Emma", "She"), ("Leo", "He"), ("Ivy", "She"), ("Jack", "He"),
    ("Nora", "She"), ("Omar", "He"), ("Ruby", "She"), ("Eli", "He"),
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


def _draw_sub(rng: random.Random) -> dict:
    a = rng.randint(10, 40)
    return {"a": a, "b": rng.randint(2, a - 1)}


def _draw_add_sub(rng: random.Random) -> dict:
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    return {"a": a, "b": b, "c": rng.randint(1, a + b - 1)}


def _draw_mul_sub(rng: random.Random) -> dict:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return {"a": a, "b": b, "c": rng.randint(1, a * b - 1)}


OPERATIONS: dict[str, Operation] = {
    "add": Operation(
        draw=lambda rng: {"a": rng.randint(2, 30), "b": rng.randint(2, 30)},
        templates=(
            "{name} has {a} {items}. {pron} buys {b} more. How many {items} does {name} have now?",
            "There are {a} {items} in a box and {b} {items} on the table. How many {items} are there in all?",
            "{name} picked {a} {items} in the morning and {b} in the afternoon. How many {items} did {name} pick?",
        ),
    ),
    "sub": Operation(
        draw=_draw_sub,
        templates=(
            "{name} had {a} {items}. {pron} gave {b} to a friend. How many {items} does {name} have left?",
            "A shop had {a} {items} and sold {b} of them. How many {items} are left?",
            "{name} needs {a} {items} and already has {b}. How many more {items} does {name} need?",
        ),
    ),
    "mul": Operation(
        draw=lambda rng: {"a": rng.randint(2, 9), "b": rng.randint(2, 9)},
        templates=(
            "{name} buys {a} bags with {b} {items} in each bag. How many {items} does {name} buy?",
            "Each box holds {b} {items}. How many {items} are in {a} boxes?",
            "{name} gets {b} {items} every day for {a} days. How many {items} does {name} get?",
        ),
    ),
    "mul_add": Operation(
        draw=lambda rng: {"a": rng.randint(2, 9), "b": rng.randint(2, 9), "c": rng.randint(1, 20)},
        templates=(
            "{name} has {c} {items} and buys {a} packs of {b} {items}. How many {items} does {name} have now?",
            "There are {a} rows of {b} {items} and {c} more {items} on a shelf. How many {items} are there?",
        ),
    ),
    "add_sub": Operation(
        draw=_draw_add_sub,
        templates=(
            "{name} had {a} {items}, found {b} more and then lost {c}. How many {items} does {name} have now?",
            "A jar has {a} {items}. {name} adds {b} and takes out {c}. How many {items} are in the jar?",
        ),
    ),
    "mul_sub": Operation(
        draw=_draw_mul_sub,
        templates=(
            "{name} buys {a} boxes of {b} {items} and gives away {c}. How many {items} are left?",
            "{name} makes {a} piles of {b} {items}, then {c} {items} get lost. How many {items} are left?",
        ),
    ),
}


def make_gsm_problem(rng: random.Random) -> dict[str, str]:
    """One problem drawn with `rng`: {"question": ..., "answer": "<calculation lines>\\n#### N"}."""
    kind = rng.choice(list(OPERATIONS))
    operation = OPERATIONS[kind]
    numbers = operation.draw(rng)
    name, pron = rng.choice(NAMES)
    question = rng.choice(operation.templates).format(name=name, pron=pron, items=rng.choice(ITEMS), **numbers)
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
