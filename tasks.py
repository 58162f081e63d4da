#!/usr/bin/env python3
"""The two commands of the README, on a machine with Python 3.10+ and nothing else installed:

    python3 tasks.py demo    # make .venv, install, train the embedded default, then draw its figures
    python3 tasks.py test    # make .venv, install, run the default test tier (pytest -q)

Further arguments go to the recipe or to pytest: `python3 tasks.py demo --max_steps 20`, `python3 tasks.py test -k
loss`. Standard library only, so that it runs before anything is installed. It installs torch first (the CPU build
of the pinned version: a bare torch requirement pulls a multi-GB CUDA build), then the package with the extra the
command needs. A .venv that already holds this checkout's version of the package and the extra's packages is used as
it is, so a second call starts at once and CI (.ci/run builds its own .venv first) runs the very same command; so is
the virtual environment this script runs in, when it is one that holds them (an activated venv, the tests' own).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(ROOT, ".venv")
TORCH = "torch==2.13.0"
# What each command needs besides the package: the extra to install and a distribution that shows it is there.
EXTRAS = {"demo": ("report", ["matplotlib", "tensorboard"]), "test": ("dev", ["pytest", "matplotlib", "ruff"])}
DEMO_OUTPUT_DIR = "outputs/gsm8k_gspo_offline"  # recipes/configs/gsm8k_gspo_offline.yaml's output_dir
USAGE = "usage: python3 tasks.py {demo|test} [arguments for the recipe or for pytest]"


def venv_bin(name: str, venv: str = VENV) -> str:
    folder = "Scripts" if os.name == "nt" else "bin"
    return os.path.join(venv, folder, name + (".exe" if os.name == "nt" else ""))


def checkout_version() -> str:
    with open(os.path.join(ROOT, "gspo_recipes", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.MULTILINE).group(1)


def venv_is_ready(needed: list[str], venv: str = VENV) -> bool:
    """Whether .venv holds torch, this checkout's version of gspo-recipes and `needed`, without importing them."""
    check = (
        "import importlib.metadata as m, sys\n"
        f"names = ['torch', *{needed!r}]\n"
        "try:\n"
        "    [m.version(n) for n in names]\n"
        f"    sys.exit(m.version('gspo-recipes') != {checkout_version()!r})\n"
        "except m.PackageNotFoundError:\n"
        "    sys.exit(1)\n"
    )
    return subprocess.run([venv_bin("python", venv), "-c", check], capture_output=True).returncode == 0


def set_up(command: str) -> str:
    """The environment that holds what `command` needs: the running one when it does, else .venv, made ready."""
    extra, needed = EXTRAS[command]
    if sys.prefix != sys.base_prefix and venv_is_ready(needed, sys.prefix):
        return sys.prefix
    if not os.path.exists(venv_bin("python")):
        print(f"tasks.py: creating {VENV}", flush=True)
        if subprocess.run([sys.executable, "-m", "venv", VENV]).returncode != 0:
            sys.exit(
                "tasks.py: could not create a virtual environment. On Debian and Ubuntu the system Python's venv "
                "module is a separate package (apt-get install python3-venv); python.org's Python and the official "
                "python Docker images have it."
            )
    if venv_is_ready(needed):
        return VENV
    print(f"tasks.py: installing {TORCH} (CPU build) and gspo-recipes[{extra}] into .venv (a few minutes)", flush=True)
    pip = [venv_bin("python"), "-m", "pip", "install", "-q"]
    for args in ([*pip, "--upgrade", "pip"], [*pip, TORCH], [*pip, "-e", f".[{extra}]"]):
        if subprocess.run(args, cwd=ROOT).returncode != 0:
            sys.exit(f"tasks.py: '{' '.join(args[2:])}' failed (see pip's message above)")
    return VENV


def output_dir(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg.startswith("--output_dir="):
            return arg.split("=", 1)[1]
        if arg == "--output_dir" and i + 1 < len(args):
            return args[i + 1]
    return DEMO_OUTPUT_DIR


def demo(venv: str, args: list[str]) -> int:
    # One process, so no `accelerate launch`: the recipe runs the same and accelerate prints no launch defaults.
    recipe = [venv_bin("python", venv), os.path.join("recipes", "gsm8k_gspo.py"), *args]
    code = subprocess.run(recipe, cwd=ROOT).returncode
    if code != 0:
        return code
    return subprocess.run([venv_bin("gspo", venv), "report", output_dir(args)], cwd=ROOT).returncode


def test(venv: str, args: list[str]) -> int:
    # pytest, not `python -m pytest`: -m would put the checkout first on sys.path (see the README's Test section).
    return subprocess.run([venv_bin("pytest", venv), "-q", *args], cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(USAGE, file=sys.stderr)
        return 2
    venv = set_up(argv[0])
    return {"demo": demo, "test": test}[argv[0]](venv, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
