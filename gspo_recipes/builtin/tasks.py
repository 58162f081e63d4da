"""The tasks a cold-start model is made for, one per offline recipe: GSM8K word problems, MATH-style problems, and
MBPP-style functions (`gspo_recipes.builtin.data`).

Every task is built the same way, which is what lets GSPO show learning on a tiny model: problems take one or two
steps, and in the fine-tuning data a share of the two-step solutions stops after the first step (the flaw weak SFT
data has), so the cold-start model often stops early; the reward its recipe trains with pays only for the finished
answer, so RL teaches it to finish. A task names its generator, the user message the recipe sends (the model sees it
followed by `prompt_suffix`), the worked completion, the early stop, and that reward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gspo_recipes.builtin.data import synthetic_code, synthetic_gsm, synthetic_math


@dataclass(frozen=True)
class ColdStartTask:
    make_problems: Callable[[int, int], list[dict]]  # (n, seed) -> problems, the same for the same seed
    user_message: Callable[[dict], str]  # what the recipe sends as the user turn (or as plain text)
    prompt_suffix: str  # the cue after the user message: the model's completion starts right after it
    completion: Callable[[dict], str]  # the worked solution the model is trained to write (EOS follows)
    stop_early: Callable[[dict], dict | None]  # the problem with its solution cut after one step; None if one-step
    reward: Callable[[list[str], list[dict]], list[float | None]]  # the recipe's own reward, per completion

    def prompt(self, problem: dict) -> str:
        """The plain prompt text the model is trained on (and that its chat template renders)."""
        return self.user_message(problem) + self.prompt_suffix


def _gsm8k_reward(completions, problems):
    from gspo_recipes.rewards import gsm8k_accuracy

    return gsm8k_accuracy(completions, answer=[p["answer"] for p in problems])


def _math_reward(completions, problems):
    from gspo_recipes.rewards import math_accuracy

    return math_accuracy(completions, solution=[p["solution"] for p in problems])


def _code_reward(completions, problems):
    from gspo_recipes.rewards import code_execution

    return code_execution(completions, tests=[p["test_list"] for p in problems])


def _gsm8k_stop_early(problem: dict) -> dict | None:
    first, *rest = problem["answer"].split("\n")
    if len(rest) != 2:  # one calculation line, then `#### N`
        return None
    return {**problem, "answer": f"{first}\n#### {first.split('=')[-1]}"}


TASKS: dict[str, ColdStartTask] = {
    "gsm8k": ColdStartTask(
        make_problems=lambda n, seed: synthetic_gsm.make_gsm_problems(n, seed=seed),
        user_message=lambda problem: problem["question"],
        prompt_suffix=synthetic_gsm.PROMPT_SUFFIX,
        completion=lambda problem: problem["answer"],
        stop_early=_gsm8k_stop_early,
        reward=_gsm8k_reward,
    ),
    "math": ColdStartTask(
        make_problems=lambda n, seed: synthetic_math.make_math_problems(n, seed=seed),
        user_message=lambda problem: problem["problem"],
        prompt_suffix=synthetic_math.PROMPT_SUFFIX,
        completion=lambda problem: problem["solution"],
        stop_early=synthetic_math.stop_after_first_step,
        reward=_math_reward,
    ),
    "code": ColdStartTask(
        make_problems=lambda n, seed: synthetic_code.make_code_tasks(n, seed=seed),
        user_message=synthetic_code.task_message,
        prompt_suffix=synthetic_code.PROMPT_SUFFIX,
        completion=lambda task: synthetic_code.completion(task["code"]),
        stop_early=synthetic_code.stop_after_first_step,
        reward=_code_reward,
    ),
}
