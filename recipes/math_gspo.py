"""GSPO on competition maths (MATH-style data), graded by math_accuracy's final-answer contract.

    accelerate launch recipes/math_gspo.py                                         # offline default (CPU, minutes)
    accelerate launch recipes/math_gspo.py --config recipes/configs/math_gspo.yaml  # the real recipe (GPUs)

With no arguments (or flags only, which override its values) it reads recipes/configs/math_gspo_offline.yaml: a tiny
character-level model the project trains itself on generated problems (`builtin:coldstart-math`, the "cold start",
shipped with the package; `scripts/build_coldstart_model.py --task math` reproduces it) and more generated problems
(`builtin:math-generated`); GSPO then raises the math_accuracy reward visibly within the run.

Data: a `problem` column and either a worked `solution` (ending in \\boxed{...}, as in MATH) or a bare `answer`.
Map other column names with `--column_map problem=question answer=final_answer`.
Copy this file to adapt it: the parts meant to change are marked ADAPT.
"""

import os

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

OFFLINE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "math_gspo_offline.yaml")
# ADAPT: the instruction and the rewards.
SYSTEM_PROMPT = "Solve the problem. Reason step by step, then put the final answer in \\boxed{}."
DEFAULT_REWARDS = ["math_accuracy"]


def main():
    # Everything before train() is set-up: an error in it (a flag, the data, the model files, a reward that cannot
    # run here) ends the run with one message naming its cause; GSPO_DEBUG=1 shows the traceback.
    with setup_errors():
        script_args, training_args, model_args = parse_args(RecipeArguments, OFFLINE_CONFIG)
        # The packages the settings need (a tracker, vLLM); then what output_dir holds: a run cut short is resumed
        # from its last checkpoint, a finished one is not trained over.
        check_extras(training_args)
        claim_output_dir(training_args, overwrite=script_args.overwrite_output_dir)

        # 1. Data, checked before any model is loaded.
        dataset = load_train_dataset(script_args, seed=training_args.seed)
        # Held-out prompts (never trained on) for the held-out evaluation with the strict grader (heldout_eval_steps).
        columns = (("problem", "solution"), ("problem", "answer"))
        dataset, heldout = split_heldout(script_args, training_args, dataset, *columns)
        dataset = map_columns(dataset, script_args.column_map)
        require_columns(dataset, *columns)
        banner(
            [
                (
                    f"GSPO on maths: {describe(script_args.dataset_name)}, "
                    f"{len(dataset)} problems, model {describe(model_args.model_name_or_path)}"
                ),
                "Real recipe: accelerate launch recipes/math_gspo.py --config recipes/configs/math_gspo.yaml",
            ]
        )

        # 2. Rewards: TRL passes the `solution` / `answer` columns to them by name.
        reward_funcs = get_rewards(script_args.reward_funcs or DEFAULT_REWARDS)
        check_reward_sandboxes(reward_funcs)  # a code reward that cannot be confined here refuses now

        # 3. Model and tokenizer.
        model, tokenizer = model_and_tokenizer(model_args, training_args)
        chat = script_args.use_chat_template and tokenizer.chat_template is not None
        system_prompt = script_args.system_prompt if script_args.system_prompt is not None else SYSTEM_PROMPT

        def to_prompt(rows):
            return rows.map(lambda row: {"prompt": as_prompt(row["problem"], system_prompt, chat)})

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
        add_heldout_eval(trainer, heldout, dataset)  # graded by the strict grader, whatever the training rewards are

    # 5. Train (resuming a run cut short in output_dir, see parse_args), save, say where everything is.
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()
    end_banner(training_args.output_dir, trainer.state.log_history)


if __name__ == "__main__":
    main()
