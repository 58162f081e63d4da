"""What one committed answer says: its form and, where it is one number, its value (the rule's item 2).

Inside the committed answer everything counts (where the answer is, is `contract.py`'s business):

- an answer is one value: alternatives (`or`, `\\lor`, `∨`, a list where the gold is one value), qualifiers
  (`at least`, `nearly`, `up to`, `~`, `≈`, `-ish`), negations (`\\not`, `\\neg`, "not") and relations other than
  `variable = value` or the gold's own form (`≡`, `→`, `⇒`, `≔`, `＝`, chained `=`) score 0 -- unless the gold
  itself writes them;
- letters, constants, subscripts and words glued to a number are part of its value (`18i`, `9\\pi`, `18_{16}` are
  not 18; `18 \\text{ thousand}` is 18000); only the unit words of `UNIT_WORDS`, the gold's own words and the
  nouns of the problem ("18 eggs") are dropped, never a word of `VALUE_WORDS` (half, negative, times, ...);
- a number is a whole token: thousands separators only in groups of three; nothing that could glue two digits
  together (`1 8`, `1\\text{ or }8`) is deleted;

Golds are read by the same functions, so a gold of `2k` is 2k, not 2.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

MAX_DIGITS = 100  # longer "numbers" are never a dataset's answer, and Fraction() on them is wasted work
MAX_ANSWER_CHARS = 1000  # no dataset's answer is a kilobyte of LaTeX: not worth a worker's time

# Words that name what is counted or measured: dropped around a number, they never change its value.
UNIT_WORDS = frozenset(
    """dollar dollars cent cents euro euros usd percent percentage degree degrees unit units square sq cubic
    cm mm km m meter meters metre metres inch inches in ft foot feet yard yards yd mile miles mi mph kph
    g kg gram grams kilogram kilograms lb lbs pound pounds oz ounce ounces ton tons
    l ml liter liters litre litres gallon gallons cup cups quart quarts
    s sec second seconds min mins minute minutes h hr hrs hour hours day days week weeks month months year years per
    """.split()
)
# Units that change the value of a number read in the problem's own unit (50 cents is not 50 dollars, 30 minutes
# of arc not 30 degrees): dropped only where the problem or the gold names them.
CONVERTING_UNITS = frozenset(
    "cent cents percent percentage min mins minute minutes arcminute arcminutes second seconds sec arcsecond".split()
)
# Words that change or qualify a value: never dropped, even where the problem uses them.
NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
} | {word: 10 * (i + 2) for i, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
MULTIPLIERS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "trillion": 10**12, "dozen": 12}
MULTIPLIERS |= {"hundreds": 100, "thousands": 1000, "millions": 10**6, "billions": 10**9, "dozens": 12, "k": None}
VALUE_WORDS = frozenset(
    """or and nor not no never none neither either but half halves third thirds quarter quarters fourth double
    twice triple thrice negative minus plus times over under less more fewer least most about around nearly
    almost roughly approximately approx circa close near up to than ish so maybe perhaps possibly probably likely
    of squared cubed root roots between except without inverse reciprocal radian radians rad
    tenth tenths hundredth hundredths thousandth thousandths millionth millionths fifth fifths""".split()
)

_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|operatorname)\s*\{")
_WORD = re.compile(r"[A-Za-z]+")
_CONNECTIVE = re.compile(
    r":=|\\(?:to|rightarrow|Rightarrow|longrightarrow|Longrightarrow|implies|iff|Leftrightarrow|leftrightarrow|"
    r"mapsto|sim|approx|simeq|equiv|mid|lor|land|vee|wedge|neq|ne|not|neg|lnot|therefore|because|cong|propto|pm|mp|"
    r"lesssim|gtrsim|coloneqq|triangleq|doteq)(?![a-zA-Z])|\|\||&&|(?<![<>])(?:->|=>|<=>)|==|-ish\b"
)
# Symbols an answer may write; any other non-ASCII character (`≈`, `＝`, `∨`, `→`, `¬` ...) must come from the gold.
_ALLOWED_SYMBOLS = set("−×·÷°π√∞∪∩≤≥′²³½¼¾ ")
_RELATION = re.compile(r"\\(?:le|leq|ge|geq|lt|gt|leqslant|geqslant)(?![a-zA-Z])|<=|>=|[=<>]")
_VARIABLE = r"(?:[A-Za-z]|\\[a-zA-Z]+)(?:_\{?[\w\\]+\}?)?(?:\^\{?(?:\*|\\prime)\}?|')?(?:\([^()=]*\))?"
# `x = 5`, and a named tuple `(x, y) = (5, 8)`: the value is the right-hand side.
_ASSIGNMENT = re.compile(rf"\s*({_VARIABLE}|\(\s*{_VARIABLE}(?:\s*,\s*{_VARIABLE})+\s*\))\s*=\s*(.+)", re.DOTALL)
_SPACING = r"(?:\s|~|\\[,;:! ]|\\quad|\\qquad|\\enspace|\\thinspace)"
_LATEX_SPACE = r"(?:~|\\[,;:! ]|\\quad|\\qquad|\\enspace|\\thinspace)"
# After a comma only LaTeX spacing may follow (`10,\!080`): "32, 349" is a list of two numbers.
# `1,000`, `1{,}000`, `10,\!080`, `70 000`, `13\,535`
_GROUP_SEPARATOR = rf"(?:\s*(?:\{{\s*,\s*\}}|,)(?:{_LATEX_SPACE}\s*)*|{_SPACING}+)"
_THOUSANDS = re.compile(rf"(?<![\d.])\d{{1,3}}(?:{_GROUP_SEPARATOR}\d{{3}})+(?!\d)")
_GLUED = re.compile(rf"\d(?:{_SPACING}|\\[$%]|\\text\s*\{{[^{{}}]*\}}|\\mathrm\s*\{{[^{{}}]*\}})+[-−]?\.?\d")
_QUALIFYING_TILDE = re.compile(r"(?:^|[^\d\s])\s*~\s*[-−]?\.?\d|^\s*~")
_BASE = re.compile(r"\d\s*_\s*\{?\s*(\w+)")
_BARE_NUMBER = re.compile(rf"-?\d{{1,{MAX_DIGITS}}}(?:\.\d{{1,{MAX_DIGITS}}})?")


def answer_form(answer: str, gold: str, problem: str | None = None) -> str | None:
    """The answer as the graders should compare it, or None when what it says is more than one value, or other
    than one (see the module docstring). `variable = value` becomes the value."""
    answer = strip_delimiters(answer)
    if _BARE_NUMBER.fullmatch(answer) and "_" not in gold:
        return answer  # the common case, and nothing below could refuse it
    answer = unify_relations(read_through(answer, gold))
    gold = unify_relations(gold)
    if _PRIME.search(answer) and not _PRIME.search(gold):
        return None  # 30' is thirty minutes of arc, not 30 degrees
    if _several_values(gold):  # "1, 2 and 3", "1; 2", "(2, 2) \quad\text{and}\quad (6, 2)"
        answer = list_form(answer)
    answer = mixed_numbers(answer)
    one_value = count_commas(join_thousands(gold)) == 0 and not _RELATION.search(gold)  # an inequality is a range
    answer = join_thousands(answer, commas=one_value)
    if not answer or len(answer) > MAX_ANSWER_CHARS or _is_ragged_matrix(answer):
        return None
    if any(token not in gold for token in set(_CONNECTIVE.findall(answer))):
        return None
    if any(ord(char) > 127 and char not in _ALLOWED_SYMBOLS and char not in gold for char in answer):
        return None
    if _QUALIFYING_TILDE.search(answer) and not _QUALIFYING_TILDE.search(gold):
        return None
    if _RELATION.search(gold) and len(_RELATION.findall(answer)) > len(_RELATION.findall(gold)):
        return None  # a chained relation (`x = 5 + 1 = 6`) states more than one thing
    membership = _MEMBERSHIP.fullmatch(answer)
    if membership and "\\in" not in gold:
        answer = membership.group(1)  # x \in [-2, 7]: the set it names
    if not _RELATION.search(gold):
        answer = _without_relation(answer, gold)
        if answer is None:
            return None
    if one_value and count_commas(answer) or ";" in answer and ";" not in gold:
        return None
    if "_" in answer and "_" not in gold or _BASE.findall(answer) != _BASE.findall(gold):
        return None  # a subscript is part of the value: 18_{16} is not 18, and 1000 is not 1000_2

    if _GLUED.search(answer) and not _GLUED.search(gold):
        return None
    if not words_allowed(answer, gold, problem):
        return None
    return answer


_MEMBERSHIP = re.compile(r"\s*[A-Za-z]\s*\\in\s*(.+)", re.DOTALL)
_NOT_EQUAL = re.compile(r"!=|≠|\\ne(?![a-zA-Z])")
_LIST_JOINER = re.compile(
    r"\s*(?:,|;)?\s*(?:\\q?quad\s*)*(?:\\text\s*\{\s*(?:,\s*)?and\s*\}|(?<![A-Za-z\\])and(?![A-Za-z]))(?:\s*\\q?quad)*\s*"
    r"|\s*;\s*"
)


_UNICODE = {"≤": "\\le ", "≥": "\\ge ", "∞": "\\infty ", "≠": "\\neq ", "−": "-", "×": "\\times ", "·": "\\cdot ",
            "÷": "\\div ", "π": "\\pi ", "∪": "\\cup ", "∩": "\\cap ", "¢": "\\text{ cents}", "\u2009": " ",
            "\u202f": " ", "\u00a0": " "}  # fmt: skip
_UNICODE_PATTERN = re.compile("|".join(map(re.escape, _UNICODE)))
_ARTICLE_IN_TEXT = re.compile(r"(\\text\s*\{)\s*(?:the|an?)\s+", re.IGNORECASE)
_RATE = re.compile(r"/\s*(?:\\(?:text|mathrm)\s*\{\s*([A-Za-z]+)\s*\}|([A-Za-z]{2,})\b)")
_PRIME = re.compile(r"\d\s*(?:'|′|\^\s*\{?\s*\\prime)")
_SET_BUILDER = re.compile(
    r"\s*\\\{\s*([A-Za-z])\s*(?:\\in\s*\\mathbb\s*\{?R\}?\s*)?(?:\\mid|\||:)\s*(.+?)\s*\\\}\s*", re.DOTALL
)
_OR = re.compile(r"\s*(?:\\text\s*\{\s*or\s*\}|\bor\b|\\lor|\\vee|\\cup)\s*")


def read_through(answer: str, gold: str) -> str:
    """The answer with what only dresses it read through: unicode symbols as LaTeX (`≤`, `∞`, thin spaces, `¢`
    as cents), an article in `\\text{}` ("the east"), a rate's `/day` (as "per day"); and, where the gold is an
    interval or a union, set-builder notation and inequalities joined by "or" as the intervals they are."""
    if any(char in answer for char in _UNICODE):
        answer = _UNICODE_PATTERN.sub(lambda match: _UNICODE[match.group()], answer)
    if "\\text" in answer and not _ARTICLE_IN_TEXT.search(gold):
        answer = _ARTICLE_IN_TEXT.sub(r"\1", answer)
    if "/" in answer:
        answer = _RATE.sub(lambda match: _per_unit(match), answer)
    if _looks_like_interval(gold):
        builder = _SET_BUILDER.fullmatch(answer)
        if builder:
            answer = builder.group(2)
        parts = _OR.split(answer)
        if len(parts) > 1 and "\\cup" in gold:
            intervals = [inequality_as_interval(part) for part in parts]
            if all(intervals):
                answer = " \\cup ".join(intervals)
    return answer


def _per_unit(match: re.Match) -> str:
    unit = match.group(1) or match.group(2)
    return f" \\text{{ per {unit}}}" if unit.lower() in UNIT_WORDS else match.group()


def unify_relations(text: str) -> str:
    """`!=`, `≠` and `\\ne` are all `\\neq`."""
    return _NOT_EQUAL.sub(r"\\neq ", text) if ("!" in text or "≠" in text or "\\ne" in text) else text


def list_form(text: str) -> str:
    """A list written with "and", `\\text{ and }` or ";" between its values, as a comma-separated list (at the top
    level only: a `;` inside brackets separates matrix rows or coordinates); `$` between the values dropped."""
    if not re.search(r"and|;", text) or "\\begin" in text:
        return text
    text = re.sub(r"(?<!\\)\$", " ", text)
    depth, out, position = 0, [], 0
    for match in _LIST_JOINER.finditer(text):
        prefix = text[position : match.start()]
        depth += sum(prefix.count(c) for c in "([{") - sum(prefix.count(c) for c in ")]}")
        out.append(prefix + (", " if depth == 0 else match.group()))
        position = match.end()
    return ("".join(out) + text[position:]).strip()


_ONE_ASSIGNMENT = re.compile(r"\s*([A-Za-z])\s*=\s*([^=]+?)\s*")


def assigned_values(text: str) -> str:
    """`x=3,\\ x=5,\\ x=7` as `3, 5, 7`: a list whose every element assigns the same variable, as its values."""
    elements = [element for element in re.split(r"(?<!\\),(?:\s|\\[,;:! ]|\\q?quad)*", text)]
    matches = [_ONE_ASSIGNMENT.fullmatch(element) for element in elements]
    if len(elements) < 2 or not all(matches) or len({match.group(1) for match in matches}) != 1:
        return text
    return ", ".join(match.group(2) for match in matches)


def expand_plus_minus(gold: str) -> str | None:
    """`a \\pm b` as the list `a+b, a-b` (and `\\pm b` as `b, -b`): what an answer giving both values lists;
    None when the gold has no single top-level `\\pm`."""
    parts = gold.split("\\pm")
    if len(parts) != 2 or not parts[1].strip():
        return None
    head, tail = parts[0].strip(), parts[1].strip()
    if head:
        return f"{head}+{tail}, {head}-{tail}"
    return f"{tail}, -{tail}"


def words_allowed(answer: str, gold: str, problem: str | None = None) -> bool:
    """Whether every word of the answer is one that may be dropped or is the gold's own (see `droppable`): every
    word in `\\text{}` (which math-verify would drop unread), bare words only when they qualify, negate or join
    values (`VALUE_WORDS`; other bare letters are variables). A `\\text{}` group holds words, not more math."""
    gold_words = {word.lower() for word in _WORD.findall(gold)}
    problem_words = {word.lower() for word in _WORD.findall(problem or "") if len(word) > 2}
    groups = [match.group()[match.group().index("{") + 1 : -1] for match in _TEXT_GROUP.finditer(answer)]
    outside = _TEXT_GROUP.sub(" ", answer)
    for content in groups:
        if content.strip() in gold:
            continue
        if re.search(r"[=<>+*/^]", content) or re.search(r"\d", content) and re.search(r"\d", outside):
            return False  # "18 \\text{ (20 with tax)}": a second value hidden where math-verify does not look
        for word in _WORD.findall(content):
            if not droppable(word.lower(), gold_words, problem_words) and not MULTIPLIERS.get(word.lower()):
                return False
    bare = _WORD.findall(re.sub(r"\\[A-Za-z]+", " ", outside))
    return not any(word.lower() in VALUE_WORDS and word.lower() not in gold_words for word in bare if len(word) > 1)


def droppable(word: str, gold_words: set, problem_words: set) -> bool:
    """A word that names what is counted: the gold's own, a unit word, or a noun of the problem (never a word
    that changes a value, `VALUE_WORDS`, nor a number word: "twenty" is a value)."""
    if word in gold_words:
        return True
    if word in VALUE_WORDS or word in NUMBER_WORDS or word in MULTIPLIERS:
        return False
    if word in CONVERTING_UNITS:  # cents are not dollars, nor minutes degrees: only where the problem counts them
        return word in problem_words or word.rstrip("s") in problem_words or word + "s" in problem_words
    return word in UNIT_WORDS or word in problem_words


_TEXT_GROUP = re.compile(_TEXT_COMMAND.pattern + r"[^{}]*\}")


def text_words(text: str) -> list[str]:
    """The lower-cased words written inside `\\text{}`-like groups."""
    words = []
    for match in _TEXT_GROUP.finditer(text):
        words += [word.lower() for word in _WORD.findall(match.group()[match.group().index("{") :])]
    return words


_MIXED = re.compile(r"(?<![\d.}^_])(\d+)\s*\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")


def mixed_numbers(text: str) -> str:
    """`4\\frac{2}{3}` is the mixed number 4 2/3 (as MATH writes it), not 4 times 2/3: written `\\frac{14}{3}`."""

    def improper(match: re.Match) -> str:
        whole, numerator, denominator = (int(group) for group in match.groups())
        return f"\\frac{{{whole * denominator + numerator}}}{{{denominator}}}" if denominator else match.group()

    return _MIXED.sub(improper, text) if len(text) <= MAX_ANSWER_CHARS else text


@lru_cache(maxsize=4096)
def _several_values(gold: str) -> bool:
    return count_commas(list_form(gold)) > 0


_DELIMITERS = re.compile(r"\\\(|\\\)|\\\[|\\\]|(?<!\\)\$|\*\*|__|\\displaystyle")
_QUOTED = re.compile(r"(?:\\?\"|“|``)\s*(.*?)\s*(?:\\?\"|”|'')", re.DOTALL)


def strip_delimiters(text: str) -> str:
    """The answer without math delimiters, markdown emphasis, `\\displaystyle`, quotes around it and a final full
    stop."""
    text = _DELIMITERS.sub(" ", text)
    text = text.strip().rstrip(".,;:").strip()
    quoted = _QUOTED.fullmatch(text) if text[:1] in '\\"“`' else None
    return quoted.group(1).rstrip(".,;:").strip() if quoted else text  # 'The final answer is \"12 and 13\".'


def _without_relation(answer: str, gold: str) -> str | None:
    """Where the gold is no relation: `x = 5` reads as 5, an inequality as an interval (if the gold is one);
    any other relation is refused."""
    if not _RELATION.search(answer):
        return answer
    interval = inequality_as_interval(answer)
    if interval is not None and _looks_like_interval(gold):
        return interval
    assignment = _ASSIGNMENT.fullmatch(answer)
    if assignment and not _RELATION.search(assignment.group(2)):
        return assignment.group(2).strip()
    return None


def count_commas(text: str) -> int:
    return len(re.findall(r"(?<!\\),|\{,\}", text))


def _is_ragged_matrix(text: str) -> bool:
    for body in re.findall(r"\\begin\{[pbvBV]?matrix\}(.*?)\\end\{[pbvBV]?matrix\}", text, re.DOTALL):
        rows = [row for row in re.split(r"\\\\", body) if row.strip()]
        if len({row.count("&") for row in rows}) > 1:
            return True
    return False


# ----------------------------------------------------------------------------------------------------------------
# Numbers

_NOISE = re.compile(
    r"\\[$%]|[$%°]|\^\s*\{?\\circ\}?|\\circ|\\left|\\right|\\[,;:! ]|\\quad|\\qquad|~|\\!|\{\}|\\displaystyle"
)
_PLAIN = re.compile(r"\s*([-−+]?)\s*(\d+(?:\.\d*)?|\.\d+)(?:\s*/\s*(\d+))?\s*")
_FRAC = re.compile(r"\s*([-−]?)\s*\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}\s*")


def plain_number(text: str, gold: str = "", problem: str | None = None) -> Fraction | None:
    """The value of an answer that is one plain number with at most a sign, a currency or percent sign, degrees,
    a multiplier ("thousand") and droppable words around it ("18", "-3", "2.5", "3/4", "\\$18", "18\\%",
    "\\text{18 dollars}", "90^\\circ", "18 \\text{ thousand}", "eighteen"); None for anything else (a letter
    glued to it, a word that changes it, two numbers, operators). Expects thousands already joined."""
    if _BARE_NUMBER.fullmatch(text):
        return Fraction(text) if "." in text else Fraction(int(text))
    if not words_allowed(text, gold, problem):
        return None
    gold_words = {word.lower() for word in _WORD.findall(gold)}
    problem_words = {word.lower() for word in _WORD.findall(problem or "") if len(word) > 2}
    in_text = set(text_words(text))
    cleaned = _TEXT_GROUP.sub(lambda match: " " + match.group()[match.group().index("{") + 1 : -1] + " ", text)
    cleaned = _NOISE.sub(" ", cleaned).replace("−", "-")
    if not re.search(r"\d", cleaned):
        value = number_words_value(cleaned)
        return None if value is None else Fraction(value)
    multiplier = 1
    for word in _WORD.findall(cleaned):
        lower = word.lower()
        if MULTIPLIERS.get(lower):
            multiplier *= MULTIPLIERS[lower]
        elif len(word) == 1 and lower not in in_text or not droppable(lower, gold_words, problem_words):
            return None  # a letter glued to a number is part of its value (18x, 9e); so is a word like "half"
    number = _WORD.sub(" ", cleaned)
    match = _PLAIN.fullmatch(number) or _FRAC.fullmatch(number)
    if match is None or len(number.strip()) > MAX_DIGITS:
        return None
    sign, numerator, denominator = match.groups()
    if denominator is not None and int(denominator) == 0:
        return None
    value = Fraction(numerator.rstrip(".") or "0") / (int(denominator) if denominator else 1) * multiplier
    return -value if sign in ("-", "−") else value


def number_words_value(text: str) -> int | None:
    """ "twenty-five", "one hundred and five", "three thousand": their value; None when any word is no number."""
    words = [word for word in re.split(r"[\s-]+", text.lower().strip().rstrip(".")) if word and word != "and"]
    if not words or any(word not in NUMBER_WORDS and word not in MULTIPLIERS for word in words) or "k" in words:
        return None
    total, current = 0, 0
    for word in words:
        if word in NUMBER_WORDS:
            current += NUMBER_WORDS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            total, current = total + max(current, 1) * MULTIPLIERS[word], 0
    return total + current


def has_decimal(text: str) -> bool:
    """Whether `text` writes a number with decimals (`2.5`, `.5`), as opposed to an exact one."""
    return re.search(r"(?<![\d.])\d*\.\d", text) is not None


def join_thousands(text: str, commas: bool = True) -> str:
    """`13\\,535`, `70 000`, `1{,}000` (and, with `commas`, `1,000`) written as one number: groups of three only."""

    def join(match: re.Match) -> str:
        number = match.group()
        if not commas and "," in number.replace("{,}", ""):
            return number
        groups = re.split(_GROUP_SEPARATOR, number)
        return "".join(groups) if all(len(group) == 3 for group in groups[1:]) else number

    return _THOUSANDS.sub(join, text)


# ----------------------------------------------------------------------------------------------------------------
# Inequalities as intervals


def inequality_as_interval(text: str) -> str | None:
    """`-2 \\le x \\le 7` as `[-2, 7]`, `x > 3` as `(3, \\infty)`: one variable, constant bounds; else None."""
    tokens = _RELATION.findall(text)
    parts = [part.strip() for part in _RELATION.split(text)]
    kinds = [_relation_kind(token) for token in tokens]
    if len(parts) == 3 and kinds[0] == kinds[1] and kinds[0] in "<>" and _is_variable(parts[1]):
        low, high = (parts[0], parts[2]) if kinds[0] == "<" else (parts[2], parts[0])
        opening = "(" if _is_strict(tokens[0 if kinds[0] == "<" else 1]) else "["
        closing = ")" if _is_strict(tokens[1 if kinds[0] == "<" else 0]) else "]"
        return None if _is_variable(low) or _is_variable(high) else f"{opening}{low}, {high}{closing}"
    if len(parts) == 2 and kinds[0] in "<>":
        variable, bound, kind = parts[0], parts[1], kinds[0]
        if _is_variable(bound) and not _is_variable(variable):
            variable, bound, kind = bound, variable, "<" if kind == ">" else ">"
        if not _is_variable(variable) or _is_variable(bound):
            return None
        if kind == ">":
            return f"{'(' if _is_strict(tokens[0]) else '['}{bound}, \\infty)"
        return f"(-\\infty, {bound}{')' if _is_strict(tokens[0]) else ']'}"
    return None


def _relation_kind(token: str) -> str:
    if token in ("<", "<=", "\\le", "\\leq", "\\lt", "\\leqslant"):
        return "<"
    if token in (">", ">=", "\\ge", "\\geq", "\\gt", "\\geqslant"):
        return ">"
    return "="


def _is_strict(token: str) -> bool:
    return token in ("<", ">", "\\lt", "\\gt")


def _is_variable(text: str) -> bool:
    return re.fullmatch(_VARIABLE, text.strip()) is not None and not text.strip().startswith("\\infty")


def _looks_like_interval(gold: str) -> bool:
    # "(1, 2)" may be a point as well as an interval: only a bracket, an infinity or a union says "interval".
    return bool(re.search(r"\\infty|\\cup|^\s*(?:\\left)?\s*(?:\[.*,.*[\])]|\(.*,.*\])\s*$", gold))
