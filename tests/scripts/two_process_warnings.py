"""Run under two CPU processes: GSPO runs built to fire gspo-recipes' warnings, each log line tagged with its rank.

Run 1: a tiny GPT-2 with its dropout on, old_logps_source='sampler' (a setup warning), the mismatch monitor every step
(its warning), automatic calibration over 2 steps (the trainer's note of the new range). Run 2: fully on-policy (the
health callback's setup warning). argv[1]: output folder; process 0 writes run 1's log history to history.json there.
"""

import json
import logging
import os
import sys

import torch
from datasets import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tokenizer

rank = int(os.environ.get("RANK", "0"))
logging.basicConfig(level=logging.WARNING, format=f"[rank{rank}] %(name)s: %(message)s", force=True)


def digit_count_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def tiny_gpt2(tokenizer):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


out = sys.argv[1]
tokenizer = build_tokenizer()
dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(40, 44) for b in range(4)])
common = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=8, learning_rate=1e-3,
              logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0, bf16=False)  # fmt: skip
runs = {
    "run1": dict(
        max_steps=4,
        old_logps_source="sampler",
        sampler_mismatch_steps=1,
        disable_dropout=False,
        epsilon_calibration_steps=2,
    ),  # fmt: skip
    "run2": dict(max_steps=1, num_minibatches=1, disable_dropout=True),
}
for name, settings in runs.items():
    args = GSPOConfig(output_dir=os.path.join(out, name), **common, **settings)
    trainer = GSPOTrainer(model=tiny_gpt2(tokenizer), reward_funcs=digit_count_reward, args=args,
                          train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
    trainer.train()
    if name == "run1" and trainer.accelerator.is_main_process:
        with open(os.path.join(out, "history.json"), "w") as f:
            json.dump(trainer.state.log_history, f)
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
