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

> Clip range from data

    epsilon_calibration_steps (`int`, defaults to `0`): calibrate the clip range during the first N optimizer steps.
    epsilon_target_clip (`float`, defaults to `0.1`): the fraction of responses to clip on each side.
    epsilon_adaptive (`bool`, defaults to `False`): a clip range that follows the run toward epsilon_target_clip,
        decided per side at each rollout boundary, frozen with a warning when a guard holds (docs/clip-range.md).
    epsilon_adaptive_min_responses (`int`, defaults to `32`): a side with fewer off-policy responses in the
        controller's window is left as it is.
    token_log_ratio_clip (`float`, defaults to `None`): GMPO-style clamp of each token's log-ratio before the mean.
    epsilon_length_scaling (`bool`, defaults to `False`): a clip range that scales with length like 1/sqrt(L):
        a response of L tokens gets epsilon * sqrt(L_ref / L) on both sides.
    epsilon_reference_length (`int`, defaults to `None`): L_ref, where epsilon/epsilon_high hold as given;
        None is `max_completion_length`, so no response gets a narrower range than the configured one.

> Diagnostics

    gspo_diagnostics (`bool`, defaults to `True`): register the clip-fraction and log-ratio callbacks.

> Mixture-of-Experts

    routing_replay (`bool`, defaults to `False`): reuse the experts chosen in the old-policy pass in every training
        forward and backward of that rollout (GRPO needs it on MoE models; GSPO, as the paper recommends, does not).
        The routing volatility metric is on for MoE models whenever `gspo_diagnostics` is.

> Old-policy log-probabilities (gspo_recipes/sampler/)

    old_logps_source (`str`, defaults to `"recompute"`): `"sampler"` uses the generator's log-probabilities as
        pi_old and skips the trainer's forward pass over every rollout.
    sampler_mismatch_steps (`int`, defaults to `25`): every this many steps, log the mismatch between the two sources.
    vllm_importance_sampling_sequence_ratio (`str`, defaults to `"geometric_mean"`): vLLM's sequence-level
        importance-sampling weight, length-normalised; `"product"` is TRL's.

> Groups that carry signal (gspo_recipes/stats/groups.py, gspo_recipes/trainer/dynamic_sampling.py)

    dynamic_sampling (`bool`, defaults to `False`): replace groups with zero std on the signal reward by fresh ones.
    dynamic_sampling_max_rounds (`int`, defaults to `4`): generation rounds per generation batch, the first included.
    dynamic_sampling_reward (`str`, defaults to `None`): the deciding reward; None is the first reward of kind
        "accuracy" (`reward_kind` attribute, a registry accuracy reward, TRL's accuracy_reward), never guessed.
    zero_std_epsilon (`float`, defaults to `1e-6`): the std at or below which a group carries no signal.

> Held-out evaluation (callbacks/heldout_eval.py, gspo_recipes/stats/heldout.py; the recipes add the callback)

    heldout_eval_steps (`int`, defaults to `0`): score held-out prompts at the first log on or after every N
        optimizer steps (held-out evaluation never adds a log); 0 turns it off.
    heldout_num_samples (`int`, defaults to `4`): k, sampled completions per held-out prompt (pass@k, maj@k).
    heldout_max_prompts (`int`, defaults to `32`): at most this many held-out prompts per evaluation.
    heldout_rewards (`list[str]`, defaults to `None`): graders by registry name; None: the strict math graders or
        the code judge, chosen from the held-out dataset's columns.

> Truncated sampling (gspo_recipes/sampler/sampling_mask.py)

    keep_sampling_mask (`bool`, defaults to `False`): with top_p/top_k/min_p, score every token over the set the
        sampler kept (renormalised), in the old, new and reference log-probabilities, so the ratio compares the
        distribution the tokens were drawn from.
    sampling_mask_max_tokens (`int`, defaults to `512`): the most kept-set entries stored per token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from trl import GRPOConfig

import gspo_recipes.trainer.config_checks as config_checks
from gspo_recipes.stats.heldout import check_heldout_settings
from gspo_recipes.trainer import engine
from gspo_recipes.trainer.config_checks import CISPO_RECOMMENDED_CAP, TOKEN_SIZED_EPSILON, TOKEN_SUM_LOSS_TYPES  # noqa: F401 (public)

logger = logging.getLogger(__name__)


def _has_accelerator() -> bool:
    import torch

    xpu = getattr(torch, "xpu", None)
    return torch.cuda.is_available() or torch.backends.mps.is_available() or bool(xpu and xpu.is_available())


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
    epsilon_calibration_steps: int = field(
        default=0,
        metadata={
            "help": "Calibrate the clip range from data: during the first N optimizer steps collect the off-policy "
            "log s_i, then fix epsilon and epsilon_high from their quantiles (see epsilon_target_clip). 0 (default) "
            "keeps the configured range. The calibrated range is logged as gspo/epsilon_low, gspo/epsilon_high and "
            "saved with each checkpoint."
        },
    )
    epsilon_target_clip: float = field(
        default=0.1,
        metadata={
            "help": "With epsilon_calibration_steps or epsilon_adaptive: the fraction of responses to clip on each "
            "side (of the off-policy responses with A < 0 and A > 0 respectively)."
        },
    )
    epsilon_adaptive: bool = field(
        default=False,
        metadata={
            "help": "Let the clip range follow the run: at each rollout boundary (never inside a generation "
            "batch, nor during the learning-rate warm-up) each side moves toward the epsilon that clips "
            "epsilon_target_clip of the last 4 rollouts' off-policy responses, by half the log-distance, at most "
            "x1.5 per decision, within [start / 10, start x 10] of the configured or calibrated range, and only when "
            "the share leaves [target / 1.5, target x 1.5]. It freezes with a warning when widening would hide a "
            "defect (sampler mismatch, one-sided bias, one-token clips, a bound held for 4 decisions, MoE routing "
            "volatility). Logged as gspo/epsilon_low, gspo/epsilon_high, gspo/adaptive/*; saved with each "
            "checkpoint. Composes with epsilon_length_scaling (the epsilons at L_ref) and epsilon_calibration_steps "
            "(the calibrated range is the start). Needs GSPOTrainer's loss."
        },
    )
    epsilon_adaptive_min_responses: int = field(
        default=32,
        metadata={
            "help": "With epsilon_adaptive: a side is adjusted only when the window holds at least this many "
            "off-policy responses of its advantage sign."
        },
    )
    token_log_ratio_clip: float | None = field(
        default=None,
        metadata={
            "help": "Clamp each token's log-ratio log pi_theta - log pi_old before the mean that gives log s_i, on the "
            "side the advantage favours (GMPO's pessimistic clip: at +c for A > 0, at -c for A < 0); a clamped token "
            "gets no gradient. Stops one token from clipping a whole response (gspo/clip_frac/one_token). None "
            "(default) is plain GSPO. Needs GSPOTrainer's loss (importance_sampling_level='sequence', "
            "loss_type='grpo')."
        },
    )
    epsilon_length_scaling: bool = field(
        default=False,
        metadata={
            "help": "Scale the clip range with response length as the 1/sqrt(L) law of log s_i says: a response of L "
            "tokens gets [1 - epsilon * sqrt(L_ref / L), 1 + epsilon_high * sqrt(L_ref / L)], so short responses are "
            "not clipped more often than long ones for the same per-token drift. L_ref is epsilon_reference_length. "
            "Calibrated by epsilon_calibration_steps and `gspo calibrate --length-scaled` too."
        },
    )
    epsilon_reference_length: int | None = field(
        default=None,
        metadata={
            "help": "With epsilon_length_scaling: the response length (tokens) at which epsilon and epsilon_high hold "
            "as given. None (default): max_completion_length, so shorter responses get a wider range and none a "
            "narrower one."
        },
    )
    gspo_diagnostics: bool = field(
        default=True,
        metadata={
            "help": "Register the diagnostics callbacks (clip fraction by length, histogram of log s_i, health "
            "warnings, gspo_diagnostics.jsonl). They never change training."
        },
    )
    routing_replay: bool = field(
        default=False,
        metadata={
            "help": "Mixture-of-Experts models only: Routing Replay. The experts each token was routed to in the "
            "old-policy pass are reused in every training forward and backward of that rollout, weighted by the "
            "current router, so token ratios no longer jump when routes flip. Token-level GRPO needs it on MoE models; "
            "GSPO's sequence ratio does not (the paper trains without). Needs off-policy minibatches and "
            "old_logps_source='recompute'; dense models and unsupported routers are refused at trainer start."
        },
    )
    old_logps_source: str = field(
        default="recompute",
        metadata={
            "help": "Where the old policy's log-probabilities come from. 'recompute' (TRL's): a forward pass of the "
            "training engine over every rollout. 'sampler': the generator's own (transformers: log_softmax of the "
            "temperature-scaled logits before top-k/top-p filtering, or over the kept set with keep_sampling_mask; "
            "vLLM: its returned logprobs), which skips that pass. Check gspo/sampler_mismatch/* in 'recompute' mode "
            "before switching.",
            "choices": ["recompute", "sampler"],
        },
    )
    sampler_mismatch_steps: int = field(
        default=25,
        metadata={
            "help": "Every this many optimizer steps, compare the sampler's log-probabilities with the trainer's on "
            "the same responses and log gspo/sampler_mismatch/{log_s_mean,log_s_std,token_max_abs,outside_clip_frac} "
            "(both modes; in 'sampler' mode it costs one forward pass). 0 turns it off."
        },
    )
    vllm_importance_sampling_sequence_ratio: str = field(
        default="geometric_mean",
        metadata={
            "help": "Sequence weight of vLLM's importance-sampling correction in the sequence_* modes. "
            "'geometric_mean': exp(mean over tokens of log pi_train - log pi_vllm), length-normalised like s_i. "
            "'product': TRL's exp(sum), which collapses on long responses (TRL issues 4772, 5814).",
            "choices": ["geometric_mean", "product"],
        },
    )
    # Groups that carry signal (gspo_recipes/stats/groups.py, gspo_recipes/trainer/dynamic_sampling.py).
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling: groups whose signal reward (dynamic_sampling_reward) has zero std are "
            "dropped and replaced by groups from fresh prompts until the generation batch is full or "
            "dynamic_sampling_max_rounds is spent; a batch still short is filled with dropped groups masked out of "
            "the loss. Needs per_device_train_batch_size * steps_per_generation to be a multiple of num_generations."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=4,
        metadata={
            "help": "With dynamic_sampling: generation rounds per generation batch, the first included (1 only masks "
            "the zero-std groups out of the loss, without generating more)."
        },
    )
    dynamic_sampling_reward: str | None = field(
        default=None,
        metadata={
            "help": "The reward (a reward function's name) whose std decides whether a group carries signal, for "
            "dynamic sampling and the gspo/groups/* metrics. None: the first reward of kind 'accuracy' (a function "
            "with reward_kind='accuracy', a registry accuracy reward, TRL's accuracy_reward); when none is, dynamic "
            "sampling refuses to start. A shaping term (format, soft_overlong_punishment) is refused."
        },
    )
    zero_std_epsilon: float = field(
        default=1e-6,
        metadata={
            "help": "A group whose signal rewards have a std at most this has zero std (no signal). Raise it for "
            "continuous rewards where tiny differences carry no information."
        },
    )
    # Held-out evaluation (callbacks/heldout_eval.py): the recipes add HeldoutEvalCallback when this is on.
    heldout_eval_steps: int = field(
        default=0,
        metadata={
            "help": "At the first log on or after every this many optimizer steps (and at the last), generate on the "
            "held-out prompts and log heldout/{reward}/pass@1, pass@k, maj@k, greedy; it never adds a log of its "
            "own. 0: off."
        },
    )
    heldout_num_samples: int = field(
        default=4, metadata={"help": "Sampled completions per held-out prompt (the k of pass@k and maj@k)."}
    )
    heldout_max_prompts: int = field(
        default=32, metadata={"help": "Held-out prompts per evaluation, at most (the cost is their generation)."}
    )
    heldout_rewards: list[str] | None = field(
        default=None,
        metadata={
            "help": "Held-out graders by registry name. None: the strict math grader (gsm8k_accuracy, "
            "math_accuracy) or the code judge (code_execution), chosen from the held-out dataset's columns."
        },
    )

    keep_sampling_mask: bool = field(
        default=False,
        metadata={
            "help": "With truncated sampling (top_p < 1, top_k > 0 or min_p), record the set of tokens the sampler "
            "kept at every step and take the trainer's log-probabilities (old, new and reference) as log_softmax over "
            "that set only, so that the ratio compares the truncated distribution the tokens were drawn from on both "
            "sides (DeepSeek-V3.2's Keep Sampling Mask). Costs B x T x K x 4 bytes per generation batch (K: the "
            "largest kept set, at most sampling_mask_max_tokens). vLLM needs sampling masks (vLLM PR #49577)."
        },
    )
    sampling_mask_max_tokens: int = field(
        default=512,
        metadata={
            "help": "The most kept-set entries stored per token. top_k above it is refused; a top_p/min_p set larger "
            "than it is not stored, and that token is scored over the full vocabulary on both sides (the share is "
            "logged as gspo/sampling_mask/overflow_frac)."
        },
    )

    def __post_init__(self):
        if self.num_minibatches < 1:
            raise ValueError(f"num_minibatches must be at least 1, got {self.num_minibatches}.")
        if self.steps_per_generation is None and self.generation_batch_size is None:
            self.steps_per_generation = self.num_minibatches * self.gradient_accumulation_steps
        if not self.use_cpu and not _has_accelerator():
            # On a CPU-only machine say so: without it, processes started by a launcher do not form a process group.
            self.use_cpu = True
        if self.bf16 is None and not self.fp16 and not _bf16_available(self.use_cpu):
            # TRL defaults to bf16, which stops a CPU-only machine at config time; there, train in float32.
            self.bf16 = False
        super().__post_init__()
        replaced = engine.follow_training_precision(self)  # not the launcher's config file (trainer/engine.py)
        if replaced is not None:
            self._warn(engine.precision_message(replaced, self))
        config_checks.check_clip_range(self)
        config_checks.check_token_log_ratio_clip(self)
        config_checks.check_loss_type(self)
        config_checks.check_old_logps_source(self)
        config_checks.check_routing_replay(self)
        config_checks.check_dynamic_sampling(self)
        check_heldout_settings(self)
        from gspo_recipes.sampler.mask_settings import (
            check_sampling_mask_settings,  # imported here: sampler/ sits above config
        )

        check_sampling_mask_settings(self)
        config_checks.warn_if_on_policy(self)

    def _warn(self, message: str, *args) -> None:
        """Every process builds the config: its warnings are shown once, by the first."""
        if self.process_index == 0:
            logger.warning(message, *args)

    @property
    def resolved_epsilon_reference_length(self) -> int | None:
        """L_ref of the length-scaled clip range, or None when the range is the plain one."""
        if not self.epsilon_length_scaling:
            return None
        return self.epsilon_reference_length or self.max_completion_length
