"""Code rewards: run the completion's Python against the row's tests, in the sandbox, in parallel.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", reward.py.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..pool import PoolUnavailable, get_pool
from ..text import column, completion_text
from .hacking import record_findings, scan_programs
from .judge.broker import MAX_WORKER_STARTS, OVERRAN
from .judge.confined import row_deadline_s
from .judge.records import Verdict
from .plan import Job, Unjudgeable, dataset_helpers, extract_code, plan_row
from .sandbox.launch import Limits, SandboxUnavailable, resolve_backend, run_harness, weak_sandbox_note

__all__ = ["code_execution", "code_execution_binary", "extract_code", "require_sandbox"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
_JUDGE_POOL = "code-judge"
_COLUMNS = ("tests", "io_tests", "entry_point", "test_setup_code", "helpers")

# Codes a run can end with without passing anything: normal and error exits, exec failures, 128 + signal.
_RESERVED_EXIT_CODES = frozenset({0, 1, 2, 126, 127, *range(128, 160)})
_FAILED = "failed"  # a completion whose scan, plan or judgement failed: scored 0


def code_execution(
    completions: list,
    tests: list | None = None,
    io_tests: list | None = None,
    entry_point: list | None = None,
    test_setup_code: list | None = None,
    helpers: list | None = None,
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
    `log_metric` is TRL's (it passes one to reward functions); `helpers` (or else `prompts`, which TRL passes too)
    provide the helper functions a HumanEval prompt defines.
    """
    columns = (tests, io_tests, entry_point, test_setup_code, helpers)
    return _score(completions, "code_execution", columns, timeout_s, memory_mb, backend, log_metric, kwargs)


def code_execution_binary(
    completions: list, *, log_metric: Callable[[str, float], None] | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 when the completion's code passes every test of the row, else 0.0 (`None` as in `code_execution`)."""
    columns = tuple(kwargs.pop(key, None) for key in _COLUMNS)
    options = {key: kwargs.pop(key) for key in ("timeout_s", "memory_mb", "backend") if key in kwargs}
    scores = _score(completions, "code_execution_binary", columns, options.get("timeout_s", DEFAULT_TIMEOUT_S),
                    options.get("memory_mb", 1024), options.get("backend"), log_metric, kwargs)  # fmt: skip
    return [None if score is None else float(score == 1.0) for score in scores]


def require_sandbox(backend: str | None = None, **_options: Any) -> str | None:
    """Refuse, before anything runs, where model code or the dataset's tests could not be confined at full strength:
    raises `SandboxUnavailable` with what is missing, why and the fix. Returns what the run must say on every start
    when a weaker backend was asked for by name (`GSPO_SANDBOX_BACKEND` or `backend=`), else None. GSPOTrainer calls it
    (as each code reward's `sandbox_check`) before it loads a model; each call of a code reward calls it first."""
    from .judge import confined
    from .sandbox import bwrap_binary

    chosen = resolve_backend(backend)
    if chosen == "bwrap" and not confined.confinement_works() and confined.unreadable_roots is not None:
        raise SandboxUnavailable(
            "no sandbox for the code judge: confined as a uid of its own, it cannot read the interpreter's "
            f"directories {confined.unreadable_roots or '(their parents)'} to import pytest. Fix: let other users "
            "read them (`chmod o+rX` on each), or use an interpreter or venv in a directory others can read."
        )
    if chosen == "bwrap" and not confined.confinement_works():
        raise SandboxUnavailable(
            "no sandbox for the code judge: this process cannot make mount and PID namespaces (as root, or in a user "
            f"namespace of its own), though bubblewrap ({bwrap_binary.bwrap_path()}) can. Cause: a security module "
            f"confines {os.path.realpath(sys.executable)} and not bwrap. Fix: allow user namespaces for the "
            "interpreter too (see docs/install.md, Ubuntu 23.10 and later), or "
            "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`."
        )
    return weak_sandbox_note(chosen)


def _score(completions, reward, columns, timeout_s, memory_mb, backend, log_metric, kwargs) -> list[float | None]:
    require_sandbox(backend)  # raises with the fix: a reward that cannot confine model code never scores it
    n = len(completions)
    tests, io_tests, entry_point, setup, helpers = columns
    # The columns under the names the datasets themselves use: MBPP's test_list, HumanEval's test, APPS' input_output.
    tests = tests if tests is not None else kwargs.get("test_list", kwargs.get("test"))
    io_tests = io_tests if io_tests is not None else kwargs.get("input_output")
    programs = [extract_code(completion_text(c)) for c in completions]
    limits = Limits(memory_mb=memory_mb)
    rows = list(zip(programs, column(tests, n), column(io_tests, n), column(entry_point, n), column(setup, n),
                    column(helpers, n), column(kwargs.get("prompts"), n)))  # fmt: skip
    # Scanning and planning are this process's share of the work (about 2 ms a completion): the sandboxes start on
    # the first rows while the rest are still being planned, in chunks that double (few chunk ends to wait at).
    plans, findings, running = [], [], _Running()
    chunk = 2 * _judge_pool().size
    try:
        while len(plans) < n:
            start = len(plans)
            found = scan_programs(programs[start : start + chunk])
            chunk_rows = zip(rows[start : start + chunk], found)
            chunk_plans = [_plan(start + offset, *row, found_one, timeout_s, limits, reward)
                           for offset, (row, found_one) in enumerate(chunk_rows)]  # fmt: skip
            if not running.started and any(isinstance(plan, list) for plan in chunk_plans):
                backend = resolve_backend(backend)  # probed by `require_sandbox` already
            running.start(start, chunk_plans, backend)
            plans += chunk_plans
            findings += found
            chunk *= 2
    except SandboxUnavailable:
        return [None] * n
    record_findings(reward, findings, log_metric)
    outcomes = running.outcomes(plans)
    _report(reward, plans, outcomes, log_metric)
    scores: list[float | None] = []
    for plan, row_outcomes in zip(plans, outcomes):
        if plan == _FAILED:
            scores.append(0.0)
        elif row_outcomes is None or any(outcome is None or outcome[1] == 0 for outcome in row_outcomes):
            scores.append(None)
        else:
            scores.append(sum(o[0] for o in row_outcomes) / sum(o[1] for o in row_outcomes))
    return scores


def _plan(index, program, tests, io_tests, entry_point, setup, helpers, prompt, found, timeout_s, limits, reward):
    """The row's jobs; None for a row no completion can be judged on; `_FAILED` when this completion broke a step."""
    if found is None:  # the scan could not read the program (a parser bomb): nothing honest looks like that
        _log_failure(reward, index, "the hacking scan could not parse the program")
        return _FAILED
    try:
        blocks = dataset_helpers(helpers, prompt) if io_tests is None else []
        return plan_row(program, tests, io_tests, entry_point, setup, blocks, timeout_s, limits)
    except Unjudgeable:
        return None
    except Exception as error:  # noqa: BLE001 (one completion's failure is its own 0, never the batch's)
        _log_failure(reward, index, f"planning failed: {type(error).__name__}: {error}")
        return _FAILED


_warned: set[str] = set()


def _warn_once(key: str, message: str, *args) -> None:
    """WARNING the first time per kind of problem, INFO after: a long run logs each problem once, loudly."""
    logger.log(logging.INFO if key in _warned else logging.WARNING, message, *args)
    _warned.add(key)


def _log_failure(reward: str, index: int, why: str) -> None:
    _warn_once("failure", "%s: completion %d scores 0: %s", reward, index, why)


def _report(reward, plans, outcomes, log_metric) -> None:
    """Metrics and warnings for what the judge found wrong with the rows (dataset defects, not model successes)."""
    judged = [(i, plan, outs) for i, (plan, outs) in enumerate(zip(plans, outcomes)) if isinstance(plan, list)]
    if not judged:
        return
    fallbacks = sum(plan[0].kind == "tests" for _, plan, _ in judged)
    if fallbacks:
        _warn_once("fallback", "%s: %d row(s) judged in the weaker fallback (tests inside the sandbox, beside the "
                   "model's code, which can forge the verdict) because their tests inspect classes the program "
                   "defines; see rewards/%s/fallback_frac", reward, fallbacks, reward)  # fmt: skip
    problems = {"uncalled": 0, "missing_helper": 0, "setup_error": 0, "worker_cap": 0}
    for index, _, outs in judged:
        reports = [o[2] for o in outs or [] if o is not None and len(o) > 2]
        if any(r.get("uncalled") for r in reports):
            problems["uncalled"] += 1
            _warn_once("uncalled", "%s: row of completion %d: a test ran to its end without calling the program "
                       "(a HumanEval `check` with no entry_point? unittest classes or test_ functions nothing runs?): "
                       "it scores 0, as a test that can tell nothing; see rewards/%s/uncalled_frac", reward, index,
                       reward)  # fmt: skip
        missing = sorted({name for r in reports for name in r.get("missing_helpers", [])})
        if missing:
            problems["missing_helper"] += 1
            _warn_once("missing_helper", "%s: row of completion %d: the tests use %s, which no dataset column "
                       "defines (or whose helper block fails to run); the program's version is never used, so those "
                       "tests fail. Pass the code as a `helpers` column (HumanEval: the original `prompt`)", reward,
                       index, ", ".join(missing))  # fmt: skip
        errors = [r["setup_error"] for r in reports if r.get("setup_error")]
        if errors:
            problems["setup_error"] += 1
            _warn_once("setup_error", "%s: row of completion %d: the row's setup code fails before any call into "
                       "the program (%s): every test fails", reward, index, errors[0])  # fmt: skip
        if any(r.get("worker_cap") for r in reports):
            problems["worker_cap"] += 1
            _warn_once("worker_cap", "%s: row of completion %d: the program's worker was started %d times in one "
                       "attempt (it kept crashing): its remaining tests fail; see rewards/%s/worker_cap_frac",
                       reward, index, MAX_WORKER_STARTS, reward)  # fmt: skip
        refusals = [r["refused"] for r in reports if r.get("refused")]
        if refusals:
            _warn_once("refused", "%s: row of completion %d cannot be judged (scored None): %s", reward, index,
                       refusals[0])  # fmt: skip
        failures = [r["judge_error"] for r in reports if r.get("judge_error")]
        if failures:
            _log_failure(reward, index, f"the judge failed: {failures[0]}")
    if log_metric is not None:
        log_metric(f"rewards/{reward}/fallback_frac", fallbacks / len(judged))
        for name, count in problems.items():
            log_metric(f"rewards/{reward}/{name}_frac", count / len(judged))


# ----------------------------------------------------------------------------------------------------------------
# Running


class _Running:
    """The batch's jobs, started as they are planned: each chunk's judged rows go to the judge pool from a thread of
    their own (chunks one after another), its stdin/stdout and fallback jobs to the sandbox threads."""

    def __init__(self):
        self.started = False
        self.futures: dict = {}  # (row, job index) -> its (passed, run)
        self.chunks: list = []  # (keys, the chunk's verdicts)

    def start(self, first_row: int, plans: list, backend: str) -> None:
        keys, judged = [], []
        for row, plan in enumerate(plans, start=first_row):
            for index, job in enumerate(plan if isinstance(plan, list) else []):
                self.started = True
                if job.kind == "judge":
                    keys.append((row, index))
                    judged.append(job)
                else:
                    self.futures[row, index] = _executor().submit(_run_job, job, backend)
        if judged:
            self.chunks.append((keys, _dispatcher().submit(_judge_in_pool, judged, backend)))

    def outcomes(self, plans: list) -> list[list | None]:
        """Every job's (passed, run), row by row (None for a row without jobs)."""
        results = {key: future.result() for key, future in self.futures.items()}
        for keys, verdicts in self.chunks:
            results.update(zip(keys, verdicts.result()))
        return [[results[row, index] for index in range(len(plan))] if isinstance(plan, list) and plan else None
                for row, plan in enumerate(plans)]  # fmt: skip


def _judge_pool():
    return get_pool(_JUDGE_POOL, preload=["gspo_recipes.rewards.code.plan:start_judge_workers"])


def _judge_in_pool(jobs: list[Job], backend: str) -> list[Verdict | None]:
    if not jobs:
        return []
    items = [(dataclasses.replace(job.payload, backend=backend),) for job in jobs]
    # The judge keeps its own deadlines; this one only catches a judge that hangs (a test that never returns). Each
    # row has its own: a stall beside a long row is cut at its own row's deadline, not the longest one's.
    # The confined judge's own, then teardown.
    deadlines = [row_deadline_s(job.payload.limits.wall_s) + 2.0 for job in jobs]
    try:
        verdicts = _judge_pool().map("gspo_recipes.rewards.code.judge.confined:judge_isolated", items,
                                     deadline_s=deadlines, on_timeout=_OVERRAN, on_error=_BROKE)  # fmt: skip
    except PoolUnavailable:
        return [None] * len(jobs)
    # A judge that overran its deadline or broke was sent into work no alarm interrupts (C-level loops over the
    # program's data) or broken by it: the program's 0, never a None the advantage would leave out.
    return [Verdict(0, job.total, {"judge_error": verdict}) if verdict in (_OVERRAN, _BROKE) else verdict
            for job, verdict in zip(jobs, verdicts)]  # fmt: skip


_OVERRAN = OVERRAN
_BROKE = "the judge raised"


def _run_job(job: Job, backend: str | None) -> tuple[int, int] | None:
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
    except Exception as error:  # noqa: BLE001 (one completion's failure is its own 0, never the batch's)
        _log_failure("code_execution", -1, f"a sandbox job failed: {type(error).__name__}: {error}")
        return 0, job.total


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
_dispatcher_instance: ThreadPoolExecutor | None = None


def _dispatcher() -> ThreadPoolExecutor:
    # One thread: the judge pool takes one batch at a time, so the chunks queue here in order.
    global _dispatcher_instance
    with _executor_lock:
        if _dispatcher_instance is None:
            _dispatcher_instance = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gspo-code-judge")
        return _dispatcher_instance


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
    global _executor_instance, _dispatcher_instance, _executor_lock
    _executor_instance, _dispatcher_instance, _executor_lock = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget_executor_after_fork)


# GSPOTrainer finds the check here (on a ConfiguredReward too, which copies a function's attributes) and runs it with
# the reward's configured options before it loads a model.
code_execution.sandbox_check = require_sandbox
code_execution_binary.sandbox_check = require_sandbox
