"""Where a completion's answer is: its last answer marker (docs/rewards.md, "The rule").

After the last reasoning delimiter (`</think>` by default, or TRL's `reasoning_delimiters`; a `<think>` that never
closes has no answer), in what a reader can see (code, fences, `<pre>`, HTML comments and `%` LaTeX comments are
blanked out), the markers are:

- a box, `\\boxed{...}` or `\\fbox{...}` (the outermost; boxes side by side in one sentence, fewer than
  `MAX_BOX_GAP` characters apart with no line or sentence end between them, are one marker holding several values:
  `\\boxed{17} or \\boxed{18}` holds two);
- `<answer>...</answer>`;
- a `####` line (`#### 72`: the line's rest, when it does not start with a word and is one short value, as on an
  answer line: "#### Step 1" and "#### 1. Set up" are markdown headings);
- an answer line: the last non-empty line, when it starts with an answer label (`ANSWER_LABELS`, in any markdown
  markup: a heading, a quote, a bullet, bold, a table's last row `| **Answer** | 18 |`) followed by one value
  (`short_value`: math and symbols, then at most `MAX_LINE_WORDS` words, then closing punctuation). A label alone
  on the line before the last ("**Final Answer**" then "18") counts as the same line.

The answer is the content of the marker that starts last; a marker inside another belongs to it. Prose is never
read: text after the last marker changes nothing, and with no marker there is no answer.

Bounded time: every scan is linear; a box's braces are matched within `MAX_BOX_CHARS`, and more than `MAX_MARKERS`
boxes is a repetition loop, not an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_MARKERS = 64  # boxes: more than this many is a repetition loop, not an answer
MAX_BOX_CHARS = 1000  # a box that does not close within this many characters is no answer (none is longer)
MAX_LINE_WORDS = 4  # an answer line's value: "18 square feet per second", never a sentence
MAX_LINE_CHARS = 500  # an answer line's or `####` line's value; MATH-500's longest answer has 66 characters

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")
_ANSWER_TAGS = re.compile(r"<\s*answer\s*>(.*?)<\s*/\s*answer\s*>", re.IGNORECASE | re.DOTALL)
_HASHES = re.compile(r"^[ \t]*####[ \t]*(?![^\W\d_]{2})(\S[^\n]*)$", re.MULTILINE)

# Answer labels, by language. A label ending in its verb ("The answer is") needs no colon; the others need one.
ANSWER_LABELS = {
    "English": (r"(?:the\s+)?(?:final\s+)?answer\s+is|(?:final\s+)?answer", "is"),
    "German": (r"(?:die\s+)?(?:endgültige\s+)?antwort\s+(?:ist|lautet)|(?:endgültige\s+)?antwort", "ist"),
    "French": (r"(?:la\s+)?r[ée]ponse(?:\s+finale)?\s+est|r[ée]ponse(?:\s+finale)?", "est"),
    "Spanish": (r"(?:la\s+)?respuesta(?:\s+final)?\s+es|respuesta(?:\s+final)?", "es"),
    "Portuguese": (r"(?:a\s+)?resposta(?:\s+final)?\s+é|resposta(?:\s+final)?", "é"),
    "Italian": (r"(?:la\s+)?risposta(?:\s+finale)?\s+è|risposta(?:\s+finale)?", "è"),
    "Russian": (r"(?:окончательный\s+)?ответ", ""),
    "Chinese": (r"(?:最终)?答案(?:应该|应)?(?:是|为)|(?:最终)?答案", "是"),
    "Japanese": (r"答えは|答え", "は"),
}
_LABEL = "|".join(pattern for pattern, _ in ANSWER_LABELS.values())
_VERB_ENDINGS = ("is", "ist", "lautet", "est", "es", "é", "è", "是", "为", "は")
_MARKUP = r"[ \t]*(?:#{1,6}[ \t]*|>[ \t]*|[-+][ \t]+|\|[ \t]*)?[*_]*[ \t]*"  # heading, quote, bullet, table row
_LABEL_LINE = re.compile(
    rf"{_MARKUP}(?P<label>{_LABEL})(?![^\W\d_])[*_]*[ \t]*(?P<colon>[:：=|])?[*_]*[ \t]*(?P<value>.*?)[ \t|]*$",
    re.IGNORECASE,
)
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]", re.DOTALL)
_NUMBER = re.compile(r"-?[\d,]{1,30}(?:\.\d{1,30})?")
_SENTENCE_BREAK = re.compile(r"[.!?;。！？；](?=\s+\S)")
# One value: symbols and single letters, then up to MAX_LINE_WORDS words, then closing punctuation.
_VALUE_SHAPE = re.compile(
    rf"[^A-Za-z\u00C0-\u024F\u0400-\u04FF]*?(?:(?<![^\W\d_])[A-Za-z](?![^\W\d_])[^A-Za-z]*?)*"
    rf"(?:\s*[^\W\d_]{{2,}}){{0,{MAX_LINE_WORDS}}}[\s.!。！)*_]*"
)
_SENTENCE_END = re.compile(r"\n|[.!?;。！？；](?:\s|\$|\\[)\]]|$)")
MAX_BOX_GAP = 80  # boxes further apart than this are two answers, not one
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[^\n]*$", re.MULTILINE)
_TICKS = re.compile(r"`+")
_HIDDEN_BLOCKS = re.compile(
    r"<!--.*?(?:-->|\Z)|<\s*(pre|code)\b[^>]*>.*?(?:<\s*/\s*\1\s*>|\Z)", re.IGNORECASE | re.DOTALL
)


@dataclass(frozen=True)
class Marker:
    """The last answer marker: its kind ("box", "tags", "hashes", "line") and the values it holds, as written
    (several only for boxes side by side)."""

    kind: str
    values: tuple[str, ...]


def final_marker(text: str, delimiters: tuple[str, ...] | None = None) -> Marker | None:
    """The completion's last answer marker (the module docstring), or None when it has none."""
    section = final_section(text, delimiters)
    if section is None:
        return None
    found = []  # (start, end, kind, values)
    boxes = outer_boxes(section)
    if boxes is None:
        return None  # a repetition loop of boxes
    for start, end in boxes:
        found.append((start, end, "box", (section[start:end],)))
    for match in _ANSWER_TAGS.finditer(section) if "<" in section else ():
        found.append((match.start(), match.end(), "tags", (match.group(1),)))
    for match in _HASHES.finditer(section) if "####" in section else ():
        if short_value(match.group(1)):  # "#### Step 1: set up": a markdown heading
            found.append((match.start(), match.end(), "hashes", (match.group(1),)))
    line = _answer_line(section)
    if line is not None:
        found.append(line)
    if not found:
        return None
    found.sort(key=lambda item: (item[0], -item[1]))
    outermost, reach = [], -1
    for item in found:
        if item[0] >= reach:  # a marker inside another belongs to it
            outermost.append(item)
            reach = item[1]
    start, _, kind, values = outermost[-1]
    if kind == "box":
        values = _box_run(section, boxes, start)
    elif kind == "tags":
        values = (_without_label(values[0]),)
    return Marker(kind, tuple(unwrap(value) for value in values))


def _box_run(section: str, boxes: list[tuple[int, int]], last_start: int) -> tuple[str, ...]:
    """The contents of the last box and of the boxes side by side with it (one sentence, MAX_BOX_GAP apart)."""
    index = next(i for i, (start, _) in enumerate(boxes) if start == last_start)
    run = [boxes[index]]
    while index > 0:
        previous_end = boxes[index - 1][1] + 1
        gap = _BOX.sub("", section[previous_end : boxes[index][0]], count=1)
        if len(gap) > MAX_BOX_GAP or _SENTENCE_END.search(gap):
            break
        index -= 1
        run.insert(0, boxes[index])
    return tuple(section[start:end] for start, end in run)


def _answer_line(section: str) -> tuple[int, int, str, tuple[str]] | None:
    """(start, end, "line", (value,)) of the answer line, or None (the module docstring)."""
    end = len(section.rstrip())
    if end == 0:
        return None
    start = section.rfind("\n", 0, end) + 1
    for opening, closing in (("\\[", "\\]"), ("$$", "$$")):  # display math over several lines is one line
        if section.endswith(closing, 0, end) and opening not in section[start : end - len(closing)]:
            opened = section.rfind(opening, 0, end - len(closing))
            if opened >= 0:
                start = section.rfind("\n", 0, opened) + 1
            break
    match = _LABEL_LINE.fullmatch(section[start:end].replace("\n", " "))
    if match is None or not match.group("value").strip(" \t*_"):
        previous_end = len(section[:start].rstrip())
        if previous_end == 0:
            return None
        previous_start = section.rfind("\n", 0, previous_end) + 1
        heading = _LABEL_LINE.fullmatch(section[previous_start:previous_end])
        if heading is None or heading.group("value").strip(" \t*_:："):
            return None
        value, start = section[start:end], previous_start  # "**Final Answer**" then the value on its own line
    else:
        if not (match.group("colon") or match.group("label").lower().endswith(_VERB_ENDINGS)
                or re.match(r"\$|\\[(\[]", match.group("value"))):  # fmt: skip
            return None  # "Answer 18": a label needs its colon, its verb, or math right after it
        value = match.group("value")
    value = value.strip().strip("*_").strip()
    if not short_value(value):
        return None
    return start, end, "line", (value,)


def short_value(value: str) -> bool:
    """Whether a line's rest is one value: math and bare symbols (numbers, operators, single letters), then at most
    MAX_LINE_WORDS words (a unit: "18 eggs", "(C) Plane"), then closing punctuation; no sentence, no words before
    or between values ("17, no wait: 18", "Janet makes 18")."""
    if _NUMBER.fullmatch(value):
        return True
    if len(value) > MAX_LINE_CHARS:
        return False  # no answer is that long: a repetition loop, read no further
    prose = _MATH.sub(" 0 ", value)
    prose = re.sub(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{[^{}]*\}", " 0 ", prose)
    prose = re.sub(r"\\(?:begin|end)\s*\{[^{}]*\}|\\(?:[A-Za-z]+|.)", " ", prose)
    return _VALUE_SHAPE.fullmatch(prose) is not None and not _SENTENCE_BREAK.search(prose)


def _without_label(content: str) -> str:
    """`<answer>The answer is 18</answer>` holds 18: a label at the start of a tag's content is markup."""
    match = _LABEL_LINE.fullmatch(content.strip())
    if match and (match.group("colon") or match.group("label").lower().endswith(_VERB_ENDINGS)):
        return match.group("value")
    return content


def unwrap(value: str) -> str:
    """A marker's value without the dress around it: math delimiters, bold, a closing full stop, and a box that
    is all of it (`Answer: $\\boxed{18}$.`)."""
    value = value.strip()
    if _NUMBER.fullmatch(value):
        return value
    for _ in range(3):
        previous = value
        value = re.sub(r"^(?:\$\$?|\\\(|\\\[|\*\*|__)\s*", "", value)
        value = re.sub(r"\s*(?:\$\$?|\\\)|\\\]|\*\*|__)$", "", value)
        value = value.rstrip(" .。").strip()  # never "!": `5!` is a factorial
        boxes = outer_boxes(value, most=2)
        if boxes and len(boxes) == 1 and _BOX.match(value) and boxes[0][1] == len(value) - 1:
            value = value[boxes[0][0] : boxes[0][1]].strip()
        if value == previous:
            break
    return value


# ----------------------------------------------------------------------------------------------------------------
# What a reader sees


def final_section(text: str, delimiters: tuple[str, ...] | None = None) -> str | None:
    """The visible text after the last reasoning delimiter (`</think>` by default); all of it when there is none
    (with the default delimiter); None when a `<think>` never closes, or when `delimiters` are given and none of
    them is there (TRL's `reasoning_delimiters`: reasoning is required)."""
    text = visible(text)
    ends = [text.rfind(delimiter) + len(delimiter) for delimiter in delimiters or ("</think>",) if delimiter in text]
    if ends:
        return text[max(ends) :]
    if delimiters:
        return None
    return None if "<think>" in text else text


def visible(text: str) -> str:
    """`text` with what a reader of the rendered answer cannot see blanked out (same length, newlines kept): code
    fences of backticks or tildes and inline code as markdown closes them, `<pre>` and `<code>` blocks, HTML
    comments, and `%` LaTeX comments (a `%` outside braces that starts a line or follows a space after no
    number)."""
    chars = None
    if "`" in text or "~~~" in text:
        chars = list(text)
        _blank_code(text, chars)
    if "<" in text:
        chars = chars or list(text)
        for match in _HIDDEN_BLOCKS.finditer(text):
            _blank(chars, match.start(), match.end())
    if "%" in text:
        chars = chars or list(text)
        _blank_percent_comments(text, chars)
    return text if chars is None else "".join(chars)


def _blank(chars: list[str], start: int, end: int) -> None:
    chars[start:end] = [char if char == "\n" else " " for char in chars[start:end]]


def _blank_code(text: str, chars: list[str]) -> None:
    """A fence of three or more backticks or tildes runs to a fence of the same character at least as long (or
    the end); an inline span of n backticks to the next run of exactly n, else the backticks are literal."""
    fences = {match.start(1): match.group(1) for match in _FENCE.finditer(text)}
    position = 0
    while True:
        candidates = [start for start in fences if start >= position]
        run = _TICKS.search(text, position)
        fence_start = min(candidates) if candidates else None
        if run is None and fence_start is None:
            return
        if fence_start is not None and (run is None or fence_start <= run.start()):
            opening = fences[fence_start]
            closing = next(
                (m for m in _FENCE.finditer(text, fence_start + len(opening))
                 if m.group(1)[0] == opening[0] and len(m.group(1)) >= len(opening)),
                None,
            )  # fmt: skip
            end = len(text) if closing is None else closing.end()
            _blank(chars, fence_start, end)
            position = end
            continue
        length = len(run.group())
        closing = next((m for m in _TICKS.finditer(text, run.end()) if len(m.group()) == length), None)
        if closing is None:
            position = run.end()
            continue
        _blank(chars, run.start(), closing.end())
        position = closing.end()


def _blank_percent_comments(text: str, chars: list[str]) -> None:
    for match in re.finditer(r"(?<!\\)%", text):
        start = match.start()
        line_start = text.rfind("\n", 0, start) + 1
        before = text[line_start:start]
        if before.count("{") - before.count("\\{") > before.count("}") - before.count("\\}"):
            continue  # "\\boxed{$28$ %}": inside a group, where a comment would leave the braces open
        if before and not before[-1].isspace():
            continue  # "18%", "x%": a percent sign
        if before.strip() and before.rstrip()[-1].isdigit():
            continue  # "18 %"
        line_end = text.find("\n", start)
        _blank(chars, start, len(text) if line_end < 0 else line_end)


# ----------------------------------------------------------------------------------------------------------------
# Boxes


def boxed_contents(text: str) -> list[str]:
    """The contents of every outermost `\\boxed{...}` / `\\fbox{...}` in `text`, braces matched."""
    return [text[start:end] for start, end in outer_boxes(text, most=None) or []]


def outer_boxes(text: str, most: int | None = MAX_MARKERS) -> list[tuple[int, int]] | None:
    """(start, end) of the content of every box not inside another; None when there are more than `most`.
    Each box is matched within MAX_BOX_CHARS: a box that does not close there is no answer."""
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
