"""Math rewards: exact-answer accuracy for MATH-style and GSM8K-style data.

math-verify does the judging, called the right way round (`verify(gold, answer)`) and never in this process:
its own timeout uses `signal.alarm`, which raises outside the main thread and cannot interrupt big-integer work done
in C. Here every item runs in a worker of a `DeadlinePool` under a deadline; an item that overruns has its worker
killed and scores 0.0 (a pathological answer is wrong, not unknown). Plain numbers never reach sympy at all.

Scores: 1.0 right, 0.0 wrong (or no answer found), None when the gold answer cannot be parsed.
"""

from __future__ import annotations

import os
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ..pool import PoolUnavailable, get_pool
from ..text import column, completion_text

DEFAULT_TIMEOUT_S = float(os.environ.get("GSPO_MATH_TIMEOUT_S", "5"))
_POOL = "math"
_POOL_PRELOAD = ("math_verify", __name__)
_MAX_DIGITS = 100  # longer "numbers" are never a dataset's answer, and Fraction() on them is wasted work


def math_accuracy(
    completions: list,
    solution: list | None = None,
    answer: list | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the completion's final answer equals the gold one, judged by math-verify.

    The gold comes from the `answer` column (a bare answer, such as `\\frac{1}{2}`) when there is one, else from the
    `solution` column (a full worked solution with a `\\boxed{}` answer, as in MATH). The completion's answer is its
    `\\boxed{}` content first, then other LaTeX and plain expressions. An unparseable gold gives None; each item gets
    `timeout_s` seconds in a worker process.
    """
    n = len(completions)
    texts = [completion_text(c) for c in completions]
    golds = [_math_gold(s, a) for s, a in zip(column(solution, n), column(answer, n))]
    scores: list[float | None] = [None] * n
    slow: list[int] = []
    for i, (text, gold) in enumerate(zip(texts, golds)):
        if gold is None:
            continue
        scores[i] = _integer_fast_path(gold, text)
        if scores[i] is None:
            slow.append(i)
    # A GRPO batch holds each prompt's generations together, and many end on the same \boxed{} answer: those are
    # judged once, on the boxed content alone. If that content does not parse, math-verify would look elsewhere in
    # the text, so those completions are judged again in full.
    boxed = {i: _single_boxed(texts[i]) for i in slow}
    requests = [(i, golds[i], boxed[i] or texts[i], boxed[i] is not None) for i in slow]
    retry = _verify_in_pool(scores, requests, timeout_s)
    _verify_in_pool(scores, [(i, golds[i], texts[i], False) for i in retry], timeout_s)
    return scores


def gsm8k_accuracy(
    completions: list,
    answer: list | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
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
            continue
        candidate = _gsm8k_candidate(completion_text(completion))
        if candidate is None:
            scores[i] = 0.0
            continue
        value = _as_number(candidate)
        if value is not None:
            scores[i] = float(value == gold)
        elif len(candidate) > 1000:  # no GSM8K answer is a kilobyte of LaTeX: not worth a worker's time
            scores[i] = 0.0
        else:
            slow.append((i, (_format_number(gold), True), f"$\\boxed{{{candidate}}}$", False))
    _verify_in_pool(scores, slow, timeout_s)
    return scores


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
    if isinstance(answer, (int, float)):
        answer = str(answer)
    if not isinstance(answer, str):
        return None
    return _as_number(answer.rsplit("####", 1)[-1])


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


def boxed_contents(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}` in `text`, braces matched."""
    contents = []
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for position in range(start, len(text)):
            char = text[position]
            depth += char == "{"
            depth -= char == "}"
            if depth == 0:
                contents.append(text[start:position])
                break
    return contents


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


# ----------------------------------------------------------------------------------------------------------------
# math-verify, in the worker processes


_UNPARSED = "unparsed"


def _single_boxed(text: str) -> str | None:
    boxes = boxed_contents(text)
    return f"$\\boxed{{{boxes[0]}}}$" if len(boxes) == 1 else None


def _verify_in_pool(scores: list, requests: list[tuple], timeout_s: float) -> list[int]:
    """Score (index, gold, answer text, boxed only) requests, each distinct one once. Returns the indices of
    boxed-only requests whose box did not parse."""
    owners: dict[tuple, list[int]] = {}
    for index, *request in requests:
        owners.setdefault(tuple(request), []).append(index)
    if not owners:
        return []
    items = [(*gold, text, boxed_only) for gold, text, boxed_only in owners]
    try:
        pool = get_pool(_POOL, preload=_POOL_PRELOAD)
        verdicts = pool.map(f"{__name__}:verify_answer", items, deadline_s=timeout_s, on_timeout=0.0, on_error=None)
    except PoolUnavailable:
        verdicts = [None] * len(items)  # infrastructure failure: unknown, not wrong
    unparsed = []
    for indices, verdict in zip(owners.values(), verdicts):
        for index in indices:
            if verdict == _UNPARSED:
                unparsed.append(index)
                scores[index] = 0.0
            else:
                scores[index] = verdict
    return unparsed


def verify_answer(gold_text: str, gold_is_bare: bool, answer_text: str, boxed_only: bool = False) -> float | str | None:
    """math-verify's verdict, `verify(gold, answer)`: 1.0 or 0.0, or None for an unparseable gold. With `boxed_only`
    (`answer_text` is a lone `\\boxed{}`), `"unparsed"` when the box holds no math, so that the caller can judge
    the whole completion instead. Runs in a pool worker, so math-verify's signal timeouts stay off."""
    from math_verify import parse, verify

    gold = _parse_gold(gold_text, gold_is_bare)
    if not gold:
        return None
    try:
        answer = parse(answer_text, extraction_config=_answer_config(), parsing_timeout=None)
        if boxed_only and all(isinstance(item, str) for item in answer):  # only a verbatim fallback, or nothing
            return _UNPARSED
        return float(bool(answer) and verify(gold, answer, timeout_seconds=None))
    except (MemoryError, RecursionError):  # an answer that blows up sympy is a wrong answer
        return 0.0


@lru_cache(maxsize=4096)
def _parse_gold(text: str, bare: bool) -> list:
    # A GRPO batch holds each gold once per generation: parse it once per worker.
    from math_verify import LatexExtractionConfig, parse

    if bare:
        return parse(f"${text}$", parsing_timeout=None)
    return parse(text, extraction_config=[LatexExtractionConfig(boxed_match_priority=0)], parsing_timeout=None)


@lru_cache(maxsize=1)
def _answer_config() -> tuple:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def _quiet_math_verify() -> None:
    # We disable math-verify's timeouts on purpose (the pool enforces deadlines); its warning about that is noise.
    import logging

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)


if os.environ.get("GSPO_REWARD_WORKER") == "1":
    _quiet_math_verify()
