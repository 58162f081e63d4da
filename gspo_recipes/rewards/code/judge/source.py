"""Reading the dataset's test code without running it: parsing with bounds, the names it binds, the entry point a
script names itself, and the runner calls the judge drops (it is the runner). Pure: nothing here runs code.

Which tests a script holds is not decided here: pytest and unittest decide it, on the script as it runs
(`discovery.py`).
"""

from __future__ import annotations

import ast
import functools

# Code from an untrusted source is parsed only up to this size; deeper nesting is caught as RecursionError.
MAX_PARSED_CHARS = 1 << 20
# A script's tests are counted when they are collected; before that, only the budget of the row needs a figure.
MAX_ESTIMATED_TESTS = 500


def parse(source: str) -> ast.Module:
    """`ast.parse` that turns the parser's resource failures into SyntaxError (a program of 3,000 nested `-` signs
    is not code the judge will read).

    A row's tests are read several times (planning, then each attempt's judge: names, entry point, runner calls), so
    the tree of a source up to `MAX_CACHED_CHARS` is kept and shared: callers read it, never change it."""
    if len(source) > MAX_PARSED_CHARS:
        raise SyntaxError("source too long to parse")
    if len(source) <= MAX_CACHED_CHARS:
        return _parse_cached(source)
    return _parse(source)


MAX_CACHED_CHARS = 1 << 15  # a test script or a prompt; at most 128 such trees are kept (a few MB)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except (RecursionError, MemoryError, ValueError) as error:
        raise SyntaxError(f"source cannot be parsed: {type(error).__name__}") from None


_parse_cached = functools.lru_cache(maxsize=128)(_parse)  # a SyntaxError is not cached: it is raised again


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


def top_level_call_argument(script: str, function: str) -> str | None:
    """`X` in a top-level `check(X)`: the entry point a script names itself."""
    for statement in parse(script).body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == function and len(call.args) == 1:
            return getattr(call.args[0], "id", None)
    return None


def without_runner_calls(script: str) -> ast.Module:
    """The script without its top-level `unittest.main()` / `pytest.main()` statements: the judge is the runner
    (an unguarded `unittest.main()` would run the tests once more and exit)."""
    tree = parse(script)
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                and node.module in _RUNNERS for alias in node.names if alias.name == "main"}  # fmt: skip
    kept = [statement for statement in tree.body if not _is_runner_call(statement, imported)]
    return ast.Module(body=kept, type_ignores=tree.type_ignores)  # a new tree: `parse`'s is shared


_RUNNERS = ("unittest", "pytest")


def _is_runner_call(statement: ast.stmt, imported_mains: set[str]) -> bool:
    call = statement.value if isinstance(statement, ast.Expr) else None
    function = call.func if isinstance(call, ast.Call) else None
    if isinstance(function, ast.Attribute):
        return function.attr == "main" and getattr(function.value, "id", None) in _RUNNERS
    return isinstance(function, ast.Name) and function.id in imported_mains


def estimated_tests(script: str) -> int:
    """A generous figure for the tests a script holds, for the row's time budget only (never for the count): its
    functions, plus the items of the literal lists its decorators take (`parametrize`)."""
    count = 0
    for node in ast.walk(parse(script)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            count += 1
            for decorator in node.decorator_list:
                count += sum(len(sub.elts) for sub in ast.walk(decorator) if isinstance(sub, (ast.List, ast.Tuple)))
    return max(1, min(count, MAX_ESTIMATED_TESTS))


def stub_functions(source: str) -> set[str]:
    """Top-level functions of `source` whose body is only a docstring, `pass` or `...`: a stub the prompt asks the
    program to fill in (an MBPP prompt's fenced `def f(x): pass`), never a helper the dataset provides."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()

    def is_filler(statement: ast.stmt) -> bool:
        return isinstance(statement, ast.Pass) or (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and (isinstance(statement.value.value, str) or statement.value.value is Ellipsis)
        )

    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and all(map(is_filler, node.body))
    }
