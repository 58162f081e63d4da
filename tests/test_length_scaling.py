"""The length-scaled clip range (`epsilon_length_scaling`): response i gets epsilon * sqrt(L_ref / L_i) on both sides.

Off, everything is today's range bit for bit; on, the loss, the clip statistics and the files judge each response
with its own range.
"""

import math

import pytest
import torch
from support import assert_grads_close, tiny_config
from test_trainer import crafted_batch, loss_and_grads, make_pair, with_old_logps

from gspo_recipes.loss import clipped_sides, gspo_loss, gspo_token_objective, length_scaled_epsilons


def test_scaled_epsilons_follow_the_inverse_sqrt_law():
    lengths = torch.tensor([4, 16, 64, 0])
    low, high = length_scaled_epsilons(3e-4, 4e-4, lengths, reference_length=16)
    assert low.tolist() == pytest.approx([6e-4, 3e-4, 1.5e-4, 3e-4 * 4])  # an empty response counts as 1 token
    assert high.tolist() == pytest.approx([8e-4, 4e-4, 2e-4, 4e-4 * 4])
    assert length_scaled_epsilons(3e-4, 4e-4, lengths, None) == (3e-4, 4e-4)  # off: the floats themselves


def random_batch(seed=0, n=6, t=9):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g) * 3).requires_grad_()
    logp_old = logp.detach() + 1e-2 * torch.randn(n, t, generator=g)
    mask = torch.ones(n, t)
    for row, length in enumerate([9, 2, 5, 9, 1, 7][:n]):
        mask[row, length:] = 0
    return logp, logp_old, torch.tensor([1.0, -1.0, 0.5, -0.5, 1.5, -1.5][:n]), mask


def test_one_range_per_response_equal_to_the_float_range_is_bit_identical():
    """A per-response tensor holding the float range everywhere gives the very same loss and gradient."""
    results = []
    for eps_low, eps_high in ((3e-4, 4e-4), (torch.full((6,), 3e-4), torch.full((6,), 4e-4))):
        logp, logp_old, adv, mask = random_batch(seed=3)
        loss, stats = gspo_loss(logp, logp_old, adv, mask, eps_low, eps_high)
        loss.backward()
        results.append((loss.detach(), logp.grad, stats["clipped_low"], stats["clipped_high"]))
    (loss_a, grad_a, low_a, high_a), (loss_b, grad_b, low_b, high_b) = results
    assert 0 < (low_a | high_a).sum() < 6, "the batch should clip some responses and not others"
    assert torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b)
    assert torch.equal(low_a, low_b) and torch.equal(high_a, high_b)


def test_the_same_drift_clips_the_long_response_and_spares_the_short_one():
    """log s = 0.008 on a 4-token and on a 64-token response: a plain range of 0.005 clips both; scaled at
    L_ref = 16 the short one gets 0.005 * 2 (kept) and the long one 0.005 / 2 (clipped)."""
    logp_old = torch.zeros(2, 64, dtype=torch.float64)
    logp = torch.full((2, 64), 0.008, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(2, 64, dtype=torch.float64)
    mask[0, :4] = 1
    mask[1, :] = 1
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    log_s = torch.tensor([0.008, 0.008], dtype=torch.float64)
    assert clipped_sides(log_s, adv, 0.005, 0.005)[1].tolist() == [True, True]
    eps = length_scaled_epsilons(0.005, 0.005, mask.sum(-1), reference_length=16)
    assert clipped_sides(log_s, adv, *eps)[1].tolist() == [False, True]
    surrogate, _, _ = gspo_token_objective(logp, logp_old, adv, mask, *eps)
    (surrogate * mask).sum().backward()
    assert (logp.grad[0, :4] != 0).all() and (logp.grad[1] == 0).all()  # the clipped response has no gradient


# ----------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(epsilon_reference_length=64), "epsilon_reference_length=64 only has an effect"),
        (dict(epsilon_length_scaling=True, epsilon_reference_length=0), "epsilon_reference_length=0 must be"),
        (dict(epsilon_length_scaling=True, epsilon_reference_length=2.5), "epsilon_reference_length=2.5"),
        (dict(epsilon_length_scaling=True, importance_sampling_level="token", epsilon=0.2), "epsilon_length_scaling"),
        (
            dict(epsilon_length_scaling=True, loss_type="dapo", allow_length_weighted_loss=True),
            "epsilon_length_scaling",
        ),
    ],
)
def test_bad_length_scaling_settings_are_errors_naming_the_field(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(tmp_path, **overrides)


def test_reference_length_defaults_to_max_completion_length(tmp_path):
    assert tiny_config(tmp_path).resolved_epsilon_reference_length is None
    assert tiny_config(tmp_path, epsilon_length_scaling=True).resolved_epsilon_reference_length == 8
    cfg = tiny_config(tmp_path, epsilon_length_scaling=True, epsilon_reference_length=3)
    assert cfg.resolved_epsilon_reference_length == 3


# ----------------------------------------------------------------------------------------------- trainer


def reference_scaled_loss(logps, old, advantages, mask, eps_low, eps_high, reference_length):
    """GSPO-token with one range per response, written out response by response (no shared helper); advantages (N,)
    or per token (N, T). Returns the loss and the number of responses clipped (by the mean advantage's sign)."""
    total, clipped_count = 0.0, 0
    for i in range(mask.size(0)):
        m = mask[i].bool()
        length = int(m.sum())
        if not length:
            continue
        adv = advantages[i][m] if advantages.dim() == 2 else advantages[i]
        log_s = (logps[i][m] - old[i][m]).detach().mean()
        scale = math.sqrt(reference_length / length)
        ratio = torch.exp(log_s + logps[i][m] - logps[i][m].detach())
        clipped = torch.clamp(ratio, 1 - eps_low * scale, 1 + eps_high * scale)
        total = total + torch.minimum(ratio * adv, clipped * adv).mean()
        s, a = math.exp(log_s.item()), adv.mean().item()
        clipped_count += (a > 0 and s > 1 + eps_high * scale) or (a < 0 and s < 1 - eps_low * scale)
    return -total / mask.size(0), clipped_count


@pytest.mark.parametrize("advantages_shape", ["response", "token"])
def test_trainer_loss_and_gradient_with_scaling_match_the_reference(tmp_path, tiny, prompt_dataset, advantages_shape):
    """GSPO and GSPO-token (per-token advantages) with the length-scaled range, against the reference."""
    plain, _ = make_pair(tmp_path / "plain", tiny, prompt_dataset)
    # L_ref = 2: the 1-token response gets a range sqrt(2) wider, the others up to sqrt(7/2) narrower.
    scaled, _ = make_pair(
        tmp_path / "scaled", tiny, prompt_dataset, epsilon_length_scaling=True, epsilon_reference_length=2
    )
    inputs = with_old_logps(scaled, crafted_batch(tiny[1], advantages_shape), shift=3e-3)  # lengths 7, 3, 5, 7, 1, 6
    loss, grads, metrics = loss_and_grads(scaled, inputs)

    scaled.model.zero_grad()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logps, _, _ = scaled._get_per_token_logps_and_entropies(scaled.model, ids, mask, 7)
    ref, clipped = reference_scaled_loss(
        logps, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"], 3e-4, 4e-4, 2
    )
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), abs=1e-6)
    assert_grads_close(grads, {name: param.grad for name, param in scaled.model.named_parameters()})

    # The clip statistics judge each response with its own range, and differ from the plain range's here.
    assert metrics["clip_ratio/region_mean"][-1] == pytest.approx(clipped / 6)
    if advantages_shape == "response":  # on this batch the plain range clips one response fewer (3 of 6, not 4)
        plain.model.load_state_dict(scaled.model.state_dict())
        _, _, plain_metrics = loss_and_grads(plain, inputs)
        assert metrics["clip_ratio/region_mean"][-1] > plain_metrics["clip_ratio/region_mean"][-1]


# ----------------------------------------------------------------------------------------------- calibration

LAW_LENGTHS = (4, 16, 64, 256)


def law_samples(per_length=3000, sigma=0.05, seed=0):
    """Off-policy log s_i under the explainer's noise model: N(0, sigma / sqrt(L)), random advantage signs."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LAW_LENGTHS).repeat_interleave(per_length)
    log_s = torch.randn(lengths.numel(), generator=g, dtype=torch.float64) * sigma / lengths.double().sqrt()
    sign = torch.where(torch.rand(lengths.numel(), generator=g) < 0.5, -1, 1)
    return log_s, sign, lengths


def per_bucket_clip(log_s, sign, lengths, eps_low, eps_high):
    from gspo_recipes.commands.calibrate import clip_fraction_by_bucket

    return clip_fraction_by_bucket(log_s, sign, lengths, eps_low, eps_high, [(n, n) for n in LAW_LENGTHS])


def test_length_scaled_calibration_holds_the_target_at_every_length():
    from gspo_recipes.stats.calibration import EpsilonCalibration

    log_s, sign, lengths = law_samples()
    results = {}
    for reference in (None, 64):
        calibration = EpsilonCalibration(steps=1, target_clip=0.1, reference_length=reference)
        calibration.collect(log_s, sign.double(), torch.ones_like(log_s, dtype=torch.bool), lengths=lengths)
        eps = calibration.finish(None, (3e-4, 4e-4))
        results[reference] = per_bucket_clip(log_s, sign, lengths, *length_scaled_epsilons(*eps, lengths, reference))
    for row in results[64]:  # the target at every length, up to sampling noise (1,500 per side and length)
        assert row["clip_low"] == pytest.approx(0.1, abs=0.025) and row["clip_high"] == pytest.approx(0.1, abs=0.025)
    plain = results[None]  # the plain range meets the target only on average: short clipped most, long hardly
    assert plain[0]["clip_high"] > 0.2 and plain[-1]["clip_high"] < 0.02
    assert plain[0]["clip_low"] > 0.2 and plain[-1]["clip_low"] < 0.02


def test_calibrate_command_length_scaled(tmp_path, capsys):
    import json

    from gspo_recipes.commands.cli import main as gspo

    log_s, sign, lengths = law_samples(per_length=500)
    line = {
        "step": 2,
        "epsilon_low": 3e-4,
        "epsilon_high": 4e-4,
        "epsilon_reference_length": None,
        "max_completion_length": 256,
        "responses": log_s.numel(),
        "buckets": [{"lo": lo, "hi": hi} for lo, hi in ((1, 8), (9, 32), (33, 128), (129, 256))],
        "minibatches": {},
        "off_policy": {"log_s": log_s.tolist(), "advantage_sign": sign.tolist(), "length": lengths.tolist()},
    }
    (tmp_path / "gspo_diagnostics.jsonl").write_text(json.dumps(line) + "\n")
    assert gspo(["calibrate", str(tmp_path), "--length-scaled"]) == 0
    out = capsys.readouterr().out
    assert "epsilon * sqrt(256 / L_i)" in out
    assert "epsilon_length_scaling: true\nepsilon_reference_length: 256" in out
    rows = [r.split() for r in out.splitlines() if r.strip()[:1].isdigit() and "-" in r.split()[0]]
    assert [r[0] for r in rows] == ["1-8", "9-32", "33-128", "129-256"]
    scaled = [[float(v.rstrip("%")) for v in r[2:4]] for r in rows]
    plain = [[float(v.rstrip("%")) for v in r[4:6]] for r in rows]
    assert all(abs(v - 10) < 4 for pair in scaled for v in pair)  # 250 responses per side and bucket
    assert min(plain[0]) > 25 and max(plain[-1]) < 3
    # The chosen epsilon holds at L_ref = 256, so it is about the 256-token responses' own 90% quantile.
    assert gspo(["calibrate", str(tmp_path), "--length-scaled", "--reference-length", "4"]) == 0
    out4 = capsys.readouterr().out
    assert "epsilon_reference_length: 4" in out4
    assert gspo(["calibrate", str(tmp_path), "--reference-length", "4"]) == 2
    assert "add --length-scaled" in capsys.readouterr().out
    # A run that used a scaled range: its own column is judged with it, and a plain calibration says it is plain.
    line["epsilon_reference_length"] = 64
    (tmp_path / "gspo_diagnostics.jsonl").write_text(json.dumps(line) + "\n")
    assert gspo(["calibrate", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "epsilon_length_scaling: false" in out
    assert gspo(["calibrate", str(tmp_path), "--length-scaled"]) == 0
    assert "epsilon_reference_length: 64" in capsys.readouterr().out  # the run's own L_ref by default


# ----------------------------------------------------------------------------------------------- health warning


def law_window(correlated: bool, reference_length=None, seed=0, n=256, eps=(0.004, 0.004)):
    """A window of off-policy responses of 4..256 tokens whose log s_i follow the 1/sqrt(L) law, clipped with the
    plain range or a length-scaled one; advantages rise with log length when `correlated`, else are independent."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LAW_LENGTHS).repeat(n // len(LAW_LENGTHS)).double()
    log_s = torch.randn(lengths.numel(), generator=g, dtype=torch.float64) * 0.05 / lengths.sqrt()
    noise = torch.randn(lengths.numel(), generator=g, dtype=torch.float64)
    advantage = (torch.log2(lengths) - 5.0) / 2.0 + 0.7 * noise if correlated else noise
    low, high = clipped_sides(log_s, advantage, *length_scaled_epsilons(*eps, lengths, reference_length))
    return {
        "log_s": log_s,
        "length": lengths,
        "advantage": advantage,
        "clipped_low": low.double(),
        "clipped_high": high.double(),
        "minibatch": torch.full_like(log_s, 2.0),
    }


def judge(windows, scaled=False):
    from gspo_recipes.stats.health import HealthWarnings

    recorded = []
    health = HealthWarnings(min_responses=64)
    health.on_warning = lambda kind, message: recorded.append((kind, message))
    args = tiny_config("/tmp/unused-lenclip", epsilon_length_scaling=scaled)
    for window in windows:
        health.check_window(window, args, (0.004, 0.004))
    return [kind for kind, _ in recorded], [message for _, message in recorded]


def test_short_responses_warning_fires_when_short_ones_clip_more_and_length_goes_with_advantage(caplog):
    import logging

    with caplog.at_level(logging.WARNING):
        kinds, messages = judge([law_window(True, seed=s) for s in range(2)])
    assert kinds == ["short_responses_clipped"]  # once, through the on_warning hook that feeds gspo report
    assert messages[0].startswith("GSPO health: short responses dominate the clip")
    assert "epsilon_length_scaling=True" in messages[0] and "--length-scaled" in messages[0]
    assert "longer responses score better" in messages[0]
    assert "short responses dominate the clip" in caplog.text


def test_short_responses_warning_silent_without_correlation_or_with_the_scaled_range():
    window = law_window(False)
    shares = [window["clipped_high"][window["length"] == n].mean().item() for n in (4, 256)]
    assert shares[0] > 3 * shares[1]  # short responses do clip far more here: only the correlation is missing
    assert judge([law_window(False, seed=s) for s in range(3)])[0] == []
    # The scaled range judged the same correlated responses: every length clips alike, nothing to warn about.
    assert judge([law_window(True, reference_length=64, seed=s) for s in range(3)], scaled=True)[0] == []


def test_short_responses_warning_needs_enough_responses_and_judges_nothing_across_a_range_change():
    from gspo_recipes.stats.health import HealthWarnings

    args = tiny_config("/tmp/unused-lenclip")
    few = law_window(True, n=64)  # 16 per length: too few to judge
    health = HealthWarnings(min_responses=64)
    for _ in range(3):
        health.check_window(few, args, (0.004, 0.004))
    assert health.history == []
    health.check_window(few, args, (0.004, 0.004))  # 64 per length pooled: judged
    assert [w["kind"] for w in health.history] == ["short_responses_clipped"]
    # After a change of range the pooled responses are forgotten: three windows under the new one are too few.
    health = HealthWarnings(min_responses=64)
    for _ in range(3):
        health.check_window(few, args, (0.004, 0.004))
    for _ in range(3):
        health.check_window(few, args, (0.003, 0.003))
    assert health.history == []


def test_report_replays_the_short_responses_warning_from_the_file():
    from gspo_recipes.commands.report import health_warnings

    def line(step, window):
        later = window["minibatch"] > 1
        return {
            "step": step,
            "epsilon_low": 0.004,
            "epsilon_high": 0.004,
            "buckets": [{"lo": lo, "hi": hi} for lo, hi in ((1, 8), (9, 32), (33, 128), (129, 256))],
            "minibatches": {"2": {}},
            "off_policy": {
                "log_s": window["log_s"][later].tolist(),
                "advantage_sign": torch.sign(window["advantage"][later]).long().tolist(),
                "advantage": window["advantage"][later].tolist(),
                "length": window["length"][later].long().tolist(),
            },
        }

    kinds = [w["kind"] for w in health_warnings([line(s + 1, law_window(True, seed=s)) for s in range(2)])]
    assert kinds == ["short_responses_clipped"]
    assert health_warnings([line(s + 1, law_window(False, seed=s)) for s in range(2)]) == []


# ----------------------------------------------------------------------------------------------- real runs


def varied_length_run(output_dir, scaled: bool, max_steps=20):
    """A tiny GSPO run whose responses span 1..32 tokens (an EOS bias makes lengths roughly geometric) with a reward
    that grows with length, so length goes with advantage; the range (0.02) clips the short responses, whose log s_i
    spread ~10x wider, far more than the long ones."""
    import json

    from datasets import Dataset
    from support import length_reward

    from gspo_recipes import GSPOTrainer
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
    from gspo_recipes.callbacks import ClipFractionByLengthCallback, LogRatioHistogramCallback

    model, tokenizer = build_tiny_model_and_tokenizer()
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = 2.5
    model.config.tie_word_embeddings = False
    model.lm_head = head
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    cfg = tiny_config(
        output_dir, max_steps=max_steps, max_completion_length=32, epsilon=0.02, epsilon_high=0.02,
        gspo_diagnostics=False, epsilon_length_scaling=scaled,
    )  # fmt: skip
    trainer = GSPOTrainer(
        model=model, reward_funcs=length_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )
    clip = ClipFractionByLengthCallback(trainer, min_responses=16)  # a small run: 16 per bucket pooled
    trainer.add_callback(clip)
    trainer.add_callback(LogRatioHistogramCallback(trainer))
    trainer.train()
    with open(output_dir / "gspo_diagnostics.jsonl") as f:
        lines = [json.loads(text) for text in f]
    return [w["kind"] for w in clip.warnings.history], lines


@pytest.mark.slow
def test_a_run_whose_short_responses_clip_more_warns_and_the_scaled_range_does_not(tmp_path):
    from gspo_recipes.runfiles.run_warnings import recorded_warnings

    kinds, lines = varied_length_run(tmp_path / "plain", scaled=False)
    assert "short_responses_clipped" in kinds
    assert "short_responses_clipped" in [w["kind"] for w in recorded_warnings(lines)]  # for gspo report
    assert all(line.get("epsilon_reference_length") is None for line in lines if "epsilon_low" in line)

    kinds, lines = varied_length_run(tmp_path / "scaled", scaled=True)
    assert "short_responses_clipped" not in kinds
    assert {line["epsilon_reference_length"] for line in lines if "epsilon_low" in line} == {32}
    from gspo_recipes.commands.report import length_scaling_note

    assert "length-scaled: x sqrt(L_ref / L) per response, L_ref = 32" in length_scaling_note(lines)  # gspo report
    # The file's clip counts are the scaled range's: recomputed from the recorded log s_i they agree.
    from gspo_recipes.runfiles.diagnostics import clip_range_of_line

    for line in lines:
        off = line.get("off_policy")
        if not off or not off["log_s"] or any(int(k) == 1 for k in line["minibatches"]):
            continue  # lines holding on-policy responses count those too; compare the off-policy-only ones
        length = torch.tensor(off["length"])
        low, high = clipped_sides(
            torch.tensor(off["log_s"], dtype=torch.float64), torch.tensor(off["advantage"]),
            *clip_range_of_line(line, length),
        )  # fmt: skip
        assert int((low | high).sum()) == sum(b["clipped_low"] + b["clipped_high"] for b in line["buckets"])


# ----------------------------------------------------------------------------------------------- off the default path


def scaled_calibrating_trainer(output_dir, max_steps, **overrides):
    from datasets import Dataset
    from support import digit_count_reward

    from gspo_recipes import GSPOTrainer
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    settings = dict(
        max_steps=max_steps, epsilon_calibration_steps=4, epsilon_target_clip=0.2, save_strategy="steps",
        save_steps=4, gspo_diagnostics=False, epsilon_length_scaling=True, epsilon_reference_length=4,
    )  # fmt: skip
    settings.update(overrides)
    cfg = tiny_config(output_dir, **settings)
    return GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )


@pytest.mark.slow
def test_automatic_calibration_of_the_scaled_range_and_resume(tmp_path, caplog):
    import json
    import logging

    trainer = scaled_calibrating_trainer(tmp_path, max_steps=6)
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.gspo_trainer"):
        trainer.train()
    assert "at the reference length 4, scaled by sqrt(L_ref / L)" in caplog.text
    calibrated = (trainer.epsilon_low, trainer.epsilon_high)
    assert calibrated != (3e-4, 4e-4)
    state = json.loads((tmp_path / "checkpoint-4" / "gspo_calibration.json").read_text())
    assert state["reference_length"] == 4 and state["epsilons"] is None  # saved mid-calibration, with lengths
    assert len(state["length"]) == len(state["log_s"]) > 0 and min(state["length"]) >= 1

    # Resumed from the checkpoint saved before calibration finished: the same range as the uninterrupted run.
    again = scaled_calibrating_trainer(tmp_path / "again", max_steps=6, save_strategy="no")
    again.args.output_dir = str(tmp_path)
    again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert (again.epsilon_low, again.epsilon_high) == calibrated

    # A resume with another scaling setting would give those samples another meaning: refused, naming the fields.
    other = scaled_calibrating_trainer(tmp_path / "other", max_steps=6, save_strategy="no", epsilon_reference_length=8)
    other.args.output_dir = str(tmp_path)
    with pytest.raises(ValueError, match="epsilon_reference_length"):
        other.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))


@pytest.mark.parametrize(
    "overrides",
    [
        dict(num_iterations=2),  # the same generation batch twice: its second pass is off-policy from its start
        dict(gradient_accumulation_steps=2, steps_per_generation=3, per_device_train_batch_size=4),  # misaligned
    ],
)
def test_scaled_range_off_the_default_path_records_per_response_clips(tmp_path, tiny, prompt_dataset, overrides):
    """Whatever the schedule, every recorded clip flag is the one the response's own scaled range gives."""
    from support import digit_count_reward

    from gspo_recipes import GSPOTrainer
    from gspo_recipes.callbacks import attach_response_stats

    model, tokenizer = tiny
    cfg = tiny_config(
        tmp_path, epsilon=5e-3, epsilon_high=5e-3, epsilon_length_scaling=True, epsilon_reference_length=32,
        gspo_diagnostics=False, max_steps=3,
        **overrides,
    )  # fmt: skip
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    stats = attach_response_stats(trainer)
    trainer.train()
    window = stats.window(step=-1)
    off = window["minibatch"] > 1
    assert off.any()
    eps = length_scaled_epsilons(5e-3, 5e-3, window["length"], 32)  # twice the plain range at 8 tokens
    low, high = clipped_sides(window["log_s"].double(), window["advantage"], *eps)
    assert torch.equal(low.float(), window["clipped_low"]) and torch.equal(high.float(), window["clipped_high"])
    plain_low, plain_high = clipped_sides(window["log_s"].double(), window["advantage"], 5e-3, 5e-3)
    assert (plain_low | plain_high).sum() > (low | high).sum(), "the wider scaled range should clip fewer here"


@pytest.mark.slow
def test_two_process_calibration_of_the_scaled_range_resumes_as_the_uninterrupted_run(tmp_path, monkeypatch):
    """Both processes' samples, lengths included, survive the checkpoint; the resumed run fixes the same range."""
    import json

    from support import launch_two_cpu_processes

    monkeypatch.setenv("GSPO_TEST_REFERENCE_LENGTH", "4")
    full, resumed = tmp_path / "full.json", tmp_path / "resumed.json"
    launch_two_cpu_processes("two_process_calibration.py", str(tmp_path / "run"), str(full), cwd=tmp_path)
    state = json.loads((tmp_path / "run" / "checkpoint-4" / "gspo_calibration.json").read_text())
    assert state["reference_length"] == 4 and len(state["length"]) == len(state["log_s"]) == 48
    launch_two_cpu_processes("two_process_calibration.py", str(tmp_path / "run"), str(resumed), "resume", cwd=tmp_path)
    assert json.loads(resumed.read_text()) == json.loads(full.read_text())
