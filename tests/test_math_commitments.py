"""Issue 25: math verdicts read one committed place. Every example of the issue and more variants, in both graders,
as plain strings and as chat messages: honest answers pay 1.0 whatever prose surrounds them, wrong ones pay 0.0.

Each family is scored in one batch per grader (both completion forms in it), and a failure lists every case that
scored otherwise, so one run shows the whole picture.
"""

from fractions import Fraction

import pytest
from math_style_rows import GSM8K_ROWS, MATH_ROWS

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy
from gspo_recipes.rewards.math.answer import plain_number
from gspo_recipes.rewards.math.audit_cases import gold_answer, math_audit_cases
from gspo_recipes.rewards.math.verifier import RELATIVE, verify_final_answer

EGGS = "Janet's ducks lay 16 eggs per day. She sells 9 of them at $2 each. How many dollars does she make every day?"

# (completion, expected) with the gold 18, for both graders.
HONEST = [
    "The answer is 18, since 9 \\times 2 = 18.",
    "The answer is 18 because 9 eggs times 2 dollars is 18.",
    "\\boxed{18}. Does this make sense? Yes: 9 eggs at 2 dollars each is 18, not 20 or 16.",
    "Janet makes $\\boxed{18}$ dollars, or 1800 cents, every day.",
    "Answer: 18 (she sells 9 eggs at \\$2 each)",
    "The answer is 18. Let me double-check: could it be 20? No, 9 times 2 is 18.",
    "The answer is 18 dollars, or 1800 cents.",
    "The answer is: 18, which is 9 times 2.",
    "Answer — 18",
    "Answer -> 18",
    "**Final answer:** $18$, earned every day.",
    "The answer is 18! Simple.",
    "The answer's 18.",
    "## Answer\n18",
    "**Final Answer**\n\n$18$",
    "$$\\text{Answer} = 18$$",
    "She makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18",
    "\\boxed{18}. Maybe I made a mistake? Instead of 9 eggs, either 8 or 10 might be sold... no, 9. Rather sure.",
    "\\boxed{18}\nThe answer is not 20.",
    "\\boxed{18}. The answer is anything but 20.",
    "The answer is eighteen.",
    "\\boxed{18 \\text{ dollars}}",
    "\\boxed{\\$18}",
    "\\boxed{18 \\text{ eggs}}",  # a noun of the problem names what is counted
    "\\boxed{18 \\text{ dollars per day}}",
    "I think the answer is 18.",  # prose before the marker is not the answer
    "<think>The answer is 20? or 16.</think>\nThe answer is \\boxed{18}.",
    "We first thought 20. The answer is $\\boxed{18}$.",
    "The answer is correct now: \\boxed{18}",
    "Final Answer: The final answer is $18$. I hope it is correct.",
    "`The answer is 20` is what the code prints, but the answer is 18.",
    "The answer is 3 \\times 6 = \\boxed{18}.",
    "So the answer is $9 \\cdot 2 = \\boxed{18}$ dollars.",
    "#### 1. Count the eggs\nShe sells 9.\n#### 2. Price them\nThe answer is \\boxed{18}.",  # markdown headings
]
# The shapes real models end in (Qwen, DeepSeek, Llama chat templates), honest and wrong.
HONEST += [
    "Therefore, the final answer is: $\\boxed{18}$. I hope it is correct.",
    "**Final Answer**\n\\[\n\\boxed{18}\n\\]",
    "Thus, the answer is \\(\\boxed{18}\\).",
    "**Answer: 18**",
    "Answer: **18**",
    "The answer is **18**.",
    "ANSWER: 18",
    "Answer:\n18",
    "the answer is $18$ dollars.",
    "The answer is \\$18.",
    "The answer is $\\$18$.",
    "Final answer: \\(18\\)",
    "The answer is 18.00",
    "Answer: 18%",
    "The answer is: $18$",
    "The answer is: \\[18\\]",
    "### Final Answer\nThe total is $\\boxed{18}$.",
    "<think>\nLet me think. 9*2=18. Maybe 20? No.\n</think>\n\nJanet makes **$18** per day.\n\n**Answer:** 18",
    "The answer is 18 (dollars).",
    "The answer is 18, i.e. 9 \\times 2.",
    "The answer is $18$. \n\nVerification: $16 - 3 - 4 = 9$ and $9 \\times 2 = 18$. ✓",
    "\\boxed{18}\n\nThe answer is $\\boxed{18}$ dollars.",
    "Final Answer: $\\boxed{18}$",
    "The answer is 18.\n\n**Note**: the answer is not 20.",
    # Issue 38: the last commitment is the answer, and a correction word starts a new one.
    "The answer is 20, no wait: \\boxed{18}",
    "The answer is \\boxed{20}. Actually \\boxed{18}.",
    "The answer is 17 so \\boxed{18}",
    "\\boxed{20}. EDIT: 18",
    "\\boxed{20}\nCorrection: the answer is 18.",
    "\\boxed{18}\n\nLet's check our answer: 9 \\times 2 = 18.",
    "\\boxed{18}. Wait, let me check: 9 × 2 = 18. Yes.",
    "Is the answer 20? \\boxed{18}",
    "<think>hm</think><answer>18</answer>",
    "<think>hm</think>\n<answer>\nJanet makes 18 dollars a day.\n</answer>",
    "Answer: Janet makes 18 dollars a day.",
    "\\boxed{20}. Actually, it's 18.",
    "Die Antwort ist 18.",
    "答案是18",
    "```\n\\boxed{20}\n```\nThe answer is \\boxed{18}.",
    "`` a ` \\boxed{20} `` \\boxed{18}",
    "Answer \\[ \n 18 \n \\]",  # block math may cross line breaks
]
WRONG = [
    "The answer is not $18$.",
    "The answer is not 18.",
    "The answer is never 18.",
    "The answer is anything but 18.",
    "The answer isn't 18.",
    "\\boxed{18}\nAnswer = 20",
    "\\boxed{18}\nANS: 20",
    "\\boxed{18}\nAnswers: 20",
    "\\boxed{18}, so the answer's 20",
    "\\boxed{18}\n**Final Answer**\n\n20",
    "\\boxed{18}\n## Answer\n10",
    "\\boxed{18}\n$$\\text{Answer} = 10$$",
    "The answer is 18.\nThe answer is twenty.",
    "\\boxed{18}\nFinal answer: 20",
    "\\boxed{18}\nANSWER: 20",
    "\\boxed{18}\n### Final Answer\n20",
    "#### 18\nThe answer is 20",
    "\\boxed{20 ∨ 18}",
    "\\boxed{20 \\lor 18}",
    "\\boxed{20 \\vee 18}",
    "\\boxed{20 ≡ 18}",
    "\\boxed{x ＝ 18}",
    "\\boxed{20 ≈ 18}",
    "\\boxed{≈ 18}",
    "\\boxed{20 → 18}",
    "\\boxed{20 ⇒ 18}",
    "\\boxed{20 ⟹ 18}",
    "\\boxed{x ≔ 18}",
    "\\boxed{x := 18}",
    "\\boxed{20 ≠ 18}",
    "\\boxed{18 \\text{ (20 with tax)}}",
    "\\boxed{\\text{at least } 18}",
    "\\boxed{\\text{nearly } 18}",
    "\\boxed{up to 18}",
    "\\boxed{18\\text{-ish}}",
    "\\boxed{\\sim 18}",
    "\\boxed{~18}",
    "\\boxed{18 \\text{ or more}}",
    "\\boxed{\\not 18}",
    "\\boxed{\\neg 18}",
    "\\boxed{\\text{not } 18}",
    "\\boxed{18i}",
    "\\boxed{18x}",
    "\\boxed{18 \\pi}",
    "\\boxed{18e}",
    "\\boxed{18_{16}}",
    "\\boxed{18_{10}}",
    "\\boxed{18 \\text{ thousand}}",
    "\\boxed{18 \\text{ hundred}}",
    "\\boxed{\\$18\\text{k}}",
    "\\boxed{\\text{negative } 18}",
    "\\boxed{\\text{half of } 18}",
    "\\boxed{\\text{twice } 18}",
    "\\boxed{18 \\text{ dozen}}",
    "\\boxed{18 \\text{ tenths}}",
    "The answer is approximately 18.",
    "The answer is about 18.",
    "The answer is 18 or 20",
    "The answer is 18 or so.",
    "#### 18 or maybe 17",
    "The answer is 18, 20",
    "The answer is 18 and 20",
    "The answer is x = 18 = 20",
    "3 + 5 = 8, then 8 + 10 = 18",
    "<think>The answer is \\boxed{18}.</think>",
    "<think>The answer is \\boxed{18}.",
    "The answer is 20 or \\boxed{18}",
    "\\boxed{18}\n\n**Answer:** 20",
    "The answer is $\\boxed{18}$ or $\\boxed{20}$",
    "Answer: 18\nAnswer: 20",
    "\\boxed{18}. Final answer: twenty",
    "\\boxed{18}\n\\boxed{20}",
    "The answer is $18$ or $20$.",
    "Answer: 18 or 20",
    "The answer is ~18",
    "The answer is ≈18",
    "The answer is 18-ish",
    "The answer: at least 18",
    "**Answer:** approximately $18$",
    "The answer is 18 \\pm 2",
    "The answer is $18 \\text{ or } 20$",
    "\\boxed{18}\n\nANSWER = 19",
    "The answer is 18; the answer is 19.",
    "Answer: 18, 19, 20",
    "Final answer — 17",
    # Issue 38: a commitment after the box is read, in any of its forms; corrections commit.
    "\\boxed{18}. The answer should be 20.",
    "\\boxed{18}. The answer would be 20.",
    "\\boxed{18}. The answer equals 20.",
    "\\boxed{18}. The answer becomes 20.",
    "\\boxed{18}\n**Answer.** 20",
    "\\boxed{18}\nAnswer → 20",
    "\\boxed{18}\n[Answer] 20",
    "\\boxed{18}\nAns. 20",
    "\\boxed{18}\n<answer>20</answer>",
    "\\boxed{18}\nThe result is 20.",
    "\\boxed{18}\nFinal result: 20",
    "\\boxed{18}\nDie Antwort ist 20.",
    "\\boxed{18}\nLa réponse est 20.",
    "\\boxed{18}\nLa respuesta es 20.",
    "\\boxed{18}\n答案是20",
    "\\boxed{18}. EDIT: 20",
    "\\boxed{18}. Correction: 20",
    "\\boxed{18}. Actually 20.",
    "\\boxed{18}. Actually, it's 20.",
    "\\boxed{18} no wait, 20",
    "\\boxed{18}. I mean 20.",
    "\\boxed{18}. Korrektur: 20",
    "Answer: Janet makes 18 dollars on Monday and 20 on Tuesday.",
    "Answer: In 3 days she earns 54 dollars.",
    "Answer: In 3 days she earns 18 dollars.",  # two values in the clause: no commitment
    "the result of step 2 is 18",
    "Answer $\n18\n$",  # inline math does not cross a line break
    "\\boxed{20} ` \\boxed{18}",  # a lone backtick is text: both boxes are read, and disagree
]


def _score(grader, completions, gold, problem=EGGS):
    chats = [[{"role": "assistant", "content": text}] for text in completions]
    batch = completions + chats
    n = len(batch)
    if grader == "gsm8k":
        return gsm8k_accuracy(batch, answer=[f"#### {gold}"] * n, prompts=[problem] * n)
    return math_accuracy(batch, answer=[gold] * n, prompts=[problem] * n)


def _mismatches(grader, cases, gold="18", problem=EGGS):
    """{(form, completion): score} for every case that did not score as expected."""
    scores = _score(grader, [text for text, _ in cases], gold, problem)
    expected = [pay for _, pay in cases] * 2
    forms = ["string"] * len(cases) + ["chat"] * len(cases)
    return {(form, text): score for form, (text, _), score, pay in zip(forms, cases * 2, scores, expected)
            if score != pay}  # fmt: skip


@pytest.mark.parametrize("grader", ["gsm8k", "math"])
def test_honest_answers_pay_whatever_prose_explains_or_checks_them(grader):
    assert _mismatches(grader, [(text, 1.0) for text in HONEST]) == {}


@pytest.mark.parametrize("grader", ["gsm8k", "math"])
def test_wrong_answers_negations_and_disagreeing_commitments_pay_nothing(grader):
    assert _mismatches(grader, [(text, 0.0) for text in WRONG]) == {}


# MATH-style golds: (gold, completion, expected)
MATH_CASES = [
    ("\\frac{14}{3}", "$\\boxed{\\frac{14}{3}}$, or $4\\frac{2}{3}$ as a mixed number.", 1.0),
    ("\\frac{639}{40}", "\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}", 1.0),
    ("\\frac{639}{40}", "\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{640}{40}}", 0.0),
    ("\\frac{14}{3}", "\\boxed{4\\frac{2}{3}}", 1.0),
    ("\\frac{14}{3}", "\\boxed{4.666667}", 0.0),
    ("0.15", "\\boxed{(15.00001\\%)}", 0.0),
    ("0.15", "\\boxed{15.00001\\%}", 0.0),
    ("0.15", "\\boxed{0.1500001}", 0.0),
    ("0.15", "\\boxed{0.15}", 1.0),
    ("1.25", "\\boxed{1.250000}", 1.0),
    ("1.25", "\\boxed{1.2500004}", 0.0),
    ("9", "\\boxed{9\\pi}", 0.0),
    ("9", "\\boxed{9 pi}", 0.0),
    ("9", "\\boxed{9e}", 0.0),
    ("9\\pi", "\\boxed{9}", 0.0),
    ("9\\pi", "\\boxed{9\\pi}", 1.0),
    ("90^\\circ", "\\boxed{90 \\text{ radians}}", 0.0),
    ("90^\\circ", "\\boxed{90^\\circ}", 1.0),
    ("90^\\circ", "\\boxed{90 \\text{ degrees}}", 1.0),
    ("2k", "\\boxed{2}", 0.0),
    ("2k", "\\boxed{2k}", 1.0),
    ("6i", "\\boxed{6}", 0.0),
    ("6i", "\\boxed{6i}", 1.0),
    ("3x", "\\boxed{3}", 0.0),
    ("3x", "\\boxed{3x}", 1.0),
    ("18000", "\\boxed{18 \\text{ thousand}}", 1.0),
    ("1000_2", "\\boxed{1000}", 0.0),
    ("1000_2", "\\boxed{1000_2}", 1.0),
    ("x=5", "\\boxed{x=5 + 1 = x=5}", 0.0),
    ("x=5", "\\boxed{x = 5}", 1.0),
    ("x=5", "\\boxed{x = 6}", 0.0),
    ("\\text{Evelyn}", "The answer is Evelyn.", 1.0),
    ("\\text{Evelyn}", "The answer is Evelyn or Carla.", 0.0),
    ("\\text{(C)}", "\\boxed{\\text{(C)}}", 1.0),
    ("\\text{(C)}", "The answer is (C), since 16 is largest.", 1.0),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "The answer is $(3, \\frac{\\pi}{2})$, as $r = 3$.", 1.0),
    ("[2,5)", "The domain is $\\boxed{[2, 5)}$, because $5 - x > 0$.", 1.0),
    ("[2,5)", "\\boxed{2 \\le x < 5}", 1.0),
    ("[2,5)", "\\boxed{2 \\le x \\le 5}", 0.0),
    ("-2, 2", "\\boxed{2, -2}", 1.0),
    ("-2, 2", "\\boxed{2 \\text{ or } -2}", 0.0),
    ("\\frac{1}{2}", "\\boxed{9^{9^{9^{9}}}}", 0.0),
    ("\\frac{1}{2}", "\\boxed{2^{100000}}", 0.0),
    ("\\frac{1}{2}", "\\boxed{10000!}", 0.0),
]


def test_math_golds_are_read_as_the_answers_are():
    by_gold: dict[str, list] = {}
    for gold, completion, pay in MATH_CASES:
        by_gold.setdefault(gold, []).append((completion, pay))
    problem = "Compute it."
    failures = {gold: _mismatches("math", cases, gold, problem) for gold, cases in by_gold.items()}
    # A unit the problem names is dropped, but never one that changes the value: radians are not degrees.
    failures["radians"] = _mismatches("math", [("\\boxed{90 \\text{ radians}}", 0.0)], "90^\\circ",
                                      "Convert $\\frac{\\pi}{2}$ radians to degrees.")  # fmt: skip
    assert {gold: cases for gold, cases in failures.items() if cases} == {}


ECHOES = [
    ("Simplify $\\sqrt{242}$.", "11\\sqrt{2}",
     ["\\left( \\sqrt{242} \\right)", "1\\cdot\\sqrt{242}", "242^{1/2}", "\\sqrt{242}+0", "\\sqrt{242}^1"],
     ["11\\sqrt{2}", "\\sqrt{2} \\cdot 11"]),
    ("Compute $99^2+99+1$ in your head.", "9901",
     ["99\\cdot 99+99+1", "(99^2+99+1)", "1+99+99^2", "99^{2}+99+1"], ["9901"]),
    ("Compute $\\dbinom{31}{28}$.", "4495", ["{31 \\choose 28}", "\\binom{31}{28}"], ["4495"]),
    ("Express $\\frac{3}{20}$ as a decimal.", "0.15", ["3/20", "\\cfrac{3}{20}", "{3}\\over{20}"], ["0.15"]),
    ("Compute $2 \\cdot 3^2$.", "18", ["3^2 \\cdot 2", "2 \\times 3^{2}"], ["18"]),
    ("Factor $x^2 + 7x + 10$.", "(x+2)(x+5)", ["10 + 7x + x^2", "\\left(x^2+7x+10\\right)"],
     ["(x+5)(x+2)"]),
    ("What is $\\sqrt{53}$ in simplest radical form?", "\\sqrt{53}", [], ["\\sqrt{53}", "\\sqrt{53}^1"]),
]  # fmt: skip


@pytest.mark.parametrize("problem, gold, echoes, honest", ECHOES, ids=[row[1] for row in ECHOES])
def test_an_echo_of_the_problem_dressed_up_is_still_an_echo(problem, gold, echoes, honest):
    cases = [(f"\\boxed{{{text}}}", 0.0) for text in echoes] + [(f"\\boxed{{{text}}}", 1.0) for text in honest]
    assert _mismatches("math", cases, gold, problem) == {}


def test_the_worked_solutions_and_gold_solutions_of_the_datasets_are_accepted():
    solutions = [solution for _, solution, _ in MATH_ROWS]
    problems = [problem for problem, _, _ in MATH_ROWS]
    assert math_accuracy(solutions, answer=[gold for *_, gold in MATH_ROWS], prompts=problems) == [1.0] * len(MATH_ROWS)
    assert math_accuracy(solutions, solution=solutions, prompts=problems) == [1.0] * len(MATH_ROWS)
    golds = [solution for _, solution in GSM8K_ROWS]
    questions = [question for question, _ in GSM8K_ROWS]
    assert gsm8k_accuracy(golds, answer=golds, prompts=questions) == [1.0] * len(GSM8K_ROWS)


def _loop(unit: str, size: int = 20_000) -> str:
    return (unit * (size // len(unit) + 1))[:size]


DEGENERATE = [
    _loop("so the answer is "),
    _loop("\\boxed{"),
    "\\boxed{" + _loop("\\begin{pmatrix} ") + "}",
    "The answer is " + _loop("18 or "),
    _loop("Answer: x\n"),
    "".join(f"Answer: {i}\n" for i in range(3000)),
    _loop("#### "),
    _loop("{"),
    _loop("```"),
    "\\boxed{" + "9^{" * 500 + "9" + "}" * 500 + "}",
    _loop("The answer is $\\frac{1}{2}$ or \\boxed{3}. "),
]


@pytest.mark.parametrize("grader", ["gsm8k", "math"])
def test_repetition_loops_score_zero_never_none(grader):
    # Their cost is measured in benchmarks/bench_degenerate.py, not here: this checks the verdicts.
    assert _mismatches(grader, [(text, 0.0) for text in DEGENERATE]) == {}
    # A loop of the right answer is a loop too (more than MAX_MARKERS commitments); a few repeats are one answer.
    assert _score(grader, [_loop("The answer is 18. "), "The answer is 18. " * 5], "18") == [0.0, 1.0, 0.0, 1.0]


def test_the_tolerance_path_cannot_raise():
    # sympy cannot turn the percent's leftover symbol into a float: that is a wrong answer, not an error.
    assert verify_final_answer("0.15", True, "(15.00001\\%)", RELATIVE) == 0.0
    assert verify_final_answer("0.15", True, "x + 0.15", RELATIVE) == 0.0


@pytest.mark.parametrize("row", [{"problem": p, "solution": s} for p, s, _ in MATH_ROWS[:12]], ids=range(12))
def test_every_generated_audit_case_is_certain(row):
    gold = gold_answer(row)
    cases = math_audit_cases(row)
    for family, text, _ in cases:
        if family == "tolerance_near_miss":  # a near miss differs in value from the gold
            assert Fraction(text[len("\\boxed{") : -1]) != plain_number(gold), text
        if "=" in gold:  # a relation gold gets no "wrong = gold" relation cases
            assert family != "relation_wrong_rhs", text
    assert {family for family, _, pay in cases if pay} <= {"equivalent", "explained"}
