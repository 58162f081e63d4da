"""MATH-style problems generated offline: `problem`, a worked `solution` ending in `\\boxed{}`, and the bare
`answer`, as in MATH and its descendants. For the offline default of recipes/math_gspo.py and for tests."""

from __future__ import annotations

import random
from fractions import Fraction


def make_math_problem(rng: random.Random) -> dict[str, str]:
    kind = rng.choice(["linear", "fraction", "power"])
    if kind == "linear":  # a x + b = c
        a, x, b = rng.randint(2, 9), rng.randint(-9, 9), rng.randint(-20, 20)
        c = a * x + b
        problem = f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {c}$."
        solution = f"Subtract {b} and divide by {a}: $x = \\frac{{{c} - ({b})}}{{{a}}} = {x}$. So $x = \\boxed{{{x}}}$."
        answer = str(x)
    elif kind == "fraction":  # p/q + r/s in lowest terms
        p, q, r, s = rng.randint(1, 5), rng.randint(2, 7), rng.randint(1, 5), rng.randint(2, 7)
        total = Fraction(p, q) + Fraction(r, s)
        answer = (
            str(total.numerator) if total.denominator == 1 else f"\\frac{{{total.numerator}}}{{{total.denominator}}}"
        )
        problem = f"Compute $\\frac{{{p}}}{{{q}}} + \\frac{{{r}}}{{{s}}}$ in lowest terms."
        solution = (
            f"With the common denominator {q * s}: the sum is ${answer}$, so the answer is $\\boxed{{{answer}}}$."
        )
    else:  # a^n
        a, n = rng.randint(2, 5), rng.randint(2, 4)
        problem = f"What is ${a}^{n}$?"
        answer = str(a**n)
        solution = f"${a}^{n} = {answer}$, so the answer is $\\boxed{{{answer}}}$."
    return {"problem": problem, "solution": solution, "answer": answer}


def make_math_problems(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [make_math_problem(rng) for _ in range(n)]
