"""The judge: runs a row's tests, in a process that never runs model code, against a sandboxed worker that does.

The dataset's tests execute here with the names they use from the program bound to `Remote` stand-ins (`remote.py`):
calling one sends `(function, arguments)` to the worker (`worker.py`) and gets the result back as plain data
(`wire.py`), decoded into fresh built-in objects. So comparisons run on objects the model cannot have touched, the
worker never sees a test or an expected value, and the count of passed tests is made here.

Fail closed. A test passes only when it ran to its end, made at least one call into the program, and everything it
compared was data the judge decoded. Names the tests use come from the dataset (the helpers the prompt defines, the
setup code, the tests themselves), Python's builtins and standard library, the judge's own copy of a module the
program imported, and only then from the program: where the row names its entry point, the program provides that
name alone. The test shapes are in `shapes.py`.

Runs in a `DeadlinePool` process (see `reward.py`): per-test alarms work here, and a test that runs away takes down a
pool worker, not the trainer.
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
import unittest
from typing import Any

from . import sandbox
from .remote import ABSENT, REPLY_GRACE_S, STARTUP_ALLOWANCE_S, Link, Remote  # noqa: F401 (kept importable)
from .shapes import defined_names, parse

_BUILTIN_NAMES = frozenset(dir(builtins))


class SetupFailed(Exception):
    """The row's setup code (or its test script's top level) raised: every test of the row fails."""


def judge_tests(job: dict) -> tuple[int, int, dict] | None:
    """(tests passed, tests run, report) for one row, or None when no sandbox could run the program.

    `job`: program, tests (statements), shape (`shapes.Shape` as a dict), setup, helpers (code blocks from the
    dataset), per_test_s, backend, limits (a `sandbox.Limits` as a dict). The report names what the row's data got
    wrong: `uncalled` (tests that ran to their end without calling the program), `setup_error`, `missing_helpers`
    (names the tests use that only the program defines, or whose helper block failed to run)."""
    _undumpable()
    shape = job["shape"]
    total = len(shape["units"]) or 1 if shape["kind"] in ("unittest", "pytest") else len(job["tests"])
    report: dict[str, Any] = {"uncalled": 0, "setup_error": None, "missing_helpers": []}
    row_deadline = time.monotonic() + (STARTUP_ALLOWANCE_S + job["per_test_s"]) * (total + 2)
    link = Link(job, row_deadline)
    try:
        if not link.ensure():
            return 0, total, report
        namespace = _test_namespace(job, link, report)
        return _run_tests(job, namespace, link, report), total, report
    except sandbox.SandboxUnavailable:
        return None
    except SetupFailed:
        return 0, total, report
    except Exception as error:  # noqa: BLE001 (the tests or the program broke the judge: fail closed, say why)
        report["judge_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        return 0, total, report
    finally:
        link.close()


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


class _TestTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _test_namespace(job: dict, link: Link, report: dict) -> dict:
    entry_point = job["shape"].get("entry_point")
    dataset_code = [*job["tests"], job.get("setup") or ""]
    helpers, failed_helpers = _run_helpers(job.get("helpers") or [], job["per_test_s"])
    free = set(referenced_names(dataset_code)) - bound_names(dataset_code)
    wanted = [name for name in referenced_names(dataset_code) if name in free or name == entry_point]
    if entry_point and entry_point not in wanted:
        wanted.append(entry_point)
    # With a named entry point (HumanEval, BigCodeBench), the program provides that name alone: anything else the
    # tests use unimported is the dataset's (a helper such as `poly`), never the program's own version of it.
    entry_only = bool(entry_point) and job["shape"]["kind"] != "asserts"
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    link.test_deadline = time.monotonic() + job["per_test_s"]  # looking the names up gets one test's budget
    for name in wanted:
        if name != entry_point and name in helpers:
            namespace[name] = helpers[name]  # the dataset's helper, not the completion's
        elif name != entry_point and name in failed_helpers:
            report["missing_helpers"].append(name)  # its block did not run: no stand-in from the program either
        elif name != entry_point and name in _BUILTIN_NAMES:
            continue
        elif name != entry_point and _is_stdlib_module(name):
            with contextlib.suppress(ImportError):
                namespace[name] = importlib.import_module(name)
        else:
            found = _from_program(link, name)
            if found is ABSENT:
                continue
            if entry_only and name != entry_point and (isinstance(found, Remote) or not _is_judges(found)):
                report["missing_helpers"].append(name)
                continue
            namespace[name] = found
    if job.get("setup"):
        _run_setup(compile(job["setup"], "setup.py", "exec"), namespace, link, job["per_test_s"], report)
    return namespace


def _from_program(link: Link, name: str) -> Any:
    try:
        return link.get(name, class_name=name[:1].isupper())
    except Exception:  # noqa: BLE001 (a name the program cannot give is a name the tests do not have)
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


def _run_tests(job: dict, namespace: dict, link: Link, report: dict) -> int:
    shape, per_test_s = job["shape"], job["per_test_s"]
    if shape["kind"] in ("asserts", "check", "script"):
        sources = job["tests"]
        if shape["kind"] == "check":
            sources = [f"{sources[0]}\n\ncheck({shape['entry_point']})\n"]
        tests = [compile(source, f"test_{i}.py", "exec") for i, source in enumerate(sources)]
        return sum(_run_one(lambda test=test: exec(test, namespace), link, per_test_s, report) for test in tests)
    # unittest and pytest shapes: the script's top level defines the tests (and imports what they use).
    if not shape["units"]:  # TestCase classes without a test method: nothing to run, nothing shown
        report["uncalled"] += 1
        return 0
    _run_setup(compile(job["tests"][0], "test_0.py", "exec"), namespace, link, per_test_s, report)
    runner = _unittest_runner if shape["kind"] == "unittest" else _pytest_runner
    return sum(_run_one(runner(namespace, unit), link, per_test_s, report) for unit in shape["units"])


def _run_one(action, link: Link, per_test_s: float, report: dict) -> bool:
    """One test: passed when `action` returns True (or None) without raising, after at least one call into the
    program. A test that ran to its end without a call is counted in the report: it can tell nothing."""
    if not link.ensure():
        return False
    link.test_deadline = time.monotonic() + per_test_s
    calls = link.calls
    try:
        outcome = _run_timed(action, None, per_test_s + 2 * REPLY_GRACE_S)
    except BaseException:  # noqa: BLE001 (whatever a test raises, timeouts included, fails it)
        return False
    if outcome is False:
        return False
    if link.calls == calls:
        report["uncalled"] += 1
        return False
    return True


def _unittest_runner(namespace: dict, unit: str):
    def run() -> bool:
        class_name, method = unit.split(".", 1)
        result = unittest.TestResult()
        unittest.TestSuite([namespace[class_name](method)]).run(result)
        # Skipped or expected to fail is not passed: a program that raises SkipTest has shown nothing.
        return result.testsRun == 1 and result.wasSuccessful() and not (result.skipped or result.expectedFailures)

    return run


def _pytest_runner(namespace: dict, unit: str):
    def run() -> None:
        namespace[unit]()

    return run


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
