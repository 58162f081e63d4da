"""Math rewards: `math_accuracy` for MATH-style golds, `gsm8k_accuracy` for GSM8K's `#### N` golds.

Both pay only for a correct final answer in the completion's last answer marker (`marker.py`: the last box,
`<answer>` tags, `####` line or answer line; prose is never read), holding one value (`answer.py`), with a unit
that is the gold's or the problem's or converts to the same value (`units.py`), within the cost bound
(`cost.py`), in a form no more complex than the gold's (`form.py`) and no copy of the problem (`echo.py`). Plain
numbers are compared exactly in this process; anything else goes to math-verify in a worker of the deadline pool
(`verifier.py`), once per distinct (gold, answer) in the batch. `contract=False`, or the registry names
`math_accuracy_lenient` / `gsm8k_accuracy_lenient`, keeps math-verify's own reading (`lenient.py`).

Scores: 1.0 right, 0.0 wrong (or no answer marker, or a break of the rule, or an answer past the cost bound, or one
that overran its deadline or broke the verifier), None only when the gold answer cannot be parsed (or the reward
workers cannot start at all): nothing a completion writes gives None.
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
    assigned_values,
    count_commas,
    expand_plus_minus,
    has_decimal,
    join_thousands,
    list_form,
    mixed_numbers,
    plain_number,
    unify_relations,
)
from .cost import note_past_bound, within_bound
from .echo import is_echo, squash
from .form import no_more_complex
from .golds import gold_column, note_unreadable_gold, says_math
from .lenient import (
    _format_number,
    _gsm8k_gold,
    _math_gold,
    lenient_gsm8k_accuracy,
    lenient_math_accuracy,
    reasoning_delimiters_option,
)
from .marker import boxed_contents, final_marker, outer_boxes
from .units import split_unit, unit_scale
from .verifier import EXACT, NO_NUMERIC_RULE, RELATIVE, RELATIVE_TOLERANCE, verify_in_pool

DEFAULT_TIMEOUT_S = float(os.environ.get("GSPO_MATH_TIMEOUT_S", "5"))
_CHOICE = re.compile(r"\(?([A-Z])\)?")
_PLAIN_NUMBER = re.compile(r"-?\d{1,20}(?:\.\d{1,20})?")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.DOTALL)
_RELATION = re.compile(r"=|<|>|\\(?:le|leq|ge|geq|lt|gt|neq|ne)(?![A-Za-z])")
# "(C) Plane": a choice letter with its option's words, read as the letter (never "(C) (D)" or "C D": one letter).
_CHOICE_WITH_TEXT = re.compile(r"\(?([A-Z])(?:\)\s*|[.:]\s*|\s+)(?:\\text\s*\{)?\s*[A-Za-z][a-z]+(?:\s+[a-z]+)*\s*\}?")


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
    """1.0 when the completion's last answer marker holds one value equal to the gold one.

    The gold comes from the `answer` column (a bare answer, such as `\\frac{1}{2}`) when there is one, else from the
    `solution` column (a worked solution with a `\\boxed{}` answer, as in MATH). The completion's answer is the
    content of its last answer marker after the last `</think>` (the last box, `<answer>` tags, a `####` line, or
    an answer line ending the completion; `marker.py`); no marker scores 0. Inside it: one value (no alternatives,
    qualifiers, negations, relations other than `x = value`), a unit that is the gold's or the problem's or
    converts to the same value, within the cost bound, in a form no more complex than the gold's, no copy of the
    problem (from `prompts`, which TRL passes), no decimal for an exact gold. Genuine equivalence (fractions,
    intervals, sets) is math-verify's, each item under `timeout_s` seconds in a worker process. An unparseable
    gold gives None.

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
        judged.append(marker_answer(completion_text(completion), gold[0], problem, delimiters))
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
    """1.0 when the completion's last answer marker holds one number equal to GSM8K's gold (the number after `####`).

    The answer is read as in `math_accuracy`: the content of the last answer marker (the last `\\boxed{}`,
    `<answer>` tags, a `#### ` line, an answer line ending the completion), no last-number fallback. Numbers are
    whole tokens ("1,000", "70 000", "$18", "18.00", "18%", `\\text{18 dollars}` read as numbers; "1,8", "1 8",
    "18/5", "18^2" do not read as 18) compared exactly in this process; an expression (`\\frac{36}{2}`,
    `9 \\cdot 2`) is more complex than the gold's number: 0. The gold is the `answer` column, else `solution`;
    one with no readable number gives None (and a recorded warning).
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
        judged.append(None if gold is None else marker_answer(text, gold[0], problem, delimiters))
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
    text = assigned_values(list_form(unify_relations(text)))
    if not says_math(text):
        note_unreadable_gold(gold[0])
        return None
    return text, True


@lru_cache(maxsize=4096)
def _solution_answer(solution: str) -> str:
    """A worked solution's answer: its last box (boxes in one list give several values: "\\boxed{1} and
    \\boxed{-2}"), else its last marker, else the text as written when short (`$x = 11$`), else its last math."""
    boxes = boxed_contents(solution)
    if len(set(boxes)) > 1 and _one_list(solution):
        return ", ".join(boxes)  # "\\boxed{1} papers and \\boxed{2} bins": several boxes that give several values
    if boxes:
        return boxes[-1]
    marker = final_marker(solution)
    if marker is not None:
        return marker.values[-1]
    bare = re.sub(r"(?<!\\)\$", " ", solution).strip()  # a dataset's own text, not a completion: a short answer
    spans = _MATH_SPAN.findall(solution)  # as written, else its last math
    short = not re.search(r"[.!?;](?=\s+\S)", bare) and len(re.findall(r"[A-Za-z]{2,}", bare)) <= 4
    return bare if short or not spans else next(group for group in spans[-1] if group).strip()


def _one_list(solution: str) -> bool:
    """Whether the boxes of a worked solution stand in one list: a short gap with a list word (`,`, `;`, "and"), no
    "or" (that offers the same value another way, `\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}`) and no
    sentence end."""
    spans = outer_boxes(solution, most=None) or []
    gaps = [
        re.sub(r"\\(?:boxed|fbox)\s*\{$", "", solution[end + 1 : start])
        for (_, end), (start, _) in zip(spans, spans[1:])
    ]
    return all(len(gap) < 40 and re.fullmatch(r"[^.!?]*(?:[,;]|\band\b)[^.!?]*|[\s$]*", gap)
               and not re.search(r"\bor\b", gap) for gap in gaps)  # fmt: skip


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
    samples (held-out maj@k); None where the rule refuses it (no answer marker, several values, a qualified answer,
    a form more complex than the gold's, an echo of the problem in `row["prompt"]`) or the gold in `row` does not
    parse: such a sample never wins a vote."""
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
    forms = marker_answer(text, gold, problem)
    if not isinstance(forms, list):
        return None
    keys = set()
    for form, scale in forms:
        value = plain_number(form, gold, problem)
        keys.add(str(value * scale) if value is not None else squash(form))
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


def _gold_for(answer: str, gold: str) -> str:
    """The gold an answer is compared with: a `\\pm` gold is its two values where the answer lists values."""
    if "\\pm" in gold and count_commas(answer) and not count_commas(gold):
        return expand_plus_minus(gold) or gold
    return gold


def marker_answer(
    text: str, gold_answer: str, problem: str | None, delimiters: tuple[str, ...] | None = None
) -> list[tuple[str, Fraction]] | float:
    """[(the answer in the form to compare, the factor its unit converts by)] of the completion's last marker;
    one per box where boxes side by side answer a one-value gold (each must be right); 0.0 when there is no marker,
    or when what it holds breaks the rule (several values, a unit of neither the gold nor the problem, past the
    cost bound, more complex than the gold, a copy of the problem)."""
    marker = final_marker(text, delimiters)
    if marker is None:
        return 0.0
    values = [value for value in dict.fromkeys(marker.values) if value.strip()]
    if not values:
        return 0.0
    if count_commas(gold_answer) == 0:
        answers = values  # boxes side by side for a one-value gold: each must be that value ("or" offers two)
    else:
        answers = [assigned_values(list_form(", ".join(values)))]
    readings = []
    for answer in answers:
        reading = _reading(answer, gold_answer, problem)
        if reading is None:
            return 0.0
        readings.append(reading)
    return readings


def _reading(answer: str, gold_answer: str, problem: str | None) -> tuple[str, Fraction] | None:
    """(the answer in the form to compare, the factor its unit converts by), or None where it breaks the rule."""
    if _PLAIN_NUMBER.fullmatch(answer) and "_" not in gold_answer:
        return answer, Fraction(1)  # most answers: within the bound, no unit, a form no gold's is simpler than
    if squash(answer) != squash(gold_answer) and not (within_bound(answer) and within_bound(gold_answer)):
        note_past_bound(answer)  # before any other reading: counted in the run's diagnostics
        return None
    scale = Fraction(1)
    value, unit = split_unit(answer)
    if unit is not None:
        scale = unit_scale(unit, gold_answer, problem)
        if scale is None:
            return None  # a unit of a kind neither the gold nor the problem names
        answer = value
    gold = _gold_for(answer, gold_answer)
    form = answer_form(answer, gold, problem)
    if form is None:
        return None
    if squash(form) != squash(gold):
        # A choice letter is compared as a letter; a relation (an equation, an inequality) in any of its forms.
        measured = not _CHOICE.fullmatch(squash(gold)) and not _RELATION.search(gold)
        if measured and not no_more_complex(form, _gold_form(gold)) or is_echo(form, gold_answer, problem):
            return None
    return form, scale


@lru_cache(maxsize=4096)
def _gold_form(gold: str) -> str:
    """The gold as answers are measured against it: `4\\frac{2}{3}` as `\\frac{14}{3}`, thousands joined, its unit
    off."""
    return join_thousands(mixed_numbers(split_unit(gold)[0]))


def _math_request(gold: tuple[str, bool], reading: tuple[str, Fraction], problem: str | None) -> float | tuple:
    """A verdict in this process when one is certain, else the arguments for `verify_final_answer`."""
    answer, scale = reading
    gold_answer = _gold_for(answer, gold[0])
    if scale != 1:
        return _converted(answer, scale, gold_answer, problem)
    if squash(answer) == squash(gold_answer):
        return 1.0
    letter = _CHOICE.fullmatch(squash(gold_answer))
    if letter:  # a choice letter is that letter, as written: math-verify would also take the variable c for (C)
        written = _CHOICE.fullmatch(squash(answer)) or _CHOICE_WITH_TEXT.fullmatch(answer.strip())
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


def _gsm8k_request(gold: tuple[str, bool], reading: tuple[str, Fraction], problem: str | None) -> float | tuple:
    answer, scale = reading
    if scale != 1:
        return _converted(answer, scale, gold[0], problem)
    value = plain_number(answer, gold[0], problem)
    if value is not None:
        return float(value == _fraction(gold[0]))
    if not re.search(r"\\|\d", answer):
        return 0.0  # no number and no LaTeX: nothing to compare with a number
    return (gold[0], True, answer, EXACT if has_decimal(answer) else NO_NUMERIC_RULE)


def _converted(answer: str, scale: Fraction, gold: str, problem: str | None) -> float:
    """An answer in another unit than the gold's: its number times the unit's factor must be the gold's number
    (conversions are compared for numbers only)."""
    value, gold_value = plain_number(answer, gold, problem), plain_number(gold)
    if value is None or gold_value is None:
        return 0.0
    return float(_numbers_equal(gold_value, value * scale, relative=has_decimal(gold) or has_decimal(answer)))


@lru_cache(maxsize=4096)
def _fraction(text: str) -> Fraction:
    return Fraction(text)  # a GRPO batch holds each gold once per generation


def _numbers_equal(gold: Fraction, value: Fraction, relative: bool) -> bool:
    if not relative:
        return gold == value
    return abs(gold - value) <= Fraction(RELATIVE_TOLERANCE) * max(abs(gold), abs(value))


def _score(judged: list, golds: list, problems: list, timeout_s: float, request_for) -> list[float | None]:
    """Each completion's score: 1.0 only when its answer is right.

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
