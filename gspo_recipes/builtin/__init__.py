"""Built-in models and datasets, named `builtin:NAME` and used like any hub name or local path.

The recipes' offline defaults (`recipes/configs/*_offline.yaml`) name them in `model_name_or_path` and
`dataset_name`; `model_and_tokenizer` and `load_train_dataset` in `gspo_recipes.recipe` resolve them. So a recipe has
no special path for its offline default: point those two fields at your model and dataset and nothing else changes.
Everything here is made in code or shipped with the package: no network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PREFIX = "builtin:"


@dataclass(frozen=True)
class Builtin:
    description: str  # what the start banner says it is
    load: Callable  # models: () -> (model, tokenizer); datasets: (seed) -> datasets.Dataset


def _coldstart(task: str) -> Callable:
    def load():
        from accelerate import PartialState

        from gspo_recipes.builtin.coldstart import COLDSTART_CONFIGS, load_or_build_coldstart_model

        # One process builds it if no copy matches the code (the shipped one normally does); the others wait and load.
        with PartialState().main_process_first():
            return load_or_build_coldstart_model(config=COLDSTART_CONFIGS[task])

    return load


def _tiny_untrained():
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    return build_tiny_model_and_tokenizer()


def _gsm8k_generated(seed: int):
    from gspo_recipes.builtin.data.synthetic_gsm import make_gsm_dataset

    # Another seed than the cold start's training problems (seed 0 and up), so the RL problems are new to the model.
    return make_gsm_dataset(2048, seed=10_000 + seed, with_prompt=False)


def _math_generated(seed: int):
    from datasets import Dataset

    from gspo_recipes.builtin.data.synthetic_math import make_math_problems

    # Seeded apart from the cold start's training problems (seed 0), as for GSM8K.
    return Dataset.from_list(make_math_problems(1024, seed=10_000 + seed))


def _mbpp_generated(seed: int):
    from datasets import Dataset

    from gspo_recipes.builtin.data.synthetic_code import make_code_tasks

    # The cold start's training solutions that stop early are not a column a reward should ever see.
    tasks = [{k: v for k, v in task.items() if k != "shortcut"} for task in make_code_tasks(512, seed=10_000 + seed)]
    return Dataset.from_list(tasks)


MODELS: dict[str, Builtin] = {
    "coldstart-gsm8k": Builtin(
        "the cold-start tiny model, fine-tuned on generated GSM8K-format problems (CPU, offline)", _coldstart("gsm8k")
    ),
    "coldstart-math": Builtin(
        "the cold-start tiny model, fine-tuned on generated MATH-style problems (CPU, offline)", _coldstart("math")
    ),
    "coldstart-code": Builtin(
        "the cold-start tiny model, fine-tuned on generated MBPP-style tasks (CPU, offline)", _coldstart("code")
    ),
    "tiny-untrained": Builtin("a tiny untrained model (CPU, offline)", _tiny_untrained),
}
DATASETS: dict[str, Builtin] = {
    "gsm8k-generated": Builtin("2,048 generated GSM8K-format problems", _gsm8k_generated),
    "math-generated": Builtin("1,024 generated MATH-style problems", _math_generated),
    "mbpp-generated": Builtin("512 generated MBPP-style tasks", _mbpp_generated),
}


def is_builtin(name: str | None) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def _lookup(name: str, table: dict[str, Builtin], field: str) -> Builtin:
    key = name.removeprefix(PREFIX)
    if key not in table:
        names = ", ".join(PREFIX + known for known in table)
        raise SystemExit(f"error: {field}={name}: no such built-in; use one of {names}, or a hub name or local path")
    return table[key]


def load_model(name: str):
    """(model, tokenizer) of the built-in model `name` ("builtin:...")."""
    return _lookup(name, MODELS, "model_name_or_path").load()


def load_dataset(name: str, seed: int):
    """The built-in dataset `name` ("builtin:..."), generated with the run's seed."""
    return _lookup(name, DATASETS, "dataset_name").load(seed)


def describe(name: str | None) -> str:
    """`name` for the start banner, with what it is when it is built in."""
    for table in (MODELS, DATASETS):
        if is_builtin(name) and name.removeprefix(PREFIX) in table:
            return f"{name} ({table[name.removeprefix(PREFIX)].description})"
    return str(name)
