"""The recipes' held-out prompts: where they come from (--heldout_split, --heldout_dataset, the offline defaults) and
that none of them is ever a training prompt."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from support import tiny_config

from gspo_recipes import GSPOTrainer
from gspo_recipes.recipe import RecipeArguments, add_heldout_eval, load_train_dataset, split_heldout


def script_args(**overrides):
    settings = dict(dataset_name="builtin:gsm8k-generated", dataset_train_split="train")
    settings.update(overrides)
    return RecipeArguments(**settings)


def training_args(eval_steps=50, max_prompts=32, seed=0):
    return SimpleNamespace(heldout_eval_steps=eval_steps, heldout_max_prompts=max_prompts, seed=seed)


@pytest.mark.parametrize(
    "name, key, columns",
    [("builtin:gsm8k-generated", "question", ("question", "answer")),
     ("builtin:math-generated", "problem", ("problem", "solution")),
     ("builtin:mbpp-generated", "text", ("text", "test_list"))],
)  # fmt: skip
def test_offline_defaults_draw_a_disjoint_heldout_set_from_another_seed(name, key, columns):
    args = script_args(dataset_name=name)
    train = load_train_dataset(args, seed=0)
    kept, heldout = split_heldout(args, training_args(), train, columns)
    assert kept[key] == train[key]  # the training rows are exactly those of a run without held-out evaluation
    assert len(heldout) > 0 and heldout[key] != train[key][: len(heldout)]
    overlap = set(heldout[key]) & set(train[key])
    assert len(overlap) < len(heldout)  # generated problems can repeat: add_heldout_eval drops those (next test)


def test_heldout_prompts_are_never_training_prompts(tmp_path, tiny):
    """Held out of a train split that repeats prompts: the trainer never gets a held-out prompt, and the callback
    drops held-out rows whose prompt the trainer does get."""
    from datasets import Dataset

    rows = [{"prompt": f"{i % 40}+1=", "question": "q", "answer": f"#### {i % 40 + 1}"} for i in range(80)]
    dataset = Dataset.from_list(rows)
    train, heldout = split_heldout(script_args(heldout_split="0.25"), training_args(), dataset, ("answer",))
    assert len(heldout) == 20 and len(train) == 60
    model, tokenizer = tiny
    trainer = GSPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          args=tiny_config(tmp_path, heldout_eval_steps=1), train_dataset=train,
                          processing_class=tokenizer)  # fmt: skip
    add_heldout_eval(trainer, heldout, train)
    callback = trainer.callback_handler.callbacks[-1]
    evaluated = {row["prompt"] for row in callback.rows}
    assert evaluated and not evaluated & set(trainer.train_dataset["prompt"])
    assert len(evaluated) < len(heldout)  # the repeated prompts were dropped from the held-out set


def test_heldout_split_forms(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(50)]
    DatasetDict({"train": Dataset.from_list(rows), "test": Dataset.from_list(rows[:5])}).save_to_disk(tmp_path / "d")
    path = str(tmp_path / "d")
    train = load_train_dataset(script_args(dataset_name=path), seed=0)
    # 'auto' takes the test split when there is one
    kept, heldout = split_heldout(script_args(dataset_name=path), training_args(), train, ("answer",))
    assert len(kept) == 50 and heldout["question"] == [f"q{i}" for i in range(5)]
    # a count, a fraction
    assert len(split_heldout(script_args(dataset_name=path, heldout_split="8"), training_args(), train)[1]) == 8
    kept, heldout = split_heldout(script_args(dataset_name=path, heldout_split="0.1"), training_args(), train)
    assert len(heldout) == 5 and len(kept) == 45 and not set(kept["question"]) & set(heldout["question"])
    # 'none', or evaluation off: no held-out set, and the training rows stay whole
    assert split_heldout(script_args(dataset_name=path, heldout_split="none"), training_args(), train)[1] is None
    assert split_heldout(script_args(dataset_name=path), training_args(eval_steps=0), train) == (train, None)
    # a file has no other split: 'auto' holds out heldout_max_prompts rows of it
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    file_args = script_args(dataset_name=str(tmp_path / "f.jsonl"))
    kept, heldout = split_heldout(file_args, training_args(max_prompts=10), load_train_dataset(file_args))
    assert len(heldout) == 10 and len(kept) == 40
    # another dataset
    other = script_args(dataset_name=str(tmp_path / "f.jsonl"), heldout_dataset=path, heldout_split="test")
    assert len(split_heldout(other, training_args(), load_train_dataset(file_args))[1]) == 5
    with pytest.raises(SystemExit, match="--heldout_split validation: .* has no such split"):
        split_heldout(script_args(dataset_name=path, heldout_split="validation"), training_args(), train)
    with pytest.raises(SystemExit, match="fewer than all 50 rows"):
        split_heldout(script_args(dataset_name=path, heldout_split="50"), training_args(), train)
    with pytest.raises(SystemExit, match="no column 'answer'"):
        split_heldout(script_args(dataset_name=path, heldout_split="8"), training_args(),
                      train.remove_columns("answer"), ("answer",))  # fmt: skip
