"""The toy GRPO-vs-GSPO benchmark (benchmarks/toy_noisy_logprobs.py), on a tiny run."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from support import assert_close_to_rounding

from gspo_recipes.loss import gspo_loss

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "toy_noisy_logprobs.py"


@pytest.fixture(scope="module")
def toy():
    spec = importlib.util.spec_from_file_location("toy_noisy_logprobs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script is executing
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("method", ["grpo", "gspo"])
def test_tiny_run_learns_and_first_minibatch_is_on_policy(toy, method):
    result = toy.run_toy(toy.ToyConfig(method=method, length=8, sigma=0.0, seed=0, steps=8))
    assert result.accuracy > 1 / 6 + 0.1  # chance is 1/6; about 0.4 after 8 steps at this length
    for clip_row, ratio_row in zip(result.clip_frac, result.max_abs_log_ratio):
        # Without noise the first minibatch sees the sampling policy itself: every ratio is exactly 1.
        assert ratio_row[0] == 0.0 and clip_row[0] == 0.0
        # The random split makes the other three off-policy (the policy of their prompts has already moved).
        assert all(r > 0 for r in ratio_row[1:])


def test_noise_reaches_the_first_minibatch(toy):
    result = toy.run_toy(toy.ToyConfig(method="gspo", length=8, sigma=0.1, seed=0, steps=2))
    assert all(row[0] > 0 for row in result.max_abs_log_ratio)


def test_runs_are_reproducible(toy):
    config = toy.ToyConfig(method="grpo", length=4, sigma=0.1, seed=3, steps=3)
    assert toy.run_toy(config).accuracy_curve == toy.run_toy(config).accuracy_curve


def test_grpo_and_gspo_agree_on_policy(toy):
    # With every ratio 1 both weightings are 1: same loss value and same gradient.
    torch.manual_seed(0)
    logits = torch.randn(6, 5, 3)
    logp_old = torch.log_softmax(logits, -1)[..., 0]
    adv, mask = torch.randn(6), torch.ones(6, 5)
    losses, grads = [], []
    for loss_fn, eps in ((toy.grpo_loss, (0.2, 0.27)), (gspo_loss, (3e-4, 4e-4))):
        x = logits.clone().requires_grad_(True)
        loss, stats = loss_fn(torch.log_softmax(x, -1)[..., 0], logp_old, adv, mask, *eps)
        (grad,) = torch.autograd.grad(loss, x)
        losses.append(loss.item())
        grads.append(grad)
        assert stats["clip_frac"] == 0.0
    assert losses[0] == pytest.approx(losses[1])
    assert_close_to_rounding(grads[0], grads[1])


def test_grpo_loss_clips_tokens_per_side(toy):
    logp_old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]]))  # one token high, one low
    adv, mask = torch.tensor([1.0, 1.0]), torch.ones(2, 2)
    _, stats = toy.grpo_loss(logp, logp_old, adv, mask, 0.2, 0.27)
    assert stats["clip_frac"] == 0.25  # only the high token with A > 0; the low one is not clipped for A > 0
