"""`GSPOConfig`: TRL's `GRPOConfig` with the GSPO paper's settings as defaults, and checks that catch the usual
mistakes when the config is built.

Parameters that differ from `GRPOConfig`'s defaults:

> GSPO objective

    importance_sampling_level (`str`, defaults to `"sequence"`): one ratio per response, s_i (the GSPO ratio).
    loss_type (`str`, defaults to `"grpo"`): mean over each response's tokens, then over responses.
    beta (`float`, defaults to `0.0`): no KL term, as in the paper.
    epsilon (`float`, defaults to `3e-4`): low side of the clip range, s_i >= 1 - epsilon.
    epsilon_high (`float`, defaults to `4e-4`): high side of the clip range, s_i <= 1 + epsilon_high.
    num_minibatches (`int`, defaults to `4`): optimizer steps per rollout batch; sets
        `steps_per_generation = num_minibatches * gradient_accumulation_steps`.
    allow_length_weighted_loss (`bool`, defaults to `False`): opt in to a token-summing `loss_type`.

> Diagnostics

    gspo_diagnostics (`bool`, defaults to `True`): register the clip-fraction and log-ratio callbacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from trl import GRPOConfig

logger = logging.getLogger(__name__)

# Loss types that sum per-token terms over the batch: with one ratio per response, each response then counts in
# proportion to its length (TRL issue 3823), which is not GSPO's objective.
TOKEN_SUM_LOSS_TYPES = ("bnpo", "dr_grpo", "dapo", "cispo")
# Clip values this large are token-level (GRPO/PPO) ranges; sequence ratios concentrate like 1/sqrt(length).
TOKEN_SIZED_EPSILON = 0.05


def _bf16_available(use_cpu: bool) -> bool:
    import torch

    if use_cpu or not torch.cuda.is_available():
        return False
    return torch.cuda.is_bf16_supported()


@dataclass
class GSPOConfig(GRPOConfig):
    """`trl.GRPOConfig` with GSPO's defaults; every other parameter is GRPOConfig's (see the module docstring)."""

    importance_sampling_level: str = field(
        default="sequence",
        metadata={
            "help": "Where the importance ratio lives. 'sequence' is GSPO: one ratio per response, the geometric "
            "mean of its token ratios. 'token' is GRPO.",
            "choices": ["sequence", "token"],
        },
    )
    loss_type: str = field(
        default="grpo",
        metadata={
            "help": "How per-token terms are averaged. 'grpo' (GSPO's): mean over each response's tokens, then over "
            "responses. Token-summing types (bnpo, dr_grpo, dapo, cispo) weight responses by length and need "
            "`allow_length_weighted_loss`."
        },
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient. The GSPO paper uses none (0.0)."})
    epsilon: float = field(
        default=3e-4,
        metadata={"help": "Low side of the clip range: responses with s_i < 1 - epsilon and A < 0 are clipped."},
    )
    epsilon_high: float | None = field(
        default=4e-4,
        metadata={"help": "High side of the clip range: responses with s_i > 1 + epsilon_high and A > 0 are clipped."},
    )
    num_minibatches: int = field(
        default=4,
        metadata={
            "help": "Optimizer steps per rollout batch (the paper uses 4; all but the first are off-policy). Sets "
            "steps_per_generation = num_minibatches * gradient_accumulation_steps unless steps_per_generation or "
            "generation_batch_size is given."
        },
    )
    allow_length_weighted_loss: bool = field(
        default=False,
        metadata={
            "help": "Allow a token-summing loss_type (bnpo, dr_grpo, dapo, cispo) with sequence ratios, which weights "
            "each response by its length instead of GSPO's per-response mean."
        },
    )
    gspo_diagnostics: bool = field(
        default=True,
        metadata={
            "help": "Register the diagnostics callbacks (clip fraction by length, histogram of log s_i, health "
            "warnings, gspo_diagnostics.jsonl). They never change training."
        },
    )

    def __post_init__(self):
        if self.num_minibatches < 1:
            raise ValueError(f"num_minibatches must be at least 1, got {self.num_minibatches}.")
        if self.steps_per_generation is None and self.generation_batch_size is None:
            self.steps_per_generation = self.num_minibatches * self.gradient_accumulation_steps
        if self.bf16 is None and not self.fp16 and not _bf16_available(self.use_cpu):
            # TRL defaults to bf16, which stops a CPU-only machine at config time; there, train in float32.
            self.bf16 = False
        super().__post_init__()
        self._check_clip_range()
        self._check_loss_type()
        self._warn_if_on_policy()

    def _check_clip_range(self) -> None:
        for name, value in (("epsilon", self.epsilon), ("epsilon_high", self.epsilon_high)):
            if value is not None and value < 0:
                raise ValueError(f"{name}={value} is negative; the clip range is [1 - epsilon, 1 + epsilon_high].")
        if self.epsilon >= 1:
            raise ValueError(
                f"epsilon={self.epsilon} puts the low clip bound 1 - epsilon at or below 0, where no ratio can go; "
                "GSPO uses about 3e-4."
            )
        largest = max(self.epsilon, self.epsilon_high or 0.0)
        if self.importance_sampling_level == "sequence" and largest >= TOKEN_SIZED_EPSILON:
            logger.warning(
                "epsilon=%s, epsilon_high=%s is a token-level (GRPO) clip range, but the ratios are sequence-level: "
                "log s_i is a mean over the response's tokens, so its spread shrinks like 1/sqrt(length) and such a "
                "range will almost never clip. GSPO's usual range is about [1 - 3e-4, 1 + 4e-4]. Better: measure "
                "log s_i on your first batches and choose the range from it (`gspo calibrate RUN_DIR`).",
                self.epsilon,
                self.epsilon_high,
            )

    def _check_loss_type(self) -> None:
        if (
            self.importance_sampling_level == "sequence"
            and self.loss_type in TOKEN_SUM_LOSS_TYPES
            and not self.allow_length_weighted_loss
        ):
            raise ValueError(
                f"loss_type='{self.loss_type}' sums per-token terms, so with sequence-level ratios every response "
                "is weighted by its length instead of GSPO's per-response mean (TRL issue 3823). Use "
                "loss_type='grpo', or set allow_length_weighted_loss=True if you want the length weighting."
            )

    def _warn_if_on_policy(self) -> None:
        optimizer_steps_per_generation = self.steps_per_generation * self.num_iterations
        if optimizer_steps_per_generation <= self.gradient_accumulation_steps:
            logger.warning(
                "One optimizer step per generation batch (steps_per_generation=%s, num_iterations=%s, "
                "gradient_accumulation_steps=%s): training is fully on-policy, every s_i is exactly 1, nothing is "
                "ever clipped and GSPO equals GRPO. Set num_minibatches (or steps_per_generation) to 4 x "
                "gradient_accumulation_steps for the paper's four minibatch updates per rollout batch.",
                self.steps_per_generation,
                self.num_iterations,
                self.gradient_accumulation_steps,
            )
