"""Rebuild the cold-start model of an offline recipe from scratch, and report its reward.

    python scripts/build_coldstart_model.py --task math --out DIR   # train, save to DIR, measure the mean reward
    python scripts/build_coldstart_model.py                         # the GSM8K model, into the cache the recipe reads
    python scripts/build_coldstart_model.py --task code --out gspo_recipes/builtin/assets/NAME   # the shipped copy

The recipe builds this same model on first use (`gspo_recipes.builtin.coldstart.load_or_build_coldstart_model`); this
script is the explicit way to reproduce it, to refresh the cache, or to rebuild the copy shipped in
gspo_recipes/builtin/assets/ (the folder name is printed by `--print-name`). Training is deterministic for a given
seed and thread count, and takes a few minutes on 2 CPU cores. The reward is the task's recipe reward
(gsm8k_accuracy, math_accuracy, code_execution), one sampled (temperature 1.0) and one greedy answer per problem.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from gspo_recipes.builtin.coldstart import (
    COLDSTART_CONFIGS,
    EVAL_SEED,
    build_coldstart_model,
    coldstart_dir,
    evaluate_accuracy,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=list(COLDSTART_CONFIGS), default="gsm8k")
    parser.add_argument("--out", type=Path, help="where to save (default: the recipe's cache folder); replaced")
    parser.add_argument("--steps", type=int, help="default: the task's configuration")
    parser.add_argument("--seed", type=int, help="default: the task's configuration")
    parser.add_argument("--eval-problems", type=int, default=512, help="held-out problems for the reward check")
    parser.add_argument("--print-name", action="store_true", help="print the folder name of this model and exit")
    args = parser.parse_args()

    defaults = COLDSTART_CONFIGS[args.task]
    overrides = {key: getattr(args, key) for key in ("steps", "seed") if getattr(args, key) is not None}
    config = dataclasses.replace(defaults, **overrides)
    if args.print_name:
        print(coldstart_dir(config=config).name)
        return
    out = args.out or coldstart_dir(config=config)

    start = time.perf_counter()
    model, tokenizer = build_coldstart_model(out, config, replace=True)  # an old copy goes only once the new is saved
    build_seconds = time.perf_counter() - start

    problems = config.task_spec.make_problems(args.eval_problems, EVAL_SEED)
    length = 32 if args.task == "gsm8k" else 64  # the offline recipe's max_completion_length
    results = {
        "task": args.task,
        "out": str(out),
        "parameters": sum(p.numel() for p in model.parameters()),
        "build_seconds": round(build_seconds, 1),
        "sampled_reward_t1": evaluate_accuracy(model, tokenizer, problems, 1.0, length, task=args.task),
        "greedy_reward": evaluate_accuracy(model, tokenizer, problems, 0.0, length, task=args.task),
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
