"""Echoes: an answer that copies a span of the problem statement, where the gold is no such copy, scores 0.

"Simplify $\\sqrt{242}$" is not solved by `\\boxed{\\sqrt{242}}`, nor by the same span dressed up. Before comparing,
both sides lose what does not change an expression (`canonical`): `\\left`/`\\right`, spacing, redundant parentheses
and braces, `1\\cdot`, `+0`, `^1`, `\\dfrac`/`\\cfrac`/`\\over` (as `\\frac`), `\\choose` (as `\\binom`), `a/b` and
`a \\div b` (as `\\frac{a}{b}`), `^{1/2}` and `\\sqrt[2]` (as `\\sqrt{}`), `\\sin^{-1}` (as `\\arcsin`), `a\\cdot a` (as
`a^2`) and the order of the operands of `+` and `\\cdot`.
A bare integer or a single letter is never an echo: any problem may mention those.
"""

from __future__ import annotations

import re
from functools import lru_cache

_NOISE = re.compile(r"\s|\$|\\left|\\right|\\displaystyle|\\[,;:! ]|\\quad|\\qquad|\{\}")
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.DOTALL)
_ATOM = r"(?:\d+(?:\.\d+)?|[A-Za-z]|\{[^{}]*\}|\([^()]*\))"
_REWRITES = [
    (re.compile(r"\\div(?![a-zA-Z])"), "/"),
    (re.compile(r"\\sqrt\[2\]"), r"\\sqrt"),
    (re.compile(r"\\(sin|cos|tan|cot|sec|csc)\^\{?-1\}?"), r"\\arc\1"),
    (re.compile(r"\\[dtc](frac|binom)"), r"\\\1"),
    (re.compile(r"\{([^{}]*)\}\\over\{([^{}]*)\}"), r"\\frac{\1}{\2}"),
    (re.compile(r"\{([^{}\\]*)\\over([^{}]*)\}"), r"\\frac{\1}{\2}"),
    (re.compile(r"\{([^{}]*)\\choose([^{}]*)\}"), r"\\binom{\1}{\2}"),
    (re.compile(r"(?<![\w}.])(\d+)/(\d+)(?![\d.])"), r"\\frac{\1}{\2}"),
    (re.compile(rf"({_ATOM})\^\{{?(?:1/2|\\frac\{{1\}}\{{2\}}|0?\.5)\}}?"), r"\\sqrt{\1}"),
    (re.compile(r"\\sqrt(\d+|[A-Za-z])"), r"\\sqrt{\1}"),
    (re.compile(r"\\(?:cdot|times)(?![a-zA-Z])"), "*"),
    (re.compile(r"(?<![\d.^_])1\*|\*1(?![\d.])"), ""),
    (re.compile(r"[+-]0(?![\d.])"), ""),
    (re.compile(r"\^\{?1\}?(?![\d.])"), ""),
    (re.compile(r"(?<![\w.^])(\d+|[A-Za-z])\*\1(?![\w.^])"), r"\1^2"),
    (re.compile(r"\^\{(\w)\}"), r"^\1"),
    (re.compile(r"(\\(?:arc)?(?:sin|cos|tan|cot|sec|csc)|\\ln|\\log|\\exp)\(([^()]*)\)"), r"\1\2"),  # \sin(x) is \sin x
]


@lru_cache(maxsize=8192)  # a GRPO batch repeats its golds and many of its answers
def squash(text: str) -> str:
    """`text` with what does not change its meaning as written removed: spacing, delimiters, `\\text{}`."""
    text = _TEXT_COMMAND.sub(r"\1", text)
    text = re.sub(r"\\[dt](frac|binom)", r"\\\1", text)
    return _NOISE.sub("", text).rstrip(".,;:")


def canonical(text: str) -> str:
    """`text` without what does not change an expression (the module docstring), operands in a fixed order."""
    text = squash(text)
    for _ in range(3):  # rewrites enable each other ({3}\over{20} -> \frac{3}{20}); three rounds reach a fixpoint
        previous = text
        for pattern, replacement in _REWRITES:
            text = pattern.sub(replacement, text)
        text = _drop_redundant_parentheses(text)
        if text == previous:
            break
    return _sorted_operands(text)


def is_echo(answer: str, gold: str, problem: str | None) -> bool:
    """Whether `answer` is a span of the problem statement where the gold is not: equal to one of its math spans
    after `canonical`, or a verbatim substring of it."""
    if not problem:
        return False
    form = canonical(answer)
    if len(form) < 2 or re.fullmatch(r"[-−]?\d+|\(?[A-Za-z]\)?", form):
        return False
    spans = {canonical(next(group for group in match.groups() if group)) for match in _MATH_SPAN.finditer(problem)}
    written = _flat(squash(problem))
    copied = form in spans or _flat(squash(answer)) in written
    return copied and not _gold_in_problem(gold, problem, written, spans)


def _flat(text: str) -> str:
    # Braces and the spelling of a product do not make a copy new: `\sqrt50` copies `\sqrt{50}`.
    return re.sub(r"\\(?:cdot|times)(?![a-zA-Z])", "*", text).replace("{", "").replace("}", "")


def _gold_in_problem(gold: str, problem: str, written: str, spans: set) -> bool:
    """Whether the problem itself writes the gold. A number counts only standing alone: the 6 of `\\log_2 64` or
    the 5 of `5^5` is not the number 6 or 5."""
    value = _flat(squash(gold))
    if re.fullmatch(r"[-−]?\d+(?:\.\d+)?", value):
        return re.search(rf"(?<![\w.^\-−]){re.escape(value)}(?![\w^]|\.\d)", problem) is not None
    return value in written or canonical(gold) in spans


def _drop_redundant_parentheses(text: str) -> str:
    """`(x)` around one atom, and one pair around the whole expression, change nothing."""
    text = re.sub(r"(?<![\\A-Za-z_^])\((-?\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+(?:\{[^{}()]*\})+)\)", r"\1", text)
    if text.startswith("(") and text.endswith(")") and _closing(text, 0) == len(text) - 1:
        text = text[1:-1]
    if text.startswith("{") and text.endswith("}") and _closing(text, 0) == len(text) - 1:
        text = text[1:-1]
    return text


def _closing(text: str, start: int) -> int:
    """The index of the bracket that closes the one at `start` (-1 when none)."""
    depth = 0
    for index in range(start, len(text)):
        depth += text[index] in "({["
        depth -= text[index] in ")}]"
        if depth == 0:
            return index
    return -1


def _split_top_level(text: str, separators: str) -> list[str]:
    """`text` cut at `separators` outside brackets; a `-` separator stays with the term it signs."""
    parts, depth, current = [], 0, ""
    for index, char in enumerate(text):
        depth += char in "({["
        depth -= char in ")}]"
        if depth == 0 and char in separators and current and text[index - 1] not in "^_*/":
            parts.append(current)
            current = "" if char in "+*" else char
        else:
            current += char
    return [*parts, current] if current else parts


def _sorted_operands(text: str) -> str:
    terms = []
    for term in _split_top_level(text, "+-"):
        factors = _split_top_level(term, "*")
        terms.append("*".join(sorted(factors)) if len(factors) > 1 else term)
    return "+".join(sorted(terms))
