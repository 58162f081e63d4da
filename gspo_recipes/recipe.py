"""What the recipes in recipes/ share: argument parsing that fails cleanly, dataset loading (hub, local file, saved
directory), column checks that run before any model is loaded, model loading, and the start and end banners.

Each recipe stays one file that reads top to bottom; the plumbing lives here.
"""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from trl import ModelConfig, ScriptArguments, TrlParser

import gspo_recipes.builtin as builtin
from gspo_recipes.recipe_setup import (
    check_extras,  # noqa: F401 (the recipes take these from here)
    check_names,
    check_spelling,
    claim_output_dir,  # noqa: F401
    names_in_command_line,
    read_config,
    setup_errors,  # noqa: F401
)
from gspo_recipes.runfiles.diagnostics import diagnostics_path
from gspo_recipes.runfiles.output_dir import FINISHED_MARK

if TYPE_CHECKING:
    from gspo_recipes.trainer.config import GSPOConfig

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


@dataclass
class RecipeArguments(ScriptArguments):
    """trl.ScriptArguments plus what every recipe adds: reward functions by name and a system prompt."""

    reward_funcs: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Reward functions by registry name (gsm8k_accuracy, format, ...) or module:function. "
            "Empty: the recipe's default."
        },
    )
    system_prompt: str | None = field(
        default=None, metadata={"help": "System prompt for chat models. None: the recipe's default."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N training rows (quick experiments)."}
    )
    column_map: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Rename dataset columns to the names the recipe reads, as NEEDED=YOURS pairs: "
            "--column_map question=problem_text answer=label"
        },
    )
    heldout_split: str = field(
        default="auto",
        metadata={
            "help": "Held-out prompts for the held-out evaluation (on when heldout_eval_steps > 0): a split of the "
            "dataset (test), a fraction (0.05) or a count (64) of rows held out of the train split, or 'none'. "
            "'auto': the dataset's 'test' split, else heldout_max_prompts rows held out of the train split; for a "
            "builtin: dataset, problems generated with another seed. Held-out prompts are never trained on."
        },
    )
    heldout_dataset: str | None = field(
        default=None,
        metadata={"help": "Take the held-out prompts from this dataset (hub name, file, directory, builtin:NAME)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start over when output_dir holds a run (its checkpoints, diagnostics and report are removed). "
            "Without it a finished run is kept and the recipe stops; a run cut short resumes from its last checkpoint."
        },
    )
    use_chat_template: bool = field(
        default=True,
        metadata={
            "help": "Send prompts as chat messages (with system_prompt) when the tokenizer has a chat "
            "template; False sends plain text."
        },
    )


def parse_args(script_args_class, offline_config: str, argv: list[str] | None = None):
    """Parse (script args, GSPOConfig, ModelConfig) from YAML and flags.

    With neither `--config` nor `--model_name_or_path`, the recipe's offline config is the base and every flag
    overrides one of its values (`--output_dir X --max_steps 50` keeps its model, data, learning rate...): without
    it, the run would fall to TRL's defaults. A model or dataset path that is not there, a misspelled flag or YAML
    key ends the run with one line naming it; the paths are checked before torch is imported
    (gspo_recipes/recipe_setup.py).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not _has_flag(argv, "--config") and not _has_flag(argv, "--model_name_or_path"):
        argv = ["--config", offline_config, *argv]
    config = read_config(argv)
    check_names(names_in_command_line(argv, config, ("model_name_or_path", "dataset_name", "heldout_dataset")))
    return _parse(script_args_class, argv, config)


def _parse(script_args_class, argv: list[str], config: dict):
    import warnings

    from gspo_recipes.trainer.config import GSPOConfig

    parser = TrlParser((script_args_class, GSPOConfig, ModelConfig))
    if "-h" not in argv and "--help" not in argv:
        check_spelling(parser, argv, config)
    try:
        with warnings.catch_warnings():
            # TRL's own default (gradient_checkpointing=True) trips transformers' rename warning on every parse; the
            # user set nothing, so there is nothing for them to change.
            warnings.filterwarnings("ignore", message="`gradient_checkpointing", category=FutureWarning)
            return parser.parse_args_and_config(argv)
    except (ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def _has_flag(argv: list[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def load_train_dataset(script_args, seed: int = 0):
    """A hub dataset by name, a local .jsonl/.json/.parquet/.csv file, a directory saved with `save_to_disk`, or a
    built-in generated dataset (`builtin:NAME`, made with `seed`)."""
    import datasets

    name = script_args.dataset_name
    split = script_args.dataset_train_split
    if not name:
        raise SystemExit("error: no dataset_name; give a hub name, a local file or directory, or builtin:NAME")
    if builtin.is_builtin(name):
        dataset = builtin.load_dataset(name, seed)
    elif os.path.isdir(name):
        loaded = datasets.load_from_disk(name)
        dataset = loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
    elif os.path.isfile(name):
        extension = os.path.splitext(name)[1].lower()
        if extension not in LOCAL_FORMATS:
            raise SystemExit(f"error: {name}: unsupported file type; use one of {', '.join(LOCAL_FORMATS)}")
        dataset = datasets.load_dataset(LOCAL_FORMATS[extension], data_files=name, split="train")
    else:
        dataset = datasets.load_dataset(name, script_args.dataset_config, split=split)
    if script_args.max_train_samples:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return dataset


HELDOUT_SEED_OFFSET = 500_000  # a builtin dataset's held-out problems come from another seed than its training ones


def split_heldout(script_args, training_args, dataset, *required: tuple[str, ...]):
    """(training rows, held-out rows or None) from the loaded rows, before their --column_map; the held-out rows come
    back column-mapped and checked for the `required` columns, as the recipe then does with the training ones.

    None when held-out evaluation is off (`heldout_eval_steps=0`) or `--heldout_split none`. See `heldout_split`
    for where the rows come from; `add_heldout_eval` drops any held-out row whose prompt is also a training prompt."""
    import datasets

    spec = script_args.heldout_split
    if not training_args.heldout_eval_steps or spec == "none":
        return dataset, None
    source = script_args.heldout_dataset or script_args.dataset_name
    held_out_count = _held_out_count(spec, len(dataset))
    if held_out_count is not None and not script_args.heldout_dataset:
        order = list(range(len(dataset)))
        random.Random(training_args.seed).shuffle(order)
        held, kept = sorted(order[:held_out_count]), sorted(order[held_out_count:])
        heldout, dataset = dataset.select(held), dataset.select(kept)
    elif builtin.is_builtin(source):  # generated: draw others, whatever split is named
        heldout = builtin.load_dataset(source, training_args.seed + HELDOUT_SEED_OFFSET)
    elif script_args.heldout_dataset and not _has_splits(source):
        heldout = load_train_dataset(replace(script_args, dataset_name=source, max_train_samples=None))
    elif not _has_splits(source):  # a file, or a saved Dataset: no other split to take, so hold rows out of it
        if spec != "auto":
            raise SystemExit(f"error: --heldout_split {spec}: {source} has no splits; give a fraction or a count")
        count = min(training_args.heldout_max_prompts, len(dataset) // 2)
        return split_heldout(replace(script_args, heldout_split=str(count)), training_args, dataset, *required)
    else:
        split = "test" if spec == "auto" else spec
        options = {"dataset_name": source, "dataset_train_split": split, "max_train_samples": None}
        try:
            heldout = load_train_dataset(replace(script_args, **options))
        except (ValueError, KeyError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as error:
            if spec != "auto":
                raise SystemExit(f"error: --heldout_split {spec}: {source} has no such split ({error})") from None
            count = min(training_args.heldout_max_prompts, len(dataset) // 2)
            return split_heldout(replace(script_args, heldout_split=str(count)), training_args, dataset, *required)
    heldout = map_columns(heldout, script_args.column_map)
    if required:
        require_columns(heldout, *required)
    return dataset, heldout


def _has_splits(source: str) -> bool:
    """Whether `source` names several splits: a hub dataset, or a DatasetDict saved with `save_to_disk`."""
    if os.path.isfile(source):
        return False
    return not os.path.isdir(source) or os.path.exists(os.path.join(source, "dataset_dict.json"))


def _held_out_count(spec: str, rows: int) -> int | None:
    """Rows to hold out of the train split for `--heldout_split` 0.05 or 64; None for a split name."""
    try:
        value = float(spec)
    except ValueError:
        return None
    count = round(value * rows) if 0 < value < 1 else int(value)
    if not 1 <= count < rows:
        raise SystemExit(f"error: --heldout_split {spec}: hold out at least 1 and fewer than all {rows} rows")
    return count


def add_heldout_eval(trainer, heldout, train_dataset) -> None:
    """Add `HeldoutEvalCallback` on the held-out rows whose prompt is not a training prompt (the recipes' last step
    before training)."""
    if heldout is None:
        return
    from gspo_recipes.callbacks import HeldoutEvalCallback

    trained = {_prompt_key(prompt) for prompt in train_dataset["prompt"]}
    kept = [i for i, prompt in enumerate(heldout["prompt"]) if _prompt_key(prompt) not in trained]
    if not kept:
        raise SystemExit("error: every held-out prompt is also a training prompt; give another --heldout_split")
    callback = HeldoutEvalCallback(trainer, heldout.select(kept))
    args = trainer.args
    dropped = len(heldout) - len(kept)
    dropped = f" ({dropped} of {len(heldout)} held-out rows dropped: also training prompts)" if dropped else ""
    banner([f"held-out evaluation: {len(callback.rows)} prompts{dropped}, 1 greedy + {callback.num_samples} sampled "
            f"each, graded by {', '.join(name for name, _ in callback.graders)}, every {args.heldout_eval_steps} "
            "steps and at the last"])  # fmt: skip
    trainer.add_callback(callback)


def _prompt_key(prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def map_columns(dataset, column_map: list[str]):
    """Apply --column_map NEEDED=YOURS pairs: the dataset's column YOURS is read as NEEDED."""
    renames = {}
    for pair in column_map:
        needed, sep, yours = pair.partition("=")
        if not sep or not needed or not yours:
            raise SystemExit(f"error: --column_map takes NEEDED=YOURS pairs, got '{pair}'")
        if yours not in dataset.column_names:
            raise SystemExit(
                f"error: --column_map {pair}: the dataset has no column '{yours}'. "
                f"Columns present: {list(dataset.column_names)}."
            )
        renames[yours] = needed
    clashes = [needed for yours, needed in renames.items() if needed in dataset.column_names and needed != yours]
    return dataset.remove_columns(clashes).rename_columns(renames) if renames else dataset


def require_columns(dataset, *alternatives: tuple[str, ...]) -> tuple[str, ...]:
    """Fail before any model is loaded when a needed column is missing; return the first set of columns present.

    Each alternative is a tuple of column names that together suffice (for MATH: ("problem", "solution") or
    ("problem", "answer")).
    """
    present = list(dataset.column_names)
    for columns in alternatives:
        if all(column in present for column in columns):
            return columns
    missing = [column for column in alternatives[0] if column not in present]
    options = " or ".join("(" + ", ".join(columns) + ")" for columns in alternatives)
    raise SystemExit(
        f"error: the dataset has no column '{missing[0]}' (the recipe needs {options}). Columns present: {present}. "
        f"Map one of them with --column_map {missing[0]}=YOUR_COLUMN."
    )


def as_prompt(text: str, system_prompt: str | None, chat: bool):
    """The prompt column: chat messages for a model with a chat template, else the plain text."""
    if not chat:
        return text
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": text}]


def model_and_tokenizer(model_args: ModelConfig, training_args: GSPOConfig):
    """The policy for GSPOTrainer and its tokenizer.

    A hub name or local path (TRL loads the model with ModelConfig's dtype, attention and revision, and can load a
    reference model the same way) and its tokenizer; or a built-in model (`builtin:NAME`), made or loaded offline.
    """
    if not model_args.model_name_or_path:
        raise SystemExit("error: no model_name_or_path; give a hub name, a local directory, or builtin:NAME")
    if builtin.is_builtin(model_args.model_name_or_path):
        return builtin.load_model(model_args.model_name_or_path)
    from transformers import AutoTokenizer

    init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_args.model_name_or_path,
            revision=model_args.model_revision,
            padding_side="left",
            trust_remote_code=training_args.trust_remote_code,
        )
    except (OSError, ValueError) as error:  # the first thing read from the model: name what to check, not where
        why = textwrap.shorten(" ".join(str(error).split()) or type(error).__name__, 240, placeholder=" ...")
        raise SystemExit(
            f"error: --model_name_or_path {model_args.model_name_or_path}: its tokenizer did not load ({why}). "
            "Give a folder that save_pretrained() wrote for the model and its tokenizer, or a hub name."
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model_args.model_name_or_path, tokenizer


def describe(name: str | None) -> str:
    """A model or dataset name for the start banner; a built-in one says what it is."""
    return builtin.describe(name)


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def banner(lines: list[str]) -> None:
    if is_main_process():
        print("\n".join(["=" * 100, *lines, "=" * 100]), flush=True)


def reward_trend(log_history: list[dict]) -> str:
    """'reward: first fifth X -> last fifth Y over N logged steps', from the trainer's log history."""
    rewards = [entry["reward"] for entry in log_history if entry.get("reward") is not None]
    if len(rewards) < 5:
        return f"reward over {len(rewards)} logged steps: {rewards}"
    fifth = len(rewards) // 5
    first, last = sum(rewards[:fifth]) / fifth, sum(rewards[-fifth:]) / fifth
    change = f"{last - first:+.3f}"
    return f"reward: first fifth {first:.3f} -> last fifth {last:.3f} ({change}) over {len(rewards)} logged steps"


def end_banner(output_dir: str, log_history: list[dict]) -> None:
    """The closing banner: what the run left in `output_dir`, as found on disk (checkpoints only when
    `save_strategy` wrote some), and the commands that read it."""
    banner([reward_trend(log_history), *written_files(output_dir),
            f"  figures:     gspo report {output_dir}   (writes PNGs and gspo_report.txt next to the logs)",
            f"  clip range:  gspo calibrate {output_dir} --target-clip 0.1"])  # fmt: skip


def written_files(output_dir: str) -> list[str]:
    """Lines naming what the run wrote: the model, the log history, checkpoints, the diagnostics file."""
    names = set(os.listdir(output_dir)) if os.path.isdir(output_dir) else set()
    checkpoints = sorted(
        (n for n in names if n.startswith("checkpoint-") and n[11:].isdigit()), key=lambda n: int(n[11:])
    )
    model = any(n.endswith((".safetensors", ".bin")) and n != "training_args.bin" for n in names)
    lines = [f"Done. Output in {output_dir}:"]
    lines.append("  model:       saved" if model else "  model:       not saved")
    lines.append(f"  logs:        {FINISHED_MARK}" if FINISHED_MARK in names else "  logs:        none saved")
    if checkpoints:
        lines.append(f"  checkpoints: {len(checkpoints)} ({checkpoints[0]} .. {checkpoints[-1]})")
    else:
        lines.append("  checkpoints: none (save_strategy wrote none)")
    path = diagnostics_path(output_dir)
    lines.append(f"  diagnostics: {path}" if os.path.exists(path) else "  diagnostics: none (gspo_diagnostics off)")
    return lines
