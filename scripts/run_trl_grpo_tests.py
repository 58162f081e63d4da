"""Run TRL's own GRPO tests against GSPOTrainer, offline, and print a results table for both trainers.

    python scripts/run_trl_grpo_tests.py PATH [--trainers grpo gspo] [-k EXPR] [--workdir DIR] [--json FILE]

PATH is a TRL checkout (its `tests/test_grpo_trainer.py` is used) or the test file itself, inside TRL's `tests/`
folder (the tests import `.testing_utils`). The test file is run unmodified, once per trainer:

- `grpo`: as TRL wrote it (the baseline: what fails here fails for reasons other than GSPOTrainer);
- `gspo`: with `GRPOTrainer` in the test module replaced by `gspo_recipes.GSPOTrainer`, so each test's own
  `GRPOConfig` goes through the documented conversion (README, "Turn a GRPO script into GSPO").

Offline stand-ins: the tests name hub models and datasets (`trl-internal-testing/tiny-Qwen2ForCausalLM-2.5`,
`trl-internal-testing/zen`, ...). The runner writes tiny local ones under those names in a working folder and runs
pytest from there, where transformers and datasets resolve each name to the local folder. Models without a stand-in
(vision-language, GPT-OSS, GLM-4 MoE, ...) fail on both trainers and are counted under "no stand-in".

This file is also the pytest plugin (`-p run_trl_grpo_tests`) that swaps the trainer and records each outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections import Counter

TRAINER_ENV = "GSPO_TRL_TRAINER"
RESULTS_ENV = "GSPO_TRL_RESULTS"
NO_STANDIN = "no stand-in"

# Hub name -> (model_type, head, extra config). Small enough for CPU; all share one character-level tokenizer.
STANDIN_MODELS = {
    "tiny-Qwen2ForCausalLM-2.5": ("qwen2", "causal", {}),
    "tiny-Qwen2ForSequenceClassification-2.5": ("qwen2", "classification", {}),
    "tiny-Qwen3ForCausalLM": ("qwen3", "causal", {"head_dim": 16}),
    "tiny-Qwen3ForSequenceClassification": ("qwen3", "classification", {"head_dim": 16}),
    "tiny-Qwen3MoeForCausalLM": (
        "qwen3_moe",
        "causal",
        {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    ),
    "tiny-LlamaForCausalLM-3.2": ("llama", "causal", {}),
    "tiny-LlamaForSequenceClassification-3.2": ("llama", "classification", {}),
    "tiny-MistralForCausalLM-0.2": ("mistral", "causal", {}),
}
ZEN_CONFIGS = ("standard_prompt_only", "conversational_prompt_only")


# ----------------------------------------------------------------------------------------------- the stand-ins


def zen_lines() -> list[str]:
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # `import this` prints the Zen of Python
        import this as zen

    return [line for line in codecs.decode(zen.s, "rot13").splitlines()[2:] if line]


def write_zen_dataset(folder: pathlib.Path) -> None:
    """`trl-internal-testing/zen`'s two prompt-only configs: the first half of each line of the Zen of Python."""
    from datasets import Dataset

    lines = zen_lines()
    prompts = [" ".join(line.split()[: max(1, len(line.split()) // 2)]) for line in lines]
    splits = {"train": prompts[:-2], "test": prompts[-2:]}
    card = ["---", "configs:"]
    for config in ZEN_CONFIGS:
        card += [f"- config_name: {config}", "  data_files:"]
        for split, rows in splits.items():
            if config == "standard_prompt_only":
                records = [{"prompt": p} for p in rows]
            else:
                records = [{"prompt": [{"role": "user", "content": p}]} for p in rows]
            path = folder / config / f"{split}-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            Dataset.from_list(records).to_parquet(str(path))
            card += [f"  - split: {split}", f"    path: {config}/{split}-*.parquet"]
    (folder / "README.md").write_text("\n".join([*card, "---", ""]))


def write_model(folder: pathlib.Path, model_type: str, head: str, extra: dict, tokenizer) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **({"num_labels": 1} if head == "classification" else {}),
        **extra,
    )
    torch.manual_seed(0)
    auto = AutoModelForSequenceClassification if head == "classification" else AutoModelForCausalLM
    model = auto.from_config(config)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))


def write_standins(workdir: pathlib.Path) -> None:
    from gspo_recipes.builtin.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    hub = workdir / "trl-internal-testing"
    for name, (model_type, head, extra) in STANDIN_MODELS.items():
        if not (hub / name / "config.json").exists():
            write_model(hub / name, model_type, head, extra, tokenizer)
    if not (hub / "zen" / "README.md").exists():
        write_zen_dataset(hub / "zen")


# ----------------------------------------------------------------------------------------------- the pytest plugin


def pytest_configure(config):
    """Version drift between the tests and the installed TRL: an `is_X_available` the tests import that this TRL lacks
    answers False, so the tests that need X skip (on both trainers alike) instead of failing to collect."""
    import importlib

    import_utils = importlib.import_module("trl.import_utils")

    def missing_availability_check(name):
        if name.startswith("is_") and name.endswith("_available"):
            return lambda *args, **kwargs: False
        raise AttributeError(f"module 'trl.import_utils' has no attribute {name!r}")

    if "__getattr__" not in vars(import_utils):
        import_utils.__getattr__ = missing_availability_check


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get(TRAINER_ENV) != "gspo":
        return
    from gspo_recipes import GSPOTrainer

    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        if hasattr(module, "GRPOTrainer"):
            module.GRPOTrainer = GSPOTrainer


def pytest_runtest_logreport(report):
    path = os.environ.get(RESULTS_ENV)
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return
    text = str(report.longrepr) if report.failed else ""
    outcome = report.outcome
    if report.failed and "trl-internal-testing/" in text and ("OSError" in text or "not a valid" in text):
        outcome = NO_STANDIN
    with open(path, "a") as handle:
        handle.write(json.dumps({"test": report.nodeid, "outcome": outcome, "when": report.when}) + "\n")


# ----------------------------------------------------------------------------------------------- the runner


def test_file_of(path: pathlib.Path) -> pathlib.Path:
    candidate = path / "tests" / "test_grpo_trainer.py" if path.is_dir() else path
    if not candidate.is_file():
        raise SystemExit(f"{candidate} not found: give a TRL checkout or its tests/test_grpo_trainer.py")
    return candidate


def run_once(trainer: str, test_file: pathlib.Path, workdir: pathlib.Path, keyword: str | None) -> dict[str, str]:
    results = workdir / f"results-{trainer}.jsonl"
    results.unlink(missing_ok=True)
    env = dict(
        os.environ,
        **{TRAINER_ENV: trainer, RESULTS_ENV: str(results)},
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_DISABLED="true",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    )
    rootdir = test_file.parent.parent
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(test_file),
        "-p",
        "run_trl_grpo_tests",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    command += ["--rootdir", str(rootdir), "-o", "addopts="] + (["-k", keyword] if keyword else [])
    print(f"[{trainer}] {' '.join(command)}", flush=True)
    subprocess.run(command, env=env, cwd=workdir, check=False)
    outcomes: dict[str, str] = {}
    if results.exists():
        for line in results.read_text().splitlines():
            entry = json.loads(line)
            if outcomes.get(entry["test"]) in (None, "passed"):  # a teardown error after a pass counts
                outcomes[entry["test"]] = entry["outcome"]
    return outcomes


def table(outcomes: dict[str, dict[str, str]]) -> str:
    trainers = list(outcomes)
    kinds = ["passed", "failed", "skipped", NO_STANDIN]
    lines = ["| trainer | " + " | ".join(kinds) + " | total |", "| --- |" + " --- |" * (len(kinds) + 1)]
    for trainer in trainers:
        counts = Counter(outcomes[trainer].values())
        lines.append(f"| {trainer} | " + " | ".join(str(counts[k]) for k in kinds) + f" | {sum(counts.values())} |")
    if len(trainers) == 2:
        first, second = trainers
        differ = sorted(t for t in outcomes[first] if outcomes[first][t] != outcomes[second].get(t))
        lines += ["", f"Tests whose outcome differs ({len(differ)}):", ""]
        lines += [f"- {t}: {first} {outcomes[first][t]}, {second} {outcomes[second].get(t)}" for t in differ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=pathlib.Path, help="a TRL checkout, or its tests/test_grpo_trainer.py")
    parser.add_argument("--trainers", nargs="+", default=["grpo", "gspo"], choices=["grpo", "gspo"])
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression, to run a subset")
    parser.add_argument("--workdir", type=pathlib.Path, default=None, help="where the stand-ins live (kept)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write every outcome here")
    args = parser.parse_args(argv)
    test_file = test_file_of(args.path.resolve())
    workdir = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="trl-grpo-tests-"))
    workdir.mkdir(parents=True, exist_ok=True)
    write_standins(workdir)
    outcomes = {trainer: run_once(trainer, test_file, workdir, args.keyword) for trainer in args.trainers}
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1))
    print(table(outcomes))


if __name__ == "__main__":
    main()
