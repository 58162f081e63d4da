"""`gspo`: the console script. Subcommands `report`, `calibrate`, `simulate`, `passrate` and `audit-reward`.

Each subcommand lives in its own module, which exposes `register(subparsers)`: it adds its parser and sets
`func`, the function that runs it with the parsed arguments and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "report": "gspo_recipes.commands.report",
    "calibrate": "gspo_recipes.commands.calibrate",
    "simulate": "gspo_recipes.commands.simulate",
    "passrate": "gspo_recipes.commands.passrate",
    "audit-reward": "gspo_recipes.commands.audit_reward",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone when it names a subcommand (only its module is imported: `gspo X --help`
    answers at once), else of every subcommand, for `gspo --help` and its errors."""
    # The description names the subcommands from SUBCOMMANDS, so a new one cannot be left out of `gspo --help`.
    parser = argparse.ArgumentParser(prog="gspo", description=f"GSPO tools: {', '.join(SUBCOMMANDS)}.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, module_name in SUBCOMMANDS.items():
        if command not in SUBCOMMANDS or name == command:
            importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_recipe_flags", False):  # passrate hands its flags to the recipes' parser
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
