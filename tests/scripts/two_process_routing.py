"""Run under `accelerate launch --multi_gpu --num_processes 2` (two CPU processes over gloo): a few GSPO steps on a
tiny Qwen3-MoE with Routing Replay and the volatility metric. Every process writes the route-change counts it
contributed at each optimizer step to argv[1]/counts_{rank}.json; process 0 writes the log history to
argv[1]/history.json."""

import json
import os
import sys

import torch
from datasets import Dataset

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tokenizer
from gspo_recipes.moe import build_tiny_moe


def digit_count_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


out = sys.argv[1]
tokenizer = build_tokenizer()
model = build_tiny_moe("qwen3_moe", vocab_size=len(tokenizer))
model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 2
args = GSPOConfig(
    output_dir=out,
    per_device_train_batch_size=4,
    num_generations=4,
    max_completion_length=8,
    steps_per_generation=4,
    max_steps=4,
    learning_rate=3e-2,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    use_cpu=True,
    seed=0,
    routing_replay=True,
    gradient_checkpointing=True,
)
dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
trainer = GSPOTrainer(
    model=model, reward_funcs=digit_count_reward, args=args, train_dataset=dataset, processing_class=tokenizer
)
monitor, tables = trainer.routing_monitor, []
take_counts = monitor.take_counts


def take_and_keep(max_minibatch):
    table = take_counts(max_minibatch)
    tables.append(table.tolist())
    return table


monitor.take_counts = take_and_keep
trainer.train()
rank = trainer.accelerator.process_index
with open(os.path.join(out, f"counts_{rank}.json"), "w") as f:
    json.dump(tables, f)
if rank == 0:
    with open(os.path.join(out, "history.json"), "w") as f:
        json.dump(trainer.state.log_history, f)
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
