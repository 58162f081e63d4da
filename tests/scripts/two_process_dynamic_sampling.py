"""Run under two CPU processes: GSPOTrainer with dynamic sampling on data where half the groups carry no signal.
Each rank writes what reached its loss and what dynamic sampling decided to rank{R}.json in argv[1]."""

import json
import os
import sys

import torch
from datasets import Dataset

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

KINDS = ("dead", "solved", "live", "live")


def toy_accuracy(completions, kind, **kwargs):
    return [0.0 if k == "dead" else 1.0 if k == "solved" else float(any(ch.isdigit() for ch in c))
            for c, k in zip(completions, kind)]  # fmt: skip


toy_accuracy.reward_kind = "accuracy"


out = sys.argv[1]
model, tokenizer = build_tiny_model_and_tokenizer()
dataset = Dataset.from_list([{"prompt": f"q{i}:", "kind": KINDS[i % 4]} for i in range(64)])
args = GSPOConfig(
    output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=8, max_steps=4,
    learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0,
    gspo_diagnostics=False, sampler_mismatch_steps=0, dynamic_sampling=True, steps_per_generation=2,
)  # fmt: skip
trainer = GSPOTrainer(model=model, reward_funcs=[toy_accuracy], args=args, train_dataset=dataset,
                      processing_class=tokenizer)  # fmt: skip
kinds = {f"q{i}:": KINDS[i % 4] for i in range(64)}
loss_rows, trained, rounds, kept = [], set(), [], []
compute_loss = trainer._compute_loss


def spy(model, inputs):
    loss_rows.append(int(inputs["completion_ids"].size(0)))
    for ids, pmask, cmask in zip(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_mask"]):
        if cmask.any():
            trained.add(kinds[tokenizer.decode(ids[pmask.bool()])])
    fill = trainer.dynamic_sampler.last_fill
    if fill is not None and (not rounds or fill is not rounds[-1][0]):
        rounds.append((fill, fill["rounds"]))
        kept.append([sum(not m for _, _, m in pick) for pick in fill["picks"]])
    return compute_loss(model, inputs)


trainer._compute_loss = spy
trainer.train()
rank = trainer.accelerator.process_index
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"loss_rows": loss_rows, "rounds": [r for _, r in rounds], "kept_per_process": kept,
               "trained_kinds": sorted(trained)}, f)  # fmt: skip
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
