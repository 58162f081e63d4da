"""The code reward's four parts and the walls between them (docs/code-sandbox.md, "The four parts"): which part may
import which, and the order in which sandbox/inside/ is assembled into one interpreter source."""

import ast
import builtins
import pathlib
import symtable
import sys

import pytest

from gspo_recipes.rewards.code.sandbox.inside import assembly

CODE = pathlib.Path(assembly.__file__).resolve().parents[2]  # gspo_recipes/rewards/code
PACKAGE = "gspo_recipes.rewards.code"
# What each part may import of ours: the face calls the judge and the sandbox, the judge starts sandboxes, the host
# side of the sandbox launches what runs inside it, and what runs inside imports nothing of ours but its own files.
MAY_IMPORT = {
    "face": {"face", "judge", "sandbox", "inside", "elsewhere"},
    "judge": {"judge", "sandbox", "inside"},
    "sandbox": {"sandbox", "inside"},
    "inside": {"inside"},
}
# Beside the standard library: numpy, imported only by the judge's decoder, and only where numpy data crossed.
INSIDE_MAY_ALSO_IMPORT = {"numpy"}


def _part(module: str) -> str:
    if not module.startswith(PACKAGE):
        return "elsewhere"  # the rest of gspo_recipes (the reward pool, text helpers)
    parts = module.removeprefix(PACKAGE).lstrip(".").split(".")
    if parts[0] == "sandbox":
        return "inside" if parts[1:2] == ["inside"] else "sandbox"
    return "judge" if parts[0] == "judge" else "face"


def _module_of(path: pathlib.Path) -> str:
    relative = path.relative_to(CODE.parents[2]).with_suffix("")  # from gspo_recipes' parent
    return ".".join(relative.parts).removesuffix(".__init__")


def _imports_of(path: pathlib.Path) -> tuple[set[str], set[str]]:
    """(modules of gspo_recipes, top-level names of everything else) that the file imports, at any depth."""
    module = _module_of(path)
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
            target = ".".join(base + ([node.module] if node.module else []))
            ours.update(f"{target}.{alias.name}" for alias in node.names)
        else:
            names = [node.module] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                (ours if name.startswith("gspo_recipes") else others).add(name)
    return ours, {name.split(".")[0] for name in others}


def _breaches(files) -> list[str]:
    found = []
    for path in files:
        own = _part(_module_of(path))
        ours, others = _imports_of(path)
        found += [f"{path.relative_to(CODE)} ({own}) imports {dep} ({_part(dep)})" for dep in sorted(ours)
                  if _part(dep) not in MAY_IMPORT[own]]  # fmt: skip
        if own == "inside":
            found += [f"{path.relative_to(CODE)} imports {name}, not the standard library" for name in sorted(others)
                      if name not in sys.stdlib_module_names | INSIDE_MAY_ALSO_IMPORT]  # fmt: skip
    return found


def test_each_part_imports_only_the_parts_below_it():
    files = sorted(CODE.rglob("*.py"))
    assert {_part(_module_of(path)) for path in files} == set(MAY_IMPORT)
    breaches = _breaches(files)
    assert not breaches, "imports through a wall of the code reward:\n" + "\n".join(breaches)


def test_the_wall_check_sees_a_climb(tmp_path, monkeypatch):
    """The check above can fail: a judge module that imports the planner, and an inside file that imports torch."""
    monkeypatch.setattr(sys.modules[__name__], "CODE", tmp_path / "gspo_recipes" / "rewards" / "code")
    (CODE / "judge").mkdir(parents=True)
    (CODE / "sandbox" / "inside").mkdir(parents=True)
    (CODE / "judge" / "confined.py").write_text("def f():\n    from ..plan import plan_row\n")
    (CODE / "sandbox" / "inside" / "wire.py").write_text("import json\nimport torch\n")
    assert _breaches(sorted(CODE.rglob("*.py"))) == [
        "judge/confined.py (judge) imports gspo_recipes.rewards.code.plan.plan_row (face)",
        "sandbox/inside/wire.py imports torch, not the standard library",
    ]


def _defined(source: str) -> set[str]:
    """Names the file binds at module level: what it leaves in the assembled script's globals."""
    top = symtable.symtable(source, "inside", "exec")
    return {symbol.get_name() for symbol in top.get_symbols() if symbol.is_assigned() or symbol.is_imported()}


def _taken(source: str) -> set[str]:
    """Names the file takes from the assembled script's globals: free names, `globals()["name"]` (or through a name
    bound to `globals()`), and attributes of the script's own module (`sys.modules["__main__"]`)."""
    tree = ast.parse(source)
    is_globals = lambda node: isinstance(node, ast.Call) and getattr(node.func, "id", None) == "globals"  # noqa: E731
    own_module = lambda node: isinstance(node, ast.Subscript) and getattr(node.slice, "value", None) == "__main__"  # noqa: E731
    aliases, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if is_globals(node.value):
                aliases.add(node.targets[0].id)
            elif own_module(node.value):
                modules.add(node.targets[0].id)
    taken = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if is_globals(node.value) or getattr(node.value, "id", None) in aliases:
                taken.add(node.slice.value)
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in modules:
            taken.add(node.attr)
    top = symtable.symtable(source, "inside", "exec")
    scopes = [top]
    while scopes:
        scope = scopes.pop()
        scopes += scope.get_children()
        taken |= {symbol.get_name() for symbol in scope.get_symbols()
                  if symbol.is_referenced() and (scope is top or symbol.is_global())}  # fmt: skip
    return taken - _defined(source) - set(dir(builtins)) - {"__builtins__", "__file__"}


def _undefined_takes(files: tuple[str, ...]) -> list[str]:
    missing, defined = [], set()
    for name in files:
        source = (CODE / "sandbox" / "inside" / name).read_text()
        missing += [f"{name} takes {taken!r}, which no file before it defines" for taken in sorted(_taken(source))
                    if taken not in defined]  # fmt: skip
        defined |= _defined(source)
    return missing


@pytest.mark.parametrize("files", [assembly.HARNESS_FILES, assembly.ZYGOTE_FILES], ids=["harness", "zygote"])
def test_each_inside_file_finds_what_it_takes_in_the_files_before_it(files):
    assert _undefined_takes(files) == []
    assert assembly.assemble(files) == "".join((CODE / "sandbox" / "inside" / name).read_text() for name in files)


def test_the_order_check_sees_a_file_out_of_place():
    """The check above can fail: the harness ahead of the codec and the filter it takes from globals()."""
    missing = _undefined_takes(("harness.py", "wire.py", "syscall_filter.py"))
    assert "harness.py takes 'install_syscall_filter', which no file before it defines" in missing
    assert "harness.py takes 'dumps', which no file before it defines" in missing
    late_confine = _undefined_takes(("wire.py", "syscall_filter.py", "harness.py", "zygote.py", "confine.py"))
    assert any(line.startswith("zygote.py takes 'build_root'") for line in late_confine)
