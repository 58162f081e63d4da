"""math-verify, called the right way round (`verify(gold, answer)`) and never in the trainer's process.

Its own timeout uses `signal.alarm`, which raises outside the main thread and cannot interrupt big-integer work done
in C. Here every item runs in a worker of a `DeadlinePool` under a deadline; an item that overruns has its worker
killed and scores 0.0 (a pathological answer is wrong, not unknown).

Two entry points run in the workers: `verify_answer` (math-verify's own reading, for the lenient graders) and
`verify_final_answer` (one answer already read by the final-answer contract, with exact and decimal golds compared
as the contract says).
"""

from __future__ import annotations

import os
from functools import lru_cache

from ..pool import PoolUnavailable, get_pool

_POOL = "math"
_POOL_PRELOAD = ("math_verify", __name__)
UNPARSED = "unparsed"
RELATIVE_TOLERANCE = 1e-9  # float round-off passes; any rounding a person writes (4.666667 for 14/3) does not

# How a numeric answer must match, chosen by the grader from the text of the gold and of the answer.
NO_NUMERIC_RULE = "none"  # math-verify's verdict stands (neither side writes a decimal)
EXACT = "exact"  # the gold is exact and the answer writes a decimal: equal as exact numbers
RELATIVE = "relative"  # the gold writes a decimal: within RELATIVE_TOLERANCE


def verify_in_pool(
    scores: list, requests: list[tuple], timeout_s: float, function: str, on_error: float | None = None
) -> list[int]:
    """Score (index, *arguments of `function`) requests in the pool, each distinct one once. Returns the indices
    whose verdict was `UNPARSED` (they score 0.0, and the caller may judge them again another way). An item that
    raises in the worker gets `on_error`; one that overruns its deadline 0.0."""
    owners: dict[tuple, list[int]] = {}
    for index, *request in requests:
        owners.setdefault(tuple(request), []).append(index)
    if not owners:
        return []
    try:
        pool = get_pool(_POOL, preload=_POOL_PRELOAD)
        verdicts = pool.map(
            f"{__name__}:{function}", list(owners), deadline_s=timeout_s, on_timeout=0.0, on_error=on_error
        )
    except PoolUnavailable:
        verdicts = [None] * len(owners)  # infrastructure failure: unknown, not wrong
    unparsed = []
    for indices, verdict in zip(owners.values(), verdicts):
        for index in indices:
            if verdict == UNPARSED:
                unparsed.append(index)
                scores[index] = 0.0
            else:
                scores[index] = verdict
    return unparsed


# ----------------------------------------------------------------------------------------------------------------
# In the workers


def verify_answer(gold_text: str, gold_is_bare: bool, answer_text: str, boxed_only: bool = False) -> float | str | None:
    """math-verify's verdict, `verify(gold, answer)`: 1.0 or 0.0, or None for an unparseable gold. With `boxed_only`
    (`answer_text` is a lone `\\boxed{}`), `"unparsed"` when the box holds no math, so that the caller can judge
    the whole completion instead. Runs in a pool worker, so math-verify's signal timeouts stay off."""
    from math_verify import parse, verify

    gold = _parse_gold(gold_text, gold_is_bare)
    if not gold or all(isinstance(item, str) for item in gold):
        return None  # nothing but the verbatim string: a gold that says no math cannot judge anything
    try:
        answer = parse(answer_text, extraction_config=_answer_config(), parsing_timeout=None)
        if boxed_only and all(isinstance(item, str) for item in answer):  # only a verbatim fallback, or nothing
            return UNPARSED
        return float(bool(answer) and verify(gold, answer, timeout_seconds=None))
    except (MemoryError, RecursionError):  # an answer that blows up sympy is a wrong answer
        return 0.0


def verify_final_answer(gold_text: str, gold_is_bare: bool, answer: str, numeric_rule: str) -> float | None:
    """1.0 when `answer` (one committed answer, already checked by the contract) equals the gold; 0.0 when it does
    not, or does not parse, or its numbers cannot be checked under `numeric_rule`; None for an unparseable gold."""
    from math_verify import parse, verify

    gold = _parse_gold(gold_text, gold_is_bare)
    if not gold or all(isinstance(item, str) for item in gold):
        return None  # nothing but the verbatim string: a gold that says no math cannot judge anything
    try:
        parsed = parse(f"$\\boxed{{{answer}}}$", extraction_config=_answer_config(), parsing_timeout=None)
        if not parsed or all(isinstance(item, str) for item in parsed):
            return 0.0  # no math in the answer: nothing to compare
        if not verify(gold, parsed, timeout_seconds=None):
            return 0.0
        return float(numeric_rule == NO_NUMERIC_RULE or _numbers_match(gold[0], parsed[0], numeric_rule))
    except (MemoryError, RecursionError):  # an answer that blows up sympy is a wrong answer
        return 0.0


def _numbers_match(gold, answer, numeric_rule: str) -> bool:
    """math-verify rounds floats to 6 decimals; here the numbers in gold and answer must match exactly (EXACT) or
    within RELATIVE_TOLERANCE (RELATIVE). What cannot be read as numbers fails, and so does anything sympy cannot
    evaluate (a symbol left in `15.00001\\%`): a decimal that cannot be checked is not credited, and this path
    cannot raise."""
    try:
        return _numbers_within(gold, answer, numeric_rule)
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return False


def _numbers_within(gold, answer, numeric_rule: str) -> bool:
    import sympy

    golds, answers = _flat_numbers(gold), _flat_numbers(answer)
    if golds is None or answers is None or len(golds) != len(answers):
        return False
    for g, a in zip(golds, answers):
        if numeric_rule == EXACT:
            exact = a.xreplace({f: sympy.Rational(str(f)) for f in a.atoms(sympy.Float)})
            if sympy.simplify(g - exact) != 0:
                return False
        else:
            g_value, a_value = complex(sympy.N(g, 30)), complex(sympy.N(a, 30))
            if abs(g_value - a_value) > RELATIVE_TOLERANCE * max(abs(g_value), abs(a_value)):
                return False
    return True


def _flat_numbers(expr) -> list | None:
    """The numbers in a number, tuple, set (in value order), interval or matrix; None when there is anything else."""
    import sympy

    if isinstance(expr, sympy.MatrixBase):
        items = list(expr)
    elif isinstance(expr, sympy.FiniteSet):
        items = sorted(expr.args, key=lambda item: sympy.default_sort_key(sympy.N(item)))
    elif isinstance(expr, sympy.Interval):
        items = [expr.start, expr.end]
    elif isinstance(expr, (sympy.Tuple, tuple, list)):
        items = list(expr)
    elif isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        items = [expr.rhs]
    elif isinstance(expr, sympy.Expr) and expr.is_number:
        return [expr]
    else:
        return None
    flat = []
    for item in items:
        numbers = _flat_numbers(item)
        if numbers is None:
            return None
        flat.extend(numbers)
    return flat


@lru_cache(maxsize=4096)
def _parse_gold(text: str, bare: bool) -> list:
    # A GRPO batch holds each gold once per generation: parse it once per worker.
    from math_verify import parse

    if bare:
        return parse(f"${text}$", parsing_timeout=None)
    # A worked solution: its box first, else its math (as TRL's accuracy_reward reads a `solution` column).
    return parse(text, extraction_config=_answer_config(), parsing_timeout=None)


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
