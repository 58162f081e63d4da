"""TRL's loss options in GSPOTrainer's own loss (gspo_recipes/trainer/loss_options.py), and the normalisation under
mask_truncated_completions: equal to TRL's GRPOTrainer on a crafted off-policy batch, with the share each masks."""

import pytest
import torch
from support import digit_count_reward, tiny_config
from test_trainer import crafted_batch, loss_and_grads, make_pair, with_old_logps

from gspo_recipes import GSPOTrainer
from gspo_recipes.loss import gspo_loss

OPTIONS = {
    "opsm": (dict(off_policy_mask_threshold=1e-4), "gspo/opsm/masked_frac"),
    "top_entropy_quantile": (dict(top_entropy_quantile=0.5), "gspo/top_entropy/masked_frac"),
    "delta": (dict(delta=1.0), "gspo/delta/masked_frac"),
    "entropy_bonus": (dict(entropy_coef=0.05), "policy_loss"),
}


def assert_same_loss_and_grads(gspo, trl, inputs):
    loss_gspo, grads_gspo, metrics_gspo = loss_and_grads(gspo, inputs)
    loss_trl, grads_trl, metrics_trl = loss_and_grads(trl, inputs)
    assert loss_gspo.item() == pytest.approx(loss_trl.item(), abs=1e-6)
    assert grads_gspo.keys() == grads_trl.keys()
    for name in grads_gspo:
        assert torch.allclose(grads_gspo[name], grads_trl[name], atol=1e-6, rtol=1e-5), name
    return metrics_gspo, metrics_trl


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_option_runs_in_our_loss_and_equals_trl(tmp_path, tiny, prompt_dataset, option):
    settings, metric = OPTIONS[option]
    gspo, trl = make_pair(tmp_path, tiny, prompt_dataset, **settings)
    assert gspo._handed_to_trl == [], "the option should no longer hand the loss to TRL"
    inputs = with_old_logps(gspo, crafted_batch(tiny[1]))
    metrics_gspo, metrics_trl = assert_same_loss_and_grads(gspo, trl, inputs)
    share = metrics_gspo[metric][-1]
    if metric.endswith("masked_frac"):
        assert 0 < share < 1, f"{metric}={share}: the crafted batch should mask some and keep some"
        assert metric not in metrics_trl
    else:
        assert share == pytest.approx(metrics_trl[metric][-1], abs=1e-6)


def test_adaptive_entropy_controller_moves_as_trls(tmp_path, tiny, prompt_dataset):
    settings = dict(use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=100.0, entropy_coef_delta=0.01)
    gspo, trl = make_pair(tmp_path, tiny, prompt_dataset, **settings)
    inputs = with_old_logps(gspo, crafted_batch(tiny[1]))
    for _ in range(2):  # the first step measures the entropy, the second applies the bonus it gated
        assert_same_loss_and_grads(gspo, trl, inputs)
        assert gspo.entropy_coef == pytest.approx(trl.entropy_coef)
        assert gspo._last_world_entropy == pytest.approx(trl._last_world_entropy, rel=1e-6)


def test_options_keep_gspo_token_and_calibration(tmp_path, tiny, prompt_dataset):
    """With per-token advantages the options no longer refuse, and calibration may be on with them."""
    gspo, _ = make_pair(tmp_path, tiny, prompt_dataset, delta=1.0, epsilon_calibration_steps=2)
    assert gspo.calibration is not None
    inputs = with_old_logps(gspo, crafted_batch(tiny[1], advantages_shape="token"), shift=1e-3)
    loss, grads, _ = loss_and_grads(gspo, inputs)
    assert torch.isfinite(loss) and grads
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, gspo_diagnostics=False, top_entropy_quantile=0.5, epsilon_calibration_steps=2)
    GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )


def test_delta_in_the_reference_loss_stops_large_negative_ratios():
    logp = torch.zeros(2, 3, requires_grad=True)
    logp_old = torch.full((2, 3), -0.01)  # s = e^0.01 for both
    adv = torch.tensor([-1.0, -1.0])
    loss, _ = gspo_loss(logp, logp_old, adv, torch.ones(2, 3))
    loss.backward()
    assert torch.all(logp.grad != 0)
    from gspo_recipes.loss import gspo_token_objective

    x = torch.zeros(2, 3, requires_grad=True)
    surrogate, _, _ = gspo_token_objective(x, logp_old, adv, torch.ones(2, 3), delta=1.005)
    (-surrogate.mean()).backward()
    assert torch.all(x.grad == 0), "s_i > delta with A < 0: capped, no gradient (TRL's delta)"


@pytest.mark.parametrize("surviving", [1, 2])
def test_truncated_neighbours_do_not_reweight_a_response(tmp_path, tiny, prompt_dataset, surviving):
    """mask_truncated_completions: a micro-batch in which most responses were truncated gives TRL's gradient, not
    one scaled up by the share truncated."""
    gspo, trl = make_pair(tmp_path, tiny, prompt_dataset, mask_truncated_completions=True)
    inputs = with_old_logps(gspo, crafted_batch(tiny[1]))
    inputs["completion_mask"] = inputs["completion_mask"].clone()
    inputs["completion_mask"][surviving:] = 0  # what TRL does to truncated completions
    assert_same_loss_and_grads(gspo, trl, inputs)
