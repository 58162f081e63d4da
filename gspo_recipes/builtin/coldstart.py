"""Cold-start models for the offline recipes: tiny LMs fine-tuned to solve one generated task each, a share of the time.

The GSPO paper starts RL from a cold-start fine-tuned model, one that already solves some problems. This module
makes such a model offline for each task of `gspo_recipes.builtin.tasks` (GSM8K word problems, MATH-style problems,
MBPP-style functions): the character-level tokenizer and Qwen2-style decoder of `gspo_recipes.builtin.tiny` (hidden
128, 4 layers, 998,528 parameters), trained with a plain PyTorch loop on fresh generated problems, from scratch or
from another task's model (`init_from`). It learns to write the task's worked completion and EOS after `user message
+ prompt_suffix` (the loss covers the completion only); the GSM8K model takes about 3-4 minutes on 2 CPU cores.

The fine-tuning data has a deliberate flaw, the kind weak SFT data has: a share of the two-step solutions stop after
their first step (`shortcut_rate`; 70% for GSM8K). The model learns each step well but, sampled at temperature 1.0,
stops early about that often, so it starts with a reward of roughly 0.2-0.55 under its recipe's own reward, with
groups that disagree. The reward pays only for the finished answer, so GSPO teaches the model to finish the
calculation: the learning each offline recipe is meant to show.

`load_or_build_coldstart_model(config=COLDSTART_CONFIGS[task])` loads the copy shipped in `assets/`, else trains it
on first use (progress printed) and caches it under `$GSPO_RECIPES_CACHE` (default `~/.cache/gspo_recipes`) in a
folder named after the task, `COLDSTART_VERSION` and a hash of the `ColdStartConfig`; later calls load it in well
under a second. `scripts/build_coldstart_model.py --task TASK` rebuilds one from scratch. Training is deterministic
for a given seed, CPU type and thread count.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from gspo_recipes.builtin.tasks import TASKS, ColdStartTask
from gspo_recipes.builtin.tiny import build_model, build_tokenizer

# Bump whenever the data, the model shape or the training changes: the cache folder is named after it, so an
# incompatible change rebuilds the model instead of loading a stale one.
COLDSTART_VERSION = "v1"


def chat_template(prompt_suffix: str) -> str:
    """A chat template that renders a conversation as the plain prompt the model was trained on: the user turns, then
    `prompt_suffix` (system turns are dropped). So a recipe that passes chat messages holding the bare user message
    samples from the same distribution as one that passes `task.prompt(problem)` as plain text."""
    return (
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ message['content'] }}{% endif %}"
        "{% endfor %}"
        # the suffix goes in as a string literal: a raw newline right after a block tag would be trimmed
        "{% if add_generation_prompt %}{{ " + json.dumps(prompt_suffix) + " }}{% endif %}"
    )


CHAT_TEMPLATE = chat_template(TASKS["gsm8k"].prompt_suffix)  # the GSM8K model's

# The models ship with the package (3.9 MB each), so the offline recipes start training at once; each is exactly
# what `scripts/build_coldstart_model.py --task TASK` builds from this code.
SHIPPED_DIR = Path(__file__).parent / "assets"

EVAL_SEED = 1_000_003  # held-out problems for accuracy checks; training draws from `ColdStartConfig.seed`


@dataclass(frozen=True)
class ColdStartConfig:
    """What a cold-start model is and how it is trained. The defaults make the GSM8K model; `COLDSTART_CONFIGS` holds
    each task's."""

    task: str = "gsm8k"  # a key of gspo_recipes.builtin.tasks.TASKS
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512
    max_position_embeddings: int = 256  # prompt (<= ~110 characters) + completion (<= ~30) fit easily
    steps: int = 800
    batch_size: int = 32
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    # Fraction of two-step training solutions cut after their first step (`#### N` then gives that step's result),
    # the kind of flaw weak fine-tuning data has. The model learns to stop early about that often, which is what the
    # RL run's accuracy reward then trains away: the visible learning of the embedded recipe.
    shortcut_rate: float = 0.7
    seed: int = 0
    # Fine-tune the cold start of this task (a COLDSTART_CONFIGS key) instead of a fresh model: same shape needed.
    init_from: str | None = None

    @property
    def task_spec(self) -> ColdStartTask:
        return TASKS[self.task]


# The code model fine-tunes the GSM8K one, which already copies numbers from its prompt: from scratch, 400 steps left
# it writing the right structure with random digits (reward 0). The math model is trained from scratch for 1,500
# steps (sampled reward 0.46): at 500 (0.18) its arithmetic was too weak for finishing to pay, and GSPO barely lifted
# it (a GSM8K-initialised fine-tune of 250 steps did worse: 0.08). The code prompts are the longest (~170
# characters), so its batches are half as large; copying is easier than arithmetic, so more of its two-step
# solutions stop early.
COLDSTART_CONFIGS: dict[str, ColdStartConfig] = {
    "gsm8k": ColdStartConfig(),
    "math": ColdStartConfig(task="math", steps=1500),
    "code": ColdStartConfig(
        task="code", steps=250, batch_size=16, learning_rate=2e-3, warmup_steps=25, shortcut_rate=0.8, init_from="gsm8k"
    ),
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("GSPO_RECIPES_CACHE") or Path.home() / ".cache" / "gspo_recipes")


def coldstart_dir(cache_dir: str | os.PathLike | None = None, config: ColdStartConfig = ColdStartConfig()) -> Path:
    """Where the cached model and tokenizer live: the folder name carries the task, the version and a hash of the
    config."""
    config_hash = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:8]
    return Path(cache_dir or default_cache_dir()) / f"coldstart-{config.task}-{COLDSTART_VERSION}-{config_hash}"


def with_shortcuts(problems: list[dict], rate: float, seed: int, task: str = "gsm8k") -> list[dict]:
    """Copies of `problems` where, at `rate`, a two-step solution stops after its first step (the task's
    `stop_early`)."""
    rng = random.Random(seed)
    shortcut = []
    for problem in problems:
        stopped = TASKS[task].stop_early(problem)
        if stopped is not None and rng.random() < rate:
            problem = stopped
        shortcut.append(problem)
    return shortcut


def encode_for_training(problems: list[dict], tokenizer, task: str = "gsm8k") -> dict[str, torch.Tensor]:
    """Right-padded `prompt + completion + EOS` ids, with labels on the completion and EOS only (-100 elsewhere)."""
    spec = TASKS[task]
    prompts = tokenizer([spec.prompt(p) for p in problems], add_special_tokens=False)["input_ids"]
    answers = tokenizer([spec.completion(p) for p in problems], add_special_tokens=False)["input_ids"]
    sequences = [p + a + [tokenizer.eos_token_id] for p, a in zip(prompts, answers)]
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), length), tokenizer.pad_token_id)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    labels = torch.full((len(sequences), length), -100)
    for row, (prompt, sequence) in enumerate(zip(prompts, sequences)):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention_mask[row, : len(sequence)] = 1
        labels[row, len(prompt) : len(sequence)] = input_ids[row, len(prompt) : len(sequence)]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _learning_rate(step: int, config: ColdStartConfig) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_coldstart(
    config: ColdStartConfig = ColdStartConfig(),
    progress: bool = True,
    on_step: Callable[[int, Qwen2ForCausalLM, PreTrainedTokenizerFast], None] | None = None,
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast, list[float]]:
    """Train a fresh model on `config.steps` batches of new problems; returns (model, tokenizer, per-step losses).

    `on_step(step, model, tokenizer)`, if given, runs after each optimiser step (for checkpoints or evaluations;
    it must leave the model in training mode).
    """
    tokenizer = build_tokenizer(model_max_length=config.max_position_embeddings)
    tokenizer.chat_template = chat_template(config.task_spec.prompt_suffix)
    if config.init_from is not None:
        # Starts from another task's cold start (same shape and tokenizer), which already copies numbers from its
        # prompt: trained from scratch, a code model spends thousands of steps before it copies a function's name.
        model, _ = load_or_build_coldstart_model(progress=progress, config=COLDSTART_CONFIGS[config.init_from])
        torch.manual_seed(config.seed)
    else:
        model = build_model(
            tokenizer,
            hidden_size=config.hidden_size,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            max_position_embeddings=config.max_position_embeddings,
            seed=config.seed,
        )
    # Every step sees fresh problems: the stream never repeats, so there is no overfitting to watch for.
    problems = config.task_spec.make_problems(config.steps * config.batch_size, config.seed)
    problems = with_shortcuts(problems, config.shortcut_rate, seed=config.seed + 1, task=config.task)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=config.weight_decay
    )
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    report_every = max(1, config.steps // 20)
    for step in range(config.steps):
        chunk = problems[step * config.batch_size : (step + 1) * config.batch_size]
        batch = encode_for_training(chunk, tokenizer, task=config.task)
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, config)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_step is not None:
            on_step(step + 1, model, tokenizer)
        if progress and ((step + 1) % report_every == 0 or step + 1 == config.steps):
            recent = losses[-report_every:]
            elapsed = time.perf_counter() - start
            print(
                f"[coldstart] step {step + 1}/{config.steps}  loss {sum(recent) / len(recent):.4f}  "
                f"{elapsed:.0f}s elapsed, ~{elapsed / (step + 1) * (config.steps - step - 1):.0f}s left",
                flush=True,
            )
    model.eval()
    return model, tokenizer, losses


@torch.no_grad()
def evaluate_accuracy(
    model,
    tokenizer,
    problems: list[dict] | None = None,
    temperature: float = 1.0,
    max_new_tokens: int = 32,
    batch_size: int = 128,
    seed: int = 0,
    task: str = "gsm8k",
) -> float:
    """Mean reward of one completion per problem (default: 512 held-out ones), under the task's recipe reward.

    `temperature=0` decodes greedily, otherwise it samples as GRPO does (no top-k, no top-p).
    """
    spec = TASKS[task]
    problems = problems if problems is not None else spec.make_problems(512, EVAL_SEED)
    torch.manual_seed(seed)
    model.eval()
    if temperature:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    else:
        sampling = {"do_sample": False}
    total = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        inputs = tokenizer([spec.prompt(p) for p in chunk], return_tensors="pt", padding=True)
        output = model.generate(
            **inputs, max_new_tokens=max_new_tokens, **sampling,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
        completions = tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        scores = spec.reward(completions, chunk)
        if any(score is None for score in scores):
            raise RuntimeError(f"the {task} reward could not judge every completion (no sandbox?)")
        total += sum(scores)
    return total / len(problems)


def save_atomically(model, tokenizer, target: Path, extra: dict | None = None, replace: bool = False) -> None:
    """Write model and tokenizer to a temporary sibling folder, then rename it: a crash never leaves half a cache.

    An existing `target` is swapped out only once the new copy is complete (`replace`), or else kept: when another
    process got there first (two ranks building at once), its copy stays and ours is dropped.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    os.chmod(staging, 0o755)  # mkdtemp makes it private; the cache is as readable as any other folder
    retired = staging.with_name(staging.name + "-old")
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if extra:
            (staging / "coldstart.json").write_text(json.dumps(extra, indent=2) + "\n")
        if replace and target.exists():
            os.rename(target, retired)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(retired, ignore_errors=True)


def load_coldstart_model(path: str | os.PathLike) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """A saved cold-start (model, tokenizer), the model in eval mode."""
    model = Qwen2ForCausalLM.from_pretrained(path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    model.eval()
    return model, tokenizer


def build_coldstart_model(
    out_dir: str | os.PathLike,
    config: ColdStartConfig = ColdStartConfig(),
    progress: bool = True,
    replace: bool = False,
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """Train the cold-start model from scratch and save it atomically to `out_dir` (see `save_atomically`)."""
    start = time.perf_counter()
    if progress:
        print(
            f"[coldstart] training the {config.task} cold-start model into {out_dir}: {config.steps} steps, a few "
            "minutes on 2 CPU cores. This happens once; later runs load it.",
            flush=True,
        )
    model, tokenizer, losses = train_coldstart(config, progress=progress)
    info = {
        "version": COLDSTART_VERSION,
        "config": asdict(config),
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    save_atomically(model, tokenizer, Path(out_dir), extra=info, replace=replace)
    if progress:
        print(f"[coldstart] saved to {out_dir} after {info['train_seconds']}s", flush=True)
    return model, tokenizer


def load_or_build_coldstart_model(
    cache_dir: str | os.PathLike | None = None,
    rebuild: bool = False,
    progress: bool = True,
    config: ColdStartConfig = ColdStartConfig(),
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """The cold-start (model, tokenizer): from the cache if built there, else the copy shipped with the package
    (the same model, built by `scripts/build_coldstart_model.py`), else trained and cached first. `rebuild` always
    trains anew. A change to `ColdStartConfig` or `COLDSTART_VERSION` changes the folder name, so a stale cache or
    shipped copy is never used for a different configuration."""
    path = coldstart_dir(cache_dir, config)
    shipped = SHIPPED_DIR / path.name
    if not rebuild and not (path / "config.json").exists() and (shipped / "config.json").exists():
        return load_coldstart_model(shipped)
    if rebuild or not (path / "config.json").exists():
        build_coldstart_model(path, config, progress=progress, replace=rebuild)
    return load_coldstart_model(path)
