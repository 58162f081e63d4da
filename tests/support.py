"""Helpers the tests import (`from support import ...`): tiny configs and rewards, two-process launches, float
comparisons. Fixtures stay in conftest.py, which pytest loads on its own and no test imports."""

from __future__ import annotations

import os


def digit_count_reward(completions, **kwargs):
    """A reward with variance on a random model: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def length_reward(completions, **kwargs):
    return [len(c) / 16.0 for c in completions]


def tiny_moe_model_and_tokenizer():
    """A two-layer Qwen3-MoE model and the character tokenizer, set up for generation."""
    from gspo_recipes.builtin.tiny import build_tokenizer
    from gspo_recipes.moe import build_tiny_moe

    tokenizer = build_tokenizer()
    model = build_tiny_moe("qwen3_moe", vocab_size=len(tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


# What every tiny CPU run in the tests shares, for GSPOConfig and for a plain GRPOConfig alike.
TINY_RUN = dict(
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=8,
    learning_rate=1e-3,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    use_cpu=True,
    seed=0,
)


def tiny_config(output_dir, **overrides):
    """A GSPOConfig for a CPU run of a few seconds."""
    from gspo_recipes import GSPOConfig

    settings = dict(TINY_RUN, output_dir=str(output_dir), max_steps=4, temperature=1.0)
    settings.update(overrides)
    return GSPOConfig(**settings)


SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")


def launch_two_cpu_processes(script_name: str, *args: str, cwd, timeout: int = 600):
    """Run tests/scripts/SCRIPT_NAME in two CPU processes over gloo, as `accelerate launch` does; returns the finished
    process (its `stdout` and `stderr` hold both processes' output).

    accelerate 1.15 starts a single process for `--cpu --num_processes 2`; `--multi_gpu` on a machine without GPUs
    starts two CPU processes. The scripts folder is on PYTHONPATH so that scripts can share helpers.
    """
    import subprocess
    import sys

    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               os.path.join(SCRIPTS, script_name), *args]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=SCRIPTS)
    result = subprocess.run(command, env=env, timeout=timeout, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{script_name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


def assert_close_to_rounding(actual, expected, name: str = "", ulps: int = 32) -> None:
    """`actual` equals `expected` up to float rounding: for gradients (and other tensors) that two computations reach by
    summing in different orders.

    The tolerance follows the dtype and the tensor's own scale (its largest |value|), never a fixed atol: float32
    rounding differs between CPUs (vector width, summation order), so a gradient of size 2 can differ by 2e-6 with no
    bug (about one ulp of the scale). `ulps` x machine epsilon (3.8e-6 in float32, 7e-15 in float64) of the scale
    passes such rounding with a wide margin and still catches a real error: 1e-4, absolute or of the scale, fails on
    gradients of scale up to 25 (tests/test_moe_routing.py checks it on one of scale 14).
    """
    import torch

    tolerance = ulps * torch.finfo(expected.dtype).eps
    scale = expected.detach().abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance * scale, msg=lambda m: f"{name}: {m}")


def assert_grads_close(actual: dict, expected: dict, ulps: int = 32) -> None:
    """Every named gradient of `actual` equals `expected`'s up to float rounding (see `assert_close_to_rounding`)."""
    assert actual.keys() == expected.keys()
    for name in expected:
        assert_close_to_rounding(actual[name], expected[name], name, ulps)


def plain_grpo_config(output_dir, **overrides):
    """A plain `trl.GRPOConfig` for the same CPU runs as `tiny_config` (for drop-in and conversion tests)."""
    from trl import GRPOConfig

    settings = dict(TINY_RUN, output_dir=str(output_dir), bf16=False)
    settings.update(overrides)
    return GRPOConfig(**settings)


def sandbox_backend_params(names):
    """pytest params for sandbox backends: bwrap (and `bwrap-cold`, its per-attempt path) never skip, since the package
    ships its binary and a machine without it is a failure to see; the weaker, opt-in backends skip where they do not
    work."""
    import pytest

    from gspo_recipes.rewards.code.sandbox import launch

    params = []
    for name in names:
        base = name.split("-")[0]
        usable = base == "bwrap" or launch._works(base)
        params.append(pytest.param(name, marks=pytest.mark.skipif(not usable, reason=f"{name} does not work here")))
    return params


def math_cases_scored_otherwise(cases) -> dict:
    """`math_accuracy` on (gold, completion, expected score, problem or None) cases: the cases that score otherwise,
    with what they scored (empty when every case holds)."""
    from gspo_recipes.rewards import math_accuracy

    scores = math_accuracy(
        [completion for _, completion, _, _ in cases],
        answer=[gold for gold, *_ in cases],
        problem=[problem or "Compute it." for *_, problem in cases],
    )
    return {(gold, completion): score for (gold, completion, expected, _), score in zip(cases, scores)
            if score != expected}  # fmt: skip
