"""Issue 44, item 2: what the last marker holds must be one value, strictly equal to the gold: equal in value, in a
form no more complex than the gold's, with a unit that is the gold's or the problem's or converts to the same value.
Each cause both ways, the honest answer 1 and the wrong or evasive one 0."""

import pytest
from support import math_cases_scored_otherwise

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy
from gspo_recipes.rewards.math.form import complexity, no_more_complex

SIMPLIFY = "Simplify $\\sqrt{242}$."
SUM = "Compute $\\frac{1}{20} + \\frac{2}{20}$."
ROPE = "A rope is 600 meters long and 60 meters are cut off. How many meters are left?"
SNAIL = "A snail crawls 2 inches per second for 2 seconds. How fast does it go, in inches per second?"
CASES = [  # (gold, completion, expected, problem)
    # One value: several different values in the marker score 0.
    ("18", "\\boxed{18 \\text{ or } 20}", 0, None),
    ("18", "\\boxed{[17, 19]}", 0, None),
    ("18", "\\boxed{\\{18, 20\\}}", 0, None),
    ("18", "\\boxed{17 \\le x \\le 19}", 0, None),
    ("18", "\\boxed{18 \\pm 1}", 0, None),
    ("18", "\\boxed{\\approx 18}", 0, None),
    ("18", "\\boxed{18 \\text{ thousandths}}", 0, None),  # scale words are part of the value, never cut off
    ("18", "\\boxed{18 per cent}", 0, None),
    ("18", "\\boxed{18 to the power of 2}", 0, None),
    ("18", "\\boxed{18 \\bmod 5}", 0, None),
    ("\\text{(C)}", "\\boxed{\\text{(C) and (D)}}", 0, None),
    ("\\text{(C)}", "\\boxed{(C) or (D)}", 0, None),
    ("\\text{(C)}", "\\boxed{(C) Plane}", 1, None),
    ("\\text{(C)}", "\\boxed{(D) Plane}", 0, None),
    ("\\text{(C)}", "\\boxed{C}", 1, None),
    # A several-valued gold: the set must match exactly.
    ("3, 5, 7", "\\boxed{x=3,\\ x=5,\\ x=7}", 1, None),
    ("3, 5, 7", "\\boxed{7, 3, 5}", 1, None),
    ("3, 5, 7", "\\boxed{3, 5}", 0, None),
    ("3, 5, 7", "\\boxed{3, 5, 7, 9}", 0, None),
    # The form rule: equal in value is not enough; a restatement of the problem is never an answer.
    ("\\frac{3}{20}", "\\boxed{0+\\frac{3}{20}}", 0, SUM),
    ("\\frac{3}{20}", "\\boxed{3\\cdot20^{-1}}", 0, SUM),
    ("\\frac{3}{20}", "\\boxed{\\frac{1}{20} + \\frac{2}{20}}", 0, SUM),
    ("\\frac{3}{20}", "\\boxed{\\frac{3}{20}}", 1, SUM),
    ("\\frac{3}{20}", "\\boxed{0.15}", 1, SUM),
    ("11\\sqrt{2}", "\\boxed{1\\sqrt{242}}", 0, SIMPLIFY),
    ("11\\sqrt{2}", "\\boxed{\\sqrt{242}}", 0, SIMPLIFY),
    ("11\\sqrt{2}", "\\boxed{242^{1/2}}", 0, SIMPLIFY),
    ("11\\sqrt{2}", "\\boxed{\\sqrt{2} \\cdot 11}", 1, SIMPLIFY),
    ("1024", "\\boxed{2^{10}}", 0, None),
    ("120", "\\boxed{5!}", 0, None),
    ("6", "\\boxed{\\frac{12}{2}}", 0, None),
    ("\\frac{1}{2}", "\\boxed{0.5}", 1, None),
    ("0.5", "\\boxed{\\frac{1}{2}}", 1, None),
    ("\\frac{3\\sqrt{2}}{4}", "\\boxed{\\frac{3}{4}\\sqrt{2}}", 1, None),
    # Units: the gold's or the problem's, or converting to the same value.
    ("540", "\\boxed{540 \\text{ m}}", 1, ROPE),
    ("540", "\\boxed{540 \\text{ cm}}", 0, ROPE),
    ("540", "\\boxed{54000 \\text{ cm}}", 1, ROPE),
    ("540", "\\boxed{0.54 \\text{ km}}", 1, ROPE),
    ("540", "\\boxed{540 \\text{ kg}}", 0, ROPE),  # a kind the problem never names
    ("4", "\\boxed{4\\,\\text{in/s}}", 1, SNAIL),
    ("4", "\\boxed{4 \\text{ inches per second}}", 1, SNAIL),
    ("4", "\\boxed{4 \\text{ feet per second}}", 0, SNAIL),
    ("4", "\\boxed{4 \\text{ inches per minute}}", 0, SNAIL),
    ("30", "\\boxed{30 \\text{ seconds}}", 0, "It took 30 minutes. How many minutes did it take?"),
    ("30", "\\boxed{30 \\text{ minutes}}", 1, "It took 30 minutes. How many minutes did it take?"),
    ("0.5", "\\boxed{50 \\text{ cents}}", 1, "Each costs $2. How many dollars is half of one fourth?"),
    ("18", "Answer: 18 eggs", 1, "How many eggs does she sell?"),
]


def test_each_value_rule_both_ways():
    assert math_cases_scored_otherwise(CASES) == {}


def test_any_text_in_a_marker_is_bounded_without_an_exception():
    # Found by math-verify's own suite: a unicode superscript digit crashed the cost bound's reader.
    texts = ["\\boxed{1,000.99m²}", "\\boxed{x²+1}", "\\boxed{٣}", "\\boxed{" + "(" * 80 + "1" + ")" * 80 + "}"]
    assert math_accuracy(texts, answer=["1000.99"] * 4) == [0.0] * 4


def test_gsm8k_pays_the_number_not_an_expression_for_it():
    completions = ["\\boxed{18}", "\\boxed{18.00}", "\\boxed{\\$18}", "\\boxed{\\frac{36}{2}}", "\\boxed{9 \\cdot 2}"]
    assert gsm8k_accuracy(completions, answer=["#### 18"] * 5) == [1.0, 1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "text, measure",
    [
        ("18", (0, 0)),
        ("-\\frac{3}{4}", (0, 0)),
        ("\\frac{6}{8}", (1, 8)),  # not in lowest terms: measured as written
        ("11\\sqrt{2}", (2, 11)),
        ("0+\\frac{3}{20}", (2, 20)),
        ("x^2 + 2x + 1", (4, 2)),
        ("(1, 2), (3, 4)", (0, 4)),
        ("90^\\circ", (0, 0)),
        ("18 \\text{ eggs}", (0, 0)),
    ],
)
def test_the_form_measure(text, measure):
    assert complexity(text) == measure


def test_the_form_rule_compares_both_parts():
    assert no_more_complex("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}")
    assert not no_more_complex("(x+1)^2", "x^2")
    assert not no_more_complex("\\sqrt{20}", "2\\sqrt{5}")  # fewer operations, a larger integer
