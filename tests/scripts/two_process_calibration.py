"""Run under two CPU processes: automatic calibration over the first 4 steps, with a checkpoint at step 4 (saved
before the range is fixed at the start of step 5).

argv: OUTPUT_DIR RESULT_JSON [resume]. Process 0 writes the calibrated (epsilon_low, epsilon_high) to RESULT_JSON.
With GSPO_TEST_REFERENCE_LENGTH=L in the environment the range is length-scaled at L_ref = L.
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
reference_length = int(os.environ.get("GSPO_TEST_REFERENCE_LENGTH", "0")) or None
model, tokenizer = build_tiny_model_and_tokenizer()
dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
args = GSPOConfig(
    output_dir=output_dir,
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=8,
    max_steps=6,
    learning_rate=1e-3,
    logging_steps=1,
    report_to="none",
    use_cpu=True,
    seed=0,
    epsilon_calibration_steps=4,
    epsilon_target_clip=0.2,
    save_strategy="steps",
    save_steps=4,
    gspo_diagnostics=False,
    epsilon_length_scaling=reference_length is not None,
    epsilon_reference_length=reference_length,
)
trainer = GSPOTrainer(
    model=model, reward_funcs=digit_count_reward, args=args, train_dataset=dataset, processing_class=tokenizer
)
trainer.train(resume_from_checkpoint=os.path.join(output_dir, "checkpoint-4") if resume else None)
if trainer.accelerator.is_main_process:
    with open(result_path, "w") as f:
        json.dump([trainer.epsilon_low, trainer.epsilon_high], f)
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
