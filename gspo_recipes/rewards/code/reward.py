"""Code rewards: run the completion's Python against the row's tests, in the sandbox, in parallel.

Test columns (one of them per row; MBPP's `test_list`, HumanEval's `test` and APPS' `input_output` also work):
  tests     a list of assert statements (MBPP), each scored on its own; or one test script that raises on failure
            (HumanEval: `def check(candidate): ...`, followed by `check(<entry_point>)`, added when missing).
  io_tests  stdin/stdout pairs (APPS, CodeContests): a list of {"input", "output"} dicts, or {"inputs": [...],
            "outputs": [...]}, or either as a JSON string. The whole output must match, line by line, after trailing
            whitespace is stripped; every case runs in its own process.

Who decides. Test rows are judged by `judge.py` in a pool process that never runs model code; the program runs in a
sandboxed worker that only answers calls with plain data, and never sees a test, an expected value or the verdict.
io rows: the program's stdout is compared here. Rows whose tests inspect classes the program defines
(`isinstance(x, Node)`) cannot be judged on data; they fall back to running the tests inside the sandbox beside the
program (weaker: see `harness.py`), which the reward logs, and counts in `rewards/<reward>/fallback_frac`.

Every completion's code is also scanned for reward-hacking moves (`hacking.py`): `rewards/<reward>/suspicious_frac`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..pool import PoolUnavailable, get_pool
from ..text import column, completion_text
from .hacking import record_scan
from .judge import STARTUP_ALLOWANCE_S, inspected_classes
from .sandbox import Limits, SandboxUnavailable, resolve_backend, run_harness

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
_JUDGE_POOL = "code-judge"
_MAX_TESTS_PER_RUN = 64  # fallback only: exit statuses are 8 bits: nonce + passed must stay clear of the reserved codes

# Codes a run can end with without passing anything: normal and error exits, exec failures, 128 + signal.
_RESERVED_EXIT_CODES = frozenset({0, 1, 2, 126, 127, *range(128, 160)})

_PYTHON_FENCES = {"python", "python3", "py", "py3"}


def extract_code(text: str) -> str:
    """The last fenced Python block (```python, ```py...), else the last untagged fence, else the whole text.

    A block left open at the end (a truncated completion) runs to the end of the text.
    """
    blocks = _fenced_blocks(text)
    for wanted in (_PYTHON_FENCES, {""}):
        bodies = [body for language, body in blocks if language in wanted]
        if bodies:
            return bodies[-1]
    return text


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    blocks, language, body = [], "", None
    for line in text.splitlines(keepends=True):
        fence = line.strip()
        if body is None:
            if fence.startswith("```"):
                language, body = fence[3:].strip().lower(), []
        elif fence == "```":
            blocks.append((language, "".join(body)))
            body = None
        else:
            body.append(line)
    if body is not None:
        blocks.append((language, "".join(body)))
    return blocks


def code_execution(
    completions: list,
    tests: list | None = None,
    io_tests: list | None = None,
    entry_point: list | None = None,
    test_setup_code: list | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = 1024,
    backend: str | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Fraction of the row's tests the completion's code passes (0.0 to 1.0).

    `None` when the row cannot be judged: no tests, tests that do not compile, or no working sandbox. `timeout_s` is
    the budget of each test (the program's own start-up gets one more); see the module docstring for test formats.
    `log_metric` is TRL's (it passes one to reward functions); `prompts` (TRL passes them too) provide the helper
    functions a HumanEval prompt defines, taken from its last fenced code block.
    """
    return _score(completions, "code_execution", tests, io_tests, entry_point, test_setup_code, timeout_s, memory_mb,
                  backend, log_metric, kwargs)  # fmt: skip


def code_execution_binary(
    completions: list, *, log_metric: Callable[[str, float], None] | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 when the completion's code passes every test of the row, else 0.0 (`None` as in `code_execution`)."""
    columns = {key: kwargs.pop(key, None) for key in ("tests", "io_tests", "entry_point", "test_setup_code")}
    options = {key: kwargs.pop(key) for key in ("timeout_s", "memory_mb", "backend") if key in kwargs}
    timeout_s = options.get("timeout_s", DEFAULT_TIMEOUT_S)
    scores = _score(completions, "code_execution_binary", *columns.values(), timeout_s,
                    options.get("memory_mb", 1024), options.get("backend"), log_metric, kwargs)  # fmt: skip
    return [None if score is None else float(score == 1.0) for score in scores]


def _score(completions, reward, tests, io_tests, entry_point, setup, timeout_s, memory_mb, backend, log_metric,
           kwargs) -> list[float | None]:  # fmt: skip
    n = len(completions)
    # The columns under the names the datasets themselves use: MBPP's test_list, HumanEval's test, APPS' input_output.
    tests = tests if tests is not None else kwargs.get("test_list", kwargs.get("test"))
    io_tests = io_tests if io_tests is not None else kwargs.get("input_output")
    programs = [extract_code(completion_text(c)) for c in completions]
    rows = zip(programs, column(tests, n), column(io_tests, n), column(entry_point, n), column(setup, n),
               column(kwargs.get("prompts"), n))  # fmt: skip
    limits = Limits(memory_mb=memory_mb)
    plans = [_plan(*row, timeout_s, limits) for row in rows]
    record_scan(reward, programs, log_metric)
    try:
        backend = resolve_backend(backend) if any(plans) else backend
    except SandboxUnavailable:
        return [None] * n
    outcomes = _run_plans(plans, backend)
    judged = [plan for plan in plans if plan]
    fallbacks = sum(plan[0].kind == "tests" for plan in judged)
    if fallbacks:
        _log_fallback(reward, fallbacks)
    if log_metric is not None and judged:
        log_metric(f"rewards/{reward}/fallback_frac", fallbacks / len(judged))
    scores: list[float | None] = []
    for row_outcomes in outcomes:
        if row_outcomes is None or any(outcome is None for outcome in row_outcomes):
            scores.append(None)
        else:
            scores.append(sum(passed for passed, _ in row_outcomes) / sum(total for _, total in row_outcomes))
    return scores


_fallback_warned = False


def _log_fallback(reward: str, rows: int) -> None:
    global _fallback_warned
    level = logging.INFO if _fallback_warned else logging.WARNING
    _fallback_warned = True
    logger.log(
        level,
        "%s: %d row(s) judged in the weaker fallback (tests inside the sandbox, beside the model's code, which can "
        "forge the verdict) because their tests inspect classes the program defines; see rewards/%s/fallback_frac",
        reward, rows, reward,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Planning: one row becomes one or more sandbox jobs.


class _Job:
    """One unit of work: kind "judge" (a row's tests, in the judge pool), "io" (one stdin/stdout case) or "tests"
    (the fallback: a chunk of tests run by the harness beside the program)."""

    __slots__ = ("expected", "kind", "limits", "payload", "stdin", "total")

    def __init__(self, kind, payload, total, limits, stdin=None, expected=None):
        self.kind, self.payload, self.total, self.limits = kind, payload, total, limits
        self.stdin, self.expected = stdin, expected


def _plan(program, tests, io_tests, entry_point, setup, prompt, timeout_s, limits) -> list[_Job] | None:
    try:
        return _plan_row(program, tests, io_tests, entry_point, setup, prompt, timeout_s, limits)
    except (ValueError, TypeError, KeyError, AttributeError):  # malformed test data: the row cannot be judged
        return None


def _plan_row(program, tests, io_tests, entry_point, setup, prompt, timeout_s, limits) -> list[_Job] | None:
    if io_tests is not None:
        cases = _io_cases(io_tests)
        if not cases:
            return None
        wall = STARTUP_ALLOWANCE_S + timeout_s
        io_limits = _with_wall(limits, wall)
        job = {"mode": "io", "program": program}
        return [_Job("io", job, 1, io_limits, stdin=inp.encode(), expected=out) for inp, out in cases]
    if tests is None:
        return None
    if isinstance(tests, str) and tests.lstrip().startswith("["):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            pass
    if isinstance(tests, str):
        mode, statements = "script", [_with_check_call(tests, entry_point)]
    else:
        mode, statements = "asserts", [str(t) for t in tests]
    if not statements or not _compiles(statements, setup):
        return None
    helpers = _prompt_code(prompt) if entry_point else ""
    if inspected_classes([*statements, setup or "", helpers]):
        return _fallback_jobs(program, mode, statements, setup, timeout_s, limits)
    # CPU for the whole row (restarts after crashes included); the judge enforces the per-test deadlines itself.
    wall = (STARTUP_ALLOWANCE_S + timeout_s) * (len(statements) + 1)
    job = {"program": program, "tests": statements, "entry_point": entry_point, "setup": setup or "",
           "helpers": helpers, "per_test_s": timeout_s, "limits": _with_wall(limits, wall).__dict__}  # fmt: skip
    return [_Job("judge", job, len(statements), limits)]


def _fallback_jobs(program, mode, statements, setup, timeout_s, limits) -> list[_Job]:
    jobs = []
    for start in range(0, len(statements), _MAX_TESTS_PER_RUN):
        chunk = statements[start : start + _MAX_TESTS_PER_RUN]
        job = {"mode": mode, "program": program, "tests": chunk, "setup": setup or "", "per_test_s": timeout_s}
        wall = STARTUP_ALLOWANCE_S + timeout_s * (len(chunk) + 1)
        jobs.append(_Job("tests", job, len(chunk), _with_wall(limits, wall)))
    return jobs


def _prompt_code(prompt: Any) -> str:
    """The last fenced Python block of the prompt's last user message: the helpers a HumanEval prompt defines."""
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[-1].get("content") if users else None
    if not isinstance(prompt, str):
        return ""
    blocks = [body for language, body in _fenced_blocks(prompt) if language in _PYTHON_FENCES | {""}]
    if not blocks or not _compiles([blocks[-1]], None):
        return ""
    return blocks[-1]


def _with_check_call(script: str, entry_point: str | None) -> str:
    calls_check = re.search(r"^check\s*\(", script, re.MULTILINE)
    if entry_point and not calls_check:
        return f"{script}\n\ncheck({entry_point})\n"
    return script


def _compiles(statements: list[str], setup: str | None) -> bool:
    # The tests come from the dataset: one that does not compile makes the row unjudgeable, not the answer wrong.
    try:
        for source in [*statements, setup or ""]:
            compile(source, "<test>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _io_cases(io_tests: Any) -> list[tuple[str, str]]:
    if isinstance(io_tests, str):
        io_tests = json.loads(io_tests)
    if isinstance(io_tests, dict):
        inputs = io_tests.get("inputs", io_tests.get("input", []))
        outputs = io_tests.get("outputs", io_tests.get("output", []))
        pairs = list(zip(inputs, outputs))
    else:
        # A case without its expected output is malformed (KeyError), not "expects nothing".
        pairs = [
            (case.get("input", case.get("stdin", "")), case["output"] if "output" in case else case["stdout"])
            for case in io_tests
        ]
    return [(_as_text(inp), _as_text(out)) for inp, out in pairs]


def _as_text(value: Any) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _with_wall(limits: Limits, wall_s: float) -> Limits:
    return Limits(**{**limits.__dict__, "wall_s": wall_s})


# ----------------------------------------------------------------------------------------------------------------
# Running


def _run_plans(plans: list[list[_Job] | None], backend: str) -> list[list | None]:
    """Every job's (passed, run), row by row: io and fallback jobs on threads, judged rows in the judge pool, both at
    once."""
    futures = {}
    judged = []
    for row, plan in enumerate(plans):
        for index, job in enumerate(plan or []):
            if job.kind == "judge":
                judged.append((row, index, job))
            else:
                futures[row, index] = _executor().submit(_run_job, job, backend)
    verdicts = _judge_in_pool([job for _, _, job in judged], backend)
    results = {(row, index): verdict for (row, index, _), verdict in zip(judged, verdicts)}
    results.update({key: future.result() for key, future in futures.items()})
    return [None if not plan else [results[row, index] for index in range(len(plan))] for row, plan in enumerate(plans)]


def _judge_in_pool(jobs: list[_Job], backend: str) -> list[tuple[int, int] | None]:
    if not jobs:
        return []
    items = [(dict(job.payload, backend=backend),) for job in jobs]
    # The judge keeps its own deadlines; this one only catches a judge that hangs (a test that never returns).
    deadline = max(job.payload["limits"]["wall_s"] for job in jobs) * 1.5 + 5.0
    try:
        pool = get_pool(_JUDGE_POOL, preload=["gspo_recipes.rewards.code.judge"])
        verdicts = pool.map("gspo_recipes.rewards.code.judge:judge_tests", items, deadline_s=deadline, on_timeout=None)
    except PoolUnavailable:
        return [None] * len(jobs)
    return [tuple(verdict) if verdict is not None else None for verdict in verdicts]


def _run_job(job: _Job, backend: str | None) -> tuple[int, int] | None:
    """(tests passed, tests run), or None when the sandbox itself failed."""
    try:
        if job.kind == "io":
            result = run_harness(job.payload, stdin=job.stdin, limits=job.limits, capture_stdout=True, backend=backend)
            ok = result.returncode == 0 and not result.timed_out and not result.output_exceeded
            return int(ok and _same_output(result.stdout.decode("utf-8", "replace"), job.expected)), 1
        nonce = _choose_nonce(job.total)
        result = run_harness(dict(job.payload, nonce=nonce), limits=job.limits, backend=backend)
        passed = result.returncode - nonce
        return (passed if 0 <= passed <= job.total and not result.timed_out else 0), job.total
    except (SandboxUnavailable, OSError):
        return None


def _same_output(actual: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.rstrip().splitlines()]

    return lines(actual) == lines(expected)


def _choose_nonce(n_tests: int) -> int:
    candidates = [
        c for c in range(3, 256 - n_tests) if not any(c + k in _RESERVED_EXIT_CODES for k in range(n_tests + 1))
    ]
    return secrets.choice(candidates)


_executor_lock = threading.Lock()
_executor_instance: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    # Threads suffice: each one only waits on a sandboxed process. One per core keeps the cores busy.
    global _executor_instance
    with _executor_lock:
        if _executor_instance is None:
            workers = int(os.environ.get("GSPO_CODE_WORKERS", 0)) or len(os.sched_getaffinity(0))
            _executor_instance = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gspo-code")
        return _executor_instance


def _forget_executor_after_fork() -> None:
    # A forked child inherits the executor object but not its threads.
    global _executor_instance, _executor_lock
    _executor_instance, _executor_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_executor_after_fork)
