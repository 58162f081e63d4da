"""GSPO on programming tasks, scored by running the model's code against the tests in a local sandbox.

    accelerate launch recipes/code_gspo.py                                         # offline default (CPU, minutes)
    accelerate launch recipes/code_gspo.py --config recipes/configs/code_gspo.yaml  # the real recipe (GPUs)

With no arguments (or flags only, which override its values) it reads recipes/configs/code_gspo_offline.yaml: a tiny
character-level model the project trains itself on generated tasks (`builtin:coldstart-code`, the "cold start",
shipped with the package; `scripts/build_coldstart_model.py --task code` reproduces it) and more generated tasks
(`builtin:mbpp-generated`); GSPO then raises the code_execution reward (tests run in the sandbox) within the run.

Three dataset shapes (chosen with --dataset_format; columns can be renamed with --column_map NEEDED=YOURS):
  mbpp       `text` (the task) and `test_list` (assert statements, each scored on its own)
  humaneval  `prompt` (signature and docstring), `test` (defines check) and `entry_point`
  apps       `question` and `input_output` (JSON with "inputs" and "outputs": stdin/stdout pairs)
The reward is the fraction of tests passed (`code_execution`) or 1.0 only when all pass (`code_execution_binary`).
Install bubblewrap (`apt-get install bubblewrap`) for the strong sandbox. Copy this file to adapt it: ADAPT marks
the parts meant to change.
"""

import os
from dataclasses import dataclass, field

# The modules, not their names: TRL and gspo_recipes import torch only when the trainer is built, so the arguments are
# checked first (a bad path or flag fails in under a second).
import trl

import gspo_recipes
from gspo_recipes.recipe import (
    RecipeArguments,
    add_heldout_eval,
    as_prompt,
    banner,
    check_extras,
    claim_output_dir,
    describe,
    end_banner,
    load_train_dataset,
    map_columns,
    model_and_tokenizer,
    parse_args,
    require_columns,
    setup_errors,
    split_heldout,
)
from gspo_recipes.rewards import get_rewards
from gspo_recipes.trainer.reward_sandbox import check_reward_sandboxes

OFFLINE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "code_gspo_offline.yaml")
# ADAPT: the instruction and the rewards.
SYSTEM_PROMPT = "You are a careful Python programmer. Answer with one ```python code block."
DEFAULT_REWARDS = ["code_execution"]

# The columns each format needs, and how its task becomes the user message.
FORMATS = {
    "mbpp": (
        ("text", "test_list"),
        lambda row: f"{row['text']}\nYour code must pass this test:\n{row['test_list'][0]}",
    ),
    "humaneval": (
        ("prompt", "test", "entry_point"),
        lambda row: f"Complete this function and return all of it:\n```python\n{row['prompt']}```",
    ),
    "apps": (
        ("question", "input_output"),
        lambda row: f"{row['question']}\nRead the input from stdin and print the answer to stdout.",
    ),
}


@dataclass
class CodeArguments(RecipeArguments):
    dataset_format: str = field(default="mbpp", metadata={"help": "Shape of the dataset.", "choices": list(FORMATS)})


def main():
    # Everything before train() is set-up: an error in it (a flag, the data, the model files, a reward that cannot
    # run here) ends the run with one message naming its cause; GSPO_DEBUG=1 shows the traceback.
    with setup_errors():
        script_args, training_args, model_args = parse_args(CodeArguments, OFFLINE_CONFIG)
        if script_args.dataset_format not in FORMATS:
            raise SystemExit(f"error: dataset_format='{script_args.dataset_format}'; use one of {list(FORMATS)}")
        # The packages the settings need (a tracker, vLLM); then what output_dir holds: a run cut short is resumed
        # from its last checkpoint, a finished one is not trained over.
        check_extras(training_args)
        claim_output_dir(training_args, overwrite=script_args.overwrite_output_dir)

        # 1. Data, checked before any model is loaded.
        dataset = load_train_dataset(script_args, seed=training_args.seed)
        needed, task_text = FORMATS[script_args.dataset_format]
        # Held-out tasks (never trained on) for the held-out evaluation with the code judge (heldout_eval_steps).
        dataset, heldout = split_heldout(script_args, training_args, dataset, needed)
        dataset = map_columns(dataset, script_args.column_map)
        require_columns(dataset, needed)
        banner(
            [
                (
                    f"GSPO on code: {describe(script_args.dataset_name)} "
                    f"({script_args.dataset_format}), {len(dataset)} tasks, "
                    f"model {describe(model_args.model_name_or_path)}"
                ),
                "Real recipe: accelerate launch recipes/code_gspo.py --config recipes/configs/code_gspo.yaml",
            ]
        )

        # 2. Rewards: code_execution reads test_list / test + entry_point / input_output from the row.
        reward_funcs = get_rewards(script_args.reward_funcs or DEFAULT_REWARDS)
        check_reward_sandboxes(reward_funcs)  # a code reward that cannot be confined here refuses now

        # 3. Model and tokenizer.
        model, tokenizer = model_and_tokenizer(model_args, training_args)
        chat = script_args.use_chat_template and tokenizer.chat_template is not None
        system_prompt = script_args.system_prompt if script_args.system_prompt is not None else SYSTEM_PROMPT

        def to_prompt(rows):
            if script_args.dataset_format == "humaneval" and "helpers" not in rows.column_names:
                # The original prompt's code (helpers such as `poly`) stays beside the chat prompt: the judge takes the
                # helpers the tests use from it, never from the completion.
                rows = rows.map(lambda row: {"helpers": row["prompt"]})
            return rows.map(lambda row: {"prompt": as_prompt(task_text(row), system_prompt, chat)})

        dataset, heldout = to_prompt(dataset), heldout and to_prompt(heldout)

        # 4. The trainer.
        trainer = gspo_recipes.GSPOTrainer(
            model=model,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=trl.get_peft_config(model_args),
            quantization_config=trl.get_quantization_config(model_args),
        )
        add_heldout_eval(trainer, heldout, dataset)  # graded by the code judge, whatever the training rewards are

    # 5. Train (resuming a run cut short in output_dir, see parse_args), save, say where everything is.
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()
    end_banner(training_args.output_dir, trainer.state.log_history)


if __name__ == "__main__":
    main()
