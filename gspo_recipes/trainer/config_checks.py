"""The checks `GSPOConfig.__post_init__` runs once TRL's own have passed: each catches a usual mistake and names the
field and the fix, or warns once (from the first process) where a setting is legal but probably not meant.
"""

from __future__ import annotations

from gspo_recipes._trl import TWO_SIDED_CLIP_LOSS_TYPES, has_off_policy_minibatches

# Loss types that sum per-token terms over the batch: with one ratio per response, each response then counts in
# proportion to its length (TRL issue 3823), which is not GSPO's objective.
TOKEN_SUM_LOSS_TYPES = ("bnpo", "dr_grpo", "dapo", "cispo")
# Clip values this large are token-level (GRPO/PPO) ranges; sequence ratios concentrate like 1/sqrt(length).
TOKEN_SIZED_EPSILON = 0.05
# TRL's recommended CISPO cap on the ratio, `epsilon_high` (GRPOConfig's docs; ScaleRL's epsilon_max).
CISPO_RECOMMENDED_CAP = 5.0


def check_clip_range(config) -> None:
    for name, value in (("epsilon", config.epsilon), ("epsilon_high", config.epsilon_high)):
        if value is not None and value < 0:
            raise ValueError(f"{name}={value} is negative; the clip range is [1 - epsilon, 1 + epsilon_high].")
    if config.epsilon >= 1:
        raise ValueError(
            f"epsilon={config.epsilon} puts the low clip bound 1 - epsilon at or below 0, where no ratio can go; "
            "GSPO uses about 3e-4."
        )
    if config.epsilon_calibration_steps < 0:
        raise ValueError(f"epsilon_calibration_steps={config.epsilon_calibration_steps} is negative; 0 turns it off.")
    if config.epsilon_calibration_steps and not 0 < config.epsilon_target_clip < 1:
        raise ValueError(
            f"epsilon_target_clip={config.epsilon_target_clip} must lie strictly between 0 and 1 (0.1 clips 10% of "
            "the responses on each side)."
        )
    check_adaptive_clip(config)
    check_length_scaling(config)
    if config.loss_type not in TWO_SIDED_CLIP_LOSS_TYPES:  # CISPO's cap, or no clip at all (SAPO, VESPO)
        return
    largest = max(config.epsilon, config.epsilon_high or 0.0)
    if config.importance_sampling_level == "token" and largest < TOKEN_SIZED_EPSILON:
        config._warn(
            "importance_sampling_level='token' with epsilon=%s, epsilon_high=%s: that is a sequence-level (GSPO) "
            "clip range, but each token now has its own ratio, whose spread does not shrink with length, so "
            "nearly every token is clipped and little is learned. For token-level ratios (GRPO) use epsilon=0.2, "
            "epsilon_high=0.28 (or trl.GRPOConfig's defaults); for GSPO keep importance_sampling_level='sequence'.",
            config.epsilon,
            config.epsilon_high,
        )
    if config.importance_sampling_level == "sequence" and largest >= TOKEN_SIZED_EPSILON:
        config._warn(
            "epsilon=%s, epsilon_high=%s is a token-level (GRPO) clip range, but the ratios are sequence-level: "
            "log s_i is a mean over the response's tokens, so its spread shrinks like 1/sqrt(length) and such a "
            "range will almost never clip. GSPO's usual range is about [1 - 3e-4, 1 + 4e-4]. Better: measure "
            "log s_i on your first batches and choose the range from it (`gspo calibrate RUN_DIR`).",
            config.epsilon,
            config.epsilon_high,
        )


def check_adaptive_clip(config) -> None:
    if not config.epsilon_adaptive:
        return
    if not 0 < config.epsilon_target_clip < 1:
        raise ValueError(
            f"epsilon_target_clip={config.epsilon_target_clip} must lie strictly between 0 and 1 (0.1 clips 10% of "
            "the responses on each side)."
        )
    if config.epsilon_adaptive_min_responses < 1:
        raise ValueError(
            f"epsilon_adaptive_min_responses={config.epsilon_adaptive_min_responses} must be at least 1 (32: a side "
            "moves only with 32 off-policy responses of its sign in the window)."
        )
    if min(config.epsilon, config.epsilon_high or 0.0) <= 0:
        raise ValueError(
            f"epsilon_adaptive scales the range by factors, but epsilon={config.epsilon}, epsilon_high="
            f"{config.epsilon_high}: a side at 0 can never move. Start from a positive range (GSPO's 3e-4 / 4e-4)."
        )
    if config.importance_sampling_level != "sequence" or config.loss_type != "grpo":
        raise ValueError(
            "epsilon_adaptive controls GSPO's sequence-level clip range, but importance_sampling_level="
            f"'{config.importance_sampling_level}', loss_type='{config.loss_type}'. Set epsilon_adaptive=False, or "
            "use importance_sampling_level='sequence' and loss_type='grpo'."
        )


def check_token_log_ratio_clip(config) -> None:
    clip = config.token_log_ratio_clip
    if clip is not None and not 0 < clip < float("inf"):
        raise ValueError(f"token_log_ratio_clip={clip} must be a positive number (a log-ratio, e.g. 0.2), or None.")
    if clip is not None and (config.importance_sampling_level != "sequence" or config.loss_type != "grpo"):
        raise ValueError(
            f"token_log_ratio_clip={clip} works in GSPOTrainer's own loss only, and with importance_sampling_"
            f"level='{config.importance_sampling_level}', loss_type='{config.loss_type}' the loss is TRL's, which has "
            "no such clamp. Use importance_sampling_level='sequence' and loss_type='grpo', or "
            "token_log_ratio_clip=None."
        )


def check_length_scaling(config) -> None:
    if config.epsilon_reference_length is not None:
        if not config.epsilon_length_scaling:
            raise ValueError(
                f"epsilon_reference_length={config.epsilon_reference_length} only has an effect with "
                "epsilon_length_scaling=True. Set epsilon_length_scaling=True, or remove epsilon_reference_length."
            )
        if isinstance(config.epsilon_reference_length, bool) or not isinstance(config.epsilon_reference_length, int):
            raise ValueError(f"epsilon_reference_length={config.epsilon_reference_length!r} must be a token count.")
        if config.epsilon_reference_length < 1:
            raise ValueError(
                f"epsilon_reference_length={config.epsilon_reference_length} must be at least 1 token; None uses "
                f"max_completion_length ({config.max_completion_length})."
            )
    if config.epsilon_length_scaling and (config.importance_sampling_level != "sequence" or config.loss_type != "grpo"):
        raise ValueError(
            "epsilon_length_scaling scales GSPO's sequence-level clip range, but importance_sampling_level="
            f"'{config.importance_sampling_level}' with loss_type='{config.loss_type}' does not clip s_i with "
            "[1 - epsilon, 1 + epsilon_high] in GSPOTrainer's own loss. Set epsilon_length_scaling=False, or use "
            "importance_sampling_level='sequence' with loss_type='grpo' (TRL's loss, used for other settings, "
            "would silently ignore the scaling)."
        )


def check_loss_type(config) -> None:
    if (
        config.importance_sampling_level == "sequence"
        and config.loss_type in TOKEN_SUM_LOSS_TYPES
        and not config.allow_length_weighted_loss
    ):
        raise ValueError(
            f"loss_type='{config.loss_type}' sums per-token terms, so with sequence-level ratios every response "
            "is weighted by its length instead of GSPO's per-response mean (TRL issue 3823). Use "
            "loss_type='grpo', or set allow_length_weighted_loss=True if you want the length weighting."
        )
    cap = config.epsilon if config.epsilon_high is None else config.epsilon_high  # TRL's fallback for epsilon_high
    if config.loss_type == "cispo" and cap < TOKEN_SIZED_EPSILON:
        raise ValueError(
            f"loss_type='cispo' caps every ratio at epsilon_high (TRL: clamp(ratio, max=epsilon_high), the "
            f"epsilon_max of ScaleRL), so epsilon_high={cap} scales every gradient down by that factor and the run "
            f"barely trains. Set epsilon_high={CISPO_RECOMMENDED_CAP} (TRL's recommended value for CISPO)."
        )


def check_old_logps_source(config) -> None:
    if config.old_logps_source not in ("recompute", "sampler"):
        raise ValueError(
            f"old_logps_source='{config.old_logps_source}' is not a choice: use 'recompute' (a forward pass of the "
            "training engine, TRL's default) or 'sampler' (the generator's log-probabilities)."
        )
    if config.sampler_mismatch_steps < 0:
        raise ValueError(
            f"sampler_mismatch_steps={config.sampler_mismatch_steps} is negative; use 0 to turn the monitor off."
        )
    if config.vllm_importance_sampling_sequence_ratio not in ("geometric_mean", "product"):
        raise ValueError(
            f"vllm_importance_sampling_sequence_ratio='{config.vllm_importance_sampling_sequence_ratio}' is not a "
            "choice: use 'geometric_mean' (length-normalised, for GSPO) or 'product' (TRL's exp(sum))."
        )
    if config.old_logps_source == "sampler" and (config.generation_kwargs or {}).get("num_beams", 1) > 1:
        raise ValueError(
            "old_logps_source='sampler' needs the probability with which each token was sampled, and beam search "
            "(generation_kwargs num_beams > 1) does not sample: its tokens come from a search over beams. Set "
            "old_logps_source='recompute' (the trainer scores the responses itself), or remove num_beams."
        )
    if config.old_logps_source == "sampler" and config.use_transformers_continuous_batching and not config.use_vllm:
        raise ValueError(
            "old_logps_source='sampler' needs per-token log-probabilities from the generator, which transformers "
            "continuous batching does not return. Set use_transformers_continuous_batching=False, or "
            "old_logps_source='recompute'."
        )


def check_routing_replay(config) -> None:
    if not config.routing_replay:
        return
    if config.old_logps_source == "sampler":
        raise ValueError(
            "routing_replay=True replays the experts recorded in the trainer's old-policy forward pass, which "
            "old_logps_source='sampler' skips. Set old_logps_source='recompute', or routing_replay=False."
        )
    if not has_off_policy_minibatches(config):
        raise ValueError(
            "routing_replay=True has nothing to replay: every micro-step of a generation batch falls in one "
            f"optimizer step (steps_per_generation={config.steps_per_generation} x num_iterations="
            f"{config.num_iterations} divides gradient_accumulation_steps={config.gradient_accumulation_steps}), so "
            "the policy that trains is the one that sampled and its routes are already the old ones. Set "
            "num_minibatches > 1 (or steps_per_generation), or routing_replay=False."
        )


def check_dynamic_sampling(config) -> None:
    from gspo_recipes.stats.groups import SHAPING_REWARDS

    if config.zero_std_epsilon < 0:
        raise ValueError(f"zero_std_epsilon={config.zero_std_epsilon} is negative; use 0 or a small positive std.")
    if config.dynamic_sampling_reward in SHAPING_REWARDS:
        raise ValueError(
            f"dynamic_sampling_reward='{config.dynamic_sampling_reward}' is a shaping term: it pays for form, not "
            "success, so filtering on it keeps groups that teach nothing about the task. Name the accuracy "
            "reward (for example gsm8k_accuracy), or leave it None for the first accuracy reward."
        )
    if not config.dynamic_sampling:
        return
    if config.dynamic_sampling_max_rounds < 1:
        raise ValueError(
            f"dynamic_sampling_max_rounds={config.dynamic_sampling_max_rounds}: at least 1 round (the first "
            "generation) is needed; 4 lets three rounds of fresh prompts replace the zero-std groups."
        )
    local_rows = config.per_device_train_batch_size * config.steps_per_generation
    if local_rows % config.num_generations:
        raise ValueError(
            f"dynamic_sampling=True needs every process to hold whole groups: per_device_train_batch_size "
            f"({config.per_device_train_batch_size}) x steps_per_generation ({config.steps_per_generation}) = "
            f"{local_rows} rows is not a multiple of num_generations ({config.num_generations}). Change "
            "per_device_train_batch_size or num_generations, or set dynamic_sampling=False."
        )


def warn_if_on_policy(config) -> None:
    # TRL's own rule for when the old log-probabilities differ from the current ones (gspo_recipes/_trl.py).
    if has_off_policy_minibatches(config):
        return
    token_level_grpo = config.importance_sampling_level == "token" and not config.epsilon_calibration_steps
    if token_level_grpo:  # TRL's GRPO default; the advice below is about sequence ratios
        return
    if config.epsilon_adaptive:
        raise ValueError(
            "epsilon_adaptive needs off-policy minibatches, but every micro-step of a generation batch falls in one "
            "optimizer step, so every s_i is 1 and nothing can be measured. Set num_minibatches > 1, or "
            "epsilon_adaptive=False."
        )
    if config.epsilon_calibration_steps:
        raise ValueError(
            "epsilon_calibration_steps needs off-policy minibatches, but every micro-step of a generation batch "
            f"falls in one optimizer step (steps_per_generation={config.steps_per_generation} x num_iterations="
            f"{config.num_iterations} divides gradient_accumulation_steps={config.gradient_accumulation_steps}). "
            "Set num_minibatches > 1, or epsilon_calibration_steps=0."
        )
    config._warn(
        "Every micro-step of a generation batch falls in one optimizer step (steps_per_generation=%s x "
        "num_iterations=%s divides gradient_accumulation_steps=%s): training is fully on-policy, every s_i is "
        "exactly 1, nothing is ever clipped and GSPO equals GRPO. Set num_minibatches (or steps_per_generation) "
        "to 4 x gradient_accumulation_steps for the paper's four minibatch updates per rollout batch.",
        config.steps_per_generation,
        config.num_iterations,
        config.gradient_accumulation_steps,
    )
