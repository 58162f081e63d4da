"""The final-answer contract: what a completion must show before a math grader compares anything.

RL optimises whatever the reward pays for, so the graders pay only for one committed final answer, read the way a
careful human marker would read it, and never for text that merely contains the gold somewhere:

- the answer is read only after the last `</think>` (an unclosed `<think>` has no answer);
- the completion commits to its answer with `\\boxed{}`, `#### N`, "The answer is ...", "Final answer: ...",
  "Answer: ..." or a line "A: ..."; with no such marker there is no answer (no last-number fallback);
- every committed answer must be right: answers that disagree score 0, and so does a hedge or a retraction from
  the first answer on ("or", "maybe", "wait", "actually", ...), unless the gold itself says it;
- one answer may not list alternatives where the gold is one value ("9, 10", "18 or 20", `\\lor`, `\\pm`);
- a relation counts only as `variable = value` (read as the value) or in the gold's own relation form; an
  inequality in one variable is read as the interval it describes when the gold is an interval;
- numbers are whole tokens: thousands separators only in groups of three, and nothing that could glue two digits
  together is deleted (`1\\text{ or }8`, `1 8`, `1\\$8` are two numbers, not 18);
- an answer copied from the problem statement, where the gold is not such a copy, scores 0 (the unsimplified
  radical for "Simplify", the unfactored polynomial for "Factor");
- exact golds are compared exactly; a decimal answer to an exact gold must equal it exactly, and a decimal gold is
  matched within `RELATIVE_TOLERANCE` (see `verifier.py`).

This module reads and checks text only; the comparison itself is the graders' (`graders.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_MAX_DIGITS = 100  # longer "numbers" are never a dataset's answer, and Fraction() on them is wasted work
RELATIVE_TOLERANCE = 1e-9  # float round-off passes; any rounding a person writes (4.666667 for 14/3) does not

# ----------------------------------------------------------------------------------------------------------------
# Finding the committed answers

_ANCHOR = re.compile(
    r"####|\b(?:the\s+)?(?:final\s+)?answer\s+is\b\s*[:：]?|\b(?:final\s+)?answer\s*[:：]|^[ \t]*A[ \t]*[:：]",
    re.IGNORECASE | re.MULTILINE,  # "A: 18" on a line of its own is how GSM8K's example model solutions end
)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKDOWN = re.compile(r"\*\*|__|(?<!\\)\*|`")
_MATH_DELIMITERS = re.compile(r"\\\(|\\\)|\\\[|\\\]|(?<!\\)\$")


@dataclass(frozen=True)
class FinalAnswers:
    """What a completion committed to: its final answers, as written, and the text from the first one on."""

    answers: list[str]
    from_first_answer: str  # from the first answer on (and a doubtful lead-in): where hedges and retractions count
    boxed: list[bool]  # per answer: written in a box (else after an anchor such as "The answer is")


def final_section(text: str) -> str | None:
    """The text after the last `</think>`; all of it when there is no think block; None when one never closes."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return None
    return text


def read_final_answers(text: str) -> FinalAnswers | None:
    """The committed final answers of a completion, in order; None when it commits to none."""
    section = final_section(text)
    if section is None:
        return None
    boxes = _boxes(section)
    found = [(start, content, True) for start, _, content in boxes]
    box_starts = [start for start, _, _ in boxes]
    box_spans = [(start, end) for start, end, _ in boxes]
    for match in _ANCHOR.finditer(section):
        if any(start <= match.start() < end for start, end in box_spans):
            continue  # "answer:" written inside a box is part of that box's answer
        if match.group().startswith("####"):
            end = section.find("\n", match.end())
            end = len(section) if end < 0 else end
        else:
            end = _sentence_end(section, match.end())
        boxed = [start for start in box_starts if match.start() <= start < end]
        if boxed:
            before_box = _MATH_DELIMITERS.sub(" ", section[match.end() : boxed[0]]).strip()
            if not _HEDGE.search(before_box) and (not re.search(r"\d", before_box) or before_box.endswith("=")):
                continue  # "The answer is $\boxed{5}$", "the answer is $3! \times 5! = \boxed{720}$": the box
            end = boxed[0]  # "The answer is 17, no wait: \boxed{18}": two answers
        found.append((match.start(), _anchored_answer(section[match.end() : end]), False))
    if not found:
        return None
    found.sort()
    answers, boxed = [answer for _, answer, _ in found], [is_box for _, _, is_box in found]
    # "I think the answer is 18": the doubt comes just before the first answer, in its sentence.
    before = section[: found[0][0]]
    sentence_start = max(before.rfind(mark) + len(mark) if mark in before else 0 for mark in _SENTENCE_MARKS)
    lead_in = before[sentence_start:] if _LEAD_IN_HEDGE.search(before[sentence_start:]) else ""
    return FinalAnswers(answers, lead_in + section[found[0][0] :], boxed)


def boxed_contents(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}` in `text`, braces matched."""
    return [content for _, _, content in _boxes(text)]


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every box, braces matched; an unclosed box is no answer."""
    boxes = []
    for match in _BOX.finditer(text):
        depth, start = 1, match.end()
        for position in range(start, len(text)):
            depth += text[position] == "{"
            depth -= text[position] == "}"
            if depth == 0:
                boxes.append((match.start(), position + 1, text[start:position]))
                break
    return boxes


def _sentence_end(text: str, start: int) -> int:
    """Where the sentence that begins at `start` ends: a line break, or `.`, `!`, `?` before a space, outside math
    (inline `$...$` or display `\\[...\\]`)."""
    in_math, in_display, depth = False, False, 0
    for position in range(start, len(text)):
        char = text[position]
        pair = text[position : position + 2]
        if pair in ("\\[", "\\]"):
            in_display = pair == "\\["
        if char == "\n" and not in_display and position > start and text[start:position].strip():
            return position
        if char == "$" and (position == 0 or text[position - 1] != "\\"):
            in_math = not in_math
        depth += char == "{"
        depth -= char == "}"
        following = text[position + 1 : position + 2]
        if char in ".!?" and not (in_math or in_display) and depth <= 0 and (not following or following.isspace()):
            return position
    return len(text)


def _anchored_answer(span: str) -> str:
    """The answer written after an anchor: its math when it has some (`$...$`), else the plain words."""
    span = _MARKDOWN.sub(" ", span).strip()
    delimiters = list(_MATH_DELIMITERS.finditer(span))
    if len(delimiters) >= 2:
        span = span[delimiters[0].end() : delimiters[-1].start()]
    return _MATH_DELIMITERS.sub(" ", span).strip().rstrip(".,;:").strip()


# ----------------------------------------------------------------------------------------------------------------
# Hedges, alternatives and relations

_HEDGE = re.compile(
    r"\bor\b(?=\s*(?:maybe|perhaps|possibly|even|just|rather)?\s*(?:\$|\\\(|\\\[|\\boxed|[-−]?\.?\d))|"
    r"\b(?:either|maybe|perhaps|possibly|probably|likely|unsure|not\s+sure|not\s+certain|i\s+think|i\s+guess|"
    r"guess|approximately|approx|roughly|around|about|wait|actually|hmm+|alternatively|instead|otherwise|"
    r"incorrect|wrong|mistake|retract|scratch\s+that|no\s+wait|nope|unless|(?:could|might|may)\s+(?:also\s+)?be|"
    r"also\s+possible|and/or|correction|corrected|kidding|oops|rather|revised?|second\s+thought|typo|ignore|unclear|uncertain)\b|\bno\b\s*[,.!]|\\(?:lor|vee|pm|mp)(?![a-zA-Z])|\?",
    re.IGNORECASE,
)
_LEAD_IN_HEDGE = re.compile(
    r"\b(?:i\s+think|i\s+guess|i\s+believe|maybe|perhaps|possibly|probably|likely|not\s+sure|unsure|might|could)\b",
    re.IGNORECASE,
)
_SENTENCE_MARKS = ("\n", ". ", "! ", "? ")
_CONNECTIVE = re.compile(
    r":=|\\(?:to|rightarrow|Rightarrow|longrightarrow|Longrightarrow|implies|iff|Leftrightarrow|leftrightarrow|"
    r"mapsto|sim|approx|simeq|equiv|mid|lor|land|vee|wedge|neq|ne|therefore|because|cong|propto|pm|mp)"
    r"(?![a-zA-Z])|\|\||&&|(?<![<>])(?:->|=>|<=>)"
)
_RELATION = re.compile(r"\\(?:le|leq|ge|geq|lt|gt|leqslant|geqslant)(?![a-zA-Z])|<=|>=|[=<>]")
_VARIABLE = r"(?:[A-Za-z]|\\[a-zA-Z]+)(?:_\{?[\w\\]+\}?)?(?:\^\{?(?:\*|\\prime)\}?|')?(?:\([^()=]*\))?"
_ASSIGNMENT = re.compile(rf"\s*({_VARIABLE})\s*=(?!=)\s*(.+)", re.DOTALL)
_WORDS_AND = re.compile(r"\b(?:and|or)\b", re.IGNORECASE)  # one answer naming two values


def refusal(answers: FinalAnswers, gold: str) -> str | None:
    """Why these committed answers pay nothing whatever their values (a hedge or a retraction), or None."""
    hedges = {word.lower() for word in _HEDGE.findall(answers.from_first_answer)}
    allowed = {word.lower() for word in _HEDGE.findall(gold)}
    unexplained = sorted(hedges - allowed)
    return f"hedged or retracted ({', '.join(unexplained)})" if unexplained else None


def answer_form(answer: str, gold: str) -> str | None:
    """The answer as the graders should compare it, or None when its form breaks the contract.

    Checks, each relative to the gold (what the gold itself writes is allowed): connectives and relations,
    alternatives and lists, numbers glued together, ragged matrices. `variable = value` becomes the value.
    """
    one_value = _count_commas(join_thousands(gold)) == 0 and not _RELATION.search(gold)  # an inequality is a range
    answer = join_thousands(answer.strip().rstrip(".,;:").strip(), commas=one_value)
    if not answer or _is_ragged_matrix(answer):
        return None
    for token in set(_CONNECTIVE.findall(answer)):
        if token not in gold:
            return None
    if not _RELATION.search(gold):
        answer = _without_relation(answer, gold)
        if answer is None:
            return None
    if one_value and _count_commas(answer) or ";" in answer and ";" not in gold:
        return None
    if _WORDS_AND.search(answer) and not _WORDS_AND.search(gold):
        return None
    if _GLUED.search(answer) and not _GLUED.search(gold):
        return None
    return answer


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


def _count_commas(text: str) -> int:
    return len(re.findall(r"(?<!\\),|\{,\}", text))


def _is_ragged_matrix(text: str) -> bool:
    for body in re.findall(r"\\begin\{[pbvBV]?matrix\}(.*?)\\end\{[pbvBV]?matrix\}", text, re.DOTALL):
        rows = [row for row in re.split(r"\\\\", body) if row.strip()]
        if len({row.count("&") for row in rows}) > 1:
            return True
    return False


# ----------------------------------------------------------------------------------------------------------------
# Numbers as whole tokens

_SPACING = r"(?:\s|~|\\[,;:! ]|\\quad|\\qquad|\\enspace|\\thinspace)"
_THOUSANDS = re.compile(rf"(?<![\d.])\d{{1,3}}(?:(?:{_SPACING}+|\{{,\}}|,)\d{{3}})+(?![\d])")
_GLUED = re.compile(rf"\d(?:{_SPACING}|\\[$%]|\\text\s*\{{[^{{}}]*\}}|\\mathrm\s*\{{[^{{}}]*\}})+[-−]?\.?\d")


_UNIT_NOISE = re.compile(
    r"\\(?:text|textbf|textrm|mathrm|mbox)\s*\{([^{}]*)\}|\\[$%]|[$%°]|\^\s*\{?\\circ\}?|\\circ|\\left|\\right|"
    r"\\[,;:! ]|\\quad|\\qquad|~"
)
_NUMBER_TOKEN = re.compile(r"(?<![A-Za-z\d.])-?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?")
_WORDS_ONLY = re.compile(r"[A-Za-z\s'’.:]*")


def plain_number(text: str) -> Fraction | None:
    """The value of an answer that is one plain number, maybe with words or units around it ("18", "-3", "2.5",
    "3/4", "$18", "18\\%", "\\text{18 dollars}", "90^\\circ"); None for anything else (two numbers, operators...).

    Expects thousands already joined (`join_thousands`): here a comma or a space never joins digits."""
    cleaned = _UNIT_NOISE.sub(lambda match: f" {match.group(1) or ''} ", text).replace("−", "-")
    tokens = list(_NUMBER_TOKEN.finditer(cleaned))
    if len(tokens) != 1 or len(tokens[0].group()) > _MAX_DIGITS:
        return None
    rest = cleaned[: tokens[0].start()] + " " + cleaned[tokens[0].end() :]
    if not _WORDS_ONLY.fullmatch(rest):
        return None
    number, _, denominator = tokens[0].group().partition("/")
    if denominator and int(denominator) == 0:
        return None
    return Fraction(number.rstrip(".") or "0") / (int(denominator) if denominator else 1)


def has_decimal(text: str) -> bool:
    """Whether `text` writes a number with decimals (`2.5`, `.5`), as opposed to an exact one."""
    return re.search(r"(?<![\d.])\d*\.\d", text) is not None


def join_thousands(text: str, commas: bool = True) -> str:
    """`13\\,535`, `70 000`, `1{,}000` (and, with `commas`, `1,000`) written as one number: groups of three only."""

    def join(match: re.Match) -> str:
        number = match.group()
        if not commas and "," in number.replace("{,}", ""):
            return number
        groups = re.split(rf"(?:{_SPACING}+|\{{,\}}|,)", number)
        return "".join(groups) if all(len(group) == 3 for group in groups[1:]) else number

    return _THOUSANDS.sub(join, text)


def inequality_as_interval(text: str) -> str | None:
    """`-2 \\le x \\le 7` as `[-2, 7]`, `x > 3` as `(3, \\infty)`: one variable, constant bounds; else None."""
    parts = [part.strip() for part in _RELATION.split(text)]
    relations = [_relation_kind(token) for token in _RELATION.findall(text)]
    if len(parts) == 3 and relations[0] == relations[1] and relations[0] in "<>" and _is_variable(parts[1]):
        low, high = (parts[0], parts[2]) if relations[0] == "<" else (parts[2], parts[0])
        strict = [token for token in _RELATION.findall(text)]
        opening = "(" if _is_strict(strict[0 if relations[0] == "<" else 1]) else "["
        closing = ")" if _is_strict(strict[1 if relations[0] == "<" else 0]) else "]"
        return None if _is_variable(low) or _is_variable(high) else f"{opening}{low}, {high}{closing}"
    if len(parts) == 2 and relations[0] in "<>":
        token = _RELATION.findall(text)[0]
        variable, bound, kind = (parts[0], parts[1], relations[0])
        if _is_variable(bound) and not _is_variable(variable):
            variable, bound, kind = bound, variable, "<" if kind == ">" else ">"
        if not _is_variable(variable) or _is_variable(bound):
            return None
        if kind == ">":
            return f"{'(' if _is_strict(token) else '['}{bound}, \\infty)"
        return f"(-\\infty, {bound}{')' if _is_strict(token) else ']'}"
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


# ----------------------------------------------------------------------------------------------------------------
# Echoes of the problem

_ECHO_NOISE = re.compile(r"\s|\$|\\left|\\right|\\displaystyle|\\[,;:! ]|\{\}")
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")


def squash(text: str) -> str:
    """`text` with what does not change its meaning removed, to compare spans of LaTeX as written."""
    text = _TEXT_COMMAND.sub(r"\1", text)
    text = re.sub(r"\\[dt](frac|binom)", r"\\\1", text)
    return _ECHO_NOISE.sub("", text).rstrip(".,;:")


def is_echo(answer: str, gold: str, problem: str | None) -> bool:
    """Whether `answer` is a span copied from the problem statement where the gold is not. A bare integer or a
    single symbol (a choice letter) is never an echo: any problem may mention those."""
    if not problem:
        return False
    span = _echo_form(answer)
    if len(span) < 2 or re.fullmatch(r"[-−]?\d+|\(?[A-Za-z]\)?", span):
        return False
    written = _echo_form(problem)
    return span in written and not _gold_in_problem(gold, problem, written)


def _echo_form(text: str) -> str:
    # Braces and the spelling of a product do not make a copy new: `\sqrt50` copies `\sqrt{50}`, `2\times3` `2 \cdot 3`.
    return re.sub(r"\\(?:cdot|times)(?![a-zA-Z])", "*", squash(text)).replace("{", "").replace("}", "")


def _gold_in_problem(gold: str, problem: str, written: str) -> bool:
    """Whether the problem itself writes the gold. A number counts only standing alone: the 6 of `\\log_2 64` or
    the 5 of `5^5` is not the number 6 or 5."""
    value = _echo_form(gold)
    if re.fullmatch(r"[-−]?\d+(?:\.\d+)?", value):
        return re.search(rf"(?<![\w.^]){re.escape(value)}(?![\w^]|\.\d)", problem) is not None
    return value in written
