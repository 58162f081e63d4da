"""Run under two CPU processes: the adaptive clip range over 12 steps (decisions at steps 4 and 8), with a checkpoint
at step 8, whose window is partial and whose open rollout holds both processes' responses.

argv: OUTPUT_DIR RESULT_JSON [resume]. Each process records the range its loss used at every micro-step; process 0
writes [ranges of process 0, ranges of process 1] to RESULT_JSON.
"""

import json
import os
import sys

import torch
from datasets import Dataset

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer


def digit_count_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


output_dir, result_path = sys.argv[1], sys.argv[2]
resume = len(sys.argv) > 3
model, tokenizer = build_tiny_model_and_tokenizer()
dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
args = GSPOConfig(
    output_dir=output_dir,
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=8,
    max_steps=12,
    learning_rate=1e-3,
    logging_steps=1,
    report_to="none",
    use_cpu=True,
    seed=0,
    epsilon_adaptive=True,
    epsilon_adaptive_min_responses=4,
    save_strategy="steps" if not resume else "no",
    save_steps=8,
    gspo_diagnostics=False,
)
trainer = GSPOTrainer(
    model=model, reward_funcs=digit_count_reward, args=args, train_dataset=dataset, processing_class=tokenizer
)
seen, loss = [], trainer._compute_loss


def recording(model, inputs):
    out = loss(model, inputs)
    seen.append([trainer.epsilon_low, trainer.epsilon_high])
    return out


trainer._compute_loss = recording
trainer.train(resume_from_checkpoint=os.path.join(output_dir, "checkpoint-8") if resume else None)
every = trainer.accelerator.gather_for_metrics([seen], use_gather_object=True)
if trainer.accelerator.is_main_process:
    with open(result_path, "w") as f:
        json.dump(every, f)
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
