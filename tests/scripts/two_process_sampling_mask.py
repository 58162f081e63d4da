"""Run under two CPU processes: keep_sampling_mask at top_p 0.8 in sampler mode, the monitor every step.

Each process generates, records and trains on its own rows; the kept sets must stay with them. argv[1]: output
folder; process 0 writes the log history to history.json there.
"""

import json
import os
import sys

from datasets import Dataset

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer


def digit_count_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


out = sys.argv[1]
model, tokenizer = build_tiny_model_and_tokenizer()
dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
args = GSPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
                  learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0,
                  bf16=False, max_steps=3, top_p=0.8, keep_sampling_mask=True, old_logps_source="sampler",
                  sampler_mismatch_steps=1, gspo_diagnostics=False)  # fmt: skip
trainer = GSPOTrainer(model=model, reward_funcs=digit_count_reward, args=args, train_dataset=dataset,
                      processing_class=tokenizer)  # fmt: skip
trainer.train()
if trainer.accelerator.is_main_process:
    with open(os.path.join(out, "history.json"), "w") as f:
        json.dump(trainer.state.log_history, f)
