"""What `pip install .` sees: requirements that exist as written, one version, a license file."""

import importlib.metadata
import pathlib

import tomllib
from packaging.requirements import Requirement

import gspo_recipes

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_requested_extra_exists_in_the_installed_distribution():
    """pip warns on every install for an extra a package does not provide (math-verify 0.9 has no antlr4_13_2)."""
    for line in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(line)
        if not requirement.extras:
            continue
        provided = importlib.metadata.metadata(requirement.name).get_all("Provides-Extra") or []
        for extra in requirement.extras:
            assert extra in provided, f"{requirement.name} provides no extra '{extra}' (it has {provided})"


def test_math_verify_has_the_parser_runtime_it_needs():
    from math_verify import parse

    assert parse(r"$\frac{1}{2}$"), "the LaTeX parser (ANTLR runtime) is missing"


def test_version_is_written_once():
    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    assert importlib.metadata.version("gspo-recipes") == gspo_recipes.__version__


def test_license_file_ships():
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_every_subpackage_is_listed_for_a_plain_install():
    """CI installs non-editably: a subpackage missing from `packages` is missing for every user."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {"gspo_recipes"} | {
        "gspo_recipes." + ".".join(path.parent.relative_to(ROOT / "gspo_recipes").parts)
        for path in (ROOT / "gspo_recipes").rglob("__init__.py")
        if path.parent != ROOT / "gspo_recipes"
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
