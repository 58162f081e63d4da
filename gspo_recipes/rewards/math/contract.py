"""The final-answer contract: the one place of a completion that the math graders read.

The rule (docs/rewards.md writes it out as a grammar, with examples). After the last reasoning delimiter
(`</think>`, outside code spans as markdown closes them), a completion makes **commitments**, in order:

- a `\\boxed{}` (outermost: a box inside a box is part of its answer);
- an **answer word** (answer, result, solution, final, `Ans`, `####`, a line "A:", and the same in German, French,
  Spanish and Chinese), in any markup (bold, heading, brackets, `\\text{}`, `<answer>` tags), joined to a value in
  one clause by punctuation (`:`, `=`, `->`, `→`, `.` right after the word) and link verbs ("is", "should be",
  "would be", "equals", "becomes", "comes to", ...): that value, read where the math ends. When other words
  come first ("Answer: she has 18 apples"), the clause commits its one value; with several different values it
  commits none. A question, a negation ("is not 18") or an answer word that is checked ("check our answer")
  commits nothing;
- a **correction word** (edit, correction, actually, wait, no wait, I mean, and the same in those languages) at
  the start of a clause: what comes after it replaces every earlier commitment, and a value directly after it
  ("EDIT: 20", "Actually 20") is a commitment itself.

The **last** commitment is the answer. Since the last correction that is followed by a commitment, boxes must
agree with each other (several boxes are one answer only where the gold has several values and they give them
all). With no commitment the score is 0: there is no last-number fallback. Why: the verdict depends on one place,
so a policy gains nothing by writing alternatives elsewhere, and an honest model is never punished for checking
or explaining its answer, or for correcting itself.

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

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,})[^\n]*$", re.MULTILINE)
_TICKS = re.compile(r"`+")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")
_ANSWER_TAG = re.compile(r"<\s*answer\s*>|<\s*/\s*answer\s*>", re.IGNORECASE)
_LETTER = r"[^\W\d_]"
_ANSWER_WORDS = (
    r"final\s+(?:answers?|results?|solutions?)|answers?|ans|result|solution|final(?=[*_ \t]*[:：])"
    r"|antwort|ergebnis|l[öo]sung|endergebnis|r[ée]ponse|r[ée]sultat|respuesta|resultado|soluci[óo]n"
)
_CORRECTION_WORDS = (
    r"edit|correction|corrected|actually|(?:no\s*,?\s*)?wait|i\s+meant?|oops|scratch\s+that|on\s+second\s+thought"
    r"|korrektur|berichtigung|en\s+fait|correcci[óo]n|en\s+realidad"
)
_MARKER = re.compile(
    rf"(?P<hashes>####)"
    rf"|(?<!{_LETTER})(?<!\\)(?P<answer>{_ANSWER_WORDS})(?!{_LETTER})"
    rf"|(?<!{_LETTER})(?P<correction>{_CORRECTION_WORDS})(?!{_LETTER})"
    rf"|(?P<cjk_answer>最终答案|答案|结果|答)|(?P<cjk_correction>更正|修正|等等)"
    r"|(?P<line_a>^[ \t]*A[ \t]*[:：])",
    re.IGNORECASE | re.MULTILINE,
)
# An answer word that is being checked ("check our answer") is the earlier commitment talked about, not a new one;
# in an idiom ("as a result", "results in") it commits nothing. Read from the last words before it.
_CHECK_VERBS = (
    "check",
    "verif",
    "confirm",
    "test",
    "validat",
    "double-check",
    "plug",
    "substitut",
    "compar",
    "interpret",
)
_DETERMINERS = frozenset("our my the this that your final".split())


def _talked_about(head: str) -> bool:
    words = head.lower().split()[-4:]
    if words[-1:] == ["in"] or words[-2:] in (["as", "a"], ["as", "an"]):
        return True
    while words and words[-1] in _DETERMINERS:
        words.pop()
    return bool(words) and words[-1].startswith(_CHECK_VERBS)


_CLAUSE_START = set(".!?;:,\n*(\"'—–-[>#。！？；：，")
# What may stand between an answer word and its value: markup, punctuation, arrows and link verbs.
_LINK_SYMBOL = re.compile(
    r"\s+|[*_#>|)\]}:：=，,]|->|=>|→|⇒|⟹|[-—–](?=\s)|\\(?:to|rightarrow|Rightarrow|implies|longrightarrow|"
    r"Longrightarrow|quad|qquad|[,;: ])(?![A-Za-z])|"
    r"<\s*/?\s*(?:b|strong)\s*>|['’]s\b"
)
_LINK_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
LINK_WORDS = frozenset(
    """is are was were be been being 's ’s should would will shall could can may might must then thus therefore
    hence so now indeed clearly simply just equals equal equaled becomes become became gives give gave yields
    yield yielded comes come came out to get gets got obtain obtained turns turn turned stands remains remain
    ends end up as here below follows final finally itself exactly precisely reads read ist lautet beträgt est
    sont es son 是 为 為 it it's that that's make no""".split()
)
_NEGATION = re.compile(r"(?:not|never|no|none|neither|nothing|anything\s+but|n['’]t)\b", re.IGNORECASE)
# An answer word with a phrase after it ("the answer of 63", "the result of step 2 is 18") commits the clause's
# one value, never the first number of the phrase.
_PREPOSITION = re.compile(r"(?:of|for|in|on|from|with|to|by)\b", re.IGNORECASE)
_INLINE_OVER_LINES = re.compile(r"(?:\$(?!\$)[^$\n]*|\\\((?:[^\\\n]|\\(?!\)))*)\n")
_HEADING_TAIL = re.compile(r"[*_:：#\]\) \t]*(?:\n|$)")
_BLOCK_OPEN = re.compile(r"\\\[|\$\$|\\begin")
_CLAUSE_MARK = re.compile(r"[.!?;。！？；\n]")
_SENTENCE_VALUE = re.compile(
    r"(?P<box>\\(?:boxed|fbox)\s*\{)"
    r"|(?P<math>\$\$[^$]{1,400}?\$\$|\$(?![\d,.]+\s+[A-Za-z]{2})[^$\n]{1,400}?\$|\\\((?:[^\\]|\\(?!\)))*?\\\))"
    r"|(?<![\w.])(?P<number>[-−]?\d+(?:,\d{3})*(?:\.\d+)?%?)(?![\w.]\d)"
)
_RELATION_IN_MATH = re.compile(r"=|<|>|\\(?:le|leq|ge|geq|neq|ne|approx|equiv|Rightarrow|implies)(?![A-Za-z])")
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


def close_code(text: str) -> str:
    """`text` with code blanked out as markdown closes it: a fence of three or more backticks runs to a fence at
    least as long (or the end); an inline span of n backticks to the next run of exactly n, else the backticks are
    literal. Nothing inside code commits; a box that markdown shows stays."""
    if "`" not in text:
        return text
    chars, position = list(text), 0
    fences = {match.start(1): len(match.group(1)) for match in _FENCE.finditer(text)}
    while True:
        run = _TICKS.search(text, position)
        if run is None:
            break
        start, length = run.start(), len(run.group())
        if start in fences:
            closing = next((m for m in _FENCE.finditer(text, run.end()) if len(m.group(1)) >= length), None)
            end = len(text) if closing is None else closing.end()
        else:
            closing = next((m for m in _TICKS.finditer(text, run.end()) if len(m.group()) == length), None)
            if closing is None:
                position = run.end()
                continue
            end = closing.end()
        chars[start:end] = [" " if char != "\n" else "\n" for char in text[start:end]]
        position = end
    return "".join(chars)


def final_section(text: str, delimiters: tuple[str, ...] | None = None) -> str | None:
    """The text after the last reasoning delimiter outside code (`</think>` by default), code blanked out; all of
    it when there is none (with the default delimiter); None when a `<think>` never closes, or when `delimiters`
    are given and none of them closes the reasoning (TRL's `reasoning_delimiters`: reasoning is required)."""
    text = close_code(text)
    ends = [text.rfind(delimiter) + len(delimiter) for delimiter in delimiters or ("</think>",) if delimiter in text]
    if ends:
        return text[max(ends) :]
    if delimiters:
        return None
    return None if "<think>" in text else text


def read_commitments(
    text: str, gold: str = "", delimiters: tuple[str, ...] | None = None, gold_values: int = 1
) -> Commitments | None:
    """The committed answer under the rule of the module docstring, or None when the completion commits to none.
    `gold` only lets its own words start an expression ("The answer is Evelyn"); `gold_values` is how many values
    the gold has (several boxes may give them together)."""
    section = final_section(text, delimiters)
    if section is None:
        return None
    if "<" in section:
        section = _ANSWER_TAG.sub(lambda tag: "\n" if "/" in tag.group() else "\nAnswer: ", section)
    boxes = outer_boxes(section)
    inside_box = _membership(boxes or [])
    markers = []
    for marker in _markers(section):  # lazily: a loop of markers stops the scan at MAX_MARKERS + 1
        if not inside_box(marker.start()):
            markers.append(marker)
            if len(markers) > MAX_MARKERS:
                break
    if boxes is None or len(markers) > MAX_MARKERS:
        return Commitments("", (), too_many=True)
    gold_words = {word.lower() for word in re.findall(r"[A-Za-z]+", gold)}
    events = [(start, end, "box", section[start:end]) for start, end in boxes]
    events += _marker_events(section, markers, gold_words)
    events.sort(key=lambda event: event[0])
    events = _without_nested(events)
    commitments = [event for event in events if event[2] != "correction"]
    corrections = (
        [event for event in events if event[2] == "correction" and event[0] < commitments[-1][0]]
        if (commitments)
        else []
    )
    if corrections:
        commitments = [event for event in commitments if event[0] > corrections[-1][0]]
    if not commitments:
        return None
    answer = commitments[-1][3]
    boxed = [event[3] for event in commitments if event[2] == "box"]
    if gold_values > 1 and len(boxed) > 1 and commitments[-1][2] == "box" and len(set(boxed)) == len(boxed):
        return Commitments(", ".join(boxed), ())  # several boxes that together give a several-valued gold
    if commitments[-1][2] != "box":
        return Commitments(answer, ())  # a commitment after the boxes is the answer: they were steps to it
    distinct = tuple(dict.fromkeys(value for value in boxed if value.strip() != answer.strip()))  # boxes agree
    return Commitments(answer, distinct[:MAX_COMMITMENTS], too_many=len(distinct) > MAX_COMMITMENTS)


# The marker words in lower case, each the start of a match of `_MARKER`: `str.find` finds them in C at a fraction of
# the cost of a case-insensitive alternation tried at every position.
_MARKER_STARTS = (
    "####", "ans", "result", "solu", "final", "edit", "correct", "actually", "no wait", "no, wait", "wait", "i mean",
    "oops", "scratch", "on second", "korrektur", "berichtigung", "en fait", "en realidad", "antwort", "ergebnis",
    "losung", "endergebnis", "reponse", "respuesta",
)  # fmt: skip
_NON_ASCII_STARTS = ("lösung", "réponse", "résultat", "答", "结果", "最终", "更正", "修正", "等等")
_LINE_A = re.compile(r"^[ \t]*A[ \t]*[:：]", re.MULTILINE)


def _markers(section: str):
    """`_MARKER.finditer(section)`, found from the places where a marker word starts."""
    lower = section.lower()
    if len(lower) != len(section):
        yield from _MARKER.finditer(section)
        return
    starts = {match.start() for match in _LINE_A.finditer(section)}
    for word in _MARKER_STARTS if lower.isascii() else _MARKER_STARTS + _NON_ASCII_STARTS:
        position = lower.find(word)
        while position >= 0:
            starts.add(position)
            if len(starts) > 8 * MAX_MARKERS:  # a loop: let the regular expression walk it, lazily
                yield from _MARKER.finditer(section)
                return
            position = lower.find(word, position + 1)
    reach = -1
    for start in sorted(starts):
        if start < reach:
            continue
        marker = _MARKER.match(section, start)
        if marker is not None:
            reach = marker.end()
            yield marker


def _without_nested(events: list[tuple]) -> list[tuple]:
    """Events whose place lies inside an earlier commitment's value belong to it ("The answer is 20 or
    \\boxed{18}" is one alternative-laden commitment, not a box after a marker)."""
    kept, reach = [], -1
    for event in events:
        if event[0] < reach:
            continue
        kept.append(event)
        if event[2] != "correction":
            reach = max(reach, event[1])
    return kept


def _marker_events(section: str, markers: list[re.Match], gold_words: set) -> list[tuple]:
    """(start, end, kind, value) of each marker that commits (kind "marker") or corrects (kind "correction",
    followed by a "marker" event where a value stands directly after it)."""
    events, line_start, previous = [], 0, 0
    for index, marker in enumerate(markers):
        stop = markers[index + 1].start() if index + 1 < len(markers) else len(section)
        stop = min(stop, marker.end() + MAX_EXPRESSION_CHARS)
        line_start = max(line_start, section.rfind("\n", previous, marker.start()) + 1)
        previous = marker.start()
        head = section[max(line_start, marker.start() - 40) : marker.start()]
        kind = marker.lastgroup
        if kind in ("correction", "cjk_correction"):
            loose = re.fullmatch(r"actually|wait", marker.group(), re.IGNORECASE)
            if loose and head.strip() and head.rstrip(" \t")[-1:] not in _CLAUSE_START:
                continue  # "she has to wait 5 minutes": these two correct only at the start of a clause
            events.append((marker.start(), marker.end(), "correction", None))
            value = _direct_value(section, marker.end(), stop, gold_words)
            if value is not None:
                events.append((marker.start() + 1, value[1], "marker", value[0]))
            continue
        if kind == "answer" and _talked_about(head):
            continue
        at_line_start = head.strip(" \t#*_>[").lower() in ("", "final", "the final", "our final")
        value = _marker_value(section, marker, stop, gold_words, at_line_start)
        if value is not None:
            events.append((marker.start(), value[1], "marker", value[0]))
    return events


def _marker_value(section: str, marker: re.Match, stop: int, gold_words: set, at_line_start: bool):
    """(value as written, where it ends) of the expression `marker` commits to; None when it commits to none
    (prose with no value or several, a negation, a question, a box: a marker that introduces a box is the box's
    own commitment)."""
    start = marker.end()
    if marker.lastgroup == "hashes" or marker.lastgroup == "line_a":
        value = _direct_value(section, start, stop, gold_words, link=False)
        if value is not None and marker.lastgroup == "hashes":
            line_end = section.find("\n", start, stop)
            rest = section[start : stop if line_end < 0 else line_end].replace(value[0], "", 1)
            if re.search(r"[A-Za-z]{2}", rest):
                return None  # "#### 1. Set up the equation": a markdown heading, not GSM8K's "#### 72"
        return value
    heading = _HEADING_TAIL.match(section, start)
    if heading and heading.end() > start and "\n" in heading.group() and at_line_start:
        start = heading.end()  # "## Answer\n10", "**Final Answer**\n\n20": the value is on the next line
        while start < stop and section[start] in " \t\n":
            start += 1
        return _direct_value(section, start, stop, gold_words, link=False, sentence=True)
    return _direct_value(section, start, stop, gold_words, sentence=True)


def _direct_value(section: str, start: int, stop: int, gold_words: set, link: bool = True, sentence: bool = False):
    """The value that stands after `start` (past a link, when `link`): the expression that starts there, else
    (with `sentence`) the one value of the clause; None for a negation, a question, or no value."""
    if link:
        start = _past_link(section, start, stop)
        if start is None:
            return None
    if _NEGATION.match(section, start):
        return None
    end_of_clause = _clause_end(section, start, stop)
    if section[end_of_clause : end_of_clause + 1] == "?":
        return None  # "Is the answer 20?" asks, it does not commit
    if _INLINE_OVER_LINES.match(section, start):
        return None  # inline math does not cross a line break (block math, `\\[ ... \\]`, may)
    preposition = _PREPOSITION.match(section, start)
    value = None if preposition else _expression(section, start, stop, gold_words)
    if value is not None:
        return value
    if not sentence or _BOX.search(section, start, end_of_clause):
        return None
    return _sentence_value(section, start, end_of_clause)


def _clause_end(section: str, start: int, stop: int) -> int:
    """Where the clause that starts at `start` ends: a line break, or `.`, `!`, `?`, `;` before a space or the end."""
    for mark in _CLAUSE_MARK.finditer(section, start, stop):
        after = mark.end()
        if mark.group() == "\n" or after == len(section) or section[after].isspace():
            return mark.start()
    return stop


def _past_link(section: str, position: int, stop: int) -> int | None:
    """Where the value starts after an answer word: past markup, punctuation and link verbs (a full stop only
    directly after the word: "Ans. 20", "**Answer.** 20"); None at a negation ("isn't")."""
    if section[position : position + 1] == ".":
        position += 1
    for _ in range(24):  # a link is a few words: "should be", "would then be", "comes out to be"
        symbol = _LINK_SYMBOL.match(section, position, stop)
        if symbol and symbol.end() > position:
            position = symbol.end()
            continue
        word = _LINK_WORD.match(section, position, stop)
        if word is None:
            break
        lower = word.group().lower()
        if lower.endswith(("n't", "n’t")):
            return None
        if lower not in LINK_WORDS:
            break
        position = word.end()
    return position


def _sentence_value(section: str, start: int, end: int) -> tuple[str, int] | None:
    """The one value of the clause `section[start:end]` ("Answer: she has 18 apples" commits 18); None when it
    has none or several different ones."""
    values = []
    for match in _SENTENCE_VALUE.finditer(section, start, end):
        if match.lastgroup == "box":
            return None
        text = match.group()
        if match.lastgroup == "math":
            inner = text.strip("$")
            if text.startswith("\\("):
                inner = text[2:-2]
            if re.fullmatch(r"\s*[A-Za-z]\s*", inner):
                continue  # "the largest $n$ is 34": a variable named, not a value
            if _RELATION_IN_MATH.search(inner):
                return None  # a relation in the clause states several values
            text = inner
        values.append((text.strip().replace(",", "") if match.lastgroup == "number" else text.strip(), match.end()))
        if len({value for value, _ in values}) > 1:
            return None
    if not values:
        words = [w.lower() for w in re.findall(r"[A-Za-z]+", section[start:end])]
        numbers = [w for w in words if w in NUMBER_WORDS]
        if len(set(numbers)) == 1:
            return numbers[0], end
        return None
    return values[-1]


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


def _expression(text: str, start: int, stop: int, gold_words: set) -> tuple[str, int] | None:
    """(The math that starts at `start`, where it ends) (see the module docstring); None when no expression starts
    there."""
    line_end = text.find("\n", start, stop)  # only block math crosses a line break: tokenize no further
    if line_end >= 0 and not _BLOCK_OPEN.search(text, start, line_end):
        stop = line_end + 1
    tokens = [(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text, start, stop)]
    begin = end = None
    alternative = False  # after "or", the rest of the clause is the alternative
    for position, (kind, token, token_start, token_end) in enumerate(tokens):
        lower = token.lower()
        following = next((t for t in tokens[position + 1 :] if t[0] != "space"), None)
        if kind == "stop":
            break
        if kind == "box" or kind == "math" and _HAS_BOX.search(token):
            if alternative:  # "The answer is 20 or \\boxed{18}": the box is offered as an alternative, in this value
                closed = outer_boxes(text[token_start : token_start + MAX_BOX_CHARS + len(token)], most=1)
                end = token_start + (closed[0][1] + 1 if closed else len(token))
                break
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
    return None if begin is None or end is None else (text[begin:end], end)


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
