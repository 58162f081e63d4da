"""What a repetition loop costs the trainer's process: a batch of 8 degenerate completions, scored by the math rewards.

A collapsing policy writes the same few tokens until the length limit. The math rewards find the last answer marker
in linear scans (`gspo_recipes/rewards/math/marker.py`), so a batch of 8 completions of up to 100 KB must cost the
trainer's process at most about 1 s; and a batch of 8 answers whose evaluation would explode (`(999^{999})^{999}`,
`(x+y+z+k)^{999}`, `(10^{90+k})!`, ...) is refused by the cost bound (`cost.py`) before any symbolic work, within
the same budget. Each loop is printed beside a baseline measured in the same run on the same
text: one regular-expression pass that splits it into words (`re.findall(r"\\S+", text)`), the cheapest reading a
grader could do. Times are medians over `--repeats`, in ms, for a batch of 8 (gsm8k_accuracy and math_accuracy
each; math-verify workers started before timing).

    python benchmarks/bench_degenerate.py [--kb 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy  # noqa: E402

PROBLEM = "Janet's ducks lay 16 eggs per day. She sells the rest at $2 per egg. How much does she make every day?"


def loops(size: int) -> dict[str, str]:
    def repeat(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "so the answer is": repeat("so the answer is "),
        "\\boxed{": repeat("\\boxed{"),
        "\\begin{pmatrix} in a box": "\\boxed{" + repeat("\\begin{pmatrix} ") + "}",
        "or chains": "The answer is " + repeat("18 or "),
        "Answer: x": repeat("Answer: x\n"),
        "Answer: <n>": "".join(f"Answer: {i}\n" for i in range(size // 8))[:size],
        "#### ": repeat("#### "),
        "A: 1 lines": repeat("A: 1\n"),
        "open braces": repeat("{"),
        "$1$ ": repeat("$1$ "),
        "code fences": repeat("```"),
        "digits": "The answer is " + repeat("1"),
        "power tower": "\\boxed{" + "9^{" * (size // 8) + "9" + "}" * (size // 8) + "}",
        "mixed commitments": repeat("The answer is $\\frac{1}{2}$ or \\boxed{3}. "),
    }


# Answers past the cost bound (issue 44): each took sympy to the 5 s deadline before the bound.
EXPLOSIVE = ["(999^{999})^{999}", "(x+y+z+k)^{999}", "(10^{90+k})!", "(10^{91+k})!", "\\prod_{k=1}^{10^6} k",
             "2^{2^{2^{2^{2}}}}", "(a+b)^{100}", "\\binom{10^{7}}{5 \\cdot 10^{6}}"]  # fmt: skip


def median_ms(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=100, help="size of each completion (default 100 KB)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    math_accuracy(["\\boxed{\\frac{1}{2}}"], answer=["0.5"])  # start the workers: not what is measured
    gsm8k_accuracy(["\\boxed{\\frac{36}{2}}"], answer=["#### 18"])
    print(f"batch of 8 completions of {args.kb} KB, ms, median of {args.repeats} "
          f"(cores: {len(os.sched_getaffinity(0))}, load: {os.getloadavg()[0]:.1f})")  # fmt: skip
    print(f"{'loop':<26} {'gsm8k_accuracy':>15} {'math_accuracy':>14} {'baseline':>9}")
    worst = 0.0
    for name, text in loops(args.kb * 1000).items():
        batch = [text] * 8
        gsm = median_ms(lambda b=batch: gsm8k_accuracy(b, answer=["#### 18"] * 8, prompts=[PROBLEM] * 8), args.repeats)
        mth = median_ms(lambda b=batch: math_accuracy(b, answer=["18"] * 8, prompts=[PROBLEM] * 8), args.repeats)
        base = median_ms(lambda b=batch: [re.findall(r"\S+", t) for t in b], args.repeats)
        worst = max(worst, gsm, mth)
        print(f"{name:<26} {gsm:>15.0f} {mth:>14.0f} {base:>9.0f}")
    batch = [f"So the answer is $\\boxed{{{text}}}$." for text in EXPLOSIVE]
    gsm = median_ms(lambda: gsm8k_accuracy(batch, answer=["#### 18"] * 8, prompts=[PROBLEM] * 8), args.repeats)
    mth = median_ms(lambda: math_accuracy(batch, answer=["18"] * 8, prompts=[PROBLEM] * 8), args.repeats)
    base = median_ms(lambda: [re.findall(r"\S+", t) for t in batch], args.repeats)
    worst = max(worst, gsm, mth)
    print(f"{'past the cost bound':<26} {gsm:>15.1f} {mth:>14.1f} {base:>9.2f}")
    print(f"worst batch: {worst:.0f} ms (budget: about 1000 ms)")


if __name__ == "__main__":
    main()
