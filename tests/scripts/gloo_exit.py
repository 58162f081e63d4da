"""A finished GSPOTrainer run in a process with a gloo process group, as under `accelerate launch`: prints whether the
group is still alive when the interpreter starts to shut down (this script's exit hook runs after the trainer's)."""

import atexit
import os
import sys

import torch.distributed as dist
from datasets import Dataset

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
atexit.register(lambda: print(f"group alive at exit: {dist.is_initialized()}", flush=True))

from gspo_recipes import GSPOConfig, GSPOTrainer  # noqa: E402
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer  # noqa: E402

model, tokenizer = build_tiny_model_and_tokenizer()
args = GSPOConfig(output_dir=sys.argv[1], per_device_train_batch_size=4, num_generations=4, max_completion_length=4,
                  max_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False, gspo_diagnostics=False,
                  sampler_mismatch_steps=0)  # fmt: skip


def length(completions, **kwargs):
    return [float(len(c)) for c in completions]


dataset = Dataset.from_list([{"prompt": "1+1="}] * 4)
trainer = GSPOTrainer(model=model, reward_funcs=length, args=args, train_dataset=dataset, processing_class=tokenizer)
trainer.train()
