"""The judge: runs a row's tests, in a process that never runs model code, against a sandboxed worker that does.

The dataset's tests execute here with the names they use from the program bound to `Remote` stand-ins: calling one
sends `(function, arguments)` to the worker (`worker.py`) and gets the result back as plain data (`wire.py`), decoded
into fresh built-in objects. So comparisons run on objects the model cannot have touched, the worker never sees a
test or an expected value, and the count of passed tests is made here. Names the tests use come, in this order, from
the dataset (helpers the prompt provides, the setup code, the tests themselves), Python's builtins and standard-library
modules, and only then from the program.

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
from typing import Any

from . import sandbox
from .wire import NotPlainData, decode, encode
from .worker import SandboxWorker, WorkerGone

STARTUP_ALLOWANCE_S = 1.0  # sandbox and interpreter start-up, on top of one per-test budget for the program itself
REPLY_GRACE_S = 0.25  # how long past a call's budget the judge waits before it kills the worker
_BUILTIN_NAMES = frozenset(dir(builtins))


def judge_tests(job: dict) -> tuple[int, int] | None:
    """(tests passed, tests run) for one row, or None when no sandbox could run the program.

    `job`: program, tests (statements), entry_point, setup, helpers (code from the prompt), per_test_s, backend,
    limits (a `sandbox.Limits` as a dict)."""
    _undumpable()
    tests = [compile(source, f"test_{i}.py", "exec") for i, source in enumerate(job["tests"])]
    per_test_s = job["per_test_s"]
    row_deadline = time.monotonic() + (STARTUP_ALLOWANCE_S + per_test_s) * (len(tests) + 1)
    link = _Link(job, row_deadline)
    try:
        if not link.ensure():
            return 0, len(tests)
        namespace = _test_namespace(job, link)
        passed = sum(_run_test(test, namespace, link, per_test_s) for test in tests)
        return passed, len(tests)
    except (sandbox.SandboxUnavailable, OSError):
        return None
    finally:
        link.close()


def referenced_names(sources: list[str]) -> list[str]:
    """Every name the code reads, in order of first use."""
    names: dict[str, None] = {}
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.setdefault(node.id)
    return list(names)


def inspected_classes(sources: list[str]) -> set[str]:
    """Names the tests use as classes (isinstance/issubclass, a base class, `type(x) is X`) without defining them:
    classes the program must define, whose objects cannot cross as data. Decided from the dataset's tests only, so
    a program cannot choose the weaker fallback for itself."""
    used, defined = set(), set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
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
# The test namespace and the tests


class _TestTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _test_namespace(job: dict, link: _Link) -> dict:
    entry_point = job.get("entry_point")
    sources = [*job["tests"], job.get("setup") or ""]
    wanted = referenced_names(sources) + ([entry_point] if entry_point else [])
    helpers = _run_helpers(job.get("helpers") or "", job["per_test_s"])
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    link.test_deadline = time.monotonic() + job["per_test_s"]  # looking the names up gets one test's budget
    for name in dict.fromkeys(wanted):
        if name != entry_point and name in helpers:
            namespace[name] = helpers[name]  # the dataset's helper, not the completion's
        elif name != entry_point and name in _BUILTIN_NAMES:
            continue
        elif name != entry_point and _is_stdlib_module(name):
            with contextlib.suppress(ImportError):
                namespace[name] = importlib.import_module(name)
        else:
            with contextlib.suppress(Exception):
                found = link.get(name)
                if found is not _ABSENT:
                    namespace[name] = found
    if job.get("setup"):
        _run_timed(compile(job["setup"], "setup.py", "exec"), namespace, job["per_test_s"])
    return namespace


def _run_helpers(source: str, budget_s: float) -> dict:
    helpers: dict[str, Any] = {"__name__": "helpers", "__builtins__": builtins}
    if source:
        try:
            _run_timed(compile(source, "prompt.py", "exec"), helpers, budget_s)
        except BaseException:  # noqa: BLE001 (a prompt whose code does not run, however it fails, provides no helpers)
            return {}
    return helpers


def _run_test(test, namespace: dict, link: _Link, per_test_s: float) -> bool:
    if not link.ensure():
        return False
    link.test_deadline = time.monotonic() + per_test_s
    try:
        _run_timed(test, namespace, per_test_s + 2 * REPLY_GRACE_S)
        return True
    except BaseException:  # noqa: BLE001 (whatever a test raises, timeouts included, fails it)
        return False


def _run_timed(code, namespace: dict, budget_s: float) -> None:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            signal.setitimer(signal.ITIMER_REAL, budget_s)
            try:
                exec(code, namespace)  # noqa: S102 (the dataset's tests, never the model's code)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _undumpable() -> None:
    # Same-uid processes (the weakest sandbox, run without root) then cannot read this process's memory.
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0)  # PR_SET_DUMPABLE


# ----------------------------------------------------------------------------------------------------------------
# Talking to the worker

_ABSENT = object()


class Remote:
    """Something the program defined, living in the worker. Calls and attribute reads are forwarded and come back
    as plain data (or as another `Remote`); everything else (comparison, truth, length, iteration) raises: an
    object the model controls is never what a test compares."""

    __slots__ = ("_generation", "_link", "_target")

    def __init__(self, link: _Link, target: list, generation: int):
        self._link, self._target, self._generation = link, target, generation

    def __call__(self, *args, **kwargs):
        return self._link.call(self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.forward(self, ["getattr", self._target, name])

    def __str__(self) -> str:
        return self._link.forward(self, ["text", self._target, "str"])

    def __repr__(self) -> str:
        return self._link.forward(self, ["text", self._target, "repr"])

    def _refuse(self, *args):
        raise TypeError("an object of the program's is not plain data: it cannot be compared, counted or tested")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = __contains__ = _refuse
    __index__ = __int__ = __float__ = __hash__ = __getitem__ = __add__ = __radd__ = __sub__ = __mul__ = _refuse


class _Link:
    """The judge's end of one row's worker: started lazily, restarted after a crash while the row has time."""

    def __init__(self, job: dict, row_deadline: float):
        self.job, self.row_deadline = job, row_deadline
        self.worker: SandboxWorker | None = None
        self.generation = 0
        self.failed_to_load = False
        self.test_deadline = time.monotonic() + job["per_test_s"]

    def ensure(self) -> bool:
        if self.worker is not None and self.worker.alive:
            return True
        startup_s = STARTUP_ALLOWANCE_S + self.job["per_test_s"]
        if self.failed_to_load or time.monotonic() + startup_s > self.row_deadline:
            return False
        limits = sandbox.Limits(**self.job["limits"])
        self.worker = SandboxWorker(self.job["backend"], self.job["program"], self.job["per_test_s"], limits)
        self.generation += 1
        try:
            ready = self.worker.receive(startup_s)[0] == "ready"
        except WorkerGone:
            ready = False
        self.failed_to_load = not ready  # a program that cannot load will not load the next time either
        return ready

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def get(self, name: str) -> Any:
        reply = self._request(["get", name])
        if not reply[0]:
            return _ABSENT
        value = self._decode(reply[1])
        return Remote(self, ["name", name], 0) if isinstance(value, Remote) else value

    def call(self, remote: Remote, args: tuple, kwargs: dict) -> Any:
        self._check(remote)
        sent = [encode(arg, self._outgoing) for arg in args]
        named = [[key, encode(value, self._outgoing)] for key, value in kwargs.items()]
        result, after = self._request(["call", remote._target, sent, named])
        for original, changed in zip(args, after):
            if changed is not None:
                _update_in_place(original, self._decode(changed))
        return self._decode(result)

    def forward(self, remote: Remote, request: list) -> Any:
        self._check(remote)
        return self._decode(self._request(request)[0])

    def _check(self, remote: Remote) -> None:
        if remote._link is not self or (remote._generation and remote._generation != self.generation):
            raise RuntimeError("that object belonged to a worker that has since been restarted")

    def _request(self, request: list) -> list:
        if self.worker is None or not self.worker.alive:  # restarted between tests only, never under a test's alarm
            raise WorkerGone("the program is not running")
        budget = self.test_deadline - time.monotonic()
        if budget <= 0:
            raise TimeoutError("the test's time is up")
        reply = self.worker.request([*request, budget], budget + REPLY_GRACE_S)
        if reply[0] == "ok":
            return reply[1:]
        if reply[0] == "raised" and len(reply) == 3:
            raise _builtin_exception(reply[1])(str(reply[2]))
        if reply[0] == "timeout":
            raise TimeoutError("the call ran out of time")
        self.worker.close()
        raise WorkerGone("unexpected reply")

    def _decode(self, data: Any) -> Any:
        return decode(data, lambda handle_id: Remote(self, ["h", handle_id], self.generation))

    def _outgoing(self, value: Any, encode_inner) -> list:
        if isinstance(value, Remote) and value._target[0] == "h":
            self._check(value)
            return value._target
        raise NotPlainData(f"a {type(value).__name__} cannot be passed to the program")


def _builtin_exception(name: Any) -> type:
    found = getattr(builtins, name, None) if isinstance(name, str) else None
    return found if isinstance(found, type) and issubclass(found, Exception) else RuntimeError


def _update_in_place(original: Any, changed: Any) -> None:
    """Carry a call's changes to a list, dict, set or bytearray argument back to the test's own object."""
    if type(original) is not type(changed):
        return
    if isinstance(original, (list, bytearray)):
        original[:] = changed
    elif isinstance(original, (dict, set)):
        original.clear()
        original.update(changed)
