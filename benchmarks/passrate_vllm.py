"""`gspo passrate` sampling throughput: vLLM's offline engine (`--use_vllm`) against transformers generation.

Both samplers are the command's own (`gspo_recipes.commands.passrate_sampling`: `Sampler` and `VLLMSampler`), on the
same built-in model, prompts and settings as `gspo passrate`'s offline default (the cold-start GSM8K model, generated
GSM8K problems, 8 samples per prompt at temperature 1, 32 tokens), in one process. Each path's engine is started once
(timed apart: vLLM's start includes its compilation), then the repeats alternate (transformers, vLLM, vLLM,
transformers, ...) so that a shared machine's load falls on both alike; each repeat samples every prompt once, batch
by batch, with the command's per-batch seeds. Scoring is the same code for both and is left out. vLLM runs with its
defaults (bf16 for this float32 checkpoint, as in training); transformers in float32.

    python benchmarks/passrate_vllm.py                 # 256 prompts, 64 per call, 3 repeats per path
    python benchmarks/passrate_vllm.py --prompts 64 --repeats 1   # a smoke test

Needs the vLLM environment (`.ci/vllm_env` builds .venv-vllm; on CPU set VLLM_CPU_KVCACHE_SPACE, defaulted to 2 GiB
here). Timings on a shared CPU are noisy: read the ratio of medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
warnings.filterwarnings("ignore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64, help="prompts per generate call (--passrate_batch_size)")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()

    import torch
    from trl import ModelConfig

    from gspo_recipes.commands.passrate_sampling import Sampler, VLLMSampler
    from gspo_recipes.recipe import RecipeArguments, load_train_dataset, model_and_tokenizer
    from gspo_recipes.trainer.config import GSPOConfig

    script_args = RecipeArguments(dataset_name="builtin:gsm8k-generated", max_train_samples=options.prompts)
    model_args = ModelConfig(model_name_or_path="builtin:coldstart-gsm8k")
    args = GSPOConfig(output_dir="/tmp/passrate_bench", num_generations=8, max_completion_length=32,
                      per_device_train_batch_size=8, report_to="none", use_cpu=not torch.cuda.is_available(),
                      use_vllm=True)  # fmt: skip
    dataset = load_train_dataset(script_args, seed=args.seed)
    examples = [dataset[i] for i in range(len(dataset))]
    batches = [examples[i : i + options.batch] for i in range(0, len(examples), options.batch)]

    started = {}
    t = time.perf_counter()
    model, tokenizer = model_and_tokenizer(model_args, args)
    samplers = {"transformers": Sampler(model, tokenizer, args, script_args, "question", "cpu")}
    started["transformers"] = time.perf_counter() - t
    t = time.perf_counter()
    samplers["vllm"] = VLLMSampler(model, tokenizer, args, script_args, "question", model_args)
    started["vllm"] = time.perf_counter() - t

    def sample_all(name):
        sampler, tokens = samplers[name], 0
        t = time.perf_counter()
        for number, batch in enumerate(batches):
            _, ids = sampler.generate([sampler.prompt_of(e) for e in batch], (args.seed, 0, number))
            tokens += sum(len(row) for group in ids for row in group)
        return time.perf_counter() - t, tokens

    for name in samplers:  # warm-up
        sample_all(name)
    times = {name: [] for name in samplers}
    tokens = {}
    order = ["transformers", "vllm"]
    for repeat in range(options.repeats):
        for name in order if repeat % 2 == 0 else order[::-1]:
            seconds, tokens[name] = sample_all(name)
            times[name].append(seconds)

    samples = len(examples) * args.num_generations
    print(
        f"gspo passrate sampling, {len(examples)} prompts x {args.num_generations} samples, "
        f"{options.batch} prompts per call, {options.repeats} repeats, {torch.get_num_threads()} threads"
    )
    print(f"{'path':<14}{'start s':>9}{'median s':>10}{'runs s':>24}{'samples/s':>11}{'tokens/s':>10}")
    for name in order:
        median = statistics.median(times[name])
        runs = " ".join(f"{x:.1f}" for x in times[name])
        print(f"{name:<14}{started[name]:>9.1f}{median:>10.2f}{runs:>24}{samples / median:>11.1f}"
              f"{tokens[name] / median:>10.0f}")  # fmt: skip
    ratio = statistics.median(times["transformers"]) / statistics.median(times["vllm"])
    print(f"vLLM samples {ratio:.2f}x as fast as transformers generation (ratio of medians; starts not included)")


if __name__ == "__main__":
    main()
