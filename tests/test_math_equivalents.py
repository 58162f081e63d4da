"""Issue 38, items 2 to 5 (as issue 44 reads them): wrappers read through, echoes by meaning, units that change a
value, and the equivalents a gold admits. Each cause both ways: the honest answer scores 1, the wrong or evasive one 0
(one batch, and a failure lists every case that scored otherwise)."""

from support import math_cases_scored_otherwise

# (gold, completion, expected, problem): the problem matters to echoes and units
CASES = [
    # gold, completion, expected, problem
    ("10080", "\\boxed{10,\\!080}", 1, None),
    ("10080", "\\boxed{10,\\!081}", 0, None),
    ("10080", "\\boxed{10\\,080}", 1, None),
    ("10080", "\\boxed{10 080}", 1, None),
    ("10080", "\\boxed{10080}", 1, None),
    ("1, 2, 3", "\\boxed{1, 2 \\text{ and } 3}", 1, None),
    ("1, 2, 3", "\\boxed{1; 2; 3}", 1, None),
    ("1, 2, 3", "\\boxed{1, 2 \\text{ and } 4}", 0, None),
    ("x \\neq 3", "\\boxed{x != 3}", 1, None),
    ("x \\neq 3", "\\boxed{x \\ne 3}", 1, None),
    ("x \\neq 3", "\\boxed{x != 4}", 0, None),
    ("3 \\pm \\sqrt{2}", "\\boxed{3+\\sqrt{2}, 3-\\sqrt{2}}", 1, None),
    ("3 \\pm \\sqrt{2}", "\\boxed{\\{3-\\sqrt{2}, 3+\\sqrt{2}\\}}", 1, None),
    ("3 \\pm \\sqrt{2}", "\\boxed{3+\\sqrt{2}}", 0, None),
    ("3 \\pm \\sqrt{2}", "\\boxed{3+\\sqrt{2}, 3-\\sqrt{3}}", 0, None),
    ("3 \\pm \\sqrt{2}", "\\boxed{3 \\pm \\sqrt{2}}", 1, None),
    ("(2, 2), (6, 2)", "\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}", 1, None),
    ("(2, 2), (6, 2)", "\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 3)}", 0, None),
    ("5", "\\boxed{5} \\quad \\text{and} \\quad \\boxed{6}", 0, None),
    ("120", "\\boxed{5!}", 0, None),  # equal in value, more complex in form (issue 44)
    ("120", "\\boxed{6!}", 0, None),
    ("(5, 8)", "\\boxed{(x, y) = (5, 8)}", 1, None),
    ("(5, 8)", "\\boxed{(x, y) = (5, 9)}", 0, None),
    ("(-\\infty, 3]", "\\boxed{x \\le 3}", 1, None),
    ("(-\\infty, 3]", "\\boxed{x ≤ 3}", 1, None),
    ("(-\\infty, 3]", "\\boxed{(-∞, 3]}", 1, None),
    ("(-\\infty, 3]", "\\boxed{x < 3}", 0, None),
    ("(-\\infty, -2) \\cup (3, \\infty)", "\\boxed{x < -2 \\text{ or } x > 3}", 1, None),
    ("(-\\infty, -2) \\cup (3, \\infty)", "\\boxed{x < -2 \\text{ or } x > 4}", 0, None),
    ("[2, 5)", "\\boxed{\\{x \\mid 2 \\le x < 5\\}}", 1, None),
    ("[2, 5)", "\\boxed{\\{x \\mid 2 \\le x \\le 5\\}}", 0, None),
    ("\\text{Evelyn}", "\\boxed{\\text{the Evelyn}}", 1, None),
    ("\\text{east}", "\\boxed{\\text{the east}}", 1, None),
    ("18", "\\boxed{18\\,\\text{dollars}}", 1, "How many dollars?"),
    ("18", "\\boxed{18\\,\\text{dollars}}", 0, None),  # a unit the problem never names
    ("18", "\\boxed{\\mathrm{18}}", 1, None),
    ("18", "\\boxed{\\boxed{18}}", 1, None),
    ("18", "\\boxed{\\boxed{20} \\text{ or } 18}", 0, None),
    ("0.5", "\\boxed{50 \\text{ cents}}", 1, "How many dollars?"),  # converts to the same value (issue 44)
    ("0.5", "\\boxed{0.5 \\text{ cents}}", 0, "How many dollars?"),
    ("0.5", "\\boxed{\\$0.50}", 1, "How many dollars?"),
    ("50", "\\boxed{50¢}", 1, "How many cents?"),
    ("50", "\\boxed{50 \\text{ cents}}", 1, "How many cents?"),
    ("0.25", "\\boxed{25\\%}", 0, "What fraction?"),
    ("0.25", "\\boxed{25 \\text{ percent}}", 0, "What fraction?"),
    ("30", "\\boxed{30'}", 0, "How many degrees?"),
    ("30", "\\boxed{30 \\text{ arcminutes}}", 0, "How many degrees?"),
    ("5", "\\boxed{5 \\text{ per day}}", 1, "How many per day?"),
    ("5", "\\boxed{5/\\text{day}}", 1, "How many per day?"),
    ("5", "\\boxed{5 \\text{ dollars/day}}", 1, "How many dollars per day?"),
    ("\\frac{\\pi}{6}", "\\boxed{\\sin^{-1}(1/2)}", 0, "Compute $\\arcsin \\frac{1}{2}$."),
    ("\\frac{\\pi}{6}", "\\boxed{\\arcsin(1/2)}", 0, "Compute $\\arcsin \\frac{1}{2}$."),
    ("5\\sqrt{2}", "\\boxed{\\sqrt[2]{50}}", 0, "Simplify $\\sqrt{50}$."),
    ("2", "\\boxed{6 \\div 3}", 0, "Compute $6 \\div 3$."),
    ("2", "\\boxed{6/3}", 0, "Compute $6 \\div 3$."),
    ("6", "\\boxed{2 \\cdot 3}", 0, "Compute $2 \\times 3$."),
    ("6", "\\boxed{6/1}", 0, "Compute $2 \\times 3$."),  # a fraction not in lowest terms: more complex
    ("5", "\\boxed{|-5|}", 0, "Compute $\\left|-5\\right|$."),
    ("18", "`\\boxed{20}` is wrong; \\boxed{18}", 1, None),
    ("18", "\\boxed{18} ``` \\boxed{20}", 0, None),
]


def test_each_cause_scores_both_ways():
    assert math_cases_scored_otherwise(CASES) == {}
