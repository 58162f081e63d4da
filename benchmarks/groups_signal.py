"""Groups that carry signal on the embedded GSM8K default: dynamic sampling, `gspo passrate` filtering, or neither.

Offline, CPU. The recipe's embedded default (recipes/configs/gsm8k_gspo_offline.yaml: the cold-start model, generated
GSM8K problems, 8 responses per prompt, 4 minibatches per generation batch), three arms over the same number of
optimizer steps, measured in one run:

- neither: the recipe as it ships;
- dynamic sampling: `dynamic_sampling=True` (4 rounds at most);
- passrate: `gspo passrate` over the first --passrate-prompts problems (8 samples each), then training on the rows
  with 0.1 <= pass_rate <= 0.9 only (its sampling time is the arm's extra generation cost).

Printed per arm: the effective share (gspo/groups/effective_frac, responses with a non-zero advantage in the batch
that trains) and zero-std share per generation batch, the training reward (TRL's `reward`: with dynamic sampling the
mean over every generated response, dropped groups included, so it measures the policy and not the filter), the
held-out accuracy after training (4 samples on each of 64 problems no arm trains on), the time spent generating
(`_generate`, all rounds) and the wall time. A figure goes to --figure, the table to --table.

    python benchmarks/groups_signal.py                 # ~15 minutes on 2 cores shared with other jobs
    python benchmarks/groups_signal.py --steps 8 --passrate-prompts 32   # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from gspo_recipes import GSPOTrainer
from gspo_recipes.builtin.data.synthetic_gsm import make_gsm_dataset
from gspo_recipes.commands import passrate
from gspo_recipes.commands.passrate_sampling import Sampler
from gspo_recipes.recipe import RecipeArguments, as_prompt, load_train_dataset, model_and_tokenizer, parse_args
from gspo_recipes.rewards import get_rewards

HERE = os.path.dirname(os.path.abspath(__file__))
OFFLINE = os.path.join(HERE, "..", "recipes", "configs", "gsm8k_gspo_offline.yaml")


def recipe_setup(out: str, steps: int, extra: list[str]):
    script_args, args, model_args = parse_args(
        RecipeArguments, OFFLINE, ["--output_dir", out, "--max_steps", str(steps), "--save_strategy", "no", *extra]
    )
    args.gspo_diagnostics = False  # the arms differ only in their data and dynamic sampling
    return script_args, args, model_args


def timed_generation(trainer) -> dict:
    clock = {"generate_s": 0.0, "calls": 0}
    generate = trainer._generate

    def timed(prompts):
        start = time.perf_counter()
        try:
            return generate(prompts)
        finally:
            clock["generate_s"] += time.perf_counter() - start
            clock["calls"] += 1

    trainer._generate = timed
    return clock


def heldout_accuracy(model, tokenizer, args, script_args) -> float:
    data = make_gsm_dataset(64, seed=987_654, with_prompt=False)
    args.num_generations = 4
    sampler = Sampler(model, tokenizer, args, script_args, "question", "cpu")
    rewards, total = get_rewards(["gsm8k_accuracy"]), []
    for start in range(0, len(data), 32):
        examples = [data[i] for i in range(start, min(start + 32, len(data)))]
        _, scores = sampler.sample_and_score(examples, rewards, ["gsm8k_accuracy"], ("heldout", start))
        total += [r or 0.0 for s in scores for r in s["gsm8k_accuracy"]]
    model.train()
    return sum(total) / len(total)


def train_arm(name: str, steps: int, dataset=None, extra=()) -> dict:
    out = tempfile.mkdtemp(prefix=f"groups_{name}_")
    script_args, args, model_args = recipe_setup(out, steps, list(extra))
    model, tokenizer = model_and_tokenizer(model_args, args)
    if dataset is None:
        dataset = load_train_dataset(script_args, seed=args.seed)
    dataset = dataset.map(lambda row: {"prompt": as_prompt(row["question"], None, True)})
    trainer = GSPOTrainer(model=model, reward_funcs=get_rewards(["gsm8k_accuracy"]), args=args,
                          train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
    clock = timed_generation(trainer)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    history = trainer.state.log_history
    series = {key: [(e["step"], e[key]) for e in history if key in e]
              for key in ("gspo/groups/effective_frac", "gspo/groups/zero_std_frac", "reward",
                          "gspo/dynamic_sampling/rounds")}  # fmt: skip
    accuracy = heldout_accuracy(trainer.model, tokenizer, args, script_args)
    return {"name": name, "series": series, "wall_s": wall, "heldout": accuracy, "rows": len(dataset), **clock}


def passrate_dataset(prompts: int, out: str):
    start = time.perf_counter()
    argv = ["--max_train_samples", str(prompts), "--num_generations", "8", "--passrate_batch_size", "32",
            "--keep", "0.1:0.9", "--output_dir", out]  # fmt: skip
    passrate.main(argv)
    from datasets import Dataset

    kept = Dataset.from_json(os.path.join(out, passrate.KEPT_FILE))
    return kept, time.perf_counter() - start


def mean(values):
    return statistics.fmean(values) if values else float("nan")


def table(results: list[dict], steps: int) -> str:
    head = (f"{'arm':<18} {'rows':>5} {'effective':>9} {'zero-std':>8} {'reward 1st/last third':>22} "
            f"{'held-out':>8} {'gen s':>7} {'extra gen s':>11} {'wall s':>7}")  # fmt: skip
    lines = [f"{steps} optimizer steps per arm, embedded GSM8K default (cold-start model, G=8)", head]
    base = results[0]["generate_s"]
    for r in results:
        s = r["series"]
        reward = [v for _, v in s["reward"]]  # one value per generation batch
        third = max(1, len(reward) // 3)
        eff = mean([v for _, v in s["gspo/groups/effective_frac"]])
        zero = mean([v for _, v in s["gspo/groups/zero_std_frac"]])
        extra = r["generate_s"] - base + r.get("passrate_s", 0.0)
        lines.append(
            f"{r['name']:<18} {r['rows']:>5} {eff:>9.1%} {zero:>8.1%} "
            f"{mean(reward[:third]):>11.3f}/{mean(reward[-third:]):<10.3f} {r['heldout']:>8.3f} "
            f"{r['generate_s']:>7.1f} {extra:>+11.1f} {r['wall_s'] + r.get('passrate_s', 0.0):>7.1f}"
        )
    lines.append("effective/zero-std: means over generation batches of the batch that trains; reward: TRL's batch "
                 "reward (with dynamic sampling over every generated response); held-out: gsm8k_accuracy, 4 samples "
                 "on 64 unseen problems; extra gen s: generation time beyond the plain arm's (passrate: its sampling "
                 "run, plus training generation); wall s includes passrate's run.")  # fmt: skip
    return "\n".join(lines)


def figure(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        steps, eff = zip(*r["series"]["gspo/groups/effective_frac"])
        axes[0].plot(steps, eff, "o-", ms=3, label=r["name"])
        steps, reward = zip(*r["series"]["reward"])
        axes[1].plot(steps, reward, "-", label=f"{r['name']} (held-out {r['heldout']:.2f})")
    axes[0].axhline(0.25, color="grey", lw=0.8, label="low-signal threshold")
    axes[0].set(xlabel="optimizer step", ylabel="share of responses", title="effective share (non-zero advantage)",
                ylim=(-0.02, 1.02))  # fmt: skip
    axes[1].set(xlabel="optimizer step", ylabel="batch reward", title="training reward (gsm8k_accuracy)")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--passrate-prompts", type=int, default=192)
    parser.add_argument("--figure", default=os.path.join(HERE, "groups_signal.png"))
    parser.add_argument("--table", default=os.path.join(HERE, "groups_signal.txt"))
    options = parser.parse_args()
    torch.set_num_threads(2)
    results = [train_arm("neither", options.steps)]
    results.append(train_arm("dynamic sampling", options.steps, extra=["--dynamic_sampling", "true"]))
    kept, passrate_s = passrate_dataset(options.passrate_prompts, tempfile.mkdtemp(prefix="groups_passrate_"))
    arm = train_arm("passrate 0.1:0.9", options.steps, dataset=kept)
    arm["passrate_s"] = passrate_s
    results.append(arm)
    text = table(results, options.steps)
    print(text)
    with open(options.table, "w") as f:
        f.write(text + "\n")
    figure(results, options.figure)
    print(f"figure: {options.figure}\ntable: {options.table}")


if __name__ == "__main__":
    main()
