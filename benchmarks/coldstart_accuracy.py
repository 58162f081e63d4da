"""Sampled and greedy accuracy of the cached cold-start model on held-out problems, and its generation speed.

    python benchmarks/coldstart_accuracy.py [--problems 512] [--cache-dir DIR]

Builds the model first if the cache is empty (a few minutes). The sampled accuracy at temperature 1.0 is what the
RL run starts from; greedy accuracy is roughly where it can get by sharpening alone.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from gspo_recipes.builtin.coldstart import EVAL_SEED, evaluate_accuracy, load_or_build_coldstart_model
from gspo_recipes.builtin.data import format_prompt, make_gsm_problems


def generation_seconds(model, tokenizer, problems, max_new_tokens: int) -> float:
    """Wall time to sample one completion for each problem in a single batch (one GRPO generation round)."""
    inputs = tokenizer([format_prompt(p["question"]) for p in problems], return_tensors="pt", padding=True)
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=512)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()

    model, tokenizer = load_or_build_coldstart_model(cache_dir=args.cache_dir)
    problems = make_gsm_problems(args.problems, seed=EVAL_SEED)
    generation_seconds(model, tokenizer, problems[:8], args.max_new_tokens)  # warm-up
    print(json.dumps({
        "parameters": sum(p.numel() for p in model.parameters()),
        "sampled_accuracy_t1": evaluate_accuracy(model, tokenizer, problems, 1.0, args.max_new_tokens),
        "greedy_accuracy": evaluate_accuracy(model, tokenizer, problems, 0.0, args.max_new_tokens),
        "seconds_to_sample_64": round(generation_seconds(model, tokenizer, problems[:64], args.max_new_tokens), 3),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
