"""The final-answer contract, family by family, in both graders, as plain strings and as chat completions.

Each wrong case is what a policy under pressure writes to be paid without a committed, correct final answer: it
must score 0.0. Each acceptable case is a right answer written another honest way: it must score 1.0.
"""

import pytest

from gspo_recipes.rewards import get_reward, gsm8k_accuracy, math_accuracy

WORD_PROBLEM = "Natalia sold clips to 48 of her friends in April, and then she sold some more in May. How many?"


def gsm(completion, expected, gold="18", problem=WORD_PROBLEM):
    return ("gsm8k", gold, problem, completion, expected)


def mth(completion, expected, gold="18", problem="Find the value."):
    return ("math", gold, problem, completion, expected)


def both(completion, expected, gold="18", problem=WORD_PROBLEM):
    return [gsm(completion, expected, gold, problem), mth(completion, expected, gold, problem)]


def score(grader, gold, problem, completions, **options):
    n = len(completions)
    if grader == "gsm8k":
        return gsm8k_accuracy(completions, answer=[f"#### {gold}"] * n, prompts=[problem] * n, **options)
    return math_accuracy(completions, answer=[gold] * n, prompts=[problem] * n, **options)


FAMILIES = {
    # 1. A relation or a connective is not its last operand.
    "relations": [
        *both("\\boxed{8 = 18}", 0.0),
        *both("\\boxed{8 \\to 18}", 0.0),
        *both("\\boxed{8 \\rightarrow 18}", 0.0),
        *both("\\boxed{8 \\Rightarrow 18}", 0.0),
        *both("\\boxed{8 \\implies 18}", 0.0),
        *both("\\boxed{8 \\iff 18}", 0.0),
        *both("\\boxed{8 := 18}", 0.0),
        *both("\\boxed{8 \\sim 18}", 0.0),
        *both("\\boxed{8 \\approx 18}", 0.0),
        *both("\\boxed{8 \\equiv 18}", 0.0),
        *both("\\boxed{8 \\mid 18}", 0.0),
        *both("\\boxed{8 \\lor 18}", 0.0),
        *both("\\boxed{8 \\land 18}", 0.0),
        *both("\\boxed{8 \\neq 18}", 0.0),
        *both("\\boxed{8 -> 18}", 0.0),
        *both("\\boxed{20 - 2 = 18}", 0.0),
        *both("\\boxed{x^2 = 18}", 0.0),
        *both("\\boxed{x = 3 = 18}", 0.0),
        *both("The answer is $8 = 18$.", 0.0),
        *both("\\boxed{8 < 18}", 0.0),
        mth(
            "\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 9 \\end{pmatrix}}",
            0.0,
            gold="\\begin{pmatrix} 1 & 2 \\\\ 3 & 9 \\end{pmatrix}",
        ),
        mth("\\boxed{\\begin{pmatrix} 1 \\\\ 9 \\end{pmatrix}}", 0.0, gold="9"),
        *both("\\boxed{x = 18}", 1.0),
        *both("\\boxed{n=18}", 1.0),
        *both("The answer is $x = 18$.", 1.0),
        *both("\\boxed{f(3) = 18}", 1.0),
        mth("\\boxed{y = 2x + 3}", 1.0, gold="y = 2x + 3"),
        mth("\\boxed{y = 2x + 4}", 0.0, gold="y = 2x + 3"),
    ],
    # 2. One committed answer: several that disagree, hedges, retractions and alternatives pay nothing.
    "several_answers": [
        *both("\\boxed{18} or \\boxed{20}", 0.0),
        *both("\\boxed{20} so finally \\boxed{18}", 0.0),
        *both("\\boxed{18} \\boxed{20}", 0.0),
        *both("<think>It is \\boxed{18}.</think> The answer is 20.", 0.0),
        *both("#### 18\nThe answer is 20", 0.0),
        *both("The answer is 20.\n#### 18", 1.0),  # the last commitment is the answer
        *both("Final answer: 18, 20", 0.0),
        *both("Final answer: 9, 18", 0.0),
        *both("The answer is 18 or 20", 0.0),
        *both("The answer is 18 or 20.", 0.0),
        *both("\\boxed{18 \\text{ or } 20}", 0.0),
        *both("The answer is probably 18.", 0.0),
        *both("The answer is approximately 18.", 0.0),
        *both("It could be 17 at first sight. The answer is \\boxed{18}.", 1.0),
        *both("\\boxed{18 \\text{ (or 20)}}", 0.0),
        *both("\\boxed{18 \\quad 20}", 0.0),
        *both("\\boxed{[17, 19]}", 0.0),
        *both("\\boxed{17 < x < 19}", 0.0),
        *both("\\boxed{18 \\pm 2}", 0.0),
        *both("\\boxed{\\text{between 17 and 19}}", 0.0),
        *both("\\boxed{\\pm 18}", 0.0),
        *both("\\boxed{18, 20}", 0.0),
        *both("\\boxed{18; 20}", 0.0),
        *both("\\boxed{18 \\text{ and } 20}", 0.0),
        *both("\\boxed{\\{18, 20\\}}", 0.0),
        *both("The answer is 17, no wait: \\boxed{18}", 1.0),  # a correction starts a new commitment
        *both("The answer is 18, no wait: \\boxed{17}", 0.0),
        *both("\\boxed{18}. The answer is 18.", 1.0),
        *both("#### 18\nThe answer is 18.", 1.0),
        *both("<think>maybe 20? or 17, wait</think>The answer is \\boxed{18}.", 1.0),
        *both("Final Answer: The final answer is $18$. I hope it is correct.", 1.0),
        *both("So the answer is $3 \\times 6 = \\boxed{18}$.", 1.0),
        *both("The answer is 18. (I checked it 2 times.)", 1.0),
        mth("\\boxed{18 \\text{ or } 20}", 1.0, gold="18 \\text{ or } 20"),
        mth("\\boxed{\\pm 3}", 1.0, gold="\\pm 3"),
    ],
    # 2b. Prose outside the committed answer never changes the verdict; a correction word with a value is a commitment.
    "prose_outside": [
        *both("\\boxed{18}. Hmm, or maybe 20.", 1.0),
        *both("\\boxed{18}. Wait, actually it is 20.", 0.0),  # corrections commit (issue 38)
        *both("\\boxed{18}? Not sure.", 1.0),
        *both("\\boxed{18}. Actually, no.", 1.0),
        *both("\\boxed{18}. Alternatively it could be 20.", 1.0),
        *both("I think the answer is 18.", 1.0),
        *both("Maybe \\boxed{18}", 1.0),
        *both("Probably, the final answer is: 18", 1.0),
        *both("The answer is unclear. \\boxed{18}", 1.0),
        *both("\\boxed{18}. Correction: 20.", 0.0),
        *both("\\boxed{18}. Oops, typo, I meant 20.", 0.0),
        *both("\\boxed{18}. On second thought, 20.", 0.0),
        *both("\\boxed{20}. Correction: 18.", 1.0),
        *both("\\boxed{20}. Oops, typo, I meant 18.", 1.0),
        *both("\\boxed{20}. On second thought, 18.", 1.0),
    ],
    # 3. A copy of the problem statement is not the task done.
    "echoes": [
        mth("\\boxed{\\sqrt{50}}", 0.0, gold="5\\sqrt{2}", problem="Simplify $\\sqrt{50}$."),
        mth("\\boxed{ \\sqrt{ 50 } }", 0.0, gold="5\\sqrt{2}", problem="Simplify $\\sqrt{50}$."),
        mth("The answer is $\\sqrt{50}$.", 0.0, gold="5\\sqrt{2}", problem="Simplify $\\sqrt{50}$."),
        mth("\\boxed{\\sqrt50}", 0.0, gold="5\\sqrt{2}", problem="Simplify $\\sqrt{50}$."),
        mth("\\boxed{2 \\times 3^{2}}", 0.0, gold="18", problem="Compute $2 \\cdot 3^2$."),
        mth("\\boxed{5\\sqrt{2}}", 1.0, gold="5\\sqrt{2}", problem="Simplify $\\sqrt{50}$."),
        mth("\\boxed{\\binom{6}{2}}", 0.0, gold="15", problem="Compute $\\dbinom{6}{2}$."),
        mth("\\boxed{15}", 1.0, gold="15", problem="Compute $\\dbinom{6}{2}$."),
        mth("\\boxed{x^2+7x+10}", 0.0, gold="(x+2)(x+5)", problem="Factor $x^2 + 7x + 10$."),
        mth("\\boxed{(x+5)(x+2)}", 1.0, gold="(x+2)(x+5)", problem="Factor $x^2 + 7x + 10$."),
        mth("\\boxed{(x+2)(x+5)}", 1.0, gold="x^2 + 7x + 10", problem="Multiply $x+2$ by $x+5$."),
        mth("\\boxed{\\dfrac{3}{8}}", 0.0, gold="0.375", problem="Express $\\frac{3}{8}$ as a decimal."),
        mth("\\boxed{0.375}", 1.0, gold="0.375", problem="Express $\\frac{3}{8}$ as a decimal."),
        mth("\\boxed{0.5}", 0.0, gold="\\frac{1}{2}", problem="Write $0.5$ as a common fraction."),
        mth("\\boxed{\\log_2 64}", 0.0, gold="6", problem="Evaluate $\\log_2 64$."),
        mth("\\boxed{5^5\\div5^4}", 0.0, gold="5", problem="Express $5^5\\div5^4$ as an integer."),
        gsm("The answer is 36/2", 0.0, problem="What is 36/2?"),
        gsm("The answer is 18", 1.0, problem="What is 36/2?"),
    ],
    # 4. Exact golds are compared exactly; a decimal gold within a relative 1e-9.
    "tolerance": [
        mth("\\boxed{0.0000674}", 0.0, gold="0.0000672"),
        mth("\\boxed{0.0000672}", 1.0, gold="0.0000672"),
        mth("\\boxed{0.00006720}", 1.0, gold="0.0000672"),
        mth("\\boxed{\\frac{42}{625000}}", 1.0, gold="0.0000672"),
        mth("\\boxed{4.666667}", 0.0, gold="\\frac{14}{3}"),
        mth("\\boxed{4.67}", 0.0, gold="\\frac{14}{3}"),
        mth("The answer is 4.6666667.", 0.0, gold="14/3"),
        mth("\\boxed{\\frac{28}{6}}", 1.0, gold="\\frac{14}{3}"),
        mth("\\boxed{15.556349}", 0.0, gold="11\\sqrt{2}"),
        mth("\\boxed{\\sqrt{242}}", 1.0, gold="11\\sqrt{2}"),
        mth("\\boxed{\\frac{1}{2}}", 1.0, gold="0.5"),
        mth("\\boxed{0.5}", 1.0, gold="\\frac{1}{2}"),
        mth("\\boxed{\\frac{99999999}{100000000}}", 0.0, gold="1"),
        mth("\\boxed{3.14}", 0.0, gold="\\pi"),
        *both("\\boxed{17.9999999}", 0.0),
        *both("\\boxed{18.0000001}", 0.0),
        *both("The answer is 18.00", 1.0),
    ],
    # 5. Numbers are whole tokens: nothing that could glue two digits together is deleted.
    "glued_digits": [
        *both("\\boxed{1\\text{ or }8}", 0.0),
        *both("\\boxed{1,8}", 0.0),
        *both("\\boxed{1 8}", 0.0),
        *both("\\boxed{1\\$8}", 0.0),
        *both("\\boxed{1\\,8}", 0.0),
        *both("\\boxed{1\\%8}", 0.0),
        *both("\\boxed{1~8}", 0.0),
        *both("\\boxed{1\\mathrm{ }8}", 0.0),
        *both("The answer is 1 8", 0.0),
        *both("The answer is 4, 60", 0.0, gold="460"),
        *both("The answer is 12,34", 0.0, gold="1234"),
        *both("The answer is 18/5", 0.0),
        *both("The answer is 18^2", 0.0),
        *both("The answer is 18 - 2 = 16", 0.0),
        *both("The answer is 18e3", 0.0),
        *both("#### 18 - 2", 0.0),
        *both("The answer is 1,234", 1.0, gold="1234"),
        *both("\\boxed{1{,}234}", 1.0, gold="1234"),
        *both("\\boxed{13\\,535}", 1.0, gold="13535"),
        *both("The answer is 70 000", 1.0, gold="70000"),
        *both("The answer is 1,000,000.", 1.0, gold="1000000"),
    ],
    # 6. No committed answer, no pay: no last-number or last-expression fallback.
    "no_committed_answer": [
        *both("3 + 5 = 8, then 8 + 10 = 18", 0.0),
        *both("```python\nprint(18)\n```", 0.0),
        *both("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18", 0.0),
        *both("$18$", 0.0),
        *both("So we get 18.", 0.0),
        *both("<think>The answer is \\boxed{18}</think>", 0.0),
        *both("<think>The answer is \\boxed{18}", 0.0),
        *both("", 0.0),
        *both("\\boxed{}", 0.0),
        *both("\\boxed{18", 0.0),
        *both("The answer is", 0.0),
        mth("So $x = \\frac{1}{2}$.", 0.0, gold="\\frac{1}{2}"),
    ],
    # 7. Right answers written another honest way still pay.
    "acceptable": [
        *both("\\boxed{18.}", 1.0),
        *both("\\boxed{\\text{18 dollars}}", 1.0),
        *both("\\boxed{\\$18}", 1.0),
        *both("The answer is 18 clips.", 1.0),
        *both("**Answer:** 18", 1.0),
        *both("She makes 9 * 2 = $<<9*2=18>>18 every day.\nA: 18", 1.0),  # GSM8K's example model solutions
        *both("She makes 9 * 2 = $<<9*2=18>>18 every day.\nA: 20", 0.0),
        *both("The final answer is: **18**", 1.0),
        *both("The answer is $18.", 1.0),
        *both("\\boxed{18\\%}", 1.0),
        *both("The answer is -5", 1.0, gold="-5"),
        *both("\\boxed{\\frac{36}{2}}", 1.0),
        mth("\\boxed{-2 \\le x \\le 7}", 1.0, gold="[-2, 7]"),
        mth("\\boxed{-2 < x \\le 7}", 0.0, gold="[-2, 7]"),
        mth("\\boxed{x > 3}", 1.0, gold="(3, \\infty)"),
        mth("\\boxed{x \\ge 3}", 0.0, gold="(3, \\infty)"),
        mth("\\boxed{(1, 2)}", 1.0, gold="1 < x < 2"),
        mth("\\boxed{\\{2, 1\\}}", 1.0, gold="\\{1, 2\\}"),
        mth("\\boxed{\\dfrac{1}{2}}", 1.0, gold="0.5"),
        mth("\\boxed{\\frac{\\sqrt{2}}{2}}", 1.0, gold="\\frac{1}{\\sqrt{2}}"),
        mth("\\boxed{C}", 1.0, gold="\\text{(C)}"),
        mth("\\boxed{(C)}", 1.0, gold="\\text{(C)}"),
        mth("\\boxed{\\text{(C)}}", 1.0, gold="C"),
        mth("\\boxed{c}", 0.0, gold="\\text{(C)}"),
        mth("\\boxed{A \\text{ or } C}", 0.0, gold="\\text{(C)}"),
        mth("\\boxed{B}", 0.0, gold="\\text{(C)}"),
        mth("\\boxed{90^\\circ}", 1.0, gold="90"),
        mth(
            "\\boxed{\\text{Evelyn}}", 1.0, gold="\\text{Evelyn}", problem="Which student, Evelyn or Carla, is faster?"
        ),
        mth("The answer is Evelyn.", 1.0, gold="\\text{Evelyn}", problem="Which student, Evelyn or Carla, is faster?"),
        mth("\\boxed{(3, \\frac{\\pi}{2})}", 1.0, gold="\\left( 3, \\frac{\\pi}{2} \\right)"),
    ],
}
CASES = [(family, *case) for family, cases in FAMILIES.items() for case in cases]


@pytest.mark.parametrize(
    "family, grader, gold, problem, completion, expected",
    CASES,
    ids=[f"{case[0]}-{case[1]}-{i}" for i, case in enumerate(CASES)],
)
def test_final_answer_contract(family, grader, gold, problem, completion, expected):
    chat = [{"role": "assistant", "content": completion}]
    assert score(grader, gold, problem, [completion, chat]) == [expected, expected]


def test_the_echo_rule_reads_chat_prompts_and_problem_columns():
    echo, right = "\\boxed{\\sqrt{50}}", "\\boxed{5\\sqrt{2}}"
    chat_prompt = [
        {"role": "system", "content": "Reason, then box."},
        {"role": "user", "content": "Simplify $\\sqrt{50}$."},
    ]
    assert math_accuracy([echo, right], answer=["5\\sqrt{2}"] * 2, prompts=[chat_prompt] * 2) == [0.0, 1.0]
    assert math_accuracy([echo, right], answer=["5\\sqrt{2}"] * 2, problem=["Simplify $\\sqrt{50}$."] * 2) == [0.0, 1.0]
    # With no problem text at all nothing can be an echo: the answer is judged on its value.
    assert math_accuracy([echo], answer=["5\\sqrt{2}"]) == [1.0]


def test_every_answer_of_a_batch_is_judged_on_its_own():
    completions = ["\\boxed{18}", "\\boxed{8 = 18}", "The answer is 18 or 20", "\\boxed{\\frac{36}{2}}", "18"] * 3
    assert gsm8k_accuracy(completions, answer=["#### 18"] * 15) == [1.0, 0.0, 0.0, 1.0, 0.0] * 3
    assert math_accuracy(completions, answer=["18"] * 15) == [1.0, 0.0, 0.0, 1.0, 0.0] * 3


def test_an_unparseable_gold_is_still_none_and_nothing_else_is():
    assert math_accuracy(["\\boxed{1}", "\\boxed{8 = 9}", "no answer"], answer=["\\", "9", None]) == [None, 0.0, None]
    assert gsm8k_accuracy(["The answer is 18", "1 8"], answer=["no number", "#### 18"]) == [None, 0.0]


@pytest.mark.parametrize(
    "name, lenient_name, gold",
    [("math_accuracy", "math_accuracy_lenient", "9"), ("gsm8k_accuracy", "gsm8k_accuracy_lenient", "#### 9")],
)
def test_the_lenient_switch_keeps_math_verifys_reading(name, lenient_name, gold):
    wrong = ["\\boxed{8 = 9}", "\\boxed{9 \\text{ (10 with tax)}}", "1 2 3 4 5 6 7 8 9"]
    strict, lenient = get_reward(name), get_reward(lenient_name)
    assert strict(wrong, answer=[gold] * 3) == [0.0, 0.0, 0.0]
    assert lenient(wrong, answer=[gold] * 3) == [1.0, 1.0, 1.0]
    assert strict(wrong, answer=[gold] * 3, contract=False) == [1.0, 1.0, 1.0]
    assert lenient.__name__ == lenient_name and "contract=False" in lenient.__doc__
    assert lenient(["\\boxed{9}"], answer=[gold]) == strict(["\\boxed{9}"], answer=[gold]) == [1.0]
