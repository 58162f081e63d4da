"""The one module that knows TRL's internals (written against TRL 1.16).

Everything gspo-recipes assumes about `trl.GRPOTrainer` beyond its public API lives here: when TRL recomputes the
old policy's log-probabilities (and so which micro-steps are on-policy), the positions and names read from its
tuples and batches, the private attributes used, and the one wrapper installed on a plain `GRPOTrainer`.
tests/test_trl_seam.py pins the signature of every TRL method overridden or called, so that a TRL upgrade fails
one test naming the method instead of training wrongly.

Which feature needs which private hook of `GRPOTrainer`:

- GSPO loss, statistics, calibration (the default): `_compute_loss` (override), `_get_per_token_logps_and_entropies`
  (called), `_step`, `_metrics`.
- Diagnostics on a plain GRPOTrainer: wraps that instance's `_compute_loss` and `_get_per_token_logps_and_entropies`.
- `old_logps_source="sampler"`: `_generate_and_score_completions`, `_generate_single_turn` (transformers) or
  `_generate` (vLLM), and answers the old-policy call of `_get_per_token_logps_and_entropies`.
- Sampler mismatch monitor: `_generate_and_score_completions`, `_generate_single_turn`, `_generate`.
- vLLM geometric-mean importance-sampling weight: `_generate_and_score_completions`.
- `keep_sampling_mask` (gspo_recipes/sampler/sampling_mask.py): the sampler hooks above, `compute_loss` (override: the
  minibatch's kept sets, batch key `sampling_kept_ids`), and wraps `_get_per_token_logps_and_entropies`, reading the
  hidden states of TRL's fused LM head from a forward hook on the backbone; in transformers it appends a logits
  processor through the generating model's `_get_logits_processor`.
- Group health (`gspo/groups/*`, always on): `_calculate_rewards` (override; its result is every process's rows
  in process order, one column per reward function).
- Dynamic sampling: `_generate_and_score_completions` (override; calls the hook once per round and merges the
  rounds' rows, padded as TRL pads them: `ROW_LAYOUT`); assumes process p's rows are rows [p*L, (p+1)*L) of the
  gathered rewards, as TRL's `process_slice` does.
- MoE routing volatility and Routing Replay (`attach_routing`): that instance's `_generate_and_score_completions`,
  `_get_per_token_logps_and_entropies`, `_prepare_inputs`, `training_step`; adds the batch key `old_routes`.

A default run (recompute, no vLLM) with `sampler_mismatch_steps=0` runs TRL's generation untouched; with the monitor
on, the generation hooks only record (they never change what TRL computes).
"""

from __future__ import annotations

import torch

TESTED_TRL = "1.16"

# Model inputs beyond ids and mask that TRL passes through to the forward pass (vision-language models).
MULTIMODAL_INPUTS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
# `GRPOTrainer._generate` returns (prompt_ids, completion_ids, tool_mask, completions, logprobs, ...).
GENERATE_LOGPROBS_INDEX = 4

# Parameters of every TRL method we override or call, in order, as TRL 1.16 declares them.
PINNED_SIGNATURES = {
    "_compute_loss": ("self", "model", "inputs"),
    "compute_loss": ("self", "model", "inputs", "return_outputs", "num_items_in_batch"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_generate": ("self", "prompts"),
    "_generate_single_turn": (
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ),
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
        *MULTIMODAL_INPUTS,
    ),
    "_prepare_inputs": ("self", "generation_batch"),
    "training_step": ("self", "model", "inputs", "num_items_in_batch"),
    "_save_checkpoint": ("self", "model", "trial"),
    "_load_optimizer_and_scheduler": ("self", "checkpoint"),
    "get_high_entropy_mask": ("self", "entropies", "mask", "threshold"),
    "get_off_policy_mask": (
        "advantages",
        "per_token_logps",
        "sampling_per_token_logps",
        "mask",
        "off_policy_threshold",
    ),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
}
# Private attributes read or written.
PRIVATE_ATTRIBUTES = (
    "_step",
    "_metrics",
    "_entropy_bonus_enabled",
    "_last_world_entropy",
    "_entropy_window_stats",
    "_tokenizer",
)

# TRL 1.16's loss types, and the clip each applies to the ratio (`_compute_loss`): the two-sided PPO clip
# [1 - epsilon, 1 + epsilon_high] at the importance_sampling_level, or none (CISPO caps the ratio at epsilon_high and
# logs its own `cispo_clip_ratio`; SAPO's gate is smooth; VESPO weighs by a Gamma function of the sequence ratio).
TWO_SIDED_CLIP_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
TRL_LOSS_TYPES = (*TWO_SIDED_CLIP_LOSS_TYPES, "cispo", "sapo", "vespo")


def applied_clip(trainer) -> str | None:
    """Which clip the trainer's loss applies: "sequence" (one per response, GSPO's), "token" (one per token, GRPO's)
    or None (a loss type without the two-sided clip). Statistics and warnings about clipped responses hold only for
    "sequence"."""
    if trainer.loss_type not in TWO_SIDED_CLIP_LOSS_TYPES:
        return None
    return "sequence" if trainer.importance_sampling_level == "sequence" else "token"


# ------------------------------------------------------------------------------- on-policy or not, and which minibatch


def micro_steps_per_generation(args) -> int:
    """Micro-steps served from one generation batch: `steps_per_generation * num_iterations` (TRL's generate_every)."""
    return args.steps_per_generation * args.num_iterations


def has_off_policy_minibatches(args) -> bool:
    """Whether any micro-step trains on responses sampled before the last optimizer step.

    TRL's rule for recomputing the old log-probabilities: a generation batch lies inside one accumulation window
    (so every micro-step is on-policy) exactly when its micro-steps divide `gradient_accumulation_steps`.
    """
    return args.gradient_accumulation_steps % micro_steps_per_generation(args) != 0


def recomputes_old_logps(trainer) -> bool:
    """Whether `_generate_and_score_completions` runs its old-policy forward pass (off-policy micro-steps, or vLLM's
    importance-sampling correction)."""
    return has_off_policy_minibatches(trainer.args) or bool(
        trainer.use_vllm and trainer.vllm_importance_sampling_correction
    )


def starts_generation_batch(trainer) -> bool:
    """Whether the current training micro-step (call from the loss) is the first served from a new generation batch:
    TRL generates when `_step`, counted from 0 at every train start, is a multiple of `micro_steps_per_generation`."""
    return trainer._step % micro_steps_per_generation(trainer.args) == 0


def minibatch_index(trainer) -> int:
    """1 + the number of optimizer steps taken since the current micro-step's responses were sampled; 1 is on-policy.

    Call it once per training micro-step, from the loss. TRL generates at the micro-steps (`_step`, counted from 0 at
    every train start) that are multiples of `micro_steps_per_generation`; the optimizer steps after every
    `gradient_accumulation_steps` micro-steps, and after a shorter window at the end of an epoch, so the two need not
    line up. The optimizer-step count at the generating micro-step is therefore remembered, not derived.
    """
    if trainer._step % micro_steps_per_generation(trainer.args) == 0 or not hasattr(trainer, "_gspo_generated_at"):
        trainer._gspo_generated_at = trainer.state.global_step
    return trainer.state.global_step - trainer._gspo_generated_at + 1


# ------------------------------------------------------------------------------------------ metrics and batch fields


def metric_store(trainer, mode: str = "train") -> dict[str, list[float]]:
    """TRL's metric store: lists per name, averaged and sent to every tracker at the next `log`."""
    return trainer._metrics[mode]


def add_to_trainer_logs(trainer, metrics: dict[str, float]) -> None:
    """Metrics computed once per logging step (by a callback's `on_step_end`, before `log`)."""
    store = metric_store(trainer)
    for name, value in metrics.items():
        store[name] = [float(value)]


def entropy_bonus_enabled(trainer) -> bool:
    return bool(getattr(trainer, "_entropy_bonus_enabled", False))


def loss_mask(batch) -> torch.Tensor:
    """The tokens the loss covers: completion tokens, less tool output where TRL marks it."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def score_completions(trainer, model, batch, *, compute_entropy=False, compute_aux_loss=False, batch_size=None):
    """`_get_per_token_logps_and_entropies` over a TRL batch: (log-probs, entropies, aux loss) of its completions."""
    completion_ids = batch["completion_ids"]
    return trainer._get_per_token_logps_and_entropies(
        model,
        torch.cat([batch["prompt_ids"], completion_ids], dim=1),
        torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
        completion_ids.size(1),
        batch_size=batch_size,
        compute_entropy=compute_entropy,
        compute_aux_loss=compute_aux_loss,
        **{name: batch.get(name) for name in MULTIMODAL_INPUTS},
    )


def scoring_call_parts(args, kwargs) -> tuple[torch.Tensor, int]:
    """(input_ids, logits_to_keep) of a `_get_per_token_logps_and_entropies` call (self and model removed)."""
    input_ids = args[0] if args else kwargs["input_ids"]
    logits_to_keep = args[2] if len(args) > 2 else kwargs["logits_to_keep"]
    return input_ids, logits_to_keep


def is_loss_scoring_call(kwargs) -> bool:
    """Only the loss asks for entropies; TRL's old-policy and reference passes do not."""
    return bool(kwargs.get("compute_entropy"))


# ------------------------------------------------------------------------- statistics on a plain TRL GRPOTrainer


def attach_response_stats(trainer):
    """The trainer's `ResponseStats`, created on first use (nothing is recorded before, so nothing accumulates without
    a consumer). `GSPOTrainer` records into it from its own loss; on a plain `GRPOTrainer` a recorder is installed.

    The recorder wraps this trainer instance's `_compute_loss` and `_get_per_token_logps_and_entropies`: it keeps the
    log-probabilities the loss computed and, after the loss, reads them with the batch's old log-probabilities, mask
    and advantages. The loss value and its gradient are untouched. One-token clips are judged as in GSPOTrainer's loss
    (`one_token_clips`, from the same token log-ratios); a GSPOConfig's `token_log_ratio_clip`, which TRL's loss does
    not apply, is refused rather than ignored.
    """
    from gspo_recipes.loss import clipped_sides, one_token_clip_drivers, response_advantage, sequence_log_ratio
    from gspo_recipes.stats.response_stats import ResponseStats

    stats = getattr(trainer, "response_stats", None)
    if stats is not None:
        return stats
    stats = trainer.response_stats = ResponseStats()
    if getattr(trainer, "records_response_stats", False):  # GSPOTrainer's own loss records once this is set
        return stats
    if getattr(trainer.args, "token_log_ratio_clip", None) is not None:
        raise ValueError(
            f"token_log_ratio_clip={trainer.args.token_log_ratio_clip} is set, but {type(trainer).__name__} computes "
            "TRL's loss, which does not clamp token log-ratios. Train with gspo_recipes.GSPOTrainer, or set "
            "token_log_ratio_clip=None."
        )
    compute_loss = trainer._compute_loss
    get_logps = trainer._get_per_token_logps_and_entropies
    captured = {}

    def get_logps_and_keep(*args, **kwargs):
        out = get_logps(*args, **kwargs)
        if is_loss_scoring_call(kwargs):
            captured["logps"] = out[0].detach()
        return out

    def compute_loss_and_record(model, inputs):
        loss = compute_loss(model, inputs)
        logps = captured.pop("logps", None)
        if logps is not None and trainer.model.training:
            mask = loss_mask(inputs)
            old = logps if inputs.get("old_per_token_logps") is None else inputs["old_per_token_logps"]
            log_s = sequence_log_ratio(logps, old, mask)
            advantages = response_advantage(inputs["advantages"], mask)
            low, high = clipped_sides(log_s, advantages, trainer.epsilon_low, trainer.epsilon_high)
            one_token = one_token_clip_drivers(logps - old, mask, low, high, trainer.epsilon_low, trainer.epsilon_high)
            stats.record(log_s, mask.sum(-1), advantages, low, high, minibatch_index(trainer), one_token=one_token)
        return loss

    trainer._get_per_token_logps_and_entropies = get_logps_and_keep
    trainer._compute_loss = compute_loss_and_record
    return stats


# ---------------------------------------------------------------------------------------- MoE routes (gspo_recipes.moe)

# Batch key under which the old-policy pass's routes travel: one row per response, so TRL's shuffle and split into
# minibatches (`shuffle_sequence_dict`, `split_tensor_dict` in `_prepare_inputs`) carry them with the other rows.
OLD_ROUTES_KEY = "old_routes"


def attach_routing(trainer, replay: bool = False):
    """The trainer's `RoutingMonitor` (created and wired on first use), or None for a dense model, where nothing is
    installed. `replay=True` checks that Routing Replay can drive the model (ValueError otherwise).

    Wraps this trainer instance's `_generate_and_score_completions` (adds `OLD_ROUTES_KEY` to the batch),
    `_get_per_token_logps_and_entropies` (records routes in the old-policy pass, the first policy scoring call of a
    generation batch that TRL runs when `recomputes_old_logps`; measures them in the loss's call), `_prepare_inputs`
    and `training_step` (replay stays open from the minibatch's preparation until its backward has returned, so that
    gradient checkpointing recomputes layers with the same routes). Works for `GSPOTrainer` and a plain
    `GRPOTrainer` alike; what the loss computes is unchanged unless replay is on.
    """
    from gspo_recipes.moe import is_moe_model
    from gspo_recipes.moe.monitor import RoutingMonitor

    monitor = getattr(trainer, "routing_monitor", None)
    if monitor is not None:
        if replay and not monitor.replay:
            raise RuntimeError("attach_routing(replay=True) after routing was attached without replay; attach once.")
        return monitor
    if not replay and not is_moe_model(trainer.model):
        return None
    if replay and not old_pass_recordable(trainer):
        raise ValueError(
            "routing_replay=True needs the trainer's old-policy forward pass to record routes in, and this setup has "
            "none (exactly on-policy: nothing to replay; or old_logps_source='sampler'). Use off-policy minibatches "
            "(steps_per_generation > gradient_accumulation_steps) with old_logps_source='recompute', or "
            "routing_replay=False."
        )
    monitor = trainer.routing_monitor = RoutingMonitor(trainer.model, replay=replay)
    _wrap_for_routing(trainer, monitor)
    return monitor


def old_pass_recordable(trainer) -> bool:
    """Whether TRL runs the trainer's own old-policy forward pass (not answered by the sampler's log-probabilities)."""
    return recomputes_old_logps(trainer) and getattr(trainer.args, "old_logps_source", "recompute") != "sampler"


def _wrap_for_routing(trainer, monitor) -> None:
    state = {"round": None, "minibatch": None}  # the generation round in progress; the minibatch being trained
    generate_and_score = trainer._generate_and_score_completions
    get_logps = trainer._get_per_token_logps_and_entropies
    prepare_inputs = trainer._prepare_inputs
    training_step = trainer.training_step

    def generate_and_score_with_routes(inputs):
        recording = trainer.model.training and old_pass_recordable(trainer)
        state["round"] = {"routes": None} if recording else None
        try:
            output = generate_and_score(inputs)
        finally:
            round_, state["round"] = state["round"], None
        if round_ is not None and round_["routes"] is not None:
            output[OLD_ROUTES_KEY] = round_["routes"]
        return output

    def get_logps_with_routes(model, *args, **kwargs):
        round_, batch = state["round"], state["minibatch"]
        if round_ is not None and "seen" not in round_ and model is trainer.model and not is_loss_scoring_call(kwargs):
            round_["seen"] = True  # the old-policy pass (the reference pass under PEFT comes after it)
            result, round_["routes"] = monitor.record_old_pass(lambda: get_logps(model, *args, **kwargs))
            return result
        if batch is not None and is_loss_scoring_call(kwargs) and trainer.model.training:
            old_routes = batch.get(OLD_ROUTES_KEY)
            if old_routes is None and recomputes_old_logps(trainer):  # an old pass ran but was not recorded (sampler)
                return get_logps(model, *args, **kwargs)

            def run():
                return get_logps(model, *args, **kwargs)

            return monitor.score_current(run, old_routes, loss_mask(batch), minibatch_index(trainer))
        return get_logps(model, *args, **kwargs)

    def prepare_inputs_and_replay(generation_batch):
        batch = prepare_inputs(generation_batch)
        if state["minibatch"] is not None:  # inside training_step: this is the minibatch it trains on
            state["minibatch"] = batch
            monitor.open_replay(batch.get(OLD_ROUTES_KEY))
        return batch

    def training_step_with_routes(model, inputs, num_items_in_batch=None):
        state["minibatch"] = {}
        try:
            result = training_step(model, inputs, num_items_in_batch)
        except BaseException as error:
            monitor.close_replay(type(error))
            raise
        finally:
            state["minibatch"] = None
        monitor.close_replay()
        return result

    trainer._generate_and_score_completions = generate_and_score_with_routes
    trainer._get_per_token_logps_and_entropies = get_logps_with_routes
    trainer._prepare_inputs = prepare_inputs_and_replay
    trainer.training_step = training_step_with_routes


# ----------------------------------------------------------------------------- batch rows (dynamic sampling's merge)

# How `_generate_and_score_completions` pads each per-row field: prompts on the left, completions on the right (the
# default for any other 2-D field), the routes over prompt + completion positions. Fields of multimodal models are
# not rows and cannot be merged.
ROW_LAYOUT = {"prompt_ids": "prompt", "prompt_mask": "prompt", OLD_ROUTES_KEY: "sequence"}
TOKEN_ID_KEYS = ("prompt_ids", "completion_ids")  # padded with the tokenizer's pad token
ROW_PAD_VALUES = {"tool_mask": 1}  # TRL pads tool_mask with 1; every other field with 0


def pad_token_id(trainer) -> int:
    return trainer._tokenizer.pad_token_id


# ------------------------------------------------------------------------------------ the checkpoint a run resumes from


def record_resumed_checkpoint(trainer) -> None:
    """Make `resumed_checkpoint(trainer)` give the folder this trainer's `train(resume_from_checkpoint=...)` loads.

    transformers resolves the argument (True: the last checkpoint of output_dir; or any path) and passes the folder
    to `_load_optimizer_and_scheduler` before `on_train_begin`; callbacks are never told it. This wraps that method on
    this trainer instance only (once), and records its argument.
    """
    if getattr(trainer, "_gspo_records_checkpoint", False):
        return
    load = trainer._load_optimizer_and_scheduler

    def load_and_record(checkpoint):
        trainer.__dict__["gspo_resumed_checkpoint"] = checkpoint
        return load(checkpoint)

    trainer._load_optimizer_and_scheduler = load_and_record
    trainer._gspo_records_checkpoint = True


def resumed_checkpoint(trainer) -> str | None:
    """The checkpoint folder the current `train` call resumed from; None for a fresh run."""
    return trainer.__dict__.get("gspo_resumed_checkpoint")
