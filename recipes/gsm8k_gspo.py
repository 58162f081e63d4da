"""GSPO on grade-school maths (GSM8K), the project's main recipe.

    accelerate launch recipes/gsm8k_gspo.py                                          # embedded default: CPU, offline
    accelerate launch recipes/gsm8k_gspo.py --config recipes/configs/gsm8k_gspo.yaml  # the real recipe (GPUs)
    accelerate launch recipes/gsm8k_gspo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name openai/gsm8k --dataset_config main

With no arguments it runs offline on a CPU in a few minutes: a tiny character-level model that the project trains
itself on generated word problems (the "cold start", built on first use and cached; scripts/build_coldstart_model.py
reproduces it), then GSPO with the paper's clip range on more generated problems. The GSM8K accuracy reward rises
visibly within the run.

Data: GSM8K's `question` and `answer` (worked solution ending in `#### N`); rename others with
`--column_map question=YOURS answer=YOURS`. Local files work too: `--dataset_name data.jsonl` (or .json, .parquet,
or a directory saved with `save_to_disk`). Copy this file to adapt it: ADAPT marks the parts meant to change.
"""

import os

from accelerate import PartialState
from trl import get_peft_config, get_quantization_config

from gspo_recipes import GSPOTrainer
from gspo_recipes.coldstart import load_or_build_coldstart_model
from gspo_recipes.data.synthetic_gsm import format_prompt, make_gsm_dataset
from gspo_recipes.recipe import (
    RecipeArguments,
    as_prompt,
    banner,
    end_banner,
    load_train_dataset,
    map_columns,
    model_and_tokenizer,
    parse_args,
    require_columns,
)
from gspo_recipes.rewards import get_rewards

OFFLINE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "gsm8k_gspo_offline.yaml")
# ADAPT: the instruction and the rewards.
SYSTEM_PROMPT = (
    "Solve the math word problem step by step. End with the final answer on its own line, as '#### <number>'."
)
DEFAULT_REWARDS = ["gsm8k_accuracy"]


def cold_start_model():
    """The embedded default's model; one process builds it, the others wait and load it."""
    with PartialState().main_process_first():
        return load_or_build_coldstart_model()


def main():
    script_args, training_args, model_args = parse_args(RecipeArguments, OFFLINE_CONFIG)
    embedded = model_args.model_name_or_path is None

    # 1. Data, checked before any model is loaded.
    if script_args.dataset_name:
        dataset = load_train_dataset(script_args)
    else:  # generated problems in GSM8K's format, disjoint from the cold start's training problems (other seed)
        dataset = make_gsm_dataset(2048, seed=10_000 + training_args.seed, with_prompt=False)
    dataset = map_columns(dataset, script_args.column_map)
    require_columns(dataset, ("question", "answer"))
    banner([
        f"GSPO on GSM8K: {script_args.dataset_name or 'generated GSM8K-format problems'}, {len(dataset)} problems, "
        f"model {model_args.model_name_or_path or 'the cold-start tiny model (embedded default, CPU, offline)'}",
        f"clip range [1 - {training_args.epsilon}, 1 + {training_args.epsilon_high}], "
        f"{training_args.num_minibatches} minibatches per rollout batch, {training_args.max_steps} steps -> "
        f"{training_args.output_dir}",
        "Real recipe: accelerate launch recipes/gsm8k_gspo.py --config recipes/configs/gsm8k_gspo.yaml",
    ])

    # 2. Model and tokenizer.
    model, tokenizer = model_and_tokenizer(model_args, training_args, cold_start_model)
    chat = script_args.use_chat_template and tokenizer.chat_template is not None and not embedded
    system_prompt = script_args.system_prompt if script_args.system_prompt is not None else SYSTEM_PROMPT
    if embedded:  # the cold-start model was trained on exactly this plain prompt
        dataset = dataset.map(lambda row: {"prompt": format_prompt(row["question"])})
    else:
        dataset = dataset.map(lambda row: {"prompt": as_prompt(row["question"], system_prompt, chat)})

    # 3. Rewards: gsm8k_accuracy reads the gold number after `####` in the `answer` column.
    reward_funcs = get_rewards(script_args.reward_funcs or DEFAULT_REWARDS)

    # 4. Train.
    trainer = GSPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()
    end_banner(training_args.output_dir, trainer.state.log_history)


if __name__ == "__main__":
    main()
