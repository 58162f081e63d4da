"""Training speed with the sampler's log-probabilities as pi_old against TRL's recompute pass, and the mismatch.

Both modes train the same tiny model (gspo_recipes.builtin.tiny) on the same prompts with transformers generation, in
one process: after a warm-up run of each, the repeats alternate (recompute, sampler, sampler, recompute, ...) so that
drift in a shared machine's load falls on both alike, and the medians are compared. Each run is a fresh trainer from
the same seed; only `trainer.train()` is timed. The monitor is off in the timed runs (`sampler_mismatch_steps=0`),
so "sampler" runs no forward pass for the old policy at all.

Then one run per sampling setting in "recompute" mode with the monitor on every generation batch gives the
mismatch between the two sources, as logged under gspo/sampler_mismatch/*.

    python benchmarks/bench_sampler_logps.py            # 7 repeats of 16 steps per mode
    python benchmarks/bench_sampler_logps.py --quick    # 2 repeats, for a smoke test

Timings on a shared CPU are noisy: read the ratio of medians, with the per-run spread printed next to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import PrinterCallback  # noqa: E402

try:
    from gspo_recipes import GSPOConfig, GSPOTrainer
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer  # noqa: E402
from gspo_recipes.sampler.generation_logprobs import GenerationLogprobRecorder  # noqa: E402
from gspo_recipes.sampler.mismatch import MISMATCH_PREFIX  # noqa: E402

MODES = ("recompute", "sampler")
RECORDING = {"seconds": 0.0}  # time spent in the sampler's per-token recording hook during generate


def _timed_hook(hook):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return hook(*args, **kwargs)
        finally:
            RECORDING["seconds"] += time.perf_counter() - start

    return timed


GenerationLogprobRecorder._hook = _timed_hook(GenerationLogprobRecorder._hook)


def digit_count_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def dataset():
    from datasets import Dataset

    return Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(8) for b in range(8)])


def build(mode: str, args, out_dir: str, **overrides) -> GSPOTrainer:
    model, tokenizer = build_tiny_model_and_tokenizer(hidden_size=args.hidden_size, num_layers=args.layers)
    settings = dict(
        output_dir=out_dir,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=args.completion_length,
        max_steps=args.steps,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        temperature=1.0,
        disable_tqdm=True,
        gspo_diagnostics=False,
        old_logps_source=mode,
        sampler_mismatch_steps=0,
    )
    settings.update(overrides)
    cfg = GSPOConfig(**settings)
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset(), processing_class=tokenizer
    )
    trainer.remove_callback(PrinterCallback)  # keep the logs out of the benchmark's output
    return trainer


def count_scoring_passes(trainer) -> dict:
    """Scoring forward passes (TRL's fused LM head), split into generation time (the old policy) and the loss."""
    counts = {"old_policy": 0, "loss": 0, "old_policy_seconds": 0.0}
    inside = [False]
    started = [0.0]

    def count(module, args, kwargs):
        if kwargs.get("fused_lm_head"):
            counts["old_policy" if inside[0] else "loss"] += 1
            started[0] = time.perf_counter()

    def clock(module, args, kwargs, output):
        if kwargs.get("fused_lm_head") and inside[0]:
            counts["old_policy_seconds"] += time.perf_counter() - started[0]

    trainer.model.register_forward_pre_hook(count, with_kwargs=True)
    trainer.model.register_forward_hook(clock, with_kwargs=True)
    original = trainer._generate_and_score_completions

    def wrapped(inputs):
        inside[0] = True
        try:
            return original(inputs)
        finally:
            inside[0] = False

    trainer._generate_and_score_completions = wrapped
    return counts


def timed_run(mode: str, args) -> tuple[float, float, dict, float]:
    """Steps per wall-clock second, steps per CPU second of this process, scoring-pass counts, training loss."""
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = build(mode, args, out_dir)
        counts = count_scoring_passes(trainer)
        RECORDING["seconds"] = 0.0
        start, start_cpu = time.perf_counter(), time.process_time()
        result = trainer.train()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    counts["old_policy_share"] = counts["old_policy_seconds"] / elapsed
    counts["recording_share"] = RECORDING["seconds"] / elapsed
    return args.steps / elapsed, args.steps / cpu, counts, result.training_loss


def mismatch_run(args, **sampling) -> list[dict]:
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = build("recompute", args, out_dir, sampler_mismatch_steps=1, **sampling)
        trainer.train()
    keys = ("log_s_mean", "log_s_std", "token_max_abs", "outside_clip_frac")
    return [
        {k: h[MISMATCH_PREFIX + k] for k in keys} | {"step": h["step"]}
        for h in trainer.state.log_history
        if MISMATCH_PREFIX + "log_s_mean" in h
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per mode (after one warm-up each)")
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps per run (4 per generation batch)")
    parser.add_argument("--completion-length", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a shared machine)")
    parser.add_argument("--quick", action="store_true", help="2 repeats")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 2
    torch.set_num_threads(args.threads)

    print(
        f"tiny model: hidden {args.hidden_size}, {args.layers} layers; 8 responses per step, 4 steps per generation "
        f"batch of 32, completions up to {args.completion_length} tokens; {args.steps} steps per run; "
        f"torch threads {args.threads}\n"
    )
    for mode in MODES:  # warm-up: first-call costs (allocations, kernels) are not either mode's
        timed_run(mode, args)

    speeds = {mode: [] for mode in MODES}
    cpu_speeds = {mode: [] for mode in MODES}
    shares, recording = [], []
    losses, counts = {}, {}
    for repeat in range(args.repeats):
        order = MODES if repeat % 2 == 0 else MODES[::-1]
        for mode in order:
            speed, cpu_speed, counts[mode], losses[mode] = timed_run(mode, args)
            speeds[mode].append(speed)
            cpu_speeds[mode].append(cpu_speed)
            if mode == "recompute":
                shares.append(counts[mode]["old_policy_share"])
            else:
                recording.append(counts[mode]["recording_share"])
            print(f"  repeat {repeat + 1}  {mode:9s}  {speed:6.2f} steps/s  ({cpu_speed:6.2f} per CPU s)", flush=True)

    print("\nmode       median steps/s  (min - max)      best   scoring passes: old policy / loss   train loss")
    for mode in MODES:
        s = speeds[mode]
        c = counts[mode]
        print(
            f"{mode:9s}  {statistics.median(s):14.2f}  ({min(s):5.2f} - {max(s):5.2f})  {max(s):6.2f}  "
            f"{c['old_policy']:>23d} / {c['loss']:<4d}     {losses[mode]:.6f}"
        )
    ratio = statistics.median(speeds["sampler"]) / statistics.median(speeds["recompute"])
    best = max(speeds["sampler"]) / max(speeds["recompute"])
    paired = [s / r for s, r in zip(speeds["sampler"], speeds["recompute"], strict=True)]
    cpu_ratio = statistics.median(cpu_speeds["sampler"]) / statistics.median(cpu_speeds["recompute"])
    share = statistics.median(shares)
    print(
        f"\nsampler / recompute: ratio of medians {ratio:.3f}, of best runs {best:.3f} "
        f"(per repeat: {', '.join(f'{p:.2f}' for p in paired)})"
    )
    print(
        f"steps per CPU second of this process (less sensitive to other load on the machine): median "
        f"{statistics.median(cpu_speeds['recompute']):.2f} recompute, {statistics.median(cpu_speeds['sampler']):.2f} "
        f"sampler, ratio {cpu_ratio:.3f}"
    )
    record = statistics.median(recording)
    print(
        f"the old-policy pass took a median {share:.1%} of recompute mode's training time (removing it alone predicts "
        f"{1 / (1 - share):.3f});\nrecording the sampler's log-probabilities during generate took {record:.1%} of "
        f"sampler mode's (together they predict {(1 - record) / (1 - share):.3f})"
    )

    print("\nMismatch between the sampler's and the trainer's log-probabilities (recompute mode, monitor every batch):")
    settings = {
        "temperature 1.0": {},
        "temperature 0.7, top_k 10, top_p 0.9": dict(temperature=0.7, top_k=10, top_p=0.9),
    }
    for name, sampling in settings.items():
        print(f"  {name}")
        for row in mismatch_run(args, **sampling):
            print(
                f"    step {row['step']:2d}: log_s_mean {row['log_s_mean']:+.2e}  log_s_std {row['log_s_std']:.2e}  "
                f"token_max_abs {row['token_max_abs']:.2e}  outside_clip_frac {row['outside_clip_frac']:.2f}"
            )
    print("  (the clip range is [1 - 3e-4, 1 + 4e-4]: log s_i must stay within about +-3e-4)")


if __name__ == "__main__":
    main()
