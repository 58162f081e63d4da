"""Math rewards: `math_accuracy` for MATH-style golds, `gsm8k_accuracy` for GSM8K's `#### N` golds.

Both pay only for a committed, correct final answer: the one place `contract.py` reads (the last box, else the
expression after the last commitment marker; another commitment that disagrees scores 0), read by `answer.py` (one
value, nothing glued to it) and checked against the problem by `echo.py`. Plain numbers are compared exactly in
this process; anything else goes to math-verify in a worker of the deadline pool (`verifier.py`), once per distinct
(gold, answer) in the batch. `contract=False`, or
the registry names `math_accuracy_lenient` / `gsm8k_accuracy_lenient`, keeps math-verify's own reading (`lenient.py`).

Scores: 1.0 right, 0.0 wrong (or no committed answer, or a break of the contract, or an answer that overran its
deadline or broke the verifier), None only when the gold answer cannot be parsed (or the reward workers cannot
start at all): nothing a completion writes gives None.
"""

from __future__ import annotations

import os
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ..text import column, completion_text
from .answer import (
    answer_form,
    count_commas,
    expand_plus_minus,
    has_decimal,
    list_form,
    mixed_numbers,
    plain_number,
    unify_relations,
)
from .contract import boxed_contents, outer_boxes, read_commitments
from .echo import is_echo, squash
from .golds import gold_column, note_unreadable_gold, says_math
from .lenient import (
    _format_number,
    _gsm8k_gold,
    _math_gold,
    lenient_gsm8k_accuracy,
    lenient_math_accuracy,
    reasoning_delimiters_option,
)
from .verifier import EXACT, NO_NUMERIC_RULE, RELATIVE, RELATIVE_TOLERANCE, verify_in_pool

DEFAULT_TIMEOUT_S = float(os.environ.get("GSPO_MATH_TIMEOUT_S", "5"))
_CHOICE = re.compile(r"\(?([A-Z])\)?")


def math_accuracy(
    completions: list,
    solution: list | None = None,
    answer: list | None = None,
    *,
    prompts: list | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    contract: bool = True,
    reasoning_delimiters: list[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the completion commits to one final answer and it equals the gold one.

    The gold comes from the `answer` column (a bare answer, such as `\\frac{1}{2}`) when there is one, else from the
    `solution` column (a worked solution with a `\\boxed{}` answer, as in MATH). The completion's answer is read
    under the final-answer contract: after the last `</think>`, the last `\\boxed{}`, else the expression after the
    last "The answer is", "Final answer:", "Answer:", `#### `; any other commitment must agree; inside the answer no
    alternatives, qualifiers, negations, relations other than `x = value`, copies of the problem (from `prompts`,
    which TRL passes), or decimals for an exact gold. Genuine
    equivalence (fractions, roots, intervals, sets, units and words around a number) is math-verify's, each item
    under `timeout_s` seconds in a worker process. An unparseable gold gives None.

    `reasoning_delimiters` (TRL's `reasoning_accuracy_reward` argument, such as `["</think>"]`): the answer is read
    after the last of them, and a completion without any scores 0. A gold that says no math (`forty two`, `???`)
    gives None, and the trainer records a warning (`golds.py`).

    `contract=False` keeps math-verify's own, lenient reading (the last box, the last expression in the text).
    """
    delimiters = reasoning_delimiters_option(reasoning_delimiters)
    if not contract:
        return lenient_math_accuracy(completions, solution, answer, timeout_s=timeout_s, delimiters=delimiters)
    n = len(completions)
    golds = [_math_gold_answer(s, a) for s, a in zip(column(solution, n), column(answer, n))]
    problems = problem_texts(prompts, kwargs, n)
    judged = []
    for completion, gold, problem in zip(completions, golds, problems):
        if gold is None:
            judged.append(None)
            continue
        judged.append(_committed_answers(completion_text(completion), gold[0], problem, delimiters))
    return _score(judged, golds, problems, timeout_s, _math_request)


def gsm8k_accuracy(
    completions: list,
    answer: list | None = None,
    *,
    solution: list | None = None,
    prompts: list | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    contract: bool = True,
    reasoning_delimiters: list[str] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the completion commits to one final number and it equals GSM8K's gold (the number after `####`).

    The answer is read under the final-answer contract, as in `math_accuracy`: the last `\\boxed{}`, else the
    expression after the last `#### `, "The answer is", "Final answer:", "Answer:" (after the last `</think>`), every
    other commitment agreeing, no last-number fallback. Numbers are whole tokens ("1,000", "70 000", "$18", "18.00",
    "18%", `\\text{18 dollars}` read as numbers; "1,8", "1 8", "18/5", "18^2" do not read as 18) compared exactly
    in this process; only a non-numeric answer (say `\\frac{36}{2}`) goes to math-verify, under `timeout_s`. The
    gold is the `answer` column, else `solution`; one with no readable number gives None (and a recorded warning).
    `reasoning_delimiters` as in `math_accuracy`.

    `contract=False` keeps the lenient reading (the last box, then anchors, then the last number anywhere).
    """
    delimiters = reasoning_delimiters_option(reasoning_delimiters)
    golds_column = gold_column(solution, answer)
    if not contract:
        return lenient_gsm8k_accuracy(completions, golds_column, timeout_s=timeout_s, delimiters=delimiters)
    n = len(completions)
    gold_numbers = [_gsm8k_gold_cached(gold) if isinstance(gold, str) else _gsm8k_gold(gold)
                    for gold in column(golds_column, n)]  # fmt: skip
    golds = [None if value is None else (_format_number(value), True) for value in gold_numbers]
    for gold, raw in zip(golds, column(golds_column, n)):
        if gold is None:
            note_unreadable_gold(raw)
    problems = problem_texts(prompts, kwargs, n)
    judged = []
    for completion, gold, problem in zip(completions, golds, problems):
        text = completion_text(completion)
        judged.append(None if gold is None else _committed_answers(text, gold[0], problem, delimiters))
    return _score(judged, golds, problems, timeout_s, _gsm8k_request)


@lru_cache(maxsize=4096)
def _gsm8k_gold_cached(text: str) -> Fraction | None:
    return _gsm8k_gold(text)


def _math_gold_answer(solution: Any, answer: Any) -> tuple[str, bool] | None:
    """(the gold answer, True) of a row, or None (noted, see `golds.py`) when it says no math."""
    gold = _math_gold(solution, answer)
    if gold is None:
        if gold_column(solution, answer) is not None:
            note_unreadable_gold(gold_column(solution, answer))
        return None
    text = gold[0] if gold[1] else _solution_answer(gold[0])
    text = list_form(unify_relations(text))
    if not says_math(text):
        note_unreadable_gold(gold[0])
        return None
    return text, True


@lru_cache(maxsize=4096)
def _solution_answer(solution: str) -> str:
    """A worked solution's answer: its last box, else its committed answer, else the whole text."""
    boxes = boxed_contents(solution)
    if len(set(boxes)) > 1 and _one_list(solution):
        return ", ".join(boxes)  # "\\boxed{1} and \\boxed{-2}": several boxes that give several values
    if boxes:
        return boxes[-1]
    found = read_commitments(solution)
    return found.answer.strip() if found is not None and not found.too_many else solution.strip()


def math_accuracy_lenient(
    completions: list, solution: list | None = None, answer: list | None = None, **kwargs: Any
) -> list[float | None]:
    """`math_accuracy(..., contract=False)`: math-verify's own reading of the completion (the last box, relations
    read as their right-hand side, the last expression when nothing is boxed, 6-decimal rounding). Pays for hedges
    and wrong relations; see `gspo audit-reward math_accuracy_lenient`."""
    return math_accuracy(completions, solution, answer, **kwargs, contract=False)


def gsm8k_accuracy_lenient(completions: list, answer: list | None = None, **kwargs: Any) -> list[float | None]:
    """`gsm8k_accuracy(..., contract=False)`: the last box, then `####` and "the answer is", then the last number
    anywhere in the text. Pays for number dumps that end in the gold; see `gspo audit-reward`."""
    return gsm8k_accuracy(completions, answer, **kwargs, contract=False)


# ----------------------------------------------------------------------------------------------------------------


def final_answer_key(grader: str, text: str, row: dict) -> str | None:
    """The final answer `grader` ("gsm8k_accuracy" or "math_accuracy") reads in `text`, in a form that compares across
    samples (held-out maj@k); None where the contract refuses it (no committed answer, commitments that disagree, a
    qualified or listed answer, an echo of the problem in `row["prompt"]`) or the gold in `row` does not parse: such
    a sample never wins a vote."""
    if grader == "gsm8k_accuracy":
        raw = gold_column(row.get("solution"), row.get("answer"))
        value = _gsm8k_gold_cached(raw) if isinstance(raw, str) else _gsm8k_gold(raw)
        gold = None if value is None else _format_number(value)
    else:
        parsed = _math_gold_answer(row.get("solution"), row.get("answer"))
        gold = None if parsed is None else parsed[0]
    if gold is None:
        return None
    problem = _prompt_text(row.get("prompt"))
    forms = _committed_answers(text, gold, problem)
    if not isinstance(forms, list):
        return None
    keys = set()
    for form in forms:
        value = plain_number(form, gold, problem)
        keys.add(str(value) if value is not None else squash(form))
    return keys.pop() if len(keys) == 1 else None


def problem_texts(prompts: list | None, columns: dict, n: int) -> list[str | None]:
    """The problem statement of each completion, for the echo rule: the user's messages of the prompt TRL passes,
    else a `problem` or `question` column; None when there is none (then nothing counts as an echo)."""
    if prompts is not None:
        return [_prompt_text(prompt) for prompt in column(prompts, n)]
    for name in ("problem", "question"):
        if columns.get(name) is not None:
            return [value if isinstance(value, str) else None for value in column(columns[name], n)]
    return [None] * n


def _prompt_text(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"] or list(prompt)
        return "\n".join(completion_text(message) for message in users)
    return None


def _one_list(solution: str) -> bool:
    """Whether the boxes of a solution stand in one list: a short gap with a list word (`,`, `;`, "and"), no "or" (that
    offers the same value another way, `\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}`) and no sentence end."""
    spans = outer_boxes(solution, most=None)
    gaps = [
        re.sub(r"\\(?:boxed|fbox)\s*\{$", "", solution[end + 1 : start])
        for (_, end), (start, _) in zip(spans, spans[1:])
    ]
    return all(len(gap) < 40 and re.fullmatch(r"[^.!?]*(?:[,;]|\band\b)[^.!?]*|[\s$]*", gap)
               and not re.search(r"\bor\b", gap) for gap in gaps)  # fmt: skip


def _gold_for(answer: str, gold: str) -> str:
    """The gold an answer is compared with: a `\\pm` gold is its two values where the answer lists values."""
    if "\\pm" in gold and count_commas(answer) and not count_commas(gold):
        return expand_plus_minus(gold) or gold
    return gold


def _committed_answers(
    text: str, gold_answer: str, problem: str | None, delimiters: tuple[str, ...] | None = None
) -> list[str] | float:
    """The completion's committed answer, then each other commitment, in the form to compare; 0.0 when it commits
    to nothing, or when any of them breaks the contract (see `answer_form`, `is_echo`)."""
    found = read_commitments(text, gold_answer, delimiters, gold_values=1 + count_commas(gold_answer))
    if found is None or found.too_many:
        return 0.0
    forms = []
    for answer in (found.answer, *found.others):
        form = answer_form(answer, _gold_for(answer, gold_answer), problem)
        if form is None or is_echo(form, gold_answer, problem):
            return 0.0
        forms.append(form)
    return forms


def _math_request(gold: tuple[str, bool], answer: str, problem: str | None) -> float | tuple:
    """A verdict in this process when one is certain, else the arguments for `verify_final_answer`."""
    gold_answer = _gold_for(answer, gold[0])
    if squash(answer) == squash(gold_answer):
        return 1.0
    letter = _CHOICE.fullmatch(squash(gold_answer))
    if letter:  # a choice letter is that letter, as written: math-verify would also take the variable c for (C)
        written = _CHOICE.fullmatch(squash(answer))
        return float(bool(written) and written.group(1) == letter.group(1))
    gold_value, value = plain_number(gold_answer), plain_number(answer, gold_answer, problem)
    if gold_value is not None and value is not None:
        return float(_numbers_equal(gold_value, value, relative=has_decimal(gold_answer)))
    if gold_value is not None and re.fullmatch(r"[-−]?[\d.]+", squash(gold_answer)) and not re.search(r"\\|\d", answer):
        return 0.0  # words for a number gold: nothing math-verify could read as it
    if has_decimal(gold_answer):
        rule = RELATIVE
    else:
        rule = EXACT if has_decimal(answer) else NO_NUMERIC_RULE
    return (mixed_numbers(gold_answer), True, answer, rule)  # the gold read as the answer is: 4\frac{2}{3} is 14/3


def _gsm8k_request(gold: tuple[str, bool], answer: str, problem: str | None) -> float | tuple:
    value = plain_number(answer, gold[0], problem)
    if value is not None:
        return float(value == _fraction(gold[0]))
    if not re.search(r"\\|\d", answer):
        return 0.0  # no number and no LaTeX: nothing to compare with a number
    return (gold[0], True, answer, EXACT if has_decimal(answer) else NO_NUMERIC_RULE)


@lru_cache(maxsize=4096)
def _fraction(text: str) -> Fraction:
    return Fraction(text)  # a GRPO batch holds each gold once per generation


def _numbers_equal(gold: Fraction, value: Fraction, relative: bool) -> bool:
    if not relative:
        return gold == value
    return abs(gold - value) <= Fraction(RELATIVE_TOLERANCE) * max(abs(gold), abs(value))


def _score(judged: list, golds: list, problems: list, timeout_s: float, request_for) -> list[float | None]:
    """Each completion's score: 1.0 only when every one of its committed answers is right.

    A GRPO batch holds each prompt's generations together, and many end on the same answer: each distinct (gold,
    answer) goes to math-verify once."""
    verdicts: list[list] = [[] for _ in judged]
    requests, owners = [], []
    for i, answers in enumerate(judged):
        if not isinstance(answers, list):
            continue
        for answer in answers:
            request = request_for(golds[i], answer, problems[i])
            if isinstance(request, tuple):
                owners.append(i)
                requests.append((len(requests), *request))
            else:
                verdicts[i].append(request)
    results: list[float | None] = [None] * len(requests)
    verify_in_pool(results, requests, timeout_s, "verify_final_answer", on_error=0.0)
    for i, result in zip(owners, results):
        verdicts[i].append(result)
        if result is None:
            note_unreadable_gold(golds[i][0])
    scores: list[float | None] = []
    for answers, verdict in zip(judged, verdicts):
        if not isinstance(answers, list):
            scores.append(answers)  # None (no gold) or 0.0 (refused by the contract)
        elif any(v == 0.0 for v in verdict):
            scores.append(0.0)
        else:
            scores.append(None if any(v is None for v in verdict) else 1.0)
    return scores
