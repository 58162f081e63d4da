"""Truncated sampling with and without `keep_sampling_mask`, sampler mode, on the embedded GSM8K default.

Offline, CPU: the cold-start model on generated GSM8K problems (recipes/configs/gsm8k_gspo_offline.yaml, its measured
clip range), transformers generation, `old_logps_source="sampler"`, at top_p 0.8 and at top_k 20. Three arms per
setting, same seed, same number of optimizer steps, measured in one run:

- unfiltered pi_old: today's transformers default; the sampler's value is log_softmax of the untruncated logits, so
  s_i starts at 1 but the samples come from a distribution the objective does not model;
- renormalised pi_old, no mask: the sampler's value is the truncated, renormalised log-probability (what vLLM
  returns), the trainer's the full softmax: every s_i starts near the kept mass S;
- keep_sampling_mask: both sides over the kept set.

Printed per arm: log s_i on the on-policy minibatch (mean and std over the responses of every generation batch: the
mismatch monitor, which compares the sampler's values with the trainer's on the batch before any update), the mean
kept mass S, the clip fraction per side (TRL's clip_ratio/low_mean and high_mean, responses, mean over steps) and
the training reward (first and last third of the run), the wall time. The table goes to --table.

    python benchmarks/sampling_mask.py                 # ~8 minutes on 2 cores shared with other jobs
    python benchmarks/sampling_mask.py --steps 4       # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from unittest import mock

from gspo_recipes import GSPOTrainer
from gspo_recipes.recipe import RecipeArguments, as_prompt, load_train_dataset, model_and_tokenizer, parse_args
from gspo_recipes.rewards import get_rewards
from gspo_recipes.sampler import old_logps
from gspo_recipes.sampler.generation_logprobs import GenerationLogprobRecorder
from gspo_recipes.sampler.mismatch import MISMATCH_PREFIX

HERE = os.path.dirname(os.path.abspath(__file__))
OFFLINE = os.path.join(HERE, "..", "recipes", "configs", "gsm8k_gspo_offline.yaml")
SETTINGS = {"top_p 0.8": ["--top_p", "0.8"], "top_k 20": ["--top_k", "20"]}
ARMS = ("unfiltered pi_old", "renormalised, no mask", "keep_sampling_mask")


def renormalising_recorder(temperature, record_kept=False, renormalise=False, max_kept=512):
    """The transformers recorder made to return vLLM-style renormalised values while the trainer keeps the full
    softmax (the arm without the mask)."""
    return GenerationLogprobRecorder(temperature, record_kept=True, renormalise=True, max_kept=max_kept)


def train_arm(setting: str, arm: str, steps: int) -> dict:
    out = tempfile.mkdtemp(prefix="sampling_mask_")
    extra = [*SETTINGS[setting], "--old_logps_source", "sampler", "--sampler_mismatch_steps", "1"]
    if arm == "keep_sampling_mask":
        extra += ["--keep_sampling_mask", "true"]
    argv = ["--output_dir", out, "--max_steps", str(steps), "--save_strategy", "no", *extra]
    script_args, args, model_args = parse_args(RecipeArguments, OFFLINE, argv)
    args.gspo_diagnostics = False
    model, tokenizer = model_and_tokenizer(model_args, args)
    dataset = load_train_dataset(script_args, seed=args.seed)
    dataset = dataset.map(lambda row: {"prompt": as_prompt(row["question"], None, True)})
    trainer = GSPOTrainer(model=model, reward_funcs=get_rewards(["gsm8k_accuracy"]), args=args,
                          train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
    patch = mock.patch.object(old_logps, "GenerationLogprobRecorder", renormalising_recorder)
    start = time.perf_counter()
    if arm == "renormalised, no mask":
        with patch:
            trainer.train()
    else:
        trainer.train()
    wall = time.perf_counter() - start
    history = trainer.state.log_history

    def series(key):
        return [e[key] for e in history if key in e]

    return {
        "setting": setting,
        "arm": arm,
        "log_s_mean": series(MISMATCH_PREFIX + "log_s_mean"),
        "log_s_std": series(MISMATCH_PREFIX + "log_s_std"),
        "kept_mass": series(MISMATCH_PREFIX + "kept_mass"),
        "clip_low": series("clip_ratio/low_mean"),
        "clip_high": series("clip_ratio/high_mean"),
        "reward": series("reward"),
        "wall_s": wall,
    }


def mean(values):
    return statistics.fmean(values) if values else float("nan")


def table(results: list[dict], steps: int) -> str:
    head = (f"{'setting':<10} {'arm':<22} {'log s_i mean':>12} {'std':>8} {'kept S':>7} {'clip low':>8} "
            f"{'clip high':>9} {'reward 1st/last third':>22} {'wall s':>7}")  # fmt: skip
    lines = [f"{steps} optimizer steps per arm, sampler mode, cold-start model on generated GSM8K (G=8)", head]
    for r in results:
        third = max(1, len(r["reward"]) // 3)
        lines.append(
            f"{r['setting']:<10} {r['arm']:<22} {mean(r['log_s_mean']):>12.2e} {mean(r['log_s_std']):>8.1e} "
            f"{mean(r['kept_mass']):>7.3f} {mean(r['clip_low']):>8.1%} {mean(r['clip_high']):>9.1%} "
            f"{mean(r['reward'][:third]):>11.3f}/{mean(r['reward'][-third:]):<10.3f} {r['wall_s']:>7.1f}"
        )
    lines.append(
        "log s_i: on-policy minibatch (trainer - sampler, per response, mean over generation batches of the batch "
        "mean and std); kept S: mean kept mass per sampled token; clip low/high: share of responses clipped per side, "
        "mean over steps; reward: TRL's batch reward (gsm8k_accuracy)."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--table", default=os.path.join(HERE, "sampling_mask.txt"))
    args = parser.parse_args()
    results = [train_arm(setting, arm, args.steps) for setting in SETTINGS for arm in ARMS]
    text = table(results, args.steps)
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
