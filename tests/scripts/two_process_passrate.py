"""Run under two CPU processes: `gspo passrate` with the arguments given, each process scoring its own shard."""

import sys

import torch

from gspo_recipes.commands.cli import main

code = main(["passrate", *sys.argv[1:]])
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
sys.exit(code)
