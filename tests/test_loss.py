"""The reference loss against the GSPO definition and the explainer's worked example."""

import math

import pytest
import torch
from support import assert_close_to_rounding

from gspo_recipes.loss import EPS_HIGH, EPS_LOW, grpo_token_loss, gspo_loss, gspo_token_objective

# The explainer's worked example: one four-token response, sampled with these probabilities, scored now with those.
P_OLD = [0.50, 0.40, 0.90, 0.04]
P_NEW = [0.58, 0.30, 0.90, 0.05]


def worked_example():
    logp = torch.tensor([[math.log(p) for p in P_NEW]], dtype=torch.float64, requires_grad=True)
    logp_old = torch.tensor([[math.log(p) for p in P_OLD]], dtype=torch.float64)
    return logp, logp_old, torch.ones(1, 4, dtype=torch.float64)


def test_worked_example_sequence_ratio():
    logp, logp_old, mask = worked_example()
    _, stats = gspo_loss(logp, logp_old, torch.tensor([1.0], dtype=torch.float64), mask)
    assert stats["log_s"].item() == pytest.approx(0.02097, abs=1e-5)
    assert math.exp(stats["log_s"].item()) == pytest.approx(1.0212, abs=1e-4)


def test_worked_example_positive_advantage_is_clipped_whole():
    logp, logp_old, mask = worked_example()
    loss, stats = gspo_loss(logp, logp_old, torch.tensor([1.0], dtype=torch.float64), mask)
    loss.backward()
    assert stats["clip_frac_high"] == 1.0 and stats["clip_frac_low"] == 0.0
    assert torch.all(logp.grad == 0), "a clipped response contributes no gradient"
    assert loss.item() == pytest.approx(-(1 + EPS_HIGH))


def test_worked_example_negative_advantage_every_token_same_weight():
    logp, logp_old, mask = worked_example()
    loss, stats = gspo_loss(logp, logp_old, torch.tensor([-1.0], dtype=torch.float64), mask)
    loss.backward()
    assert stats["clip_frac"] == 0.0
    # d(objective)/d log pi(y_t) = s * A / |y| = -1.0212 / 4 for every token; the loss is minus the objective.
    assert (-logp.grad[0]).tolist() == pytest.approx([-0.2553] * 4, abs=1e-4)


def test_worked_example_grpo_contrast():
    """GRPO (eps 0.2) from the same example: per-token weights 1.16, 0.75, 1.00 and token 4 clipped for A = +1."""
    logp, logp_old, mask = worked_example()
    loss, stats = grpo_token_loss(logp, logp_old, torch.tensor([1.0], dtype=torch.float64), mask)
    loss.backward()
    assert (-logp.grad[0] * 4).tolist() == pytest.approx([1.16, 0.75, 1.00, 0.0], abs=1e-6)
    assert stats["clip_frac"] == 0.25

    logp, logp_old, mask = worked_example()
    loss, _ = grpo_token_loss(logp, logp_old, torch.tensor([-1.0], dtype=torch.float64), mask)
    loss.backward()
    # A = -1: token 2 (ratio 0.75) is clipped; token 4, already raised by 25%, gets the largest push down.
    assert (-logp.grad[0] * 4).tolist() == pytest.approx([-1.16, 0.0, -1.0, -1.25], abs=1e-6)


def test_on_policy_ratios_are_one_and_nothing_clips():
    torch.manual_seed(0)
    logp = torch.randn(6, 5, dtype=torch.float64).requires_grad_()
    mask = torch.ones(6, 5, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0], dtype=torch.float64)
    loss, stats = gspo_loss(logp, logp.detach(), advantages, mask)
    loss.backward()
    assert torch.all(stats["log_s"] == 0) and stats["clip_frac"] == 0.0
    expected = -advantages.unsqueeze(1).expand(6, 5) / 5 / 6  # d(loss)/d logp = -A / |y| / N
    assert_close_to_rounding(logp.grad, expected)


def test_sequence_advantages_equal_constant_token_advantages():
    torch.manual_seed(1)
    logp = torch.randn(4, 7, dtype=torch.float64)
    logp_old = logp + 1e-3 * torch.randn(4, 7, dtype=torch.float64)
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] * 5 + [0] * 2, [1] * 7], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.3, -0.2], dtype=torch.float64)
    grads = []
    for a in (adv, adv.unsqueeze(1).expand(4, 7)):
        x = logp.clone().requires_grad_()
        loss, _ = gspo_loss(x, logp_old, a, mask, eps_low=1e-4, eps_high=1e-4)
        loss.backward()
        grads.append((loss.item(), x.grad))
    assert grads[0][0] == pytest.approx(grads[1][0])
    assert_close_to_rounding(grads[0][1], grads[1][1])


def test_gspo_token_gradient_matches_the_formula():
    """Per-token advantages: d(objective)/d log pi(y_t) = s_i * A_t / |y_i| / N where response i is not clipped."""
    torch.manual_seed(2)
    n, t = 5, 6
    logp = torch.randn(n, t, dtype=torch.float64)
    logp_old = logp + 2e-3 * torch.randn(n, t, dtype=torch.float64)
    mask = torch.ones(n, t, dtype=torch.float64)
    mask[1, 4:] = 0
    adv = torch.randn(n, t, dtype=torch.float64)
    x = logp.clone().requires_grad_()
    loss, stats = gspo_loss(x, logp_old, adv, mask, eps_low=1e-3, eps_high=1e-3)
    loss.backward()

    s = torch.exp(stats["log_s"]).unsqueeze(1)
    lengths = mask.sum(1, keepdim=True)
    clipped_token = ((s > 1 + 1e-3) & (adv > 0)) | ((s < 1 - 1e-3) & (adv < 0))
    expected = -(s * adv / lengths / n) * mask * (~clipped_token)
    assert_close_to_rounding(x.grad, expected)
    assert clipped_token.any() and (~clipped_token).any(), "the crafted batch should exercise both branches"

    # TRL's main trainer broadcasts exp(mean log-ratio) against (B, T) advantages: a different gradient.
    y = logp.clone().requires_grad_()
    log_s = ((y - logp_old) * mask).sum(1, keepdim=True) / lengths
    broadcast = -((torch.exp(log_s) * adv) * mask).sum(1) / lengths.squeeze(1)
    broadcast.mean().backward()
    assert not torch.allclose(y.grad, x.grad)


def test_extreme_log_ratios_stay_finite():
    logp = torch.tensor([[0.0, -1.0], [-50.0, -60.0], [-1.0, -1.0]], requires_grad=True)
    logp_old = torch.tensor([[-80.0, -90.0], [0.0, 0.0], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # the last response has no tokens
    for sign in (1.0, -1.0):
        x = logp.detach().clone().requires_grad_()
        loss, stats = gspo_loss(x, logp_old, torch.tensor([sign, sign, 5.0]), mask)
        loss.backward()
        assert torch.isfinite(loss) and torch.all(torch.isfinite(x.grad))
        assert torch.all(x.grad[2] == 0)


def test_empty_response_does_not_move_the_loss():
    torch.manual_seed(3)
    logp = torch.randn(3, 4)
    logp_old = logp + 1e-5
    mask = torch.ones(3, 4)
    adv = torch.tensor([1.0, -1.0, 0.5])
    loss_without, _ = gspo_loss(logp[:2], logp_old[:2], adv[:2], mask[:2])
    mask[2] = 0
    loss_with, stats = gspo_loss(logp, logp_old, adv, mask)
    assert loss_with.item() == pytest.approx(loss_without.item())
    assert stats["lengths"].tolist() == [4, 4, 0]


def test_objective_value_is_the_clipped_sequence_ratio():
    logp = torch.zeros(2, 3)
    logp_old = torch.full((2, 3), -0.01)  # log s = 0.01 for both
    surrogate, log_s, ratio = gspo_token_objective(logp, logp_old, torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    assert torch.allclose(ratio, torch.full((2, 3), math.exp(0.01)))
    assert torch.allclose(surrogate[0], torch.full((3,), 1 + EPS_HIGH))  # clipped on the high side
    assert torch.allclose(surrogate[1], torch.full((3,), -math.exp(0.01)))  # active: min picks s * A
    assert EPS_LOW == 3e-4


@pytest.mark.parametrize("poison", [float("-inf"), float("nan")])
@pytest.mark.parametrize("where", ["logp", "logp_old", "ref"])
@pytest.mark.parametrize(
    "options", [{}, {"token_log_ratio_clip": 0.5, "measure_one_token": True}, {"beta": 0.1, "delta": 2.0}]
)
def test_non_finite_values_at_masked_positions_change_nothing(poison, where, options):
    """A sampler that pads log-probs with -inf (or NaN) leaves the loss, its gradient and the clip decisions as they
    are with finite padding: the mask is 0 there, so nothing there may enter the arithmetic."""
    from gspo_recipes.loss.batch import gspo_batch_loss

    torch.manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    clean = {"logp": -torch.rand(3, 4) - 0.1, "ref": -torch.rand(3, 4) - 0.1}
    clean["logp_old"] = clean["logp"] + 0.01 * torch.randn(3, 4)
    poisoned = {name: value.clone() for name, value in clean.items()}
    poisoned[where][mask == 0] = poison
    advantages = torch.tensor([1.0, -1.0, 0.5])

    def run(values):
        logp = values["logp"].clone().requires_grad_()
        step = gspo_batch_loss(logp, values["logp_old"], advantages, mask, 0.003, 0.004,
                               ref_per_token_logps=values["ref"], **options)  # fmt: skip
        step.loss.backward()
        simple = logp.detach().clone().requires_grad_()
        loss, stats = gspo_loss(simple, values["logp_old"], advantages, mask, 0.003, 0.004)
        loss.backward()
        return step, logp.grad, loss, simple.grad, stats

    expected, got = run(clean), run(poisoned)
    for want, have in zip(expected[1:4], got[1:4]):  # the batch loss's gradient, gspo_loss's value and gradient
        assert torch.isfinite(have).all() and torch.equal(have, want)
    assert torch.equal(got[0].loss, expected[0].loss) and torch.isfinite(got[0].loss)
    assert torch.equal(got[0].log_s, expected[0].log_s)
    assert torch.equal(got[0].low | got[0].high, expected[0].low | expected[0].high)
    if options.get("measure_one_token"):
        assert torch.equal(got[0].one_token, expected[0].one_token)
    if options.get("beta"):
        assert torch.equal(got[0].per_token_kl * mask, expected[0].per_token_kl * mask)
    assert got[4]["clip_frac"] == expected[4]["clip_frac"] and got[4]["log_s_mean"] == expected[4]["log_s_mean"]


@pytest.mark.parametrize("poison", [float("-inf"), float("nan")])
def test_grpo_contrast_loss_ignores_non_finite_padding(poison):
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    logp = torch.tensor([[-0.5, -0.7, poison]], requires_grad=True)
    loss, stats = grpo_token_loss(logp, torch.tensor([[-0.6, -0.7, poison]]), torch.tensor([1.0]), mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all() and logp.grad[0, 2] == 0
