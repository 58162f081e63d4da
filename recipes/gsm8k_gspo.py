"""GSPO on grade-school maths (GSM8K), the project's main recipe.

    accelerate launch recipes/gsm8k_gspo.py                                          # embedded default: CPU, offline
    accelerate launch recipes/gsm8k_gspo.py --config recipes/configs/gsm8k_gspo.yaml  # the real recipe (GPUs)
    accelerate launch recipes/gsm8k_gspo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct \
        --dataset_name openai/gsm8k --dataset_config main

With no arguments it runs offline on a CPU in a few minutes: recipes/configs/gsm8k_gspo_offline.yaml names a tiny
character-level model that the project trains itself on generated word problems (`builtin:coldstart-gsm8k`, the
"cold start", shipped with the package; scripts/build_coldstart_model.py reproduces it) and more generated problems
(`builtin:gsm8k-generated`); GSPO then raises the GSM8K accuracy reward visibly within the run. Flags override that
file's values (`--max_steps 50 --output_dir X`); with `--model_name_or_path` or `--config`, it is not read.

Data: GSM8K's `question` and `answer` (worked solution ending in `#### N`); rename others with
`--column_map question=YOURS answer=YOURS`. Local files work too: `--dataset_name data.jsonl` (or .json, .parquet,
or a directory saved with `save_to_disk`). Copy this file to adapt it: ADAPT marks the parts meant to change.
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

OFFLINE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "gsm8k_gspo_offline.yaml")
# ADAPT: the instruction and the rewards.
SYSTEM_PROMPT = (
    "Solve the math word problem step by step. End with the final answer on its own line, as '#### <number>'."
)
DEFAULT_REWARDS = ["gsm8k_accuracy"]


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
        dataset, heldout = split_heldout(script_args, training_args, dataset, ("question", "answer"))
        dataset = map_columns(dataset, script_args.column_map)
        require_columns(dataset, ("question", "answer"))
        banner(
            [
                (
                    f"GSPO on GSM8K: {describe(script_args.dataset_name)}, {len(dataset)} problems, "
                    f"model {describe(model_args.model_name_or_path)}"
                ),
                (
                    f"clip range [1 - {training_args.epsilon}, 1 + {training_args.epsilon_high}], "
                    f"{training_args.num_minibatches} minibatches per rollout batch, "
                    f"{training_args.max_steps} steps -> {training_args.output_dir}"
                ),
                "Real recipe: accelerate launch recipes/gsm8k_gspo.py --config recipes/configs/gsm8k_gspo.yaml",
            ]
        )

        # 2. Rewards: gsm8k_accuracy reads the gold number after `####` in the `answer` column.
        reward_funcs = get_rewards(script_args.reward_funcs or DEFAULT_REWARDS)
        check_reward_sandboxes(reward_funcs)  # a code reward that cannot be confined here refuses now

        # 3. Model and tokenizer; the prompt is rendered by the model's chat template (the cold-start model's renders
        #    the plain `question + "\nAnswer: "` it was trained on).
        model, tokenizer = model_and_tokenizer(model_args, training_args)
        chat = script_args.use_chat_template and tokenizer.chat_template is not None
        system_prompt = script_args.system_prompt if script_args.system_prompt is not None else SYSTEM_PROMPT

        def to_prompt(rows):
            return rows.map(lambda row: {"prompt": as_prompt(row["question"], system_prompt, chat)})

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
