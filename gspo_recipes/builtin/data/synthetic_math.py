"""MATH-style problems generated offline: `problem`, a worked `solution` ending in `\\boxed{N}`, and the bare `answer`,
as in MATH and its descendants. For the offline default of recipes/math_gspo.py, its cold-start model and tests.

Each problem is a short arithmetic (integers, or two fractions of one prime denominator) or one-unknown equation that
takes one or two steps, one step per line; the last line boxes the result (two thirds of the problems take two steps):

    Compute $3 \\times 4 + 5$.
    Solution: $3 \\times 4 = 12$
    $12 + 5 = \\boxed{17}$

    Solve for $x$: $x - 5 = 3 \\times 4$.
    Solution: $3 \\times 4 = 12$
    $x = 12 + 5 = \\boxed{17}$

The numbers are the GSM8K generator's easy ranges (one-digit factors, subtraction without borrowing), which a tiny
character-level model learns in a few minutes of CPU. The prompt the cold-start model sees is `problem +
PROMPT_SUFFIX`; its completion is `solution`. Generation is deterministic: the same `(n, seed)` gives the same problems.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

PROMPT_SUFFIX = "\nSolution: "

_TIMES = "\\times"
_FRACTION = re.compile(r"\\frac\{(\d+)\}\{(\d+)\}")


def _no_borrow(rng: random.Random, x: int) -> int:
    """A one-digit number to take from `x` without borrowing (x's last digit must be >= 2)."""
    return rng.randint(1, x % 10)


def _product_with_a_last_digit(rng: random.Random) -> tuple[int, int]:
    while (a := rng.randint(2, 9)) * (b := rng.randint(2, 9)) < 12 or a * b % 10 < 2:
        pass  # redraw until the product has a last digit to subtract from
    return a, b


def _one_step(rng: random.Random, kind: str) -> tuple[str, list[str], int | Fraction]:
    if kind == "frac_add":  # a prime denominator and a sum below it: already in lowest terms
        p = rng.choice([5, 7, 11])
        a = rng.randint(1, p - 2)
        b = rng.randint(1, p - 1 - a)
        expression = f"\\frac{{{a}}}{{{p}}} + \\frac{{{b}}}{{{p}}}"
        return f"Compute ${expression}$.", [expression], Fraction(a + b, p)
    if kind == "mul":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return f"Compute ${a} {_TIMES} {b}$.", [f"{a} {_TIMES} {b}"], a * b
    # solve: x - b = a  ->  x = a + b
    a, b = rng.randint(2, 20), rng.randint(2, 9)
    return f"Solve for $x$: $x - {b} = {a}$.", [f"x = {a} + {b}"], a + b


def _two_step(rng: random.Random, kind: str) -> tuple[str, list[str], int]:
    if kind == "mul_add":
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 9)
        return f"Compute ${a} {_TIMES} {b} + {c}$.", [f"{a} {_TIMES} {b}", f"{a * b} + {c}"], a * b + c
    if kind == "mul_sub":
        a, b = _product_with_a_last_digit(rng)
        c = _no_borrow(rng, a * b)
        return f"Compute ${a} {_TIMES} {b} - {c}$.", [f"{a} {_TIMES} {b}", f"{a * b} - {c}"], a * b - c
    # solve_mul: x - c = a * b  ->  a * b = p, x = p + c
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 9)
    return f"Solve for $x$: $x - {c} = {a} {_TIMES} {b}$.", [f"{a} {_TIMES} {b}", f"x = {a * b} + {c}"], a * b + c


ONE_STEP = ("frac_add", "mul", "solve")
TWO_STEP = ("mul_add", "mul_sub", "solve_mul")


def _value(expression: str) -> int | Fraction:
    """The value of one step's arithmetic (`3 \\times 4`, `x = 12 + 5`, `\\frac{1}{7} + \\frac{3}{7}`)."""
    arithmetic = _FRACTION.sub(r"Fraction(\1, \2)", expression.split("=")[-1]).replace(_TIMES, "*")
    return eval(arithmetic, {"Fraction": Fraction})  # our own generated numbers and + - * only


def _latex(value: int | Fraction) -> str:
    if isinstance(value, Fraction) and value.denominator != 1:
        return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    return str(value)


def make_math_problem(rng: random.Random) -> dict[str, str]:
    """One problem: {"problem", "solution" (one `$step = value$` per line, the last boxed), "answer"}."""
    kind = rng.choice(ONE_STEP + TWO_STEP * 2)  # two-step problems twice as often: where a model can stop early
    problem, steps, result = (_one_step if kind in ONE_STEP else _two_step)(rng, kind)
    values = [_value(step) for step in steps]
    assert values[-1] == result and all(v >= 0 for v in values), (problem, steps)  # checked before it is trusted
    lines = [f"${step} = {value}$" for step, value in zip(steps[:-1], values)]
    lines.append(f"${steps[-1]} = \\boxed{{{_latex(result)}}}$")
    return {"problem": problem, "solution": "\n".join(lines), "answer": _latex(result)}


def make_math_problems(n: int, seed: int = 0) -> list[dict[str, str]]:
    """`n` problems, the same ones for the same seed."""
    rng = random.Random(seed)
    return [make_math_problem(rng) for _ in range(n)]


def format_prompt(problem: str) -> str:
    """The prompt text the cold-start model is trained on and the offline recipe samples from."""
    return problem + PROMPT_SUFFIX


_FIRST_STEP = re.compile(r"^\$(.*) = (-?\d+)\$$")


def stop_after_first_step(problem: dict[str, str]) -> dict[str, str] | None:
    """The problem with its solution stopped after its first step, that step's value boxed (a wrong answer: the
    `answer` column keeps the right one); None for a one-step problem."""
    first, *rest = problem["solution"].split("\n")
    if not rest:
        return None
    step, value = _FIRST_STEP.match(first).groups()
    return {**problem, "solution": f"${step} = \\boxed{{{value}}}$"}
