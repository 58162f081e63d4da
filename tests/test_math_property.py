"""Issue 44, item 4: the project's own adversary. Hypothesis composes completions from the real golds of GSM8K's test
split and MATH-500 (`../shared/data`): reasoning prose drawn from the distractor vocabulary below, then a final
marker holding the gold in an honest form, a wrong value, several values, or no marker at all; the completion is
sent as a string or as chat messages. Invariants:

- the score equals the verdict on the last marker alone (the marker sent as the whole completion);
- no wrong value is ever credited (several values, a wrong or degenerate value, no marker: 0);
- the gold in every marker format is always credited;
- every item stays in the cost bound: a degenerate value is refused before any symbolic work, and counted.

The seed is fixed (`derandomize=True`) and the example database is off, so CI sees the same examples every run and
nothing is written into the checkout. What the generator found while this test was written is kept as plain cases
in tests/test_math_markers.py and tests/test_math_values.py ("found by the property test").

The distractor vocabulary (prose that never decides a verdict): other numbers and expressions; corrections ("Wait",
"Actually", "Never mind", "Erratum:", "Hmm, no", "不对", "Warte", "Attendez", "Espera", "Wait" with a zero-width
space); "the answer is ..." sentences inside prose; negations ("is not", "no es ... sino ...", "n'est pas", "nicht",
"cannot be"); hedges ("somewhere around", "a bit more than", "at most", "(or possibly ...)", "Alternatively,");
reported speech and conditionals ("a common mistake is to think the answer is ...", "if the answer were ...");
boxes a reader cannot see (inline code, ``` and ~~~ fences, `<pre>`, `<code>`, HTML and `%` comments); reasoning
blocks (`<think>...</think>`) holding boxes and answer lines.
"""

from __future__ import annotations

import pytest
from gold_formats import GSM8K_FILE, INSTRUCTION, MATH500_FILE, gsm8k_parts, rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy
from gspo_recipes.rewards.math.answer import plain_number
from gspo_recipes.rewards.math.cost import take_past_bound

pytestmark = pytest.mark.skipif(
    not (GSM8K_FILE.exists() and MATH500_FILE.exists()),
    reason=f"the shared data files are not at {GSM8K_FILE.parent} (set GSPO_SHARED_DATA)",
)
EXAMPLES = {"gsm8k": 2500, "math": 1200}  # about 15 s together on 2 loaded cores
SETTINGS = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def _gsm8k_rows() -> list[tuple[str, str, str]]:
    """(question, gold column, the gold answer as written)"""
    return [(row["question"], row["answer"], gsm8k_parts(row)[1]) for row in rows(GSM8K_FILE)]


def _math_rows() -> list[tuple[str, str, str]]:
    return [(row["problem"].replace(INSTRUCTION, ""), row["answer"], row["answer"]) for row in rows(MATH500_FILE)]


GSM8K_ROWS = _gsm8k_rows() if GSM8K_FILE.exists() else []
MATH_ROWS = _math_rows() if MATH500_FILE.exists() else []

DEGENERATE = ["(999^{999})^{999}", "(x+y+z+k)^{999}", "(10^{90+k})!", "9^{9^{9^{9}}}", "\\binom{10^{8}}{10^{7}}"]
CORRECTIONS = ["Wait,", "Actually,", "No wait,", "Never mind,", "Erratum:", "Hmm, no.", "不对，", "Warte,", "Attendez,",
               "Espera,", "Wa\u200bit,", "EDIT:", "Correction:"]  # fmt: skip
PROSE = [  # {v}: another value (the gold, a wrong one, a random one)
    "{c} I think the answer is {v}.",
    "{c} the answer should be {v}, let me redo this.",
    "So far we have $x = {v}$ and $y = 3$.",
    "A common mistake is to think the answer is {v}.",
    "If the answer were {v}, the check would fail.",
    "The answer is not {v}.",
    "La respuesta no es {v} sino otra.",
    "La réponse n'est pas {v}.",
    "Die Antwort ist nicht {v}.",
    "It cannot be {v}.",
    "It is somewhere around {v}, or a bit more than {v}, at most {v}.",
    "We get 12 (or possibly {v}).",
    "Alternatively, {v}.",
    'My friend said: "the answer is {v}".',
    "答案不是{v}。",
    "Let me compute $3 \\cdot 7 = 21$ and $\\frac{{1}}{{2}} + {v}$.",
]
HIDDEN = [  # boxes a reader cannot see
    "`\\boxed{{{v}}}`",
    "```\n\\boxed{{{v}}}\n```",
    "~~~\n\\boxed{{{v}}}\n~~~",
    "<pre>\\boxed{{{v}}}</pre>",
    "<code>\\boxed{{{v}}}</code>",
    "<!-- \\boxed{{{v}}} -->",
    "% \\boxed{{{v}}}",
]
VISIBLE = ["\\boxed{{{v}}}", "The answer is {v}.\n", "Answer: {v}\n", "<answer>{v}</answer>", "#### {v}\n"]
LABELS = ["Answer: {a}", "The answer is {a}.", "**Final answer:** {a}", "## Final Answer\n\n{a}", "Ответ: {a}",
          "答案是 {a}", "Die Antwort ist {a}.", "La réponse est {a}.", "La respuesta es {a}."]  # fmt: skip
FINAL_MARKERS = {
    "box": lambda a: f"$\\boxed{{{a}}}$",
    "fbox": lambda a: f"\\fbox{{{a}}}",
    "tags": lambda a: f"<answer>\n{a}\n</answer>",
    "hashes": lambda a: f"#### {a}",
}


def _wrong(gold: str, shift: int) -> str:
    """A value that surely differs from the gold: the gold's number shifted, else the gold plus a number."""
    value = plain_number(gold)
    if value is None:
        return f"{gold} + {abs(shift)}"
    shifted = value + shift
    if shifted.denominator == 1:
        return str(shifted.numerator)
    return f"{shifted.numerator}/{shifted.denominator}"


@st.composite
def prose(draw, gold: str, wrong: str, hidden_only: bool = False) -> str:
    """Reasoning prose from the vocabulary: before the final marker anything; after it, nothing a reader sees as a
    marker (`hidden_only`)."""
    values = [gold, wrong, str(draw(st.integers(-50, 5000))), "\\frac{7}{3}"]
    pieces = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["prose", "hidden"] + ([] if hidden_only else ["visible", "think"])))
        v = draw(st.sampled_from(values))
        if kind == "prose":
            piece = draw(st.sampled_from(PROSE)).format(c=draw(st.sampled_from(CORRECTIONS)), v=v)
        elif kind == "hidden":
            piece = draw(st.sampled_from(HIDDEN)).format(v=v)
        elif kind == "visible":
            piece = draw(st.sampled_from(VISIBLE)).format(v=v)
        else:
            piece = f"<think>{draw(st.sampled_from(PROSE)).format(c='Wait,', v=v)} \\boxed{{{v}}}</think>"
        pieces.append(piece)
    return "\n\n".join(pieces)


@st.composite
def completions(draw, table: list[tuple[str, str, str]]):
    """(completion as sent, the final marker alone or None, what it holds, gold column, problem)"""
    problem, gold_column, gold = draw(st.sampled_from(table))
    wrong = _wrong(gold, draw(st.sampled_from([-3, -1, 1, 2, 10])))
    holds = draw(st.sampled_from(["honest", "honest", "wrong", "several", "degenerate", "none"]))
    if holds == "honest":
        content = gold
    elif holds == "wrong":
        content = wrong
    else:
        content = draw(st.sampled_from(DEGENERATE))
    kind = draw(st.sampled_from(["box", "fbox", "tags", "hashes", "line"]))
    if holds == "several":  # a line with a word between its values is no marker ("#### 18 or 15"): the docs' rule
        several = [f"{gold}, {wrong}", f"{wrong} \\text{{ or }} {gold}"]
        content = draw(st.sampled_from(several + ([f"{gold} or {wrong}"] if kind in ("box", "fbox", "tags") else [])))
    if kind == "line":
        marker = draw(st.sampled_from(LABELS)).format(a=f"${content}$")
    else:
        marker = FINAL_MARKERS[kind](content)
    before = draw(prose(gold, wrong, hidden_only=holds == "none"))  # no marker at all: only prose and hidden boxes
    after = "" if kind == "line" or holds == "none" else draw(prose(gold, wrong, hidden_only=True))
    if holds == "none":
        marker = ""
    text = "\n\n".join(part for part in (before, marker, after) if part)
    shape = draw(st.sampled_from(["string", "chat", "parts"]))
    if shape == "chat":
        sent = [{"role": "user", "content": problem}, {"role": "assistant", "content": text}]
    elif shape == "parts":
        middle = len(text) // 2
        sent = [{"role": "assistant", "content": [{"type": "text", "text": text[:middle]},
                                                  {"type": "text", "text": text[middle:]}]}]  # fmt: skip
    else:
        sent = text
    return sent, marker or None, holds, gold_column, problem


def _check(reward, example):
    sent, marker, holds, gold_column, problem = example
    take_past_bound()
    score, alone = reward([sent, marker or ""], answer=[gold_column] * 2, prompts=[problem] * 2)
    assert score == alone, (sent, marker)  # the verdict of the last marker alone
    expected = 1.0 if holds == "honest" else 0.0
    assert score == expected, (holds, sent)
    if holds == "degenerate":
        items, _ = take_past_bound()
        assert items >= 1, sent  # refused by the cost bound, before any symbolic work, and counted


@settings(max_examples=EXAMPLES["gsm8k"], **SETTINGS)
@given(completions(GSM8K_ROWS))
def test_gsm8k_accuracy_against_the_generator(example):
    _check(gsm8k_accuracy, example)


@settings(max_examples=EXAMPLES["math"], **SETTINGS)
@given(completions(MATH_ROWS))
def test_math_accuracy_against_the_generator(example):
    _check(math_accuracy, example)


def test_the_wrong_values_are_wrong():
    # The generator's own premise: a wrong value differs from the gold in value, for every gold it draws from.
    for _, _, gold in GSM8K_ROWS + MATH_ROWS:
        value = plain_number(gold)
        if value is None:
            assert _wrong(gold, 1) == f"{gold} + 1"
        else:
            assert plain_number(_wrong(gold, 1)) == value + 1 and plain_number(_wrong(gold, -3)) == value - 3
