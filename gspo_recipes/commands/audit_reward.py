"""`gspo audit-reward REWARD --data FILE`: what a reward pays for, tried before a long run.

For each data row it builds a suite of adversarial completions from the row's own gold and problem (for math: the
families of the final-answer contract, `gspo_recipes.rewards.math.audit_cases`; for code: the reward-hacking suite,
`gspo_recipes.rewards.code.audit_cases`), calls the reward as TRL would (the completions, the row's columns, the
prompts) and prints, per family, the share of wrong answers credited (score > 0) and of acceptable answers rejected
(score below 1.0, or None). It exits 1 when a share passes `--max-credited` / `--max-rejected`, so it can guard CI.

    gspo audit-reward math_accuracy --data my_problems.jsonl --column_map problem=question answer=final
    gspo audit-reward my_module:my_reward --data builtin:math-generated --max-credited 0.05
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

CODE_CASES = "gspo_recipes.rewards.code.audit_cases"
MATH_COLUMNS = ("answer", "solution")
CODE_COLUMNS = ("tests", "test_list", "io_tests", "test")
EQUIVALENT = "equivalent"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "audit-reward",
        help="try a reward on adversarial completions built from your data, before training on it",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("reward", metavar="REWARD", help="a registered reward name or module:function")
    parser.add_argument(
        "--data",
        required=True,
        help="a .jsonl/.json/.parquet/.csv file, a save_to_disk directory, a hub dataset or builtin:NAME "
        "(builtin:gsm8k-generated, builtin:math-generated, builtin:mbpp-generated)",
    )
    parser.add_argument("--split", default="train", help="the split of a hub dataset or a saved DatasetDict")
    parser.add_argument(
        "--column_map",
        "--column-map",
        nargs="*",
        default=[],
        metavar="NEEDED=YOURS",
        help="rename columns as the recipes do: --column_map problem=question answer=label",
    )
    parser.add_argument("--kind", choices=["math", "code"], help="the suite to run (default: inferred)")
    parser.add_argument("--max-rows", "--max_rows", type=int, default=100, help="rows to audit (0: all; default 100)")
    parser.add_argument(
        "--max-credited",
        "--max_credited",
        type=float,
        default=0.0,
        help="fail when a family's share of wrong answers credited exceeds this (default 0)",
    )
    parser.add_argument(
        "--max-rejected",
        "--max_rejected",
        type=float,
        default=0.0,
        help="fail when the share of acceptable answers rejected exceeds this (default 0)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of a builtin: dataset")
    parser.set_defaults(func=run)


@dataclass
class Family:
    """The verdicts on one family's completions, with the first counter-example kept to show."""

    should_pay: bool
    cases: int = 0
    failures: int = 0  # wrong answers credited, or acceptable answers rejected
    unjudged: int = 0  # scored None
    answer_right: int = 0  # left out: the row's tests pay the case's trick-free twin (its answer is right there)
    example: str | None = None
    rows: set = field(default_factory=set)


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    reward, target = _load_reward(args.reward)
    rows = _load_rows(args)
    kind = args.kind or infer_kind(args.reward, target, rows[0] if rows else {})
    if kind is None:
        print(
            f"error: cannot tell whether {args.reward} is a math or a code reward from the columns "
            f"{sorted(rows[0]) if rows else []}; give --kind math or --kind code (or map the gold column with "
            "--column_map answer=YOURS / tests=YOURS)",
            file=sys.stderr,
        )
        return 2
    cases_for = _case_builder(kind)
    twins_for = _twin_builder(kind)
    families, total = audit(reward, rows, cases_for, twins_for)
    print(f"audit of {args.reward} ({kind} suite) on {len(rows)} rows of {args.data}: {total} completions, "
          f"{time.monotonic() - start:.1f}s")  # fmt: skip
    print(report(families))
    weak = _weak_rows(kind, rows)
    if weak:
        print(
            f"note: {len(weak)} row(s) have a test that checks nothing (it pays any program that runs: a weak test, "
            f"not a reward bug): rows {', '.join(map(str, weak[:20]))}{' ...' if len(weak) > 20 else ''}"
        )
    worst_credited = max((f.failures / f.cases for f in families.values() if not f.should_pay and f.cases), default=0.0)
    worst_rejected = max((f.failures / f.cases for f in families.values() if f.should_pay and f.cases), default=0.0)
    failed = worst_credited > args.max_credited or worst_rejected > args.max_rejected
    verdict = "FAIL" if failed else "ok"
    print(f"{verdict}: worst family credits {worst_credited:.1%} of its wrong answers (max {args.max_credited:.1%}); "
          f"{worst_rejected:.1%} of acceptable answers rejected (max {args.max_rejected:.1%})")  # fmt: skip
    return 1 if failed else 0


def audit(reward: Callable, rows: list[dict], cases_for: Callable,
          twins_for: Callable | None = None) -> tuple[dict[str, Family], int]:  # fmt: skip
    """Score every row's cases in one call of `reward`, as TRL calls it: completions, then each column as a list
    with one value per completion, and `prompts`. `twins_for(row)` ({family: twin completion}) checks the cases
    before they are trusted: a case that should not be paid, and is paid no more than its trick-free twin, is left
    out on that row (its answer is right there; see `rewards.code.audit_cases`)."""
    completions, owners, per_case = [], [], []
    for index, row in enumerate(rows):
        for family, completion, should_pay in cases_for(row):
            completions.append(completion)
            owners.append(index)
            per_case.append((family, should_pay))
        for family, twin in (twins_for(row) if twins_for else {}).items():
            completions.append(twin)
            owners.append(index)
            per_case.append((family, None))  # a twin: checks its family's case on this row
    columns = {name: [rows[i][name] for i in owners] for name in (rows[0] if rows else {})}
    columns.pop("prompts", None)
    columns.pop("completions", None)
    prompts = [_prompt(rows[i]) for i in owners]
    scores = list(reward(completions, prompts=prompts, **columns)) if completions else []
    if len(scores) != len(completions):
        raise SystemExit(f"error: the reward returned {len(scores)} scores for {len(completions)} completions")
    families: dict[str, Family] = {}
    twin_scores = {(family, row): score or 0.0 for (family, pay), score, row in zip(per_case, scores, owners)
                   if pay is None}  # fmt: skip
    for (family, should_pay), completion, score, row in zip(per_case, completions, scores, owners):
        if should_pay is None:
            continue
        key = family if not should_pay else EQUIVALENT if family == EQUIVALENT else f"{family} (must pay)"
        earned_anyway = twin_scores.get((family, row), 0.0)  # what the same answer earns here without a trick
        if not should_pay and score is not None and 0 < score <= earned_anyway:
            families.setdefault(key, Family(should_pay)).answer_right += 1
            continue
        entry = families.setdefault(key, Family(should_pay))
        entry.cases += 1
        entry.rows.add(row)
        entry.unjudged += score is None
        failed = (score is None or score < 1.0) if should_pay else (score is not None and score > 0)
        if failed:
            entry.failures += 1
            if entry.example is None:
                entry.example = f"{_short(completion)}  -> {score}"
    return families, len(completions)


def report(families: dict[str, Family]) -> str:
    lines = [f"{'family':<24} {'cases':>6} {'rows':>5}  {'credited':>9} {'rejected':>9}  example of a failure"]
    for name, family in sorted(families.items(), key=lambda item: (item[1].should_pay, item[0])):
        share = f"{family.failures / family.cases:.1%}" if family.cases else "-"
        credited, rejected = ("-", share) if family.should_pay else (share, "-")
        note = f" ({family.unjudged} scored None)" if family.unjudged else ""
        if family.answer_right:
            note += f" ({family.answer_right} left out: paid no more than the same answer without the trick)"
        lines.append(
            f"{name:<24} {family.cases:>6} {len(family.rows):>5}  {credited:>9} {rejected:>9}  "
            f"{family.example or ''}{note}"
        )
    return "\n".join(lines)


def infer_kind(name: str, target: str | None, row: dict) -> str | None:
    """math or code: from the registry entry (or the function's module), else from the data's columns."""
    for where in (target or "", name):
        if where.startswith("gspo_recipes.rewards.math"):
            return "math"
        if where.startswith("gspo_recipes.rewards.code"):
            return "code"
    if any(column in row for column in CODE_COLUMNS):
        return "code"
    if any(column in row for column in MATH_COLUMNS):
        return "math"
    return None


def _case_builder(kind: str) -> Callable:
    if kind == "math":
        from gspo_recipes.rewards.math.audit_cases import math_audit_cases

        return math_audit_cases
    try:
        module = importlib.import_module(CODE_CASES)
    except ImportError as error:
        raise SystemExit(f"error: the code audit suite ({CODE_CASES}) cannot be imported: {error}") from None
    return module.code_audit_cases


def _weak_rows(kind: str, rows: list[dict]) -> list[int]:
    if kind != "code":
        return []
    weak_tests = getattr(importlib.import_module(CODE_CASES), "weak_tests", None)
    return [index for index, row in enumerate(rows) if weak_tests and weak_tests(row)]


def _twin_builder(kind: str) -> Callable | None:
    if kind != "code":
        return None
    return getattr(importlib.import_module(CODE_CASES), "code_case_twins", None)


def _load_reward(spec: str) -> tuple[Callable, str | None]:
    """The reward and where it lives (the registry's `module:function`, or the function's own module)."""
    from gspo_recipes.rewards import registry

    try:
        reward = registry.get_reward(spec)
    except (KeyError, ImportError, AttributeError, TypeError) as error:
        raise SystemExit(f"error: cannot load the reward {spec!r}: {error}") from None
    target = registry._REGISTRY.get(spec, spec)
    return reward, target if isinstance(target, str) else getattr(target, "__module__", None)


def _load_rows(args: argparse.Namespace) -> list[dict]:
    from gspo_recipes.recipe import load_train_dataset, map_columns

    script_args = SimpleNamespace(
        dataset_name=args.data,
        dataset_train_split=args.split,
        dataset_config=None,
        max_train_samples=args.max_rows or None,
    )
    dataset = map_columns(load_train_dataset(script_args, seed=args.seed), args.column_map)
    return [dict(row) for row in dataset]


def _prompt(row: dict):
    for name in ("prompt", "problem", "question", "text"):
        if row.get(name) is not None:
            return row[name]
    return ""


def _short(text: str, width: int = 70) -> str:
    flat = repr(text)[1:-1]
    return flat if len(flat) <= width else flat[: width - 3] + "..."
