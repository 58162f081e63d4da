"""The final-answer contract: the one place of a completion that the math graders read.

The rule, in two sentences. After the last real `</think>` (one outside code spans), the answer is the last
`\\boxed{}`; without a box, it is the expression that directly follows the last commitment marker (`#### `, "The
answer is", "Final answer", "Answer" followed by `:` `=` `-` `—` `->`, an "Answer" heading; any case, "the
answer's" too), and that expression ends where the math ends (a number with its unit, a `$...$` span, a LaTeX
group), not at the end of the sentence. Prose outside the committed answer never changes the verdict, except
another commitment (a box, or a marker directly followed by an expression) whose value disagrees: that scores 0.

So `The answer is 18, since 9 \\times 2 = 18.` reads 18; `\\boxed{18}. Does this make sense? Yes, 9 eggs ...`
reads 18; `\\boxed{18}. The answer is 20.` scores 0 (two commitments that disagree); `The answer is not 9.` commits
to nothing (a marker followed by a negation is no commitment). Why: the verdict depends on one place, so a policy
gains nothing by writing alternatives elsewhere, and an honest model is never punished for checking or explaining
its answer.

An expression that directly follows a marker starts with math (a number, `$`, a LaTeX command, a bracket), a
number word, a word of the gold (`The answer is Evelyn`), a qualifier such as "about" (read into the answer, where
it scores 0, see `answer.py`) or a variable; anything else ("The answer is correct") commits to nothing. After
the value, the answer runs on over math, over `or ...` (an alternative) and over a word that joins another value
("and 20", "times 2"); it stops at the first other word, at `.`/`!`/`?`/`;` before a space, at a line break, at a
comma or a parenthesis that opens prose. A `####` line that goes on in words ("#### 1. Set up") is a markdown
heading, not a commitment.

Bounded time: the scans below are regular expressions without nested repetition, run once over the text; the
Python work is bounded whatever the length: a box's braces are matched within `MAX_BOX_CHARS`, a marker's
expression is read up to the next marker or `MAX_EXPRESSION_CHARS`, and a completion with more than `MAX_MARKERS`
boxes or markers is a repetition loop, not an answer (it scores 0, and the scan stops there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .answer import MULTIPLIERS, NUMBER_WORDS, VALUE_WORDS

MAX_EXPRESSION_CHARS = 400  # a marker's expression is read at most this far: no dataset answer is longer
MAX_COMMITMENTS = 8  # distinct other commitments compared at most; more than this many different answers is a dump
MAX_MARKERS = 64  # boxes or markers: more than this many is a repetition loop, not an answer, and scores 0
MAX_BOX_CHARS = 1000  # a box that does not close within this many characters is no answer (none is longer)

_CODE = re.compile(r"```[^`]*(?:```|$)|`[^`\n]*`")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")
_MARKER = re.compile(
    r"####|(?<![A-Za-z\\])ans(?:wers?)?(?![A-Za-z])|^[ \t]*A[ \t]*[:：]",  # "final answer" is "answer" too
    re.IGNORECASE | re.MULTILINE,
)
# What joins "answer" to its expression: "is", "'s", ":", "=", "-", "—", "->", through markdown and `}` of `\text{}`.
_LINK = re.compile(r"(?:['’]s\b|[*_}\s]*(?:\s(?:is|are)\b|[:：=]|->|—|–|-(?=\s)))(?:[\s*_]|[:：](?!=))*", re.IGNORECASE)
_HEADING_TAIL = re.compile(r"[*_:：# \t]*(?:\n|$)")
_NEGATION = re.compile(r"(?:not|never|no|none|neither|nothing|anything\s+but|n['’]t)\b", re.IGNORECASE)
_TOKEN = re.compile(
    r"(?P<box>\\(?:boxed|fbox)\s*\{)"
    r"|(?P<math>\$\$[^$]{0,400}?\$\$|\$(?![\d,.]+\s+[A-Za-z]{2})(?:[^$\n.!?]|[.!?](?!\s))+\$"
    r"|\\\((?:[^\\]|\\(?!\)))*?\\\)|\\\[(?:[^\\]|\\(?!\]))*?\\\])"
    r"|(?P<latex>\\[A-Za-z]+|\\.)"
    r"|(?P<group>\{[^{}]*\})"
    r"|(?P<number>\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)"
    r"|(?P<word>[A-Za-z]+(?:['’][a-z]+)?)"
    r"|(?P<stop>[.!?;](?=\s|$)|\n|,(?=\s*[A-Za-z(])|\((?=\s*[A-Za-z]{2,}))"
    r"|(?P<space>\s+)"
    r"|(?P<other>.)",
    re.DOTALL,
)
_HAS_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ARTICLES = {"a", "an", "the"}
_JOINING = {"or", "nor", "ish"}  # always part of the answer after a value: an alternative, a qualifier


@dataclass(frozen=True)
class Commitments:
    """The committed answer of a completion and, each once, the values of its other commitments."""

    answer: str
    others: tuple[str, ...]
    too_many: bool = False  # more than MAX_COMMITMENTS different other commitments: a dump, not an answer


def final_section(text: str) -> str | None:
    """The text after the last `</think>` outside code spans (code spans blanked out, so that nothing inside them
    commits); all of it when there is no think block; None when a `<think>` never closes."""
    if "`" in text:
        text = _CODE.sub(lambda match: " " * len(match.group()), text)
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return None if "<think>" in text else text


def read_commitments(text: str, gold: str = "") -> Commitments | None:
    """The committed answer under the rule of the module docstring, or None when the completion commits to none.
    `gold` only lets its own words start an expression ("The answer is Evelyn")."""
    section = final_section(text)
    if section is None:
        return None
    boxes = outer_boxes(section)
    inside_box = _membership(boxes or [])
    markers = []
    for marker in _MARKER.finditer(section):  # lazily: a loop of markers stops the scan at MAX_MARKERS + 1
        if not inside_box(marker.start()):
            markers.append(marker)
            if len(markers) > MAX_MARKERS:
                break
    if boxes is None or len(markers) > MAX_MARKERS:
        return Commitments("", (), too_many=True)
    values = _marker_values(section, markers, {word.lower() for word in re.findall(r"[A-Za-z]+", gold)})
    if boxes:
        answer, others = section[boxes[-1][0] : boxes[-1][1]], [section[s:e] for s, e in boxes[:-1]]
    elif values:
        answer, others = values[-1], []
        values = values[:-1]
    else:
        return None
    distinct = tuple(dict.fromkeys(value for value in others + values if value.strip() != answer.strip()))
    return Commitments(answer, distinct[:MAX_COMMITMENTS], too_many=len(distinct) > MAX_COMMITMENTS)


def _marker_values(section: str, markers: list[re.Match], gold_words: set) -> list[str]:
    """The expression after each marker that is followed by one, each read up to the next marker at most."""
    values, line_start, previous = [], 0, 0
    for index, marker in enumerate(markers):
        stop = markers[index + 1].start() if index + 1 < len(markers) else len(section)
        stop = min(stop, marker.end() + MAX_EXPRESSION_CHARS)
        line_start = max(line_start, section.rfind("\n", previous, marker.start()) + 1)
        previous = marker.start()
        head = section[line_start : marker.start()] if marker.start() - line_start <= 24 else "-"  # a bounded look
        at_line_start = head.strip(" \t#*_>").lower() in ("", "final")  # "## Answer", "**Final Answer**"
        value = _marker_value(section, marker, stop, gold_words, at_line_start)
        if value is not None:
            values.append(value)
    return values


def boxed_contents(text: str) -> list[str]:
    """The contents of every outermost `\\boxed{...}` / `\\fbox{...}` in `text`, braces matched."""
    return [text[start:end] for start, end in outer_boxes(text, most=None)]


def outer_boxes(text: str, most: int | None = MAX_MARKERS) -> list[tuple[int, int]] | None:
    """(start, end) of the content of every box not inside another; None when there are more than `most`.
    Only braces inside a box matter, and each box is matched within MAX_BOX_CHARS: a box that does not close
    there is no answer."""
    boxes, end = [], -1
    for count, match in enumerate(_BOX.finditer(text)):
        if most is not None and count >= most:
            return None
        if match.start() < end:
            continue  # a box inside the previous one belongs to its answer
        depth = 1
        for brace in _BRACE.finditer(text, match.end(), match.end() + MAX_BOX_CHARS):
            token = brace.group()
            if len(token) == 2:
                continue  # \{ and \} are set braces, not groups
            depth += 1 if token == "{" else -1
            if depth == 0:
                boxes.append((match.end(), brace.start()))
                end = brace.end()
                break
    return boxes


def _membership(spans: list[tuple[int, int]]):
    """A test `position -> inside one of the spans`, asked in increasing order (a pointer moving forward)."""
    state = {"i": 0}

    def inside(position: int) -> bool:
        while state["i"] < len(spans) and spans[state["i"]][1] < position:
            state["i"] += 1
        return state["i"] < len(spans) and spans[state["i"]][0] <= position

    return inside


def _marker_value(section: str, marker: re.Match, stop: int, gold_words: set, at_line_start: bool) -> str | None:
    """The expression that directly follows `marker`, as written; None when none does (prose, a negation, a box:
    a marker that introduces a box is the box's own commitment)."""
    start = marker.end()
    if not marker.group().startswith("####") and not marker.group().endswith((":", "：")):
        heading = _HEADING_TAIL.match(section, start)
        if heading and heading.end() > start and at_line_start:
            start = heading.end()  # "## Answer\n10", "**Final Answer**\n\n20": the value is on the next line
            while start < stop and section[start] in " \t\n":
                start += 1
        else:
            link = _LINK.match(section, start)
            if link is None:
                return None
            start = link.end()
    if _NEGATION.match(section, start):
        return None
    value = _expression(section, start, stop, gold_words)
    if value is not None and marker.group() == "####":
        line_end = section.find("\n", start, stop)
        rest = section[start : stop if line_end < 0 else line_end].replace(value, "", 1)
        if re.search(r"[A-Za-z]{2}", rest):
            return None  # "#### 1. Set up the equation": a markdown heading, not GSM8K's "#### 72"
    return value


def _expression(text: str, start: int, stop: int, gold_words: set) -> str | None:
    """Where the math that starts at `start` ends (see the module docstring); None when no expression starts there."""
    tokens = [(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text, start, stop)]
    begin = end = None
    alternative = False  # after "or", the rest of the clause is the alternative
    for position, (kind, token, token_start, token_end) in enumerate(tokens):
        lower = token.lower()
        following = next((t for t in tokens[position + 1 :] if t[0] != "space"), None)
        if kind == "stop":
            break
        if kind == "box" or kind == "math" and _HAS_BOX.search(token):
            if alternative:
                break  # "The answer is 20 or \\boxed{18}": the box is offered as an alternative
            return None  # "The answer is $3 \\times 6 = \\boxed{18}$": the marker introduces the box, its commitment
        if begin is None:  # what may start an expression
            if kind == "space" or token in "*_":
                continue
            if kind == "word" and not _starts_value(token, tokens[position + 1 :], gold_words):
                return None
            begin = token_start
        elif kind == "word" and not alternative:
            glued = tokens[position - 1][0] != "space"  # 18x, 18-ish: part of the value
            joins = lower in VALUE_WORDS and following is not None and following[0] in ("number", "math")
            if not (glued or joins or lower in _JOINING or lower in NUMBER_WORDS or lower in MULTIPLIERS
                    or lower in gold_words):  # fmt: skip
                break
            alternative = lower in ("or", "nor")
        if kind != "space":
            end = token_end
    return None if begin is None or end is None else text[begin:end]


def _starts_value(word: str, rest: list, gold_words: set) -> bool:
    """Whether an expression starts at this word: a number word, a word of the gold, a variable (not the article
    of "a whole number"), or a qualifier directly before a number ("about 18", "up to 18")."""
    lower = word.lower()
    following = [kind for kind, *_ in rest if kind != "space"][:4]
    if lower in NUMBER_WORDS or lower in gold_words:
        return True
    if lower in VALUE_WORDS or lower == "at":
        clause = following[: following.index("stop")] if "stop" in following else following
        return any(kind in ("number", "math") for kind in clause)
    if len(word) == 1:
        return not (lower in _ARTICLES and following[:1] == ["word"])
    return False
