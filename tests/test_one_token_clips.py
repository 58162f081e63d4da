"""One-token clips (issue 20, item 2): the measurement, its metrics and diagnostics counts, the health warning both
ways, and the opt-in fix `token_log_ratio_clip` (GMPO's per-token clamp) against a plain reference."""

import json
import logging

import pytest
import torch
from support import assert_close_to_rounding, digit_count_reward, plain_grpo_config, tiny_config
from trl import GRPOTrainer

from gspo_recipes import GSPOTrainer
from gspo_recipes.callbacks import ClipFractionByLengthCallback, LogRatioHistogramCallback
from gspo_recipes.loss import (
    EPS_HIGH,
    EPS_LOW,
    clamp_token_log_ratios,
    clipped_sides,
    gspo_token_objective,
    mean_over_responses,
    one_token_clips,
    response_advantage,
    sequence_log_ratio,
)
from gspo_recipes.stats.health import HealthWarnings
from gspo_recipes.stats.response_stats import ResponseStats

# ----------------------------------------------------------------------------------------------- the measurement


def judge(rows: list[list[float]], advantages: list[float], eps_low=EPS_LOW, eps_high=EPS_HIGH):
    """one_token_clips on responses given as lists of token log-ratios (padded with masked zeros)."""
    width = max(len(r) for r in rows)
    log_ratio = torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
    log_s = sequence_log_ratio(log_ratio, torch.zeros_like(log_ratio), mask)
    low, high = clipped_sides(log_s, torch.tensor(advantages), eps_low, eps_high)
    return low | high, one_token_clips(log_ratio, mask, low, high, eps_low, eps_high)


def test_one_outlier_token_is_a_one_token_clip_and_broad_drift_is_not():
    outlier = [4.6] + [0.0] * 99  # the explainer's token moved from 0.001 to 0.1 in a 100-token response
    drift = [0.01] * 100  # every token moved a little: log s_i = 0.01, far outside, with or without any one token
    low_outlier = [-4.6] + [0.0] * 99
    clipped, one = judge([outlier, drift, low_outlier, outlier], [1.0, 1.0, -1.0, -1.0])
    assert clipped.tolist() == [True, True, True, False]  # the last is s_i > 1 with A < 0: not clipped
    assert one.tolist() == [True, False, True, False]


def test_the_token_left_out_is_the_one_pushing_in_the_clipped_direction():
    """log s_i = 0.05 (clipped high). The largest |log-ratio| is -0.5, which pushes down: without it the rest is even
    higher. Without the largest positive one (0.3) the rest averages -0.033, inside: a one-token clip."""
    clipped, one = judge([[0.3, -0.5, 0.2, 0.2]], [1.0])
    assert clipped.tolist() == [True] and one.tolist() == [True]


def test_a_clip_needing_two_tokens_and_a_one_token_response_are_not_one_token_clips():
    two_needed = [0.1, 0.1] + [0.0] * 98  # without either 0.1 the rest still averages 1e-3 > 4e-4
    clipped, one = judge([two_needed, [1.0]], [1.0, 1.0])
    assert clipped.tolist() == [True, True] and one.tolist() == [False, False]


# ----------------------------------------------------------------------------------------------------- the clamp


def test_clamp_is_pessimistic_on_the_side_the_advantage_favours():
    log_ratio = torch.tensor([[2.0, -2.0, 0.1], [2.0, -2.0, 0.1]], dtype=torch.float64)
    clamped, active = clamp_token_log_ratios(log_ratio, torch.tensor([1.0, -1.0]), 0.5)
    assert clamped.tolist() == [[0.5, -2.0, 0.1], [2.0, -0.5, 0.1]]
    assert active.tolist() == [[False, True, True], [True, False, True]]


def gmpo_reference(logp, logp_old, advantages, mask, eps_low, eps_high, clip):
    """Written plainly, one response at a time, with autograd through GMPO's Algorithm 1 (sign, clamp, min in log
    space), then GSPO's clip on the sequence ratio. Per-token advantages: the paper's GSPO-token, with the ratio's
    value stopped and each token's clamped log-ratio carrying its gradient."""
    losses = []
    for i in range(logp.shape[0]):
        m = mask[i].bool()
        diff = logp[i][m] - logp_old[i][m]
        adv = advantages[i] if advantages.dim() == 1 else advantages[i][m]
        sign = 1.0 if adv.mean() > 0 else -1.0
        signed = sign * diff
        clipped_log_ratio = sign * torch.min(signed, torch.clamp(signed, -clip, clip))
        if advantages.dim() == 1:
            s = torch.exp(clipped_log_ratio.mean())
            surrogate = torch.min(s * adv, torch.clamp(s, 1 - eps_low, 1 + eps_high) * adv)
        else:
            s = torch.exp(clipped_log_ratio.mean()).detach() * torch.exp(clipped_log_ratio - clipped_log_ratio.detach())
            surrogate = torch.min(s * adv, torch.clamp(s, 1 - eps_low, 1 + eps_high) * adv).mean()
        losses.append(-surrogate)
    return torch.stack(losses).mean()


def random_batch(seed: int, per_token: bool):
    g = torch.Generator().manual_seed(seed)
    n, t = 12, 9
    logp_old = -torch.rand(n, t, generator=g, dtype=torch.float64) * 3
    drift = 0.02 * torch.randn(n, t, generator=g, dtype=torch.float64)
    drift[torch.rand(n, t, generator=g) < 0.3] *= 60  # outliers beyond the clamp, both signs
    logp = (logp_old + drift).requires_grad_(True)
    mask = torch.ones(n, t, dtype=torch.float64)
    for i in range(n):
        mask[i, 3 + i % 6 :] = 0  # lengths 3..8
    shape = (n, t) if per_token else (n,)
    advantages = torch.randn(*shape, generator=g, dtype=torch.float64)
    return logp, logp_old, advantages, mask


@pytest.mark.parametrize("per_token", [False, True], ids=["response_advantages", "per_token_advantages"])
def test_clamped_objective_value_and_gradient_equal_the_reference(per_token):
    eps_low, eps_high, clip = 0.01, 0.012, 0.1  # some responses clipped, some clamped, some neither
    logp, logp_old, advantages, mask = random_batch(0, per_token)
    surrogate, log_s, _ = gspo_token_objective(logp, logp_old, advantages, mask, eps_low, eps_high,
                                               token_log_ratio_clip=clip)  # fmt: skip
    loss = -mean_over_responses(surrogate, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    ref_logp = logp.detach().clone().requires_grad_(True)
    ref = gmpo_reference(ref_logp, logp_old, advantages, mask, eps_low, eps_high, clip)
    (ref_grad,) = torch.autograd.grad(ref, ref_logp)
    assert_close_to_rounding(loss.detach(), ref.detach(), "loss")
    assert_close_to_rounding(grad, ref_grad, "gradient")
    # The case is not vacuous: tokens are clamped, and the clamp changes the loss.
    response_adv = response_advantage(advantages, mask)  # the mean over each response's own tokens
    _, active = clamp_token_log_ratios(logp.detach() - logp_old, response_adv, clip)
    assert (~active & mask.bool()).sum() >= 5
    low, high = clipped_sides(log_s, response_adv, eps_low, eps_high)
    assert 0 < (low | high).sum() < len(log_s)  # both branches of the sequence clip are exercised
    # A clamped token gets no gradient; the unclamped tokens of an unclipped response do.
    clamped_tokens = ~active & mask.bool()
    assert torch.all(grad[clamped_tokens] == 0)
    if not per_token:  # (per-token advantages clip token by token, each on the side of its own A_t)
        kept = (~(low | high)).unsqueeze(-1) & active & mask.bool()
        assert torch.all(grad[kept] != 0)
    plain = -mean_over_responses(gspo_token_objective(logp, logp_old, advantages, mask, eps_low, eps_high)[0], mask)
    assert abs(plain.item() - loss.item()) > 1e-3


@pytest.mark.parametrize("per_token", [False, True], ids=["response_advantages", "per_token_advantages"])
def test_option_off_is_todays_objective_bit_for_bit(per_token):
    """None takes the code path of before the option: the same value and gradient as that code, copied here."""
    logp, logp_old, advantages, mask = random_batch(1, per_token)
    logp = logp.float().detach().requires_grad_(True)
    logp_old, advantages, mask = logp_old.float(), advantages.float(), mask.float()
    surrogate, _, _ = gspo_token_objective(logp, logp_old, advantages, mask, 0.01, 0.012, token_log_ratio_clip=None)
    (grad,) = torch.autograd.grad(-mean_over_responses(surrogate, mask), logp)
    before = logp.detach().clone().requires_grad_(True)
    log_s = ((before.detach() - logp_old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    ratio = torch.exp(log_s.clamp(-10.0, 10.0).unsqueeze(-1) + before - before.detach())
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    expected = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - 0.01, 1.0 + 0.012) * adv)
    (expected_grad,) = torch.autograd.grad(-mean_over_responses(expected, mask), before)
    # At masked positions nothing is read (a sampler's -inf padding must not reach the loss), so the values there may
    # differ in rounding from that code's exp(log s + x - x); the masked surrogate and the gradient are bit for bit.
    assert torch.equal(surrogate.detach() * mask, expected.detach() * mask) and torch.equal(grad, expected_grad)


# ------------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("value", [0.0, -0.1, float("nan")])
def test_config_refuses_a_clamp_that_is_not_positive(tmp_path, value):
    with pytest.raises(ValueError, match="token_log_ratio_clip"):
        tiny_config(tmp_path, token_log_ratio_clip=value)


@pytest.mark.parametrize(
    "settings",
    [
        dict(importance_sampling_level="token", epsilon=0.2, epsilon_high=0.28),
        dict(loss_type="dapo", allow_length_weighted_loss=True),
        dict(loss_type="sapo"),
    ],
    ids=["token_ratios", "dapo", "sapo"],
)
def test_config_refuses_the_clamp_where_trls_loss_is_used(tmp_path, settings):
    with pytest.raises(ValueError, match="token_log_ratio_clip=0.2 works in GSPOTrainer's own loss only"):
        tiny_config(tmp_path, token_log_ratio_clip=0.2, **settings)


def test_plain_grpo_trainer_refuses_the_clamp_it_would_ignore(tmp_path, tiny, prompt_dataset):
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, token_log_ratio_clip=0.2)  # a GSPOConfig handed to TRL's own trainer
    trainer = GRPOTrainer(model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset,
                          processing_class=tokenizer)  # fmt: skip
    with pytest.raises(ValueError, match="does not clamp token log-ratios"):
        ClipFractionByLengthCallback(trainer)


# ------------------------------------------------------------------------------------------- runs, both ways

OUTLIER_SHIFT = 4.6  # log(0.1 / 0.001): the explainer's token whose probability moved from 0.001 to 0.1


def raise_first_token(trainer):
    """Lower the old log-probability of every response's first token by OUTLIER_SHIFT: to the loss, that one token
    has moved far while the others moved as training moved them."""
    generate = trainer._generate_and_score_completions

    def generate_with_outlier(inputs):
        output = generate(inputs)
        if output.get("old_per_token_logps") is not None:
            output["old_per_token_logps"][:, 0] -= OUTLIER_SHIFT
        return output

    trainer._generate_and_score_completions = generate_with_outlier


def watched_run(tmp_path, tiny, dataset, outlier=False, trainer_class=GSPOTrainer, config=None, **overrides):
    """A tiny 8-step run with the two diagnostics callbacks (judging over 8 clipped responses); returns the trainer,
    the clip callback, the logged metrics and the diagnostics lines."""
    model, tokenizer = tiny
    cfg = config or tiny_config(tmp_path, **{"max_steps": 8, "gspo_diagnostics": False, **overrides})
    if cfg.beta != 0.0:  # TRL loads the reference model by name: give it one on disk
        model.save_pretrained(tmp_path / "model")
        model = str(tmp_path / "model")
    trainer = trainer_class(model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset,
                            processing_class=tokenizer)  # fmt: skip
    clip = ClipFractionByLengthCallback(trainer, min_responses=8)
    trainer.add_callback(clip)
    trainer.add_callback(LogRatioHistogramCallback(trainer))
    if outlier:
        raise_first_token(trainer)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "gspo/clip_frac" in e]
    lines = [json.loads(x) for x in (tmp_path / "gspo_diagnostics.jsonl").read_text().splitlines()]
    return trainer, clip, logged, lines


# A range wide enough that this tiny model's own drift stays inside it: only the outlier token can clip.
WIDE = dict(epsilon=0.05, epsilon_high=0.05)


def test_warning_fires_when_one_token_per_response_moves_far(tmp_path, tiny, prompt_dataset, caplog):
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.stats.health"):
        _, clip, logged, lines = watched_run(tmp_path, tiny, prompt_dataset, outlier=True, **WIDE)
    shares = [e["gspo/clip_frac/one_token"] for e in logged if "gspo/clip_frac/one_token" in e]
    assert len(shares) >= 4 and all(share == 1.0 for share in shares)
    assert all(e["gspo/clip_frac/one_token/len_1-8"] == 1.0 for e in logged if "gspo/clip_frac/one_token" in e)
    message = next(m for m in caplog.messages if "one-token clips" in m)
    assert message.startswith("GSPO health:") and "token_log_ratio_clip=" in message
    assert [w["kind"] for w in clip.warnings.history].count("one_token_clips") == 1
    recorded = [w for line in lines for w in line.get("warnings", []) if w["kind"] == "one_token_clips"]
    assert [w["message"] for w in recorded] == [message]  # reaches gspo report through the diagnostics file
    # Diagnostics counts: every clipped off-policy response of the bucket is a one-token clip.
    off_policy = [line for line in lines if any(int(k) > 1 for k in line["minibatches"])]
    assert sum(b["one_token"] for line in off_policy for b in line["buckets"]) > 0


def test_the_suggested_clamp_removes_the_one_token_clips(tmp_path, tiny, prompt_dataset, caplog):
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.stats.health"):
        _, clip, logged, _ = watched_run(tmp_path, tiny, prompt_dataset, outlier=True, token_log_ratio_clip=0.05,
                                         **WIDE)  # fmt: skip
    later = [e for e in logged if "gspo/clip_frac/minibatch_1" not in e]
    assert later and all(e["gspo/clip_frac"] == 0.0 for e in later)
    assert "one_token_clips" not in [w["kind"] for w in clip.warnings.history]


@pytest.mark.parametrize(
    "settings",
    [{}, dict(learning_rate=3e-2)],
    ids=["healthy_default_range", "broad_drift"],
)
def test_warning_silent_on_a_healthy_run_and_on_clips_from_broad_drift(tmp_path, tiny, prompt_dataset, settings):
    _, clip, logged, _ = watched_run(tmp_path, tiny, prompt_dataset, **settings)
    clipped = [e for e in logged if "gspo/clip_frac/one_token" in e]
    assert len(clipped) >= 4  # responses were clipped and judged
    assert "one_token_clips" not in [w["kind"] for w in clip.warnings.history]


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_iterations=2, steps_per_generation=2),
        dict(gradient_accumulation_steps=2, steps_per_generation=3, per_device_train_batch_size=4),
        dict(beta=0.04),
    ],
    ids=["num_iterations", "accumulation_not_lined_up", "beta"],
)
def test_clamp_works_off_the_default_path(tmp_path, tiny, prompt_dataset, settings):
    """The outlier run with the clamp on, with each setting: it trains with finite losses and the outlier token
    clips no off-policy response (without the clamp it clips them: test_warning_fires_...)."""
    _, _, logged, lines = watched_run(tmp_path, tiny, prompt_dataset, outlier=True, token_log_ratio_clip=0.05,
                                      max_steps=4, **WIDE, **settings)  # fmt: skip
    assert logged and all(torch.isfinite(torch.tensor(e["loss"])) for e in logged)
    off_policy = [m for line in lines for k, m in line["minibatches"].items() if int(k) > 1]
    assert sum(m["responses"] for m in off_policy) > 0
    assert sum(m["clipped_low"] + m["clipped_high"] for m in off_policy) == 0


def test_plain_grpo_trainer_records_one_token_clips_too(tmp_path, tiny, prompt_dataset):
    cfg = plain_grpo_config(tmp_path, importance_sampling_level="sequence", max_steps=8, steps_per_generation=4,
                            **WIDE)  # fmt: skip
    _, clip, logged, _ = watched_run(tmp_path, tiny, prompt_dataset, outlier=True, trainer_class=GRPOTrainer,
                                     config=cfg)  # fmt: skip
    shares = [e["gspo/clip_frac/one_token"] for e in logged if "gspo/clip_frac/one_token" in e]
    assert len(shares) >= 4 and min(shares) >= 0.5  # (a response of one token never counts as a one-token clip)
    assert "one_token_clips" in [w["kind"] for w in clip.warnings.history]


def test_open_window_saved_before_the_field_existed_restores(tmp_path):
    (tmp_path / "gspo_response_stats.json").write_text(json.dumps({
        "step": 3, "log_s": [0.1, -0.2], "length": [4, 5], "advantage": [1.0, -1.0], "clipped_low": [0, 1],
        "clipped_high": [1, 0], "minibatch": [2, 2]}))  # fmt: skip
    stats = ResponseStats()
    assert stats.restore_open_window(str(tmp_path))
    assert stats.window(step=4)["one_token"].tolist() == [0.0, 0.0]


def test_health_warns_about_outlier_tokens_not_about_a_peaked_models_ordinary_drift():
    """A peaked model's few uncertain tokens carry all its drift, so nearly all its clips are one-token clips by small
    moves (the embedded default: 115 of 117, median |log-ratio| 0.11): no warning. The explainer's outlier token
    (log 100 = 4.6) driving most clips: the warning, quoting how far the tokens moved."""
    args = type("Args", (), {"epsilon": 3e-4, "epsilon_high": 4e-4, "learning_rate": 1e-6})()

    def judged(drivers: list[float]) -> list[str]:
        n, health = len(drivers), HealthWarnings(min_responses=8)
        health.check_window(
            {
                "log_s": torch.full((n,), 1e-3),
                "length": torch.full((n,), 24.0),
                "advantage": torch.ones(n),
                "clipped_low": torch.zeros(n),
                "clipped_high": torch.ones(n),
                "minibatch": torch.full((n,), 2.0),
                "one_token": torch.tensor(drivers),
            },  # fmt: skip
            args,
        )
        return [w["message"] for w in health.history]

    assert judged([0.11] * 7 + [0.92]) == []
    assert judged([0.9] * 8) == []
    fired = judged([4.6] * 6 + [0.11, 0.0])
    assert len(fired) == 1 and "median |log-ratio| 4.6" in fired[0]


def test_drivers_are_the_size_of_the_token_that_alone_clips():
    from gspo_recipes.loss import one_token_clip_drivers

    log_ratio = torch.tensor([[4.6, 0.0, 0.0, 0.0], [0.01, 0.01, 0.01, 0.01], [-0.0, -2.0, 0.0, 0.0]])
    mask = torch.ones_like(log_ratio)
    high = torch.tensor([True, True, False])
    low = torch.tensor([False, False, True])
    drivers = one_token_clip_drivers(log_ratio, mask, low, high, 3e-4, 4e-4)
    # Row 0: one outlier clips it high; row 1: broad drift, not one token; row 2: one token clips it low.
    assert drivers.tolist() == pytest.approx([4.6, 0.0, 2.0])


def test_health_one_token_judgement_pools_responses_and_restarts():
    health = HealthWarnings(min_responses=4)
    args = type("Args", (), {"epsilon": 3e-4, "epsilon_high": 4e-4, "learning_rate": 1e-6})()

    def window(one_token: list[int]):
        n = len(one_token)
        return {"log_s": torch.full((n,), 1e-3), "length": torch.full((n,), 100.0), "advantage": torch.ones(n),
                "clipped_low": torch.zeros(n), "clipped_high": torch.ones(n), "minibatch": torch.full((n,), 2.0),
                "one_token": torch.tensor(one_token, dtype=torch.float32)}  # fmt: skip

    health.check_window(window([1, 1, 1]), args)  # 3 clipped responses: not enough to judge
    assert not health.history
    health.restart()  # e.g. the clip range changed: the 3 no longer count
    health.check_window(window([1, 1, 1]), args)
    assert not health.history
    health.check_window(window([1, 0]), args)  # 4 of 5 pooled
    assert [w["kind"] for w in health.history] == ["one_token_clips"]
    assert "token_log_ratio_clip=0.03 " in health.history[0]["message"]  # median length 100 x epsilon 3e-4
    old_file_window = window([1, 1, 1, 1, 1])
    del old_file_window["one_token"]
    health.check_window(old_file_window, args)  # a diagnostics file from before the field: not judged
    assert len(health.history) == 1
