"""The shapes of test a row can carry, and how the judge turns each into tests it can count.

  asserts    a list of statements (MBPP's `test_list`), each one test.
  check      a script defining `check(candidate)` and not calling it (HumanEval): one test, `check(<entry point>)`.
             The entry point is the row's `entry_point`; without one, the last function the prompt's code defines,
             else the last top-level function of the program (any function the program names must pass the tests).
  unittest   a script with `unittest.TestCase` classes (BigCodeBench): each test method one test, run by unittest.
  pytest     a script with top-level `def test_...()` functions: each function one test.
  script     any other script (top-level asserts, or one that calls `check(...)` itself): one test.

Read from the dataset's text, never from the program's (except the entry-point fallback above). Everything here is
pure: parsing only, no test runs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# Code from an untrusted source is parsed only up to this size; deeper nesting is caught as RecursionError.
MAX_PARSED_CHARS = 1 << 20


@dataclass
class Shape:
    """How to run one row's tests. `units` are test names (methods, functions) for unittest/pytest shapes."""

    kind: str
    units: list[str] = field(default_factory=list)
    entry_point: str | None = None


def parse(source: str) -> ast.Module:
    """`ast.parse` that turns the parser's resource failures into SyntaxError (a program of 3,000 nested `-` signs
    is not code the judge will read)."""
    if len(source) > MAX_PARSED_CHARS:
        raise SyntaxError("source too long to parse")
    try:
        return ast.parse(source)
    except (RecursionError, MemoryError, ValueError) as error:
        raise SyntaxError(f"source cannot be parsed: {type(error).__name__}") from None


def script_shape(script: str, entry_point: str | None, helpers: str = "", program: str = "") -> Shape:
    """The shape of a one-script row (see the module docstring)."""
    tree = parse(script)
    cases = [node for node in tree.body if isinstance(node, ast.ClassDef) and _is_test_case(node)]
    if cases:
        methods = (ast.FunctionDef, ast.AsyncFunctionDef)
        units = [f"{case.name}.{item.name}" for case in cases for item in case.body
                 if isinstance(item, methods) and item.name.startswith("test")]  # fmt: skip
        return Shape("unittest", units, entry_point)
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    tests = [f.name for f in functions if f.name.startswith("test") and not _required_arguments(f)]
    if tests and not _calls_at_top_level(tree, set(tests)):
        return Shape("pytest", tests, entry_point)
    if any(f.name == "check" for f in functions) and not _calls_at_top_level(tree, {"check"}):
        entry = entry_point or last_function(helpers) or last_function(program)
        return Shape("check", [], entry)
    return Shape("script", [], entry_point or top_level_call_argument(script, "check"))


def last_function(source: str) -> str | None:
    """The last top-level function `source` defines (None when it defines none or does not parse)."""
    if not source:
        return None
    try:
        tree = parse(source)
    except SyntaxError:
        return None
    names = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return names[-1] if names else None


def defined_names(source: str) -> set[str]:
    """Names `source` binds at top level (functions, classes, assignments, imports)."""
    names = set()
    for node in parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {sub.id for target in targets for sub in ast.walk(target) if isinstance(sub, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _is_test_case(node: ast.ClassDef) -> bool:
    for base in node.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name in ("TestCase", "IsolatedAsyncioTestCase"):
            return True
    return False


def _required_arguments(function: ast.FunctionDef) -> int:
    args = function.args
    return len(args.posonlyargs) + len(args.args) - len(args.defaults)


def top_level_call_argument(script: str, function: str) -> str | None:
    """`X` in a top-level `check(X)`: the entry point a script names itself."""
    for statement in parse(script).body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == function and len(call.args) == 1:
            return getattr(call.args[0], "id", None)
    return None


def _is_main_guard(statement: ast.stmt) -> bool:
    # `if __name__ == "__main__": unittest.main()`: never runs in the judge (its tests run as "tests")
    test = statement.test if isinstance(statement, ast.If) else None
    return isinstance(test, ast.Compare) and getattr(test.left, "id", None) == "__name__"


def _calls_at_top_level(tree: ast.Module, names: set[str]) -> bool:
    """Whether a top-level statement (outside any function or class) calls one of `names`: `check(f)` at the end
    of the script, not a line in a docstring or a comment."""
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or _is_main_guard(statement):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in names:
                return True
    return False
