"""The judge: runs a row's tests, in a process that never runs model code, against a sandboxed worker that does.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", judge/judge.py.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import os
import signal
import sys
import time
import types
from typing import Any

from ..sandbox import launch as sandbox
from ..sandbox.worker import WorkerStarter
from . import discovery
from .records import JudgeJob, Verdict
from .remote import (  # noqa: F401
    ABSENT,
    MODULE_ALIASES,
    REPLY_GRACE_S,
    STARTUP_ALLOWANCE_S,
    JudgeFailure,
    Link,
    Remote,
    failures,
    judge_failed,
)
from .source import defined_names, parse, stub_functions, without_runner_calls

_BUILTIN_NAMES = frozenset(dir(builtins))
# Conventional aliases and the modules behind them, which the judge imports for the tests by the tests' name.
_ALIASED_MODULES = {**MODULE_ALIASES, **{name.split(".")[0]: name.split(".")[0] for name in MODULE_ALIASES.values()}}


class SetupFailed(Exception):
    """The row's setup code (or its test script's top level) raised: every test of the row fails."""


class Refused(Exception):
    """No completion of this row can be judged (its tests cannot be collected, or it names no entry point)."""


def judge_tests(job: JudgeJob, start_worker: WorkerStarter | None = None) -> Verdict | None:
    """(tests passed, tests run, report) for one row, or None when no sandbox could run the program.

    `start_worker`, when given, starts the program's workers elsewhere (the confined judge's broker). The report
    names what the row's data got wrong: `uncalled` (tests that ran to their end without calling the program),
    `setup_error`, `missing_helpers` (names the tests use that only the program defines, or whose helper block failed
    to run), and `refused` (why no completion of the row can be judged: tests pytest cannot collect, a `check` with no
    entry point); a refused row is (0, 0, report)."""
    _undumpable()
    total = len(job.tests) if job.kind == "asserts" else job.estimated_tests
    # `programs_doing`: names the tests use whose value is the program's doing (missing, or data it defined)
    report: dict[str, Any] = {"uncalled": 0, "setup_error": None, "missing_helpers": [], "programs_doing": []}
    row_deadline = time.monotonic() + (STARTUP_ALLOWANCE_S + job.per_test_s) * (total + 2)
    link = Link(job, row_deadline, start_worker)
    try:
        if not link.ensure():
            return Verdict(0, total, report)
        namespace = _test_namespace(job, link, report)
        if job.kind == "asserts":
            return Verdict(_run_asserts(job, namespace, link, report), total, report)
        return Verdict(*_run_script(job, namespace, link, report), report)
    except sandbox.SandboxUnavailable:
        return None
    except SetupFailed:
        return Verdict(0, total, report)
    except Refused as refusal:
        report["refused"] = str(refusal)
        return Verdict(0, 0, report)
    except (Exception, JudgeFailure) as error:  # noqa: BLE001 (the tests or the program broke the judge: fail closed, say why)
        report["judge_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        return Verdict(0, total, report)
    finally:
        link.close()
        if link.capped:  # the same dict the verdict holds: its tests past the cap failed, and the run is told
            report["worker_cap"] = True


def referenced_names(sources: list[str]) -> list[str]:
    """Every name the code reads, in order of first use."""
    names: dict[str, None] = {}
    for source in sources:
        for node in ast.walk(parse(source)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.setdefault(node.id)
    return list(names)


def bound_names(sources: list[str]) -> set[str]:
    """Every name the code binds anywhere: assignments, arguments, definitions, imports, loop and `with` targets."""
    names = set()
    for source in sources:
        for node in ast.walk(parse(source)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
    return names


def inspected_classes(sources: list[str]) -> set[str]:
    """Names the tests use as classes (isinstance/issubclass, a base class, `type(x) is X`) without defining them:
    classes the program must define, whose objects cannot cross as data. Decided from the dataset's tests only, so
    a program cannot choose the weaker fallback for itself."""
    used, defined = set(), set()
    for source in sources:
        for node in ast.walk(parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                defined.add(node.name)
                if isinstance(node, ast.ClassDef):
                    used.update(base.id for base in node.bases if isinstance(base, ast.Name))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                if len(node.args) == 2:
                    used.update(_names_in(node.args[1]))
            elif isinstance(node, ast.Compare) and _is_type_call(node.left):
                for comparator in node.comparators:
                    used.update(_names_in(comparator))
    return {name for name in used - defined if name not in _BUILTIN_NAMES and not _is_stdlib_module(name)}


def _names_in(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}


def _is_type_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "type"


def _is_stdlib_module(name: str) -> bool:
    return name in sys.stdlib_module_names and not name.startswith("_")


# ----------------------------------------------------------------------------------------------------------------
# The test namespace


def _on_alarm(signum, frame):
    judge_failed("the test's time is up")


def _test_namespace(job: dict, link: Link, report: dict) -> dict:
    entry_point = job.entry_point
    dataset_code = [*job.tests, job.setup or ""]
    helpers, failed_helpers = _run_helpers(job.helpers or [], job.per_test_s)
    stubs = set().union(*map(stub_functions, job.helpers or []))  # the program's to fill in, never a helper
    for stub in stubs:
        helpers.pop(stub, None)
    failed_helpers -= stubs
    if job.test_names is not None:  # read by the planner from the same text, once per row
        referenced, bound = job.test_names[0], set(job.test_names[1])
    else:
        referenced, bound = referenced_names(dataset_code), bound_names(dataset_code)
    free = set(referenced) - bound
    # A module name is wanted even where another test binds it: statements share one namespace, in order.
    modules = {name for name in referenced if name in _ALIASED_MODULES or _is_stdlib_module(name)}
    wanted = [name for name in referenced if name in free | modules or name == entry_point]
    if entry_point and entry_point not in wanted:
        wanted.append(entry_point)
    # With a named entry point (HumanEval, BigCodeBench), the program provides that name alone: anything else the
    # tests use unimported is the dataset's (a helper such as `poly`), never the program's own version of it.
    entry_only = bool(entry_point) and job.kind != "asserts"
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    link.dataset_names = namespace
    link.helper_classes = {name: value for name, value in helpers.items() if isinstance(value, type)}
    link.test_deadline = time.monotonic() + job.per_test_s  # looking the names up gets one test's budget
    for name in wanted:
        if name != entry_point and name in helpers:
            namespace[name] = helpers[name]  # the dataset's helper, not the completion's
        elif name != entry_point and name in failed_helpers:
            report["missing_helpers"].append(name)  # its block did not run: no stand-in from the program either
        elif name != entry_point and name in _BUILTIN_NAMES:
            continue
        elif name != entry_point and (_is_stdlib_module(name) or name in _ALIASED_MODULES):
            # A module the tests name: the judge's own, by the tests' name alone (`np` is numpy whatever the
            # program imported, or if it imported nothing).
            with contextlib.suppress(Exception):
                namespace[name] = importlib.import_module(_ALIASED_MODULES.get(name, name))
        else:
            found = _from_program(link, name)
            if found is ABSENT:
                report["programs_doing"].append(name)  # a name the tests use that the program lacks: its failure
                continue
            if entry_only and name != entry_point and (isinstance(found, Remote) or not _is_judges(found)):
                report["missing_helpers"].append(name)
                continue
            namespace[name] = found
            if not isinstance(found, Remote) and not _is_judges(found):
                report["programs_doing"].append(name)  # the program's data (a constant the tests read): its answer, too
    if job.setup:
        _run_setup(compile(job.setup, "setup.py", "exec"), namespace, link, job.per_test_s, report)
    return namespace


def _from_program(link: Link, name: str) -> Any:
    try:
        return link.get(name)
    except (Exception, JudgeFailure):  # noqa: BLE001 (a name the program cannot give is a name the tests do not have)
        return ABSENT


def _is_judges(value: Any) -> bool:
    """A module or class the judge imported itself (see `remote.judges_copy`), as opposed to the program's data."""
    return isinstance(value, type) or type(value).__name__ == "module"


def _run_helpers(blocks: list[str], budget_s: float) -> tuple[dict, set[str]]:
    """The dataset's helper code, each block run in turn: (the names they define, the names of blocks that failed
    to run). A failed block provides nothing, and the program does not stand in for it."""
    helpers: dict[str, Any] = {"__name__": "helpers", "__builtins__": builtins}
    failed: set[str] = set()
    for source in blocks:
        try:
            _run_timed(compile(source, "prompt.py", "exec"), helpers, budget_s)
        except BaseException:  # noqa: BLE001 (however a helper block fails, it provides no helpers)
            with contextlib.suppress(SyntaxError):
                failed |= defined_names(source)
    return helpers, failed - set(helpers)


def _run_setup(code, namespace: dict, link: Link, budget_s: float, report: dict) -> None:
    calls = link.calls
    try:
        _run_timed(code, namespace, budget_s)
    except BaseException as error:  # noqa: BLE001 (a setup that fails, however it fails, fails the row)
        if link.calls == calls:  # it never called the program: the dataset's problem, which a warning names
            report["setup_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        raise SetupFailed() from None


# ----------------------------------------------------------------------------------------------------------------
# Running the tests


def _run_asserts(job: dict, namespace: dict, link: Link, report: dict) -> int:
    """Each statement one test, in one namespace. After the program's worker was restarted (a crash), the names and
    the setup are made again before the next test: objects the setup made lived in the worker that is gone."""
    tests = [compile(source, f"test_{i}.py", "exec") for i, source in enumerate(job.tests)]
    passed, generation = 0, link.generation
    for test in tests:
        if link.ensure() and link.generation != generation:
            generation = link.generation
            try:
                namespace = _test_namespace(job, link, report)
            except SetupFailed:
                return passed
        passed += _run_one(lambda test=test, names=namespace: exec(test, names), link, job.per_test_s, report)
    return passed


def _run_script(job: dict, namespace: dict, link: Link, report: dict) -> tuple[int, int]:
    """(passed, run) for a test script. It runs first as a module; then its tests are what pytest collects from it
    (`discovery.py`); a script without any is HumanEval's `check(candidate)`, called on the row's entry point, or
    else a plain script, itself one test."""
    source, per_test_s = job.tests[0], job.per_test_s
    module = types.ModuleType("tests")
    module.__dict__.update(namespace)
    link.dataset_names = module.__dict__
    calls, failed = link.calls, failures()
    link.test_deadline = time.monotonic() + per_test_s
    try:
        _run_timed(compile(without_runner_calls(source), discovery.SCRIPT_NAME, "exec"), module.__dict__, per_test_s)
    except BaseException as error:  # noqa: BLE001 (however the script fails, it is the program's or the dataset's)
        if link.calls == calls and not report["programs_doing"]:  # the program had no part in it: the dataset's problem
            raise Refused(f"the test script fails before any call into the program: {type(error).__name__}: "
                          f"{str(error)[:200]}") from None  # fmt: skip
        return 0, max(1, job.estimated_tests)  # the program broke the script: every test of it fails
    if discovery.might_hold_tests(module):
        outcomes = _run_collected(module, source, link, per_test_s)
        if outcomes:
            report["uncalled"] += sum(outcome == "uncounted" for outcome in outcomes.values())
            return sum(outcome == "passed" for outcome in outcomes.values()), len(outcomes)
    if link.calls == calls and callable(module.__dict__.get("check")):
        if not job.entry_point:
            raise Refused("a `check(candidate)` script and no entry_point column: which function to check is the "
                          "row's to say")  # fmt: skip
        candidate = module.__dict__.get(job.entry_point)
        return int(_run_one(lambda: module.__dict__["check"](candidate), link, per_test_s, report)), 1
    if link.calls == calls:
        report["uncalled"] += 1
    return int(link.calls > calls and failures() == failed), 1


def _run_collected(module: types.ModuleType, source: str, link: Link, per_test_s: float) -> dict[str, str]:
    """pytest's verdicts on the script's tests, each test under the judge's rules: the worker alive, the test's own
    deadline and alarm, and at least one call into the program."""
    alarm_at = [0.0]

    def begin_test():
        can_run = link.ensure()
        link.test_deadline = time.monotonic() + per_test_s
        alarm_at[0] = link.test_deadline + 2 * REPLY_GRACE_S
        calls, failed = link.calls, failures()
        return lambda: can_run and link.calls > calls and failures() == failed

    @contextlib.contextmanager
    def alarm():
        signal.setitimer(signal.ITIMER_REAL, max(alarm_at[0] - time.monotonic(), 0.001))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    link.collecting = True
    try:
        return discovery.run_collected(module, source, begin_test, alarm, lambda: setattr(link, "collecting", False))
    except discovery.CollectionFailed as error:
        raise Refused(str(error)) from None
    finally:
        link.collecting = False
        signal.signal(signal.SIGALRM, previous)


def _run_one(action, link: Link, per_test_s: float, report: dict) -> bool:
    """One test: passed when `action` returns True (or None) without raising, after at least one call into the
    program. A test that ran to its end without a call is counted in the report: it can tell nothing."""
    if not link.ensure():
        return False
    link.test_deadline = time.monotonic() + per_test_s
    calls, failed = link.calls, failures()
    try:
        outcome = _run_timed(action, None, per_test_s + 2 * REPLY_GRACE_S)
    except BaseException:  # noqa: BLE001 (whatever a test raises, timeouts included, fails it)
        return False
    if outcome is False or failures() != failed:  # the judge failed under it, whatever the test caught
        return False
    if link.calls == calls:
        report["uncalled"] += 1
        return False
    return True


def _run_timed(code, namespace: dict | None, budget_s: float) -> Any:
    """Run `code` (a code object, executed in `namespace`, or a callable) under an alarm, with stdout discarded."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            signal.setitimer(signal.ITIMER_REAL, budget_s)
            try:
                if callable(code):
                    return code()
                exec(code, namespace)  # noqa: S102 (the dataset's tests, never the model's code)
                return None
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _undumpable() -> None:
    # Same-uid processes (the weakest sandbox, run without root) then cannot read this process's memory.
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0)  # PR_SET_DUMPABLE
