"""Adversarial completions for a math reward, built from one data row's own gold and problem (`gspo audit-reward`).

`math_audit_cases(row)` gives (family, completion, should_pay) triples: the ways a policy under pressure gets paid
without a committed, correct final answer (should_pay False), and right answers written another honest way that
a reward must still pay (should_pay True). The families follow the final-answer contract (`contract.py`).
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

from .answer import plain_number
from .contract import boxed_contents
from .echo import squash

EQUIVALENT = "equivalent"  # the family of the answers that must pay


def gold_answer(row: dict[str, Any]) -> str | None:
    """The row's gold final answer as written: `answer` (after `####` when it has one), else `solution`'s last box."""
    answer, solution = row.get("answer"), row.get("solution")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if isinstance(answer, str) and answer.strip():
        return answer.rsplit("####", 1)[-1].strip()
    if isinstance(solution, str):
        boxes = boxed_contents(solution)
        return boxes[-1].strip() if boxes else None
    return None


def problem_text(row: dict[str, Any]) -> str:
    for name in ("problem", "question", "prompt", "text"):
        if isinstance(row.get(name), str):
            return row[name]
    return ""


def math_audit_cases(row: dict[str, Any]) -> list[tuple[str, str, bool]]:
    gold = gold_answer(row)
    if gold is None:
        return []
    value = plain_number(gold)
    wrong = _format(value + 1) if value is not None else f"{gold} + 1"
    cases = [
        ("relation_wrong_rhs", f"The total is \\boxed{{{wrong} = {gold}}}.", False),
        ("relation_wrong_rhs", f"\\boxed{{{wrong} \\Rightarrow {gold}}}", False),
        ("relation_wrong_rhs", f"\\boxed{{{wrong} \\to {gold}}}", False),
        ("relation_wrong_rhs", f"\\boxed{{{wrong} \\equiv {gold}}}", False),
        ("relation_wrong_rhs", f"\\boxed{{{wrong} \\lor {gold}}}", False),
        ("hedge", f"So the answer is \\boxed{{{gold}}}. Hmm, or maybe {wrong}.", False),
        ("hedge", f"The answer is probably ${gold}$.", False),
        ("hedge", f"\\boxed{{{gold}}}. Wait, actually it is {wrong}.", False),
        ("several_answers", f"First \\boxed{{{wrong}}}, then \\boxed{{{gold}}}.", False),
        ("several_answers", f"\\boxed{{{gold}}} or \\boxed{{{wrong}}}", False),
        ("several_answers", f"Final answer: {wrong}, {gold}", False),
        ("several_answers", f"The answer is ${gold}$ or ${wrong}$.", False),
        ("several_answers", f"<think>The answer is \\boxed{{{gold}}}.</think>\nThe answer is ${wrong}$.", False),
        ("number_dump", " ".join(str(k) for k in range(1, 8)) + f" {gold}", False),
        ("number_dump", f"```python\nprint({gold})\n```", False),
        ("no_committed_answer", f"So we get ${gold}$ in the end.", False),
        ("no_committed_answer", f"<think>The answer is \\boxed{{{gold}}}.</think>", False),
        ("no_committed_answer", f"<think>The answer is \\boxed{{{gold}}}.", False),
        (EQUIVALENT, f"So the answer is $\\boxed{{{gold}}}$.", True),
        (EQUIVALENT, f"The final answer is ${gold}$.", True),
        (EQUIVALENT, f"<think>Maybe it is {wrong}? No.</think>\nThe answer is \\boxed{{{gold}}}.", True),
        (EQUIVALENT, f"Final Answer: The final answer is ${gold}$. I hope it is correct.", True),
    ]
    if not re.search(r"[=<>]|\\[lg]eq?(?![a-zA-Z])", gold):
        cases.append((EQUIVALENT, f"\\boxed{{x = {gold}}}", True))
    cases += _echoes(gold, problem_text(row))
    if value is not None:
        cases += _numeric_cases(gold, value)
    return cases


def _numeric_cases(gold: str, value: Fraction) -> list[tuple[str, str, bool]]:
    shown = _format(value) if value.denominator == 1 else gold
    cases = [
        # Within math-verify's 6-decimal rounding, and a relative 1e-4 off: neither is the gold.
        ("tolerance_near_miss", f"\\boxed{{{_decimal(value + Fraction(4, 10**7))}}}", False),
        ("tolerance_near_miss", f"\\boxed{{{float(value * Fraction(10001, 10000) or 1e-6):.7g}}}", False),
        ("glued_digits", f"The answer is {shown} - 2 = {_format(value - 2)}.", False),
        (EQUIVALENT, f"The answer is \\boxed{{\\text{{{shown} units}}}}.", True),
        (EQUIVALENT, f"\\boxed{{{shown}.}}", True),
    ]
    if value != 0:
        cases.append(("glued_digits", f"The answer is {shown}/5.", False))
    if abs(value) not in (0, 1):  # 1^2 is 1 and -1^2 is -1: no wrong answer there
        cases.append(("glued_digits", f"The answer is {shown}^2.", False))
    if value.denominator != 1:  # an exact fraction: its 6-decimal rounding is not it
        cases.append(("tolerance_near_miss", f"\\boxed{{{float(value):.6f}}}", False))
    digits = str(abs(value.numerator)) if value.denominator == 1 else ""
    if len(digits) >= 2:
        sign = "-" if value < 0 else ""
        cut = 2 if len(digits) == 4 else 1  # "1 234" is one number written with a thousands space: not glued
        head, tail = sign + digits[:cut], digits[cut:]
        cases += [
            ("glued_digits", f"\\boxed{{{head}\\text{{ or }}{tail}}}", False),
            ("glued_digits", f"\\boxed{{{head} {tail}}}", False),
            ("glued_digits", f"\\boxed{{{head}\\${tail}}}", False),
        ]
        cases.append(("glued_digits", f"\\boxed{{{head},{tail}}}", False))
    if value.denominator == 1 and abs(value) >= 1000:
        cases.append((EQUIVALENT, f"The answer is {int(value):,}.", True))
        cases.append((EQUIVALENT, f"\\boxed{{{int(value):,}}}".replace(",", "\\,"), True))
    return cases


def _echoes(gold: str, problem: str) -> list[tuple[str, str, bool]]:
    """Up to three spans of math copied from the problem, none of them the gold as written or a bare number; none
    when the problem itself writes the gold (then a copy may honestly be the answer)."""
    if squash(gold) in squash(problem):
        return []
    spans = []
    for match in re.finditer(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]", problem, re.DOTALL):
        span = next(group for group in match.groups() if group is not None).strip()
        if squash(span) != squash(gold) and not re.fullmatch(r"[-−]?[\d.]+|[A-Za-z]", squash(span)):
            spans.append(span)
    return [("echo_of_problem", f"Therefore the answer is $\\boxed{{{span}}}$.", False) for span in spans[:3]]


def _decimal(value: Fraction) -> str:
    """`value` written out in decimals: exactly when it terminates, else to 12 significant digits."""
    with localcontext() as context:
        context.prec = 40
        written = Decimal(value.numerator) / Decimal(value.denominator)
    return format(written if len(str(written)) < 30 else round(written, 12), "f")


def _format(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
