"""Issue 44, item 1: the answer is the content of the completion's last answer marker, read by one closed rule.

Each row is what a user would see in a run: a completion (gold 18 unless the row says otherwise) and its score.
"""

import pytest

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy
from gspo_recipes.rewards.math.marker import ANSWER_LABELS, final_marker, visible

GOLD = "#### 18"

MARKERS = [  # (completion, score): the markers and where the answer is
    ("9 \\cdot 2 = 18, so $\\boxed{18}$.", 1.0),
    ("$\\fbox{18}$", 1.0),
    ("<think>9 + 9</think><answer>18</answer>", 1.0),
    ("<answer>\nThe answer is 18\n</answer>", 1.0),  # a label inside the tags is markup
    ("9 + 9 = 18\n#### 18", 1.0),
    ("9 + 9 = 18\n\nAnswer: 18", 1.0),
    ("9 + 9 = 18\n\nThe answer is $18$.", 1.0),
    ("9 + 9 = 18\n\n**Final answer:** $18$", 1.0),
    ("9 + 9 = 18\n\n## Final Answer\n\n$18$", 1.0),  # a label alone, the value on the last line
    ("9 + 9 = 18\n\nAnswer: \\[\n18\n\\]", 1.0),  # display math over several lines is one line
    ("| Step | Value |\n|---|---|\n| Eggs left | 9 |\n| **Answer** | 18 |", 1.0),  # a table's last row
    ("| Step | Value |\n|---|---|\n| **Answer** | 18 |\n| Check | 9 + 9 |", 0.0),
    ("Ответ: 18", 1.0),
    ("答案应该是18", 1.0),
    ("答案：18", 1.0),
    ("Die Antwort ist 18.", 1.0),
    ("La réponse est 18.", 1.0),
    ("La respuesta es 18.", 1.0),
    # Text after the last marker changes nothing.
    ("\\boxed{18} Wait, I should double-check... 9 + 9 = 18. Yes.", 1.0),
    ("\\boxed{18}\n\nWait, actually, the answer is 20.", 1.0),  # a correction in prose does not count
    ("\\boxed{18}. No, it's not 18, it's 20.", 1.0),
    ("\\boxed{18}. EDIT: 20", 1.0),
    ("\\boxed{18}\n#### Check: every step agrees", 1.0),  # a markdown heading is no `####` line
    ("\\boxed{18}\n#### 1. Set up the equation again", 1.0),
    # The last marker is the answer.
    ("\\boxed{20}\n\nAnswer: 18", 1.0),
    ("\\boxed{18}\n\nAnswer: 20", 0.0),
    ("The answer is 18.\n\n#### 20", 0.0),
    ("#### 20\n\n\\boxed{18}", 1.0),
    ("<answer>20</answer> so finally \\boxed{18}", 1.0),
    ("\\boxed{18} and then <answer>20</answer>", 0.0),
    # An answer line is the last non-empty line, a label with one short value.
    ("The answer is 18.\nI hope it is correct.", 0.0),
    ("So the answer is 18.", 0.0),  # no label at the start of the line
    ("Answer: Janet sells 16 - 3 - 4 = 9 eggs and makes 18 dollars every day.", 0.0),
    ("Answer: 18. She sells nine eggs.", 0.0),
    ("Answer 18", 0.0),  # a label needs its colon, its verb or math after it
    ("Answer $18$", 1.0),
    # Found by the property test: a line with a word between two values is no answer line and no `####` line,
    # so the box before it stays the last marker; between delimiters (a box, tags) the same words are its values.
    ("\\boxed{18}\n\n#### 18 or 15", 1.0),
    ("\\boxed{15}\n\n#### 18 or 15", 0.0),
    ("\\boxed{18}\n\nAnswer: 18 or 15", 1.0),
    ("#### 18, 15", 0.0),
    ("Answer: $18 \\text{ or } 15$", 0.0),
    ("<answer>18 or 15</answer>", 0.0),
    # No marker: 0, whatever the prose says.
    ("9 + 9 = 18", 0.0),
    ("the answer is obviously 18 as computed", 0.0),
    ("<think>\\boxed{18}", 0.0),  # a reasoning block that never closes has no answer
    ("<think>The answer is \\boxed{18}.</think>", 0.0),  # inside the reasoning is no answer
    ("", 0.0),
]
INVISIBLE = [  # boxes a reader cannot see are no markers
    "\\boxed{18}\n<!-- \\boxed{20} -->",
    "\\boxed{18}\n% \\boxed{20}",
    "\\boxed{18} % \\boxed{20}",
    "\\boxed{18}\n~~~\n\\boxed{20}\n~~~",
    "\\boxed{18}\n```latex\n\\boxed{20}\n```",
    "\\boxed{18}\n<pre>\\boxed{20}</pre>",
    "\\boxed{18} and `\\boxed{20}`",
    "\\boxed{18}\n<code>\\boxed{20}</code>",
    "\\boxed{18}\n<!-- unclosed \\boxed{20}",
]


@pytest.mark.parametrize("completion, expected", MARKERS)
def test_the_last_marker_decides(completion, expected):
    assert gsm8k_accuracy([completion], answer=[GOLD]) == [expected]


@pytest.mark.parametrize("completion", INVISIBLE)
def test_boxes_a_reader_cannot_see_are_no_markers(completion):
    assert gsm8k_accuracy([completion], answer=[GOLD]) == [1.0]
    swapped = completion.replace("18", "X").replace("20", "18").replace("X", "20")
    assert gsm8k_accuracy([swapped], answer=[GOLD]) == [0.0]  # the hidden right answer is never read


def test_percent_signs_are_not_comments():
    assert gsm8k_accuracy(["She keeps 50% of them: \\boxed{18}"], answer=[GOLD]) == [1.0]
    assert math_accuracy(["\\boxed{28 \\%}", "\\boxed{$28$ %}"], answer=["28\\%"] * 2) == [1.0, 1.0]
    assert visible("18 % of it") == "18 % of it"


def test_boxes_side_by_side_are_one_marker():
    # For a one-value gold each box must hold it; "or" between boxes offers two answers.
    completions = ["\\boxed{17} or \\boxed{18}", "\\boxed{18}, \\boxed{17}", "\\boxed{18} = \\boxed{\\frac{36}{2}}"]
    assert math_accuracy(completions, answer=["18"] * 3) == [0.0, 0.0, 0.0]
    assert math_accuracy(["\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}"], answer=["\\frac{639}{40}"]) == [
        1.0
    ]
    # In separate sentences the last box is the marker.
    assert math_accuracy(["First \\boxed{17}. Then it is \\boxed{18}."], answer=["18"]) == [1.0]
    # Several values for a several-valued gold.
    assert math_accuracy(["\\boxed{1} and \\boxed{-2}"], answer=["1, -2"]) == [1.0]


def test_reasoning_delimiters_as_trl_passes_them():
    assert math_accuracy(["<R>\\boxed{1}</R>\\boxed{2}"], answer=["2"], reasoning_delimiters=["</R>"]) == [1.0]
    assert math_accuracy(["\\boxed{2}"], answer=["2"], reasoning_delimiters=["</R>"]) == [0.0]
    assert final_marker("a `</think>` in code\n\\boxed{2}") is not None


def test_the_label_languages_are_a_closed_documented_set():
    assert set(ANSWER_LABELS) == {
        "English", "German", "French", "Spanish", "Portuguese", "Italian", "Russian", "Chinese", "Japanese",
    }  # fmt: skip
    assert gsm8k_accuracy(["Svar: 18"], answer=[GOLD]) == [0.0]  # Swedish is not in the set
