"""The cost bound: what evaluating an answer (or a gold) could produce, bounded before any symbolic work.

`evaluation_size(latex)` reads the expression once, left to right, and bounds two things its evaluation could
build: the **digits** of the largest number (through powers, towers, factorials, binomials, Gamma and products
`\\prod`) and the **degree** of an expansion (a sum raised to a power). An item whose answer or gold is past
`MAX_DIGITS` digits or `MAX_DEGREE` scores 0, before it reaches sympy, and is counted (`take_past_bound`) so the
trainer records it in the run's diagnostics. The bound is an over-estimate by design: `2^{10}` is bounded by its
value, `2^{k+10}` as if k were 1, an unknown command by its argument.
"""

from __future__ import annotations

import math
import re

from .tally import Tally

MAX_DIGITS = 10_000  # sympy computes with numbers of this size in milliseconds; no dataset's answer is larger
MAX_DEGREE = 64  # (x + y)^64 has 65 terms; (x + y + z + k)^999 has 1.7e8: no answer expands that far
MAX_NESTING = 50
WARNING_KIND = "math_answer_past_cost_bound"
_past_bound = Tally()  # answer text -> items scored 0 for it since the last take_past_bound()

_TOKEN = re.compile(
    r"\\[dt]?binom|\\choose|\\[dtc]?frac|\\sqrt|\\prod|\\Gamma|\\operatorname\s*\{\s*[Gg]amma\s*\}|\\[A-Za-z]+|\\."
    r"|[0-9]+(?:\.[0-9]+)?|[A-Za-z]|[-+*/^!_(){}\[\],=<>|]|\s+|."
)
_SKIP = {"\\left", "\\right", "\\displaystyle", "\\,", "\\;", "\\!", "\\:", "\\ ", "\\quad", "\\qquad"}
_TIMES = {"*", "\\cdot", "\\times", "/", "\\div"}
_INFINITE = float("inf")


class _Size:
    """A bound on a value: `digits` (log10 of its largest integer, numerator and denominator together), and
    `degree` (of the polynomial it expands to); `value` when it is a known small number."""

    __slots__ = ("digits", "degree", "value", "sum")

    def __init__(self, digits: float = 0.0, degree: float = 0.0, value: float | None = None, is_sum: bool = False):
        self.digits, self.degree, self.value, self.sum = digits, degree, value, is_sum

    def bound(self) -> float:
        """An upper bound on |value| as a number (for exponents and factorials)."""
        if self.value is not None:
            return abs(self.value)
        return 10.0 ** min(self.digits, 300)


def within_bound(text: str) -> bool:
    """Whether evaluating `text` stays within MAX_DIGITS digits and MAX_DEGREE (the module docstring)."""
    try:
        size = evaluation_size(text)
    except (ValueError, OverflowError, RecursionError):  # what cannot be bounded is refused, never raised
        return False
    return size.digits <= MAX_DIGITS and size.degree <= MAX_DEGREE


def evaluation_size(text: str) -> _Size:
    if _nesting(text) > MAX_NESTING:
        return _Size(_INFINITE, _INFINITE)  # no answer nests fifty deep; the reader below recurses per level
    tokens = [t for t in _TOKEN.findall(text) if not t.isspace() and t not in _SKIP]
    parser = _Parser(tokens)
    total = _Size()
    while parser.position < len(tokens):  # a list, a relation: each part bounded, the largest counts
        part = parser.expression()
        total = _Size(max(total.digits, part.digits), max(total.degree, part.degree))
        if parser.position < len(tokens):
            parser.position += 1  # a separator (",", "=", a stray closing bracket)
    return total


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "({[":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")}]":
            depth -= 1
    return deepest


class _Parser:
    """Precedence climbing over LaTeX tokens: sums, products (explicit and implicit), powers, postfix `!`."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.position = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.position += token is not None
        return token

    def expression(self) -> _Size:
        terms = [self.product()]
        while self.peek() in ("+", "-", "\\pm", "\\mp"):
            self.take()
            terms.append(self.product())
        if len(terms) == 1:
            return terms[0]
        return _Size(max(t.digits for t in terms) + 1, max(t.degree for t in terms), is_sum=True)

    def product(self) -> _Size:
        factors = [self.power()]
        while True:
            token = self.peek()
            if token in _TIMES:
                self.take()
            elif token == "\\choose":  # {n \choose k}
                self.take()
                factors[-1] = _binomial(factors[-1], self.power())
                continue
            elif token is None or token in (")", "}", "]", ",", "=", "<", ">", "+", "-", "|", "\\pm", "\\mp"):
                break
            factors.append(self.power())  # explicit or implicit product
        if len(factors) == 1:
            return factors[0]
        return _Size(sum(f.digits for f in factors), sum(f.degree for f in factors))

    def power(self) -> _Size:
        base = self.postfix(self.atom())
        while self.peek() in ("^", "_"):
            operator = self.take()
            exponent = self.postfix(self.atom())
            if operator == "_":
                continue  # a subscript names, it does not compute
            times = exponent.bound() if exponent.degree == 0 else exponent.bound() + 1
            base = _Size(base.digits * times, base.degree * times)
        return base

    def postfix(self, size: _Size) -> _Size:
        while self.peek() == "!":
            self.take()
            size = _factorial(size)
        return size

    def atom(self) -> _Size:
        token = self.take()
        if token is None:
            return _Size()
        if token in ("(", "{", "["):
            inner = self.expression()
            while self.peek() not in (None, ")", "}", "]"):
                self.take()
                inner = _Size(max(inner.digits, self.expression().digits), inner.degree)
            self.take()
            return inner
        if "0" <= token[0] <= "9":  # ASCII digits only: `²` is a symbol here
            value = float(token)
            return _Size(math.log10(value + 1) if "." not in token else len(token), 0.0, value)
        if token.isalpha():
            return _Size(0.0, 1.0)  # a variable: value bounded as 1, degree 1
        if token in ("-", "+"):
            return self.power()
        if token in ("\\frac", "\\dfrac", "\\tfrac", "\\cfrac"):
            top, bottom = self.atom(), self.atom()
            return _Size(top.digits + bottom.digits, max(top.degree, bottom.degree))
        if token in ("\\binom", "\\dbinom", "\\tbinom"):
            return _binomial(self.atom(), self.atom())
        if token == "\\sqrt":
            if self.peek() == "[":
                self.atom()
            return self.atom()
        if token.startswith(("\\Gamma", "\\operatorname")):
            return _factorial(self.atom())
        if token == "\\prod":
            return self._product_bounds()
        if token.startswith("\\"):
            return _Size()  # a symbol (\pi) or a function: bounded by what follows it as its argument
        return _Size()

    def _product_bounds(self) -> _Size:
        """`\\prod_{k=1}^{N} ...`: at most N! in size."""
        upper = _Size()
        while self.peek() in ("_", "^"):
            operator = self.take()
            limit = self.atom()
            if operator == "^":
                upper = limit
        body = self.power()
        return _Size(_factorial(upper).digits + body.digits * upper.bound(), body.degree * upper.bound())


def _factorial(size: _Size) -> _Size:
    n = size.bound()
    if n > 1e300:
        return _Size(_INFINITE, size.degree)
    return _Size(n * math.log10(n + 1) if n > 1 else 0.0, size.degree)


def _binomial(top: _Size, bottom: _Size) -> _Size:
    n, k = top.bound(), bottom.bound()
    k = min(k, max(n - k, 0.0)) if top.value is not None and bottom.value is not None else max(k, 1.0)
    return _Size(k * math.log10(n + 1) if k < 1e300 else _INFINITE, max(top.degree, bottom.degree))


def note_past_bound(answer: str) -> None:
    _past_bound.note(answer)


def take_past_bound() -> tuple[int, list[str]]:
    """(items, up to three example answers) scored 0 past the bound since the last call, and forget them."""
    return _past_bound.take()


def past_bound_message(items: int, examples: list[str]) -> str:
    return (
        f"{items} math answers were past the cost bound ({MAX_DIGITS} digits, degree {MAX_DEGREE}) and scored 0 "
        f"before any symbolic work, e.g. {', '.join(repr(example) for example in examples)}"
    )
