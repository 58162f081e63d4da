"""The form rule: an answer is credited only in a form no more complex than the gold's.

One measure, `complexity(latex) = (operations, largest integer)`, and an answer passes when both are at most the
gold's. **Operations**: every `+ - * / ^ !`, `\\cdot`, `\\times`, `\\div`, `\\frac`, `\\sqrt`, `\\binom`, function
(`\\sin`, `\\log`, ...), and implicit product (`11\\sqrt{2}`, `2x`, `)(`). **Largest integer**: the largest integer
written (a decimal counts as its integer part plus one). A number written on its own in lowest terms (an integer, a
decimal, a reduced fraction, with its sign) is one atom and counts (0, 0): `0.5` for `\\frac{1}{2}` and
`\\frac{1}{2}` for `0.5` both pass, `\\frac{12}{2}` for 6 does not. Lists are measured element by element and
summed (operations) or maxed (largest integer).

So a restatement of the problem never passes, whatever its value: `0+\\frac{3}{20}` and `3\\cdot20^{-1}` (more
operations than `\\frac{3}{20}`), `1\\sqrt{242}` and `\\sqrt{242}` (a larger integer than `11\\sqrt{2}`'s 2), `2^{10}`
for 1024. What it gives up: an expanded polynomial for a factored gold, `\\frac{1}{2}+\\frac{\\sqrt5}{2}` for
`\\frac{1+\\sqrt5}{2}`, an unreduced fraction.
"""

from __future__ import annotations

import re
from fractions import Fraction
from math import gcd

_DRESS = re.compile(
    r"\s|\$|\\left|\\right|\\displaystyle|\\[,;:! ]|\\q?quad|\\[%$]|%|°|\^\s*\{?\s*\\circ\s*\}?|\\circ"
    r"|\\(?:text|textnormal|textbf|textit|textrm|mbox)\s*\{[^{}]*\}|(?<![\\A-Za-z])[A-Za-z]{2,}"
)  # dress, and words: units and nouns the answer rules let stand are no operations
_NAMES = re.compile(r"\\(?:mathrm|mathbf|mathit|operatorname)\s*\{([^{}]*)\}")
_SHORT_FRAC = re.compile(r"\\([dtc]?frac)\s*(\d|\{[^{}]*\})\s*(\d)")
_NUMBER = r"\d+(?:\.\d+)?|\.\d+"
_LITERAL = re.compile(
    rf"[-+]?(?:(?P<plain>{_NUMBER})|(?P<slash>\d+)/(?P<under>\d+)|\\[dtc]?frac\{{(?P<top>-?\d+)\}}\{{(?P<bottom>\d+)\}})"
)
_OPERATION_COMMANDS = re.compile(
    r"\\(?:[dtc]?frac|sqrt|[dt]?binom|choose|over|cdot|times|div|sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan"
    r"|sinh|cosh|tanh|log|ln|lg|exp|det|gcd|lcm|max|min|mod|bmod|pmod|lfloor|lceil|Gamma|prod|sum|int|lim)(?![A-Za-z])"
)
_OPERATORS = re.compile(r"[-+*/^!]|(?<![<>=])=(?!=)")
# Implicit products: a number, letter, symbol or closing bracket directly before a letter, command or opening one.
_IMPLICIT = re.compile(
    r"(?:\d|(?<!\\)\b[A-Za-z]|\\(?:pi|infty|theta|alpha|beta|gamma|phi|omega)|[)\]])"
    r"(?=[A-Za-z(]|\\(?:sqrt|[dtc]?frac|pi|theta|alpha|beta|gamma|phi|omega|sin|cos|tan|log|ln|exp|[dt]?binom)"
    r"(?![A-Za-z]))"
    r"|\}(?=[A-Za-z]|\\(?:sqrt|pi|[dt]?frac|sin|cos|tan|log|ln))"
)


def complexity(text: str) -> tuple[int, int]:
    """(operations, largest integer) of `text` (the module docstring); (0, 0) for a lone number in lowest terms."""
    operations, largest = 0, 0
    for element in _elements(text):
        if _is_atom(element):
            continue
        operations += _operations(element)
        largest = max(largest, _largest_integer(element))
    return operations, largest


def no_more_complex(answer: str, gold: str) -> bool:
    """Whether the answer's form is no more complex than the gold's: both parts of `complexity` at most the gold's."""
    ops, largest = complexity(answer)
    gold_ops, gold_largest = complexity(gold)
    return ops <= gold_ops and largest <= gold_largest


def _plain(text: str) -> str:
    text = re.sub(r"\\\\(?=[A-Za-z])", r"\\", text)  # `\\left` written with its backslash doubled
    text = _SHORT_FRAC.sub(
        lambda m: f"\\{m.group(1)}{{{m.group(2).strip('{}')}}}{{{m.group(3)}}}", _NAMES.sub(r"\1", text)
    )
    return _DRESS.sub("", text)


def _elements(text: str) -> list[str]:
    """The top-level comma-separated elements, brackets of a tuple, set or interval dropped."""
    text = _plain(text)
    if "," in text:
        text = _inside_brackets(text)
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part for part in [*parts, current] if part]


def _inside_brackets(text: str) -> str:
    """`text` without one pair of brackets around all of it (a tuple's, a set's, an interval's)."""
    if text.startswith("\\{") and text.endswith("\\}"):
        inner = text[2:-2]
    elif text[:1] in "([{" and text[-1:] in ")]}":
        inner = text[1:-1]
    else:
        return text
    depth = 0
    for char in inner:
        depth += char in "([{"
        depth -= char in ")]}"
        if depth < 0:
            return text  # "(1, 2), (3, 4)": the first bracket closes before the end
    return inner


def _is_atom(element: str) -> bool:
    """A number written on its own in lowest terms: an integer, a decimal, or a reduced fraction (with a sign),
    in brackets or not."""
    while len(element) > 2 and element[0] + element[-1] in ("()", "{}", "[]"):
        element = element[1:-1]
    match = _LITERAL.fullmatch(element.replace("−", "-"))
    if match is None:
        return False
    if match.group("plain") is not None:
        return True
    numerator, denominator = (
        (match.group("slash"), match.group("under"))
        if match.group("slash")
        else (match.group("top"), match.group("bottom"))
    )
    numerator, denominator = int(numerator), int(denominator)
    return denominator > 1 and gcd(abs(numerator), denominator) == 1


def _operations(element: str) -> int:
    commands = len(_OPERATION_COMMANDS.findall(element))
    operators = len(_OPERATORS.findall(element))
    return commands + operators + len(_IMPLICIT.findall(element))


def _largest_integer(element: str) -> int:
    largest = 0
    for number in re.findall(_NUMBER, element):
        value = Fraction(number)
        largest = max(largest, int(value) + (value.denominator != 1))
    return largest
