"""A short GSPO run under one of the shipped accelerate configs (`accelerate launch --config_file ...`), or in one plain
process: writes what the engine did and what training gave to OUT_DIR/rank{r}.json.

argv: OUT_DIR. Completions are fixed by the prompt and the response's place in its group (the generator still runs,
so the engine's generation path is exercised, but its tokens are replaced), so one process and two see the same
batches and must train the same weights, up to float rounding.
"""

import json
import os
import sys

import torch
from datasets import Dataset

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

GROUP = 4
ROWS_PER_STEP = 16  # every step, in total over the processes: 4 groups of 4


class FixedCompletions(GSPOTrainer):
    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        super()._generate_single_turn(prompt_ids, *args, **kwargs)  # the engine's generation path, run and discarded
        seen: dict[tuple, int] = {}
        completions = []
        for ids in prompt_ids:
            j = seen[tuple(ids)] = seen.get(tuple(ids), -1) + 1  # the response's place in its group
            completions.append([5 + (sum(ids) + 7 * j + t) % 20 for t in range(2 + j)])
        return completions, None


def sharded(parameter) -> bool:
    """Whether this process holds only a shard of the parameter: FSDP2's DTensor, ZeRO-3's partitioned tensor."""
    if type(parameter).__name__ == "DTensor":
        return True
    return hasattr(parameter, "ds_numel") and parameter.ds_tensor.numel() < parameter.ds_numel


def length(completions, **kwargs):
    return [float(len(c)) for c in completions]


def main(out_dir: str) -> None:
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    model, tokenizer = build_tiny_model_and_tokenizer()
    args = GSPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=ROWS_PER_STEP // processes,
        num_generations=GROUP,
        steps_per_generation=1,
        max_completion_length=8,
        learning_rate=1e-2,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        gspo_diagnostics=False,
        sampler_mismatch_steps=0,
    )
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    trainer = FixedCompletions(model=model, reward_funcs=length, args=args, train_dataset=dataset,
                               processing_class=tokenizer)  # fmt: skip
    trainer.train()
    wrapped = trainer.model_wrapped
    with trainer.accelerator.autocast():
        autocast_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    state = trainer.accelerator.get_state_dict(wrapped)  # collective under FSDP and ZeRO-3
    rank = trainer.accelerator.process_index
    result = {
        "processes": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type).split(".")[-1],
        "wrapper": type(wrapped).__name__,
        "sharded": any(sharded(p) for p in trainer.model.parameters()),
        "mixed_precision": trainer.accelerator.mixed_precision,
        "autocast": None if autocast_dtype is None else str(autocast_dtype),
        "param_dtype": str(next(trainer.model.parameters()).dtype),
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "weights": {name: value.float().flatten().tolist() for name, value in (state or {}).items()},
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
