"""Rebuild the cold-start model of the default GSM8K recipe from scratch, and report its accuracy.

    python scripts/build_coldstart_model.py --out DIR          # train, save to DIR, measure accuracy
    python scripts/build_coldstart_model.py                    # same, into the cache the recipe reads

The recipe builds this same model on first use (`gspo_recipes.builtin.coldstart.load_or_build_coldstart_model`); this
script is the explicit way to reproduce it, or to refresh the cache. Training is deterministic for a given seed and
thread count, and takes a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from gspo_recipes.builtin.coldstart import (
    EVAL_SEED,
    ColdStartConfig,
    build_coldstart_model,
    coldstart_dir,
    evaluate_accuracy,
)
from gspo_recipes.builtin.data import make_gsm_problems


def main() -> None:
    defaults = ColdStartConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where to save (default: the recipe's cache folder); replaced")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--eval-problems", type=int, default=512, help="held-out problems for the accuracy check")
    args = parser.parse_args()

    config = dataclasses.replace(defaults, steps=args.steps, seed=args.seed)
    out = args.out or coldstart_dir(config=config)

    start = time.perf_counter()
    model, tokenizer = build_coldstart_model(out, config, replace=True)  # an old copy goes only once the new is saved
    build_seconds = time.perf_counter() - start

    problems = make_gsm_problems(args.eval_problems, seed=EVAL_SEED)
    results = {
        "out": str(out),
        "parameters": sum(p.numel() for p in model.parameters()),
        "build_seconds": round(build_seconds, 1),
        "sampled_accuracy_t1": evaluate_accuracy(model, tokenizer, problems, temperature=1.0),
        "greedy_accuracy": evaluate_accuracy(model, tokenizer, problems, temperature=0.0),
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
