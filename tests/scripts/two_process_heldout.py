"""Run under two CPU processes: held-out evaluation split across processes and gathered.

Each process evaluates 20 held-out prompts in chunks of 4 (process 0 draws three chunks, process 1 two) at step 0
and writes the metrics to rank{r}.json in argv[1]; then a 2-step run evaluates at every step, which would hang if the
processes did not meet in the same collectives.
"""

import json
import os
import sys

from datasets import Dataset

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
from gspo_recipes.callbacks import HeldoutEvalCallback

rank = int(os.environ.get("RANK", "0"))
out = sys.argv[1]


def has_digit(completions, **kwargs):
    return [float(any(ch.isdigit() for ch in c)) for c in completions]


def sums(op):
    rows = [{"prompt": f"{a}{op}{b}=", "question": f"{a}{op}{b}?", "answer": f"#### {eval(f'{a}{op}{b}')}"}
            for a in range(8) for b in range(8)]  # fmt: skip
    return Dataset.from_list(rows)


model, tokenizer = build_tiny_model_and_tokenizer()
args = GSPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
                  learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0,
                  max_steps=2, temperature=1.0)  # fmt: skip
trainer = GSPOTrainer(model=model, reward_funcs=[has_digit], args=args, train_dataset=sums("+"),
                      processing_class=tokenizer)  # fmt: skip
callback = HeldoutEvalCallback(trainer, sums("*"), reward_funcs=[has_digit, "gsm8k_accuracy"], num_samples=4,
                               max_prompts=20, chunk_prompts=4, eval_steps=1)  # fmt: skip
metrics, _ = callback.evaluate(step=0)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(metrics, f)
trainer.add_callback(callback)
trainer.train()
assert [point["step"] for point in callback.judge.series] == [1, 2], callback.judge.series
