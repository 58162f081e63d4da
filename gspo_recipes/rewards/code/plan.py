"""Planning: a completion and its dataset row become sandbox jobs (a judged row, stdin/stdout cases, or fallback
chunks), and the dataset's helper code is found. Parsing only; nothing runs here.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
from typing import Any, NamedTuple

from .judge.confined import start_warm_workers
from .judge.judge import bound_names, inspected_classes, referenced_names
from .judge.records import JudgeJob
from .judge.remote import STARTUP_ALLOWANCE_S
from .judge.source import (
    defined_names,
    estimated_tests,
    stub_functions,
    top_level_call_argument,
    without_runner_calls,
)
from .sandbox.launch import Limits

MAX_TESTS_PER_RUN = 64  # fallback only: exit statuses are 8 bits: nonce + passed must stay clear of the reserved codes
_PYTHON_FENCES = {"python", "python3", "py", "py3"}


class Unjudgeable(ValueError):
    """The row's test data is missing or malformed: no completion of it can be judged."""


def extract_code(text: str) -> str:
    """The last fenced Python block (```python, ```py...), else the last untagged fence, else the whole text.

    A block left open at the end (a truncated completion) runs to the end of the text.
    """
    blocks = fenced_blocks(text)
    for wanted in (_PYTHON_FENCES, {""}):
        bodies = [body for language, body in blocks if language in wanted]
        if bodies:
            return bodies[-1]
    return text


def fenced_blocks(text: str) -> list[tuple[str, str]]:
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


def dataset_helpers(helpers: Any, prompt: Any) -> list[str]:
    """The helper code the row provides: its `helpers` column (code, or a list of code blocks: keep HumanEval's
    original `prompt` there), else the prompt the model saw: the whole text when it is code (the raw HumanEval
    prompt is unfenced), else every fenced Python block in it (the last one may be a usage example)."""
    if isinstance(helpers, str):
        return [helpers] if helpers.strip() else []
    if isinstance(helpers, (list, tuple)):
        return [str(block) for block in helpers]
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[-1].get("content") if users else None
    if not isinstance(prompt, str) or not prompt.strip():
        return []
    if _compiles([prompt]):
        return [prompt]
    blocks = fenced_blocks(prompt)
    if not blocks:  # a chat prompt with its code inline, after (or between) prose
        code = unfenced_code(prompt)
        return [code] if code is not None else []
    return [body for language, body in blocks if language in _PYTHON_FENCES | {""} and _compiles([body])]


_CODE_STARTS = ("def ", "async def ", "class ", "import ", "from ", "@")


def unfenced_code(text: str) -> str | None:
    """The code an unfenced prompt holds: from the first top-level line that starts a definition or an import, to
    the last top-level line before which it still compiles (the prose after it left out); None when there is none.
    Only lines at the left margin that start neither code nor a block's continuation are tried as ends."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(_CODE_STARTS)]
    for start in starts[:8]:
        ends = [i for i in range(start + 1, len(lines)) if lines[i][:1] not in ("", " ", "\t", "\n", "#", "@")
                and not lines[i].startswith(_CODE_STARTS)]  # fmt: skip
        for end in [len(lines), *reversed(ends[:32])]:
            body = "".join(lines[start:end])
            if _compiles([body]):
                return body
    return None


class Job:
    """One unit of work: kind "judge" (a row's tests, in the judge pool), "io" (one stdin/stdout case) or "tests"
    (the fallback: a chunk of tests run by the harness beside the program)."""

    __slots__ = ("expected", "kind", "limits", "payload", "stdin", "total")

    def __init__(self, kind, payload, total, limits, stdin=None, expected=None):
        self.kind, self.payload, self.total, self.limits = kind, payload, total, limits
        self.stdin, self.expected = stdin, expected


def plan_row(program, tests, io_tests, entry_point, setup, helpers, timeout_s, limits) -> list[Job]:
    """The jobs for one completion of one row. Raises `Unjudgeable` for a row no completion can be judged on."""
    try:
        return _plan_row(program, tests, io_tests, entry_point, setup, helpers, timeout_s, limits)
    except (ValueError, TypeError, KeyError, AttributeError, SyntaxError) as error:
        if isinstance(error, Unjudgeable):
            raise
        raise Unjudgeable(f"{type(error).__name__}: {error}") from None


def _plan_row(program, tests, io_tests, entry_point, setup, helpers, timeout_s, limits) -> list[Job]:
    if io_tests is not None:
        cases = _io_cases(io_tests)
        if not cases:
            raise Unjudgeable("no stdin/stdout cases")
        io_limits = _with_wall(limits, STARTUP_ALLOWANCE_S + timeout_s)
        job = {"mode": "io", "program": program}
        return [Job("io", job, 1, io_limits, stdin=inp.encode(), expected=out) for inp, out in cases]
    if tests is None:
        raise Unjudgeable("no tests")
    if isinstance(tests, str) and tests.lstrip().startswith("["):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            pass
    if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise Unjudgeable(f"entry_point {entry_point!r} is not a Python name")
    statements = (tests,) if isinstance(tests, str) else tuple(str(t) for t in tests)
    row = _read_tests(statements, isinstance(tests, str), entry_point, setup or "", tuple(helpers))
    if row.fallback:
        return _fallback_jobs(program, row.kind, row.entry_point, list(statements), setup, timeout_s, limits)
    # CPU for the whole row (restarts after crashes included); the judge enforces the per-test deadlines itself.
    wall = (STARTUP_ALLOWANCE_S + timeout_s) * (row.total + 2)
    job = JudgeJob(
        program=program,
        kind=row.kind,
        tests=list(statements),
        entry_point=row.entry_point,
        setup=setup or "",
        helpers=helpers,
        per_test_s=timeout_s,
        estimated_tests=row.total,
        limits=_with_wall(limits, wall),
        test_names=[list(row.referenced), list(row.bound)],
    )
    return [Job("judge", job, row.total, limits)]


class _RowTests(NamedTuple):
    """What a row's tests say, whichever completion is judged on them (`_read_tests`)."""

    kind: str  # "script" or "asserts"
    entry_point: str | None
    total: int  # the tests counted (asserts) or estimated (a script), for the row's budget
    fallback: bool  # the tests inspect the program's classes: the weaker fallback runs them
    referenced: tuple  # the names the tests and setup read, in order of first use (`judge.referenced_names`)
    bound: tuple  # the names they bind (`judge.bound_names`)


@functools.lru_cache(maxsize=256)
def _read_tests(statements: tuple, is_script: bool, entry_point, setup: str, helpers: tuple) -> _RowTests:
    """Read a row's tests once, not once per completion: a group's completions share their row, and its tests,
    setup and helpers are the dataset's text (parsing and compiling them was about a third of this process's share
    of the work). Raises `Unjudgeable`, which is not kept: a broken row is read again, and fails again."""
    if not statements or not _compiles([*statements, setup]):
        raise Unjudgeable("tests missing or not valid Python")
    kind = "script" if is_script else "asserts"
    if kind == "script" and not entry_point:
        entry_point = top_level_call_argument(statements[0], "check")  # the tests' own call; never the program's
    if kind == "script" and not entry_point and _is_check_script(statements[0]):
        # The one function the prompt asks for (its stub, HumanEval's signature and docstring): the row's word too.
        stubs = set().union(*map(stub_functions, helpers))
        entry_point = stubs.pop() if len(stubs) == 1 else None
    fallback = bool(inspected_classes([*statements, setup, *helpers]))
    total = len(statements) if kind == "asserts" else estimated_tests(statements[0])
    # What the judge would otherwise read again in every attempt (two walks of the tests' syntax trees).
    code = [*statements, setup]
    names = tuple(referenced_names(code)), tuple(sorted(bound_names(code)))
    return _RowTests(kind, entry_point, total, fallback, *names)


def _is_check_script(source: str) -> bool:
    """Whether a test script is HumanEval's `check(candidate)` alone: a top-level `check` and no test pytest would
    collect (`test*` functions, `Test*` classes)."""
    body = ast.parse(source).body
    named = [node.name for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return "check" in named and not any(name.lower().startswith("test") for name in named)


# The weaker fallback runs a script's tests inside the sandbox with unittest's loader and the script's argument-free
# `test*` functions, all of them one test: a `test*` function that wants fixtures fails it (never dropped silently).
_FALLBACK_RUNNER = """
import inspect as _inspect, types as _types, unittest as _unittest
_module = _types.ModuleType("tests")
_module.__dict__.update(globals())
_result = _unittest.TestResult()
_suite = _unittest.defaultTestLoader.loadTestsFromModule(_module)
_suite.run(_result)
_functions = [_f for _n, _f in list(globals().items()) if _n.startswith("test") and _inspect.isfunction(_f)]
for _function in _functions:
    _function()
if not (_result.testsRun or _functions) and {entry!r} and callable(globals().get("check")):
    check(globals()[{entry!r}])
assert _result.wasSuccessful() and not _result.skipped
"""


def _fallback_jobs(program, kind, entry_point, statements, setup, timeout_s, limits) -> list[Job]:
    """The weaker fallback: tests beside the program in the sandbox (a script as one test, see above)."""
    mode = "asserts"
    if kind == "script":
        if not entry_point and "check" in defined_names(statements[0]):
            raise Unjudgeable("a check(candidate) script and no entry_point column")
        if _needs_pytest(statements[0]):
            raise Unjudgeable("tests that inspect the program's classes and take fixtures or parameters: the fallback "
                              "runs them without pytest, and would fail them all")  # fmt: skip
        script = ast.unparse(without_runner_calls(statements[0]))
        statements = [script + "\n" + _FALLBACK_RUNNER.format(entry=entry_point or "")]
    jobs = []
    for start in range(0, len(statements), MAX_TESTS_PER_RUN):
        chunk = statements[start : start + MAX_TESTS_PER_RUN]
        job = {"mode": mode, "program": program, "tests": chunk, "setup": setup or "", "per_test_s": timeout_s}
        wall = STARTUP_ALLOWANCE_S + timeout_s * (len(chunk) + 1)
        jobs.append(Job("tests", job, len(chunk), _with_wall(limits, wall)))
    return jobs


def _needs_pytest(script: str) -> bool:
    """Whether a script has a test that takes arguments (fixtures, parametrize): only pytest runs those. Top-level
    functions take none, methods only `self`."""
    tree = ast.parse(script)
    tests = [(node, 0) for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    tests += [(item, 1) for node in tree.body if isinstance(node, ast.ClassDef) for item in node.body
              if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]  # fmt: skip
    return any(
        node.name.startswith("test") and len(node.args.posonlyargs + node.args.args) > own for node, own in tests
    )


def _compiles(sources: list[str]) -> bool:
    return all(_compiles_one(source) for source in sources)


@functools.lru_cache(maxsize=512)
def _compiles_one(source: str) -> bool:
    """Whether `source` compiles; only the dataset's text comes here (tests, setup, prompts), the same for every
    completion of a row, so the answer is kept."""
    try:
        compile(source, "<test>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
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


# Our own rows, judged once in each judging pool process before the judge's zygote is forked from it (see
# `judge.confined.start_warm_workers`). An honest program of ours; nothing of a dataset's or a model's.
_WARM_UP_ROWS = (
    ("def add(a, b):\n    return a + b\n", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], None),
    ("def add(a, b):\n    return a + b\n", "def check(candidate):\n    assert candidate(2, 3) == 5\n", "add"),
)


def start_judge_workers() -> None:
    """The judging pool's preload: the warm workers, warmed up on our own rows (the planner stays on this side)."""
    jobs = []
    for program, tests, entry_point in _WARM_UP_ROWS:
        with contextlib.suppress(Exception):  # a warm-up that fails costs only speed
            [job] = plan_row(program, tests, None, entry_point, None, [], 5.0, Limits())
            jobs.append(job.payload)
    start_warm_workers(jobs)
