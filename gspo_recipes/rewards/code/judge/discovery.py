"""Which tests a test script holds, and how each went, by the runners' own rules: pytest collects and runs them.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", judge/discovery.py.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from collections.abc import Callable

SCRIPT_NAME = "test_row.py"
# Where the judge keeps its own files (pytest's copy of the script, its rootdir and ini): its own /tmp, which no
# program sees. Never TMPDIR or the working directory: those are the folder it shares with the program.
PRIVATE_TOP = "/tmp"
_PYTEST_ARGS = ["-q", "-s", "--assert=plain", "--disable-plugin-autoload", "--noconftest", "-p", "no:cacheprovider",
                "-p", "no:faulthandler", "-p", "no:stepwise", "-W", "ignore"]  # fmt: skip


class CollectionFailed(Exception):
    """pytest could not collect the script's tests (the dataset's problem, the same for every completion)."""


def might_hold_tests(module: types.ModuleType) -> bool:
    """Whether pytest's default rules could collect anything from `module` (a cheap superset of them: a `test*`
    callable, a `Test*` class, a `TestCase` subclass), so that scripts without tests (HumanEval's `check`) skip it."""
    # A TestCase subclass needs unittest imported (by the script, or a module it imported): the judge itself
    # imports it only then, which keeps it out of the zygote every attempt is forked from.
    unittest = sys.modules.get("unittest")
    for name, value in list(vars(module).items()):
        if isinstance(value, type):
            if name.startswith("Test") or (unittest is not None and issubclass(value, unittest.TestCase)):
                return True
        elif name.startswith("test") and callable(value):
            return True
    return False


def run_collected(module: types.ModuleType, source: str, begin_test: Callable[[], Callable[[], bool]],
                  around_phase: Callable[[], contextlib.AbstractContextManager],
                  collected: Callable[[], None] = lambda: None) -> dict[str, str]:  # fmt: skip
    """{test id: "passed" | "failed" | "uncounted"} for every test pytest collects from `module` (`source` is its
    text). `begin_test()` is called as each test starts and returns `counts()`, asked as it ends: False makes a test
    the runner passed "uncounted" (the judge's rule: it never called the program). `around_phase()` wraps each of a
    test's setup, call and teardown (the judge's alarm); `collected()` is called once collection is done."""
    import tempfile

    import pytest  # here, not at the top: most rows (asserts, HumanEval's check) never need it in the judge

    _fail_yield_tests(module)
    plugin = _row_plugin_class()(module, begin_test, around_phase)
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):  # the trainer's environment does not configure the judge
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="gspo-judge-", dir=PRIVATE_TOP) as folder:
        path = os.path.join(folder, SCRIPT_NAME)
        with open(path, "w", encoding="utf-8") as script:
            script.write(source)
        ini = os.path.join(folder, "pytest.ini")
        with open(ini, "w", encoding="utf-8") as config:
            config.write("[pytest]\n")
        plugin.script = path  # removed once collected: no test runs while the script is a file anyone could read
        plugin.collected_hook = collected
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            pytest.main([path, "-c", ini, "--rootdir", folder, *_PYTEST_ARGS], plugins=[plugin])
    if plugin.collection_error is not None:
        raise CollectionFailed(plugin.collection_error)
    return {test: plugin.outcome(test) for test in plugin.collected}


def _fail_yield_tests(module: types.ModuleType) -> None:
    """A `test*` generator function (a yield test, which pytest 4 stopped running) is one test that fails, not a
    collection error that refuses the whole row (None for every completion): the script's other tests count."""
    import inspect

    def failing(function):
        @functools.wraps(function)
        def yield_test(*args, **kwargs):
            raise AssertionError(f"{function.__name__} is a yield test: pytest does not run those")

        return yield_test

    unittest = sys.modules.get("unittest")
    # pytest's own classes only: unittest runs a TestCase's generator method as a call that returns at once.
    classes = [value for value in vars(module).values() if isinstance(value, type)]
    holders = [module, *(cls for cls in classes if unittest is None or not issubclass(cls, unittest.TestCase))]
    for holder in holders:
        for name, value in list(vars(holder).items()):
            if name.startswith("test") and inspect.isgeneratorfunction(value):
                setattr(holder, name, failing(value))


@functools.cache
def _row_plugin_class() -> type:
    """The pytest plugin that collects from the judge's module and keeps the verdicts (made once, on first use)."""
    import pytest

    class _RowPlugin:
        def __init__(self, module, begin_test, around_phase):
            self.module, self.begin_test, self.around_phase = module, begin_test, around_phase
            self.collected: list[str] = []
            self.collection_error: str | None = None
            self.failed: set[str] = set()
            self.ended_well: set[str] = set()  # the call phase passed, or failed as xfail said it would
            self.uncounted: set[str] = set()
            self.script = ""
            self.collected_hook = lambda: None

        def outcome(self, test: str) -> str:
            if test not in self.ended_well or test in self.failed:
                return "failed"
            return "uncounted" if test in self.uncounted else "passed"

        def pytest_pycollect_makemodule(self, module_path, parent):
            collector = pytest.Module.from_parent(parent, path=module_path)
            collector.obj = self.module  # the module the judge ran; pytest does not import the file
            return collector

        def pytest_collectreport(self, report):
            if report.failed and self.collection_error is None:
                lines = str(report.longrepr).strip().splitlines()
                self.collection_error = f"{SCRIPT_NAME}: {lines[-1] if lines else 'collection failed'}"[:300]

        def pytest_collection_finish(self, session):
            self.collected = [item.nodeid for item in session.items]
            with contextlib.suppress(OSError):
                os.unlink(self.script)
            self.collected_hook()

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            counts = self.begin_test()
            try:
                return (yield)
            finally:
                if not counts():
                    self.uncounted.add(item.nodeid)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_setup(self, item):
            with self.around_phase():
                return (yield)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item):
            with self.around_phase():
                return (yield)

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_teardown(self, item, nextitem):
            with self.around_phase():
                return (yield)

        @pytest.hookimpl(tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem):
            import asyncio
            import inspect

            function = pyfuncitem.obj
            if not inspect.iscoroutinefunction(function):
                return None
            names = inspect.signature(function).parameters
            asyncio.run(function(**{name: value for name, value in pyfuncitem.funcargs.items() if name in names}))
            return True

        def pytest_runtest_logreport(self, report):
            if report.failed:
                self.failed.add(report.nodeid)
            elif report.when == "call" and getattr(report, "context", None) is None:  # the test, not a subtest
                if report.passed or hasattr(report, "wasxfail"):
                    self.ended_well.add(report.nodeid)

    return _RowPlugin
