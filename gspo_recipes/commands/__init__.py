"""One module per `gspo` subcommand, each with `register(subparsers)` (see gspo_recipes/commands/cli.py)."""
