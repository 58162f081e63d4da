"""The lenient math graders: math-verify's own reading of a completion, as before the final-answer contract.

Chosen with `contract=False` on `math_accuracy` / `gsm8k_accuracy`, or by the registry names `math_accuracy_lenient`
and `gsm8k_accuracy_lenient`. They pay for more than a committed, correct final answer: the last of several boxes,
the right-hand side of any relation, the last number in the text when nothing is marked as the answer, numbers
within math-verify's 6-decimal rounding. Use them to compare with older runs, not to train a policy that will learn
those gaps (`gspo audit-reward math_accuracy_lenient --data ...` shows them).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from ..text import column, completion_text
from .cost import note_past_bound, within_bound
from .golds import note_unreadable_gold
from .marker import boxed_contents, final_marker
from .verifier import verify_in_pool

_MAX_DIGITS = 100  # longer "numbers" are never a dataset's answer, and Fraction() on them is wasted work


def lenient_math_accuracy(
    completions: list,
    solution: list | None = None,
    answer: list | None = None,
    *,
    timeout_s: float,
    delimiters: tuple[str, ...] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the completion's final answer equals the gold one, judged by math-verify.

    The gold comes from the `answer` column (a bare answer, such as `\\frac{1}{2}`) when there is one, else from the
    `solution` column (a full worked solution with a `\\boxed{}` answer, as in MATH). The completion's answer is its
    `\\boxed{}` content first, then other LaTeX and plain expressions. An unparseable gold gives None; each item gets
    `timeout_s` seconds in a worker process.
    """
    n = len(completions)
    texts = [after_reasoning(completion_text(c), delimiters) for c in completions]
    golds = [_math_gold(s, a) for s, a in zip(column(solution, n), column(answer, n))]
    scores: list[float | None] = [None] * n
    slow: list[int] = []
    for i, (text, gold) in enumerate(zip(texts, golds)):
        if gold is None:
            continue
        if text is None:
            scores[i] = 0.0  # no reasoning delimiter: TRL's reasoning_accuracy_reward scores it 0
            continue
        scores[i] = _integer_fast_path(gold, text)
        if scores[i] is None:
            slow.append(i)
    # A GRPO batch holds each prompt's generations together, and many end on the same \boxed{} answer: those are
    # judged once, on the boxed content alone. If that content does not parse, math-verify would look elsewhere in
    # the text, so those completions are judged again in full.
    boxed = {i: _single_boxed(texts[i]) for i in slow}
    for i in list(slow):  # big-number work in the answer is refused before a worker spends its deadline on it
        if boxed[i] is not None and not within_bound(boxed[i]):
            note_past_bound(boxed[i])
            scores[i] = 0.0
            slow.remove(i)
    requests = [(i, *golds[i], boxed[i] or texts[i], boxed[i] is not None) for i in slow]
    retry = verify_in_pool(scores, requests, timeout_s, "verify_answer")
    verify_in_pool(scores, [(i, *golds[i], texts[i], False) for i in retry], timeout_s, "verify_answer")
    for score, gold in zip(scores, golds):
        if score is None and gold is not None:
            note_unreadable_gold(gold[0])
    return scores


def lenient_gsm8k_accuracy(
    completions: list,
    answer: list | None = None,
    *,
    timeout_s: float,
    delimiters: tuple[str, ...] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the completion's final number equals GSM8K's gold (the number after `####` in `answer`).

    The completion's answer is taken from `\\boxed{}`, then `#### N`, "The answer is N", "Final answer: N",
    "Answer: N", and otherwise the last number in the text; "1,000", "$18", "18.00" and "18%" all read as numbers.
    Plain numbers are compared exactly in this process; only a non-numeric `\\boxed{}` (say `\\frac{36}{2}`) goes to
    math-verify, under `timeout_s`. A gold with no readable number gives None.
    """
    n = len(completions)
    scores: list[float | None] = [None] * n
    slow: list[tuple] = []
    for i, (completion, gold_text) in enumerate(zip(completions, column(answer, n))):
        gold = _gsm8k_gold(gold_text)
        if gold is None:
            note_unreadable_gold(gold_text)
            continue
        text = after_reasoning(completion_text(completion), delimiters)
        candidate = None if text is None else _gsm8k_candidate(text)
        if candidate is None:
            scores[i] = 0.0
            continue
        value = _as_number(candidate)
        if value is not None:
            scores[i] = float(value == gold)
        elif len(candidate) > 1000:  # no GSM8K answer is a kilobyte of LaTeX: not worth a worker's time
            scores[i] = 0.0
        else:
            slow.append((i, _format_number(gold), True, f"$\\boxed{{{candidate}}}$", False))
    verify_in_pool(scores, slow, timeout_s, "verify_answer")
    return scores


def reasoning_delimiters_option(delimiters: Any) -> tuple[str, ...] | None:
    """TRL's `reasoning_delimiters` as a tuple of strings, or None (the default: `</think>` when there is one);
    anything else is refused, naming the argument and what it takes."""
    if delimiters is None:
        return None
    if isinstance(delimiters, str):
        delimiters = [delimiters]
    delimiters = tuple(delimiters) if isinstance(delimiters, (list, tuple)) else None
    if not delimiters or not all(isinstance(item, str) and item for item in delimiters):
        raise ValueError(
            "reasoning_delimiters must be a non-empty list of non-empty strings, such as ['</think>'] "
            "(the answer is read after the last of them)"
        )
    return delimiters


def after_reasoning(text: str, delimiters: tuple[str, ...] | None) -> str | None:
    """The text after the last of `delimiters` (None when there is none); all of it without delimiters."""
    if delimiters is None:
        return text
    ends = [text.rfind(delimiter) + len(delimiter) for delimiter in delimiters if delimiter in text]
    return text[max(ends) :] if ends else None


# ----------------------------------------------------------------------------------------------------------------
# Gold answers


def _math_gold(solution: Any, answer: Any) -> tuple[str, bool] | None:
    """(gold text, whether it is a bare answer) or None when the row has neither."""
    if isinstance(answer, (int, float)):
        answer = str(answer)
    if isinstance(answer, str) and answer.strip():
        if "####" in answer:  # a GSM8K-style worked answer
            answer = answer.rsplit("####", 1)[1]
        return answer.strip(), True
    if isinstance(solution, str) and solution.strip():
        return solution, False
    return None


def _gsm8k_gold(answer: Any) -> Fraction | None:
    """GSM8K's `#### N`, a plain number, else the number a worked solution commits to (`\\boxed{72}`, "The
    answer is 72" ending it); number words are not read (TRL skips a gold of "forty two")."""
    if isinstance(answer, (int, float)):
        answer = str(answer)
    if not isinstance(answer, str):
        return None
    value = _as_number(answer.rsplit("####", 1)[-1])
    if value is None and "####" not in answer:
        found = final_marker(answer)
        if found is not None and re.search(r"\d", found.values[-1]):
            value = _as_number(found.values[-1])
    return value


# ----------------------------------------------------------------------------------------------------------------
# Reading numbers without sympy

_NUMBER = r"[-−]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?|[-−]?\.\d+"
_NUMBER_RE = re.compile(rf"(?<![\w.])(?:{_NUMBER})")
_ANCHORS = [  # in priority order, after \boxed{}
    re.compile(rf"####\s*({_NUMBER})"),
    re.compile(rf"the\s+(?:final\s+)?answer\s+is\s*[:：]?[\s*_$]*({_NUMBER})", re.IGNORECASE),
    re.compile(rf"final\s+answer\s*(?:is)?\s*[:：][\s*_$]*({_NUMBER})", re.IGNORECASE),
    re.compile(rf"answer\s*[:：][\s*_$]*({_NUMBER})", re.IGNORECASE),
]
_LATEX_NOISE = re.compile(r"\\text\s*\{[^{}]*\}|\\mathrm\s*\{[^{}]*\}|\\[,!;: ]|\\\$|\\%|\{,\}|\$|\\left|\\right")
_INTEGER = re.compile(rf"\s*\$?\s*(-?\d{{1,{_MAX_DIGITS}}})\s*\$?\s*")
_PLAIN = re.compile(r"([-−]?)(\d+(?:\.\d+)?|\.\d+)(?:/(\d+))?%?")


def _as_number(text: str) -> Fraction | None:
    """The value of a plain number ("1,000", "$18", "18.00", "18%", "-3", "3/4"), or None if it is not one."""
    cleaned = _LATEX_NOISE.sub("", text).replace(",", "").replace(" ", "").strip().rstrip(".")
    match = _PLAIN.fullmatch(cleaned)
    if not match or len(cleaned) > _MAX_DIGITS:
        return None
    sign, number, denominator = match.groups()
    if denominator is not None and int(denominator) == 0:
        return None
    value = Fraction(number) / (int(denominator) if denominator else 1)
    return -value if sign else value


def _format_number(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _gsm8k_candidate(text: str) -> str | None:
    """The text of the completion's answer, by the priority in `gsm8k_accuracy`'s docstring."""
    boxed = boxed_contents(text)
    if boxed:
        return boxed[-1]
    for anchor in _ANCHORS:
        matches = anchor.findall(text)
        if matches:
            return matches[-1]
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def _integer_fast_path(gold: tuple[str, bool], text: str) -> float | None:
    """Exact verdict when the gold and the completion's only `\\boxed{}` are both integers; None otherwise."""
    gold_text, bare = gold
    if not bare:
        gold_boxes = boxed_contents(gold_text)
        if len(gold_boxes) != 1:
            return None
        gold_text = gold_boxes[0]
    answer_boxes = boxed_contents(text)
    if len(answer_boxes) != 1:
        return None
    gold_match, answer_match = _INTEGER.fullmatch(gold_text), _INTEGER.fullmatch(answer_boxes[0])
    if not (gold_match and answer_match):
        return None
    return float(int(gold_match.group(1)) == int(answer_match.group(1)))


def _single_boxed(text: str) -> str | None:
    boxes = boxed_contents(text)
    return f"$\\boxed{{{boxes[0]}}}$" if len(boxes) == 1 else None
