"""`gspo passrate`: the starting policy's pass rate on every prompt, to keep the prompts that can teach.

    gspo passrate                                                    # offline: the cold-start model, generated GSM8K
    gspo passrate --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name openai/gsm8k --dataset_config main \
        --reward_funcs gsm8k_accuracy --num_generations 16 --keep 0.1:0.9 --output_dir passrate_gsm8k
    accelerate launch -m gspo_recipes.commands.cli passrate ...               # one shard of the prompts per process

Takes the recipes' arguments (`--config YAML`, `--model_name_or_path`, `--dataset_name`, `--max_train_samples`,
`--column_map`, `--reward_funcs`, `--system_prompt`, and GSPOConfig's sampling fields `--num_generations`,
`--max_completion_length`, `--temperature`, `--top_p`, `--seed`), samples `num_generations` responses per prompt
with transformers generation (with `--use_vllm`: vLLM's offline engine, `LLM.generate`, with training's vLLM
settings, in one process), scores them with the package's rewards, and writes `<output_dir>/passrate.jsonl` (or a
`save_to_disk` folder with `--save_format disk`): every row with `pass_rate`, `signal_reward`,
`sample_rewards` (each reward's value per sample) and `samples` (the completions). `--keep LO:HI` also writes
`passrate_kept.jsonl`, the original rows with LO <= pass_rate <= HI, ready for `--dataset_name`.

pass_rate is the share of samples that the signal reward counts as solved (>= 1), the accuracy reward chosen as for
dynamic sampling (gspo_recipes/stats/groups.py), never a shaping term: `format` or `soft_overlong_punishment` never
enter it. A sample its reward cannot judge (None) counts as not solved, and the run says how many there were.

Resumable: every batch of prompts is appended to `<output_dir>/shards/` in one write once scored; a rerun with the
same arguments skips the finished batches and redoes a batch cut short. Each batch is sampled from its own seed
(seed, shard, batch), so a resumed run writes exactly what an uninterrupted one does. Nothing is pushed anywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

RESULT_FILE, KEPT_FILE, RUN_FILE, SHARDS = "passrate.jsonl", "passrate_kept.jsonl", "passrate_run.json", "shards"
# Without --config or --model_name_or_path: the offline default of recipes/gsm8k_gspo.py; flags override these.
OFFLINE_FLAGS = [
    "--model_name_or_path", "builtin:coldstart-gsm8k", "--dataset_name", "builtin:gsm8k-generated",
    "--reward_funcs", "gsm8k_accuracy", "--num_generations", "8", "--max_completion_length", "32",
    "--max_train_samples", "256", "--output_dir", "passrate_gsm8k",
]  # fmt: skip
PROMPT_COLUMNS = ("prompt", "question", "problem")
# Columns of this command's output, dropped from the kept rows: TRL would hand them to the rewards as keywords.
OUTPUT_COLUMNS = ("pass_rate", "signal_reward", "sample_rewards", "samples")


def _recipe_arguments():
    from gspo_recipes.recipe import RecipeArguments

    @dataclass
    class PassrateArguments(RecipeArguments):
        keep: str | None = field(
            default=None, metadata={"help": "LO:HI: also write the rows with LO <= pass_rate <= HI (passrate_kept)."}
        )
        prompt_column: str | None = field(
            default=None, metadata={"help": f"The prompt column; None: the first of {', '.join(PROMPT_COLUMNS)}."}
        )
        save_format: str = field(default="jsonl", metadata={"help": "jsonl, or disk (datasets' save_to_disk folders)."})
        passrate_batch_size: int = field(default=8, metadata={"help": "Prompts per generate call."})

    return PassrateArguments


def parse(argv: list[str]):
    from trl import ModelConfig, TrlParser

    from gspo_recipes.recipe import _has_flag
    from gspo_recipes.recipe_setup import check_spelling, read_config
    from gspo_recipes.trainer.config import GSPOConfig

    if not _has_flag(argv, "--config") and not _has_flag(argv, "--model_name_or_path"):
        argv = [*OFFLINE_FLAGS, *argv]
    parser = TrlParser((_recipe_arguments(), GSPOConfig, ModelConfig), prog="gspo passrate")
    if "--help" not in argv:  # a misspelled flag or YAML key: one line with the closest names, as in the recipes
        check_spelling(parser, argv, read_config(argv))
    try:
        script_args, training_args, model_args = parser.parse_args_and_config(argv)
    except (ValueError, TypeError) as error:
        raise SystemExit(f"error: {error}") from error
    return script_args, training_args, model_args


# `gspo passrate --help`: these options, grouped, from their fields' help; TRL's whole set (about 300 more, all
# accepted) is behind --help-all, since importing GSPOConfig to list them takes seconds.
HELP_GROUPS = {
    "model and data": (
        "config", "model_name_or_path", "dtype", "dataset_name", "dataset_config",
        "dataset_train_split", "max_train_samples", "column_map", "prompt_column", "system_prompt", "use_chat_template",
    ),
    "sampling and scoring": (
        "reward_funcs", "dynamic_sampling_reward", "num_generations", "max_completion_length", "temperature",
        "top_p", "seed", "passrate_batch_size", "use_vllm",
    ),
    "output": ("output_dir", "keep", "save_format"),
}  # fmt: skip
# The help of GSPOConfig's fields as passrate reads them (importing GSPOConfig for theirs would import torch), and of
# the names whose TRL help speaks of other scripts.
OWN_HELP = {
    "config": "A YAML file of these fields (recipes/configs/*.yaml); flags override its values.",
    "model_name_or_path": "The policy: a hub name, a local folder or builtin:NAME.",
    "dtype": "The dtype to load the model in.",
    "dataset_name": "The prompts: a hub name, a .jsonl/.json/.parquet/.csv file, a saved folder or builtin:NAME.",
    "dataset_config": "The hub dataset's configuration (main for openai/gsm8k).",
    "dynamic_sampling_reward": "The reward whose value >= 1 counts as solved (default: the accuracy reward).",
    "num_generations": "Samples per prompt.",
    "max_completion_length": "Longest sample, in tokens.",
    "temperature": "Sampling temperature.",
    "top_p": "Nucleus sampling: keep the smallest set of tokens with this probability.",
    "seed": "Seed of every batch's sampling (a resumed run writes what an uninterrupted one would).",
    "output_dir": "Where passrate.jsonl, passrate_kept.jsonl and shards/ (the resumable work) go.",
    "use_vllm": "Sample with vLLM's offline engine (LLM.generate) and training's vLLM settings, in one process "
    "(pip install 'gspo-recipes[vllm]'); --dtype is passed to it when given.",
}


def short_help() -> str:
    """`gspo passrate --help`: the options above, without importing torch, TRL's trainers or transformers."""
    from dataclasses import MISSING, fields

    from trl import ModelConfig

    known = {f.name: f for dataclass in (_recipe_arguments(), ModelConfig) for f in fields(dataclass)}
    parser = argparse.ArgumentParser(
        prog="gspo passrate",
        usage="gspo passrate [OPTIONS]  (or accelerate launch -m gspo_recipes.commands.cli passrate: a shard each)",
        description="Sample the starting policy on every prompt and write each prompt's pass rate to "
        "OUTPUT_DIR/passrate.jsonl; --keep LO:HI also writes the rows worth training on. Without --config or "
        f"--model_name_or_path: {' '.join(OFFLINE_FLAGS)}; flags override those values.",
        epilog="--help-all lists every field of GSPOConfig and ModelConfig (all accepted).",
        add_help=False,
    )
    for title, names in HELP_GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            field_ = known.get(name)
            text = OWN_HELP.get(name) or field_.metadata.get("help", "")
            default = None if field_ is None or field_.default is MISSING else field_.default
            if default not in (None, [], ""):
                text += f" (default: {default})"
            group.add_argument(f"--{name}", metavar=name.split("_")[-1].upper(), help=text.replace("%", "%%"))
    return parser.format_help()


def keep_range(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        bounds = (float(lo), float(hi))
    except ValueError:
        bounds = None
    if not sep or bounds is None or not 0 <= bounds[0] <= bounds[1] <= 1:
        raise SystemExit(f"error: --keep takes LO:HI with 0 <= LO <= HI <= 1 (for example 0.1:0.9), got '{text}'")
    return bounds


def pass_rate(signal: list[float | None]) -> float:
    """Share of samples solved by the signal reward; unjudged (None) samples count as not solved."""
    return sum(1 for r in signal if r is not None and r >= 1.0) / len(signal)


def run(args: argparse.Namespace) -> int:
    return main(list(getattr(args, "extra", [])))


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(short_help())
        return 0
    if "--help-all" in argv:
        argv = ["--help"]
    from accelerate import PartialState

    from gspo_recipes.commands.passrate_sampling import Sampler, VLLMSampler, reward_names
    from gspo_recipes.recipe import load_train_dataset, map_columns, model_and_tokenizer
    from gspo_recipes.rewards import get_rewards
    from gspo_recipes.rewards.registry import reward_kind
    from gspo_recipes.stats.groups import no_signal_reward, signal_reward_index

    script_args, training_args, model_args = parse(argv)
    bounds = keep_range(script_args.keep)
    if script_args.save_format not in ("jsonl", "disk"):
        raise SystemExit(f"error: --save_format is jsonl or disk, got '{script_args.save_format}'")
    if training_args.use_vllm:
        check_vllm_run()
    dataset = map_columns(load_train_dataset(script_args, seed=training_args.seed), script_args.column_map)
    column = script_args.prompt_column or next((c for c in PROMPT_COLUMNS if c in dataset.column_names), None)
    if column not in dataset.column_names:
        raise SystemExit(
            f"error: no prompt column (looked for {script_args.prompt_column or ', '.join(PROMPT_COLUMNS)}); columns "
            f"present: {list(dataset.column_names)}. Name one with --prompt_column."
        )
    rewards = get_rewards(script_args.reward_funcs or ["gsm8k_accuracy"])
    names = reward_names(rewards)
    signal = signal_reward_index(names, [reward_kind(f) for f in rewards], training_args.dynamic_sampling_reward)
    if signal is None:
        raise SystemExit(f"error: {no_signal_reward(names)}")

    state = PartialState()
    out = training_args.output_dir
    work = Work(out, state.process_index, state.num_processes, fingerprint(script_args, training_args, model_args))
    model, tokenizer = model_and_tokenizer(model_args, training_args)
    if training_args.use_vllm:
        sampler = VLLMSampler(model, tokenizer, training_args, script_args, column, model_args)
    else:
        sampler = Sampler(model, tokenizer, training_args, script_args, column, state.device)
    indices = list(range(state.process_index, len(dataset), state.num_processes))  # this process's shard
    size = script_args.passrate_batch_size
    batches = [indices[i : i + size] for i in range(0, len(indices), size)]
    done = work.finished_batches()
    from tqdm.auto import tqdm

    bar = tqdm(total=len(batches), initial=len(done), desc="gspo passrate", disable=not state.is_main_process)
    for number, rows in enumerate(batches):
        if number in done:
            continue
        examples = [dataset[i] for i in rows]
        seed = (training_args.seed, state.process_index, number)
        completions, scores = sampler.sample_and_score(examples, rewards, names, seed)
        lines = []
        for i, example, samples, per_reward in zip(rows, examples, completions, scores):
            line = {"index": i, "batch": number, **example, "pass_rate": pass_rate(per_reward[names[signal]])}
            line.update(signal_reward=names[signal], sample_rewards=per_reward, samples=samples)
            lines.append(line)
        work.append(lines)
        bar.update(1)
    bar.close()
    state.wait_for_everyone()
    if state.is_main_process:
        write_results(work.all_lines(), out, bounds, script_args.save_format, names[signal])
    return 0


def check_vllm_run() -> None:
    """`--use_vllm` runs vLLM's offline engine in one process, which batches (and with
    `--vllm_tensor_parallel_size`, shards) the whole run itself; vLLM must be installed."""
    import importlib.util

    from gspo_recipes.recipe_setup import install_hint

    if importlib.util.find_spec("vllm") is None:
        raise SystemExit(f"error: --use_vllm needs vllm, which is not installed. {install_hint('vllm')}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SystemExit(
            "error: gspo passrate --use_vllm runs one vLLM engine for all the prompts: start it without accelerate "
            "launch (vLLM batches them itself; --vllm_tensor_parallel_size N spreads the model over N GPUs)."
        )


def fingerprint(script_args, training_args, model_args) -> dict:
    """Every argument that decides the samples, the prompts or the signal reward: a resumed run must match it (else
    a rerun with another --system_prompt would return the stale file)."""
    return {
        "model": model_args.model_name_or_path,
        "dataset": script_args.dataset_name,
        "dataset_config": script_args.dataset_config,
        "max_train_samples": script_args.max_train_samples,
        "column_map": list(script_args.column_map),
        "reward_funcs": [str(r) for r in script_args.reward_funcs],
        "num_generations": training_args.num_generations,
        "max_completion_length": training_args.max_completion_length,
        "temperature": training_args.temperature,
        "top_p": training_args.top_p,
        "top_k": training_args.top_k,
        "min_p": training_args.min_p,
        "repetition_penalty": training_args.repetition_penalty,
        "generation_kwargs": training_args.generation_kwargs,
        "seed": training_args.seed,
        "batch_size": script_args.passrate_batch_size,
        # what the prompts are, and which reward decides
        "system_prompt": script_args.system_prompt,
        "prompt_column": script_args.prompt_column,
        "use_chat_template": script_args.use_chat_template,
        "dynamic_sampling_reward": training_args.dynamic_sampling_reward,
        # the sampler: vLLM draws other samples than transformers from the same seed (present only with --use_vllm,
        # so a transformers run's file stays what it was)
        **({"sampler": "vllm", "dtype": model_args.dtype} if training_args.use_vllm else {}),
    }


class Work:
    """The shard files of a run: one per process, a batch's lines appended in one write once it is scored."""

    def __init__(self, output_dir: str, rank: int, world: int, run: dict):
        self.folder = os.path.join(output_dir, SHARDS)
        self.world = world
        self.path = os.path.join(self.folder, f"shard{rank}of{world}.jsonl")
        os.makedirs(self.folder, exist_ok=True)
        run_path = os.path.join(output_dir, RUN_FILE)
        run = {**run, "processes": world}
        if os.path.exists(run_path):
            with open(run_path) as f:
                before = json.load(f)
            if before != run:
                changed = sorted(k for k in run if before.get(k) != run[k])
                raise SystemExit(
                    f"error: {output_dir} holds a passrate run with other settings ({', '.join(changed)}); resume with "
                    "the same arguments and number of processes, or use another --output_dir."
                )
        elif rank == 0:
            with open(run_path, "w") as f:
                json.dump(run, f, indent=1)

    def _read(self, path: str) -> tuple[list[dict], bool]:
        """(the lines that parse, whether the file is whole lines only: none cut short by a kill)."""
        if not os.path.exists(path):
            return [], True
        lines, whole = [], True
        with open(path) as f:
            for text in f:
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError:  # cut short by a kill: that batch is redone
                    whole = False
                    continue
                whole = whole and text.endswith("\n")
        return lines, whole

    def finished_batches(self) -> set[int]:
        """Batches whose every line was written (a batch's last line carries `batch_size`)."""
        lines, whole = self._read(self.path)
        counts: dict[int, int] = {}
        sizes: dict[int, int] = {}
        for line in lines:
            counts[line["batch"]] = counts.get(line["batch"], 0) + 1
            if "batch_size" in line:
                sizes[line["batch"]] = line["batch_size"]
        finished = {b for b, n in counts.items() if sizes.get(b) == n}
        kept = [line for line in lines if line["batch"] in finished]
        # Drop a batch cut short, so that its redo is the only copy, and a line cut short by the kill (even where it
        # is all that was written of its batch), so that the redo's first line does not land on its end.
        if len(kept) != len(lines) or not whole:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(line) + "\n" for line in kept)
            os.replace(tmp, self.path)
        return finished

    def append(self, lines: list[dict]) -> None:
        lines[-1]["batch_size"] = len(lines)
        with open(self.path, "a") as f:
            f.write("".join(json.dumps(line) + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())

    def all_lines(self) -> list[dict]:
        lines = []
        for rank in range(self.world):
            lines += self._read(os.path.join(self.folder, f"shard{rank}of{self.world}.jsonl"))[0]
        for line in lines:
            line.pop("batch", None)
            line.pop("batch_size", None)
        return sorted(lines, key=lambda line: line["index"])


def write_results(lines: list[dict], output_dir: str, bounds, save_format: str, signal: str) -> None:
    rows = [{k: v for k, v in line.items() if k != "index"} for line in sorted(lines, key=lambda x: x["index"])]
    outputs = [(RESULT_FILE, rows)]
    if bounds is not None:
        kept = [{k: v for k, v in row.items() if k not in OUTPUT_COLUMNS[1:]} for row in rows
                if bounds[0] <= row["pass_rate"] <= bounds[1]]  # fmt: skip
        outputs.append((KEPT_FILE, kept))
    for name, data in outputs:
        path = os.path.join(output_dir, name)
        if save_format == "disk":
            from datasets import Dataset

            path = path.removesuffix(".jsonl")
            Dataset.from_list(data).save_to_disk(path)
        else:
            with open(path, "w") as f:
                f.writelines(json.dumps(row) + "\n" for row in data)
        print(f"gspo passrate: {len(data)} rows -> {path}")
    rates = [row["pass_rate"] for row in rows]
    if rates:
        solved = sum(r == 1.0 for r in rates) / len(rates)
        failed = sum(r == 0.0 for r in rates) / len(rates)
        print(
            f"gspo passrate: pass rate on {signal}: mean {sum(rates) / len(rates):.3f}; {solved:.0%} of prompts always "
            f"solved, {failed:.0%} never (their groups would carry no signal)"
        )


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "passrate",
        add_help=False,  # --help is passrate's own (short_help); --help-all the recipes' parser, every argument
        help="Sample the starting policy on every prompt and write its pass rate (--keep LO:HI filters).",
        description=__doc__,
    )
    parser.set_defaults(func=run, takes_recipe_flags=True)
    return parser
