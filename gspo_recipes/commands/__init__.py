"""The `gspo` subcommands, one module each; each exposes `register(subparsers)` (see `gspo_recipes.cli`)."""
