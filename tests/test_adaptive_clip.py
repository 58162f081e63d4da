"""The adaptive clip range (`GSPOConfig(epsilon_adaptive=True)`): the controller's rule and guards on crafted
rollouts, and in real tiny GSPOTrainer runs where the range may change, logging, checkpoints and resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
from support import digit_count_reward, tiny_config

from gspo_recipes.stats.adaptive_clip import (
    BOUND_FACTOR,
    MAX_STEP,
    AdaptiveClipController,
    frozen_message,
    rollout_table,
)
from gspo_recipes.stats.calibration import calibrate_epsilons

START = (1e-3, 1e-3)


def crafted_rollout(high_share: float, low_share: float, n: int = 200, scale: float = 1.0, on_policy: float = 0.0):
    """n off-policy responses per side, of which the given shares lie outside START by `scale` x 2 epsilon, the
    rest inside; plus n on-policy responses per side at log s = `on_policy` (0: no sampler mismatch)."""

    def side(share, sign):
        out = round(share * n)
        inside = torch.linspace(-0.5, 0.5, n - out) * START[0]
        outside = torch.linspace(1.5, 2.5, out) * START[0] * scale * (1 if sign > 0 else -1) if out else torch.zeros(0)
        return torch.cat([inside, outside])

    log_s = torch.cat([side(high_share, 1), side(low_share, -1), torch.full((2 * n,), float(on_policy))])
    sign = torch.cat([torch.ones(n), -torch.ones(n), torch.ones(n), -torch.ones(n)])
    minibatch = torch.cat([torch.full((2 * n,), 2.0), torch.ones(2 * n)])
    return rollout_table(log_s, sign, minibatch)


def test_adaptive_dead_band_is_a_no_op():
    controller = AdaptiveClipController(0.1, start=START)
    for share in (0.07, 0.1, 0.14):
        decision = controller.decide(crafted_rollout(share, share), START)
        assert decision.epsilons == START and decision.factors == {"low": 1.0, "high": 1.0}
        assert not decision.frozen


def test_adaptive_gain_moves_half_the_log_distance_per_side():
    controller = AdaptiveClipController(0.1, start=START)
    rollout = crafted_rollout(0.3, 0.1)  # only the high side leaves the band
    off = rollout[:, rollout[2] > 1]
    wanted_low, wanted_high = calibrate_epsilons(off[0], off[1], 0.1)
    decision = controller.decide(rollout, START)
    assert decision.epsilons[0] == START[0]  # the low side sits in its band
    assert wanted_high > START[1]
    expected = math.sqrt(START[1] * min(wanted_high, START[1] * MAX_STEP**2))
    assert decision.epsilons[1] == pytest.approx(expected, rel=1e-12)


def test_adaptive_rate_and_bound_clamps():
    controller = AdaptiveClipController(0.1, start=START)
    # Every response far outside: the wanted range is ~20x wider, one decision moves by at most x1.5.
    decision = controller.decide(crafted_rollout(1.0, 1.0, scale=10), START)
    assert decision.factors["low"] == pytest.approx(MAX_STEP) and decision.factors["high"] == pytest.approx(MAX_STEP)
    # Next to the upper bound: clamped at start x 10, never beyond.
    near_bound = (START[0] * 9, START[1] * 9)
    controller = AdaptiveClipController(0.1, start=START)
    decision = controller.decide(crafted_rollout(1.0, 1.0, scale=100), near_bound)
    assert decision.epsilons == pytest.approx((START[0] * BOUND_FACTOR, START[1] * BOUND_FACTOR))
    # And nothing clipped at all (quantile at 0): narrowed, by at most /1.5, never below start / 10.
    controller = AdaptiveClipController(0.1, start=START)
    decision = controller.decide(crafted_rollout(0.0, 0.0), START)
    assert decision.factors["high"] == pytest.approx(1 / MAX_STEP)
    near_floor = (START[0] / 9, START[1] / 9)
    unmoved = crafted_rollout(0.0, 0.0)
    unmoved[0] = 0.0  # s_i = 1 everywhere: the wanted epsilon is 0
    decision = AdaptiveClipController(0.1, start=START).decide(unmoved, near_floor)
    assert decision.epsilons == pytest.approx((START[0] / BOUND_FACTOR, START[1] / BOUND_FACTOR))


def test_adaptive_skips_a_side_with_too_few_responses():
    controller = AdaptiveClipController(0.1, start=START, min_responses=50)
    rollout = crafted_rollout(0.5, 0.5, n=200)
    few_negatives = rollout[:, (rollout[1] > 0) | (torch.arange(rollout.shape[1]) % 10 == 0)]
    decision = controller.decide(few_negatives, START)
    assert decision.skipped == ["low"] and decision.epsilons[0] == START[0]
    assert decision.epsilons[1] > START[1]


def test_adaptive_window_pools_the_last_four_rollouts_only():
    controller = AdaptiveClipController(0.1, start=START)
    for _ in range(4):
        controller.decide(crafted_rollout(0.1, 0.1), START)
    assert len(controller.window) == 4
    # One rollout far out among three in band: the pooled share (17.5%) leaves the band, so it moves, but less
    # than the single rollout alone would ask.
    decision = controller.decide(crafted_rollout(0.4, 0.4), START)
    alone = AdaptiveClipController(0.1, start=START).decide(crafted_rollout(0.4, 0.4), START)
    assert START[1] < decision.epsilons[1] < alone.epsilons[1]
    assert len(controller.window) == 4


@pytest.mark.parametrize(
    "guard, rollout, routing",
    [
        ("sampler_mismatch", crafted_rollout(0.3, 0.3, on_policy=2e-3), None),  # minibatch 1 clips alone
        ("one_sided", crafted_rollout(0.8, 0.0), None),
        ("routing", crafted_rollout(0.3, 0.3), 0.25),
    ],
)
def test_adaptive_guards_freeze_and_say_what_to_check(guard, rollout, routing):
    controller = AdaptiveClipController(0.1, start=START)
    decision = controller.decide(rollout, START, routing_changed=routing)
    assert guard in decision.frozen and decision.epsilons == START
    assert decision.newly_frozen.keys() == decision.frozen.keys()
    assert "check:" in frozen_message(decision.frozen)
    # Cleared: still frozen until no guard has held for a window of decisions (the defect's rollout leaves the
    # pooled window too), then it moves again.
    clean = [controller.decide(crafted_rollout(0.3, 0.3), START) for _ in range(8)]
    unfrozen = next(i for i, d in enumerate(clean) if not d.frozen)
    assert all(d.epsilons == START for d in clean[:unfrozen]) and unfrozen >= 3
    if guard == "sampler_mismatch":  # the bad rollout's on-policy clips stay in the pooled window 3 more decisions
        assert unfrozen == 6
    assert controller.decide(crafted_rollout(0.3, 0.3), START).epsilons != START


def test_adaptive_one_token_guard_freezes():
    rollout = crafted_rollout(0.3, 0.3)
    off = rollout[2] > 1
    outside = off & ((rollout[0] > 1.2e-3) | (rollout[0] < -1.2e-3))
    rollout[3] = outside.double()  # every clip driven by one outlier token
    decision = AdaptiveClipController(0.1, start=START).decide(rollout, START)
    assert "one_token" in decision.frozen and decision.epsilons == START


def test_adaptive_bound_guard_after_window_decisions_at_the_bound():
    controller = AdaptiveClipController(0.1, start=START)
    epsilons, history = START, []
    for _ in range(12):
        decision = controller.decide(crafted_rollout(1.0, 1.0, scale=200), epsilons)
        epsilons = decision.epsilons
        history.append((epsilons[1], bool(decision.frozen)))
    reached = next(i for i, (eps, _) in enumerate(history) if eps == pytest.approx(START[1] * BOUND_FACTOR))
    frozen = next(i for i, (_, is_frozen) in enumerate(history) if is_frozen)
    # It moves x1.5 per decision up to start x 10, then sits there: the 4th decision taken at the bound freezes it.
    assert reached == 5 and frozen == reached + 4 and "at_bound" in decision.frozen


def test_adaptive_state_round_trip_with_a_partial_window():
    controller = AdaptiveClipController(0.1, start=START)
    epsilons = START
    for share in (0.3, 0.25):  # two of the four rollouts of a window
        epsilons = controller.decide(crafted_rollout(share, share), epsilons).epsilons
    state = json.loads(json.dumps(controller.state_dict()))
    restored = AdaptiveClipController(0.5)
    restored.load_state_dict(state)
    assert len(restored.window) == 2
    following = crafted_rollout(0.35, 0.2)
    assert restored.decide(following, epsilons) == controller.decide(following, epsilons)
    assert restored.state_dict() == controller.state_dict()


def test_adaptive_composes_with_length_scaling():
    """With epsilon_length_scaling a response of L tokens is clipped at epsilon * sqrt(L_ref / L): the controller sees
    log s_i * sqrt(L / L_ref), so the share it measures under (epsilon_low, epsilon_high) is the loss's own."""
    from types import SimpleNamespace

    from gspo_recipes.loss import clipped_sides, length_scaled_epsilons
    from gspo_recipes.stats.adaptive_clip import clipped_shares
    from gspo_recipes.trainer.adaptive_clip import AdaptiveClipRange

    args = SimpleNamespace(epsilon_target_clip=0.1, epsilon_adaptive_min_responses=1)
    hook = AdaptiveClipRange(SimpleNamespace(args=args, epsilon_reference_length=32))
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([2, 8, 32] * 200)
    log_s = torch.randn(600, generator=generator, dtype=torch.float64) * 4e-3 / lengths.sqrt()
    advantages = torch.where(torch.arange(600) % 2 == 0, 1.0, -1.0).double()
    hook.record(log_s, lengths, advantages, minibatch=2)
    table = hook.rows[0]
    assert torch.allclose(table[0], log_s * (lengths / 32).sqrt())
    epsilons = (5e-4, 5e-4)
    measured, _ = clipped_shares(table[0], table[1], epsilons)
    low, high = clipped_sides(log_s, advantages, *length_scaled_epsilons(*epsilons, lengths.double(), 32))
    assert measured["high"] == pytest.approx(high[advantages > 0].double().mean().item())
    assert measured["low"] == pytest.approx(low[advantages < 0].double().mean().item())


# ---------------------------------------------------------------------------------------------- in a real trainer


def adaptive_trainer(tiny, dataset, output_dir, **overrides):
    from gspo_recipes import GSPOTrainer

    model, tokenizer = tiny
    settings = dict(epsilon_adaptive=True, epsilon_adaptive_min_responses=4, gspo_diagnostics=False, max_steps=12)
    settings.update(overrides)
    cfg = tiny_config(output_dir, **settings)
    return GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )


def ranges_per_micro_step(trainer) -> list[tuple[int, tuple[float, float]]]:
    """(generation batch index, range the loss used) for every training micro-step."""
    from gspo_recipes._trl import micro_steps_per_generation

    seen, loss = [], trainer._compute_loss

    def recording(model, inputs):
        out = loss(model, inputs)
        if trainer.model.training:
            generate_every = micro_steps_per_generation(trainer.args)
            seen.append((trainer._step // generate_every, (trainer.epsilon_low, trainer.epsilon_high)))
        return out

    trainer._compute_loss = recording
    return seen


@pytest.mark.parametrize(
    "schedule",
    [
        dict(gradient_accumulation_steps=2, per_device_train_batch_size=4),  # 4 minibatches of 2 micro-steps
        dict(gradient_accumulation_steps=2, steps_per_generation=3, per_device_train_batch_size=4),  # misaligned
    ],
)
def test_adaptive_range_changes_only_between_generation_batches(tmp_path, tiny, prompt_dataset, schedule):
    trainer = adaptive_trainer(tiny, prompt_dataset, tmp_path, max_steps=8, **schedule)
    seen = ranges_per_micro_step(trainer)
    trainer.train()
    by_batch = {}
    for batch, epsilons in seen:
        by_batch.setdefault(batch, set()).add(epsilons)
    assert all(len(ranges) == 1 for ranges in by_batch.values()), by_batch  # one range per generation batch
    changes = [b for b in sorted(by_batch)[1:] if by_batch[b] != by_batch[b - 1]]
    assert changes, "the controller never moved: the test would not notice a change inside a batch"


def test_adaptive_boundary_rule_is_trls_generation(tmp_path, tiny, prompt_dataset):
    """`starts_generation_batch` (where the controller decides) holds exactly at the micro-steps TRL has just generated
    for, on a schedule whose generation batches do not line up with optimizer steps (GUIDE 5)."""
    from gspo_recipes import _trl

    trainer = adaptive_trainer(
        tiny, prompt_dataset, tmp_path, max_steps=5, gradient_accumulation_steps=2, steps_per_generation=3,
        per_device_train_batch_size=4,
    )  # fmt: skip
    fresh, observed = {"generated": False}, []
    generate, loss = trainer._generate_and_score_completions, trainer._compute_loss

    def generation_spy(inputs):
        fresh["generated"] = True
        return generate(inputs)

    def loss_spy(model, inputs):
        observed.append((_trl.starts_generation_batch(trainer), fresh["generated"]))
        fresh["generated"] = False
        return loss(model, inputs)

    trainer._generate_and_score_completions, trainer._compute_loss = generation_spy, loss_spy
    trainer.train()
    assert sum(truth for _, truth in observed) >= 3 and [rule for rule, _ in observed] == [t for _, t in observed]


def test_adaptive_waits_for_the_learning_rate_warm_up(tmp_path, tiny, prompt_dataset):
    trainer = adaptive_trainer(tiny, prompt_dataset, tmp_path, max_steps=9, warmup_steps=5)
    seen = ranges_per_micro_step(trainer)
    trainer.train()
    # Boundaries at steps 4 (warming up: nothing decided, its rollout left out) and 8 (from the rollout of 4-7).
    assert {epsilons for batch, epsilons in seen if batch <= 1} == {(3e-4, 4e-4)}
    assert trainer.adaptive_clip.controller.decisions == 1 and len(trainer.adaptive_clip.controller.window) == 1


def test_adaptive_logs_the_range_and_decisions_and_off_logs_suggestions(tmp_path, tiny, prompt_dataset):
    trainer = adaptive_trainer(tiny, prompt_dataset, tmp_path / "on", gspo_diagnostics=True, max_steps=5)
    trainer.train()
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert {"gspo/epsilon_low", "gspo/epsilon_high", "gspo/adaptive/share_low", "gspo/adaptive/factor_high"} <= logged
    assert not any(key.startswith("gspo/clip_suggest") for key in logged)
    lines = [json.loads(line) for line in (tmp_path / "on" / "gspo_diagnostics.jsonl").read_text().splitlines()]
    decided = [d for line in lines for d in line.get("adaptive_clip", [])]
    assert decided and decided[0]["target"] == 0.1

    from gspo_recipes.commands.report.adaptive_clip import plot_adaptive_clip

    assert plot_adaptive_clip(lines, str(tmp_path / "figure.png")) and (tmp_path / "figure.png").stat().st_size

    model, tokenizer = tiny
    fixed = adaptive_trainer(
        (model, tokenizer), prompt_dataset, tmp_path / "off", epsilon_adaptive=False, gspo_diagnostics=True,
        logging_steps=4,  # windows of 24 off-policy responses: some with 10 per side, enough for a 10% quantile
    )  # fmt: skip
    fixed.train()
    suggested = [entry for entry in fixed.state.log_history if "gspo/clip_suggest/high" in entry]
    assert suggested and all(entry["gspo/clip_suggest/high"] >= 0 for entry in suggested)
    assert not any("gspo/adaptive/share_low" in entry for entry in fixed.state.log_history)


def test_adaptive_frozen_by_a_clipping_sampler_warns_in_the_diagnostics_file(tmp_path, tiny, prompt_dataset, caplog):
    """The sampler's log-probabilities as pi_old differ from the trainer's by float noise (~1e-7): a range narrower
    than that makes the on-policy minibatch clip, which a wider range would hide. It freezes at the first decision."""
    import logging

    from gspo_recipes.runfiles.diagnostics import read_diagnostics
    from gspo_recipes.runfiles.run_warnings import recorded_warnings

    trainer = adaptive_trainer(
        tiny, prompt_dataset, tmp_path, epsilon=1e-8, epsilon_high=1e-8, old_logps_source="sampler",
        gspo_diagnostics=True, max_steps=5,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.adaptive_clip"):
        trainer.train()
    assert "Adaptive clip range frozen: the on-policy minibatch alone clips" in caplog.text
    assert (trainer.epsilon_low, trainer.epsilon_high) == (1e-8, 1e-8)  # not widened over the defect
    warnings = recorded_warnings(read_diagnostics(str(tmp_path / "gspo_diagnostics.jsonl")))
    frozen = [w for w in warnings if w["kind"] == "adaptive_clip_frozen"]
    assert len(frozen) == 1 and "gspo/sampler_mismatch" in frozen[0]["message"] and frozen[0]["step"] == 4


@pytest.mark.slow
def test_adaptive_frozen_at_a_bound_warns_in_the_diagnostics_file(tmp_path, tiny, prompt_dataset, caplog):
    import logging

    from gspo_recipes.runfiles.diagnostics import read_diagnostics
    from gspo_recipes.runfiles.run_warnings import recorded_warnings

    # A start far wider than the run needs: the wanted range lies below start / 10 at every decision.
    trainer = adaptive_trainer(
        tiny,
        prompt_dataset,
        tmp_path,
        epsilon=0.5,
        epsilon_high=0.5,
        gspo_diagnostics=True,
        max_steps=21,
        num_minibatches=2,  # a decision every 2 steps: 6 to reach start / 10, frozen at the 4th decision there
    )
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.adaptive_clip"):
        trainer.train()
    assert "Adaptive clip range frozen" in caplog.text and "recalibrate the start" in caplog.text
    warnings = recorded_warnings(read_diagnostics(str(tmp_path / "gspo_diagnostics.jsonl")))
    assert [w["kind"] for w in warnings if w["kind"] == "adaptive_clip_frozen"] == ["adaptive_clip_frozen"]
    assert trainer.epsilon_low == pytest.approx(0.05)  # held at start / 10 while frozen


def test_adaptive_resume_gives_the_same_range_as_the_uninterrupted_run(tmp_path, tiny, prompt_dataset):
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    full = adaptive_trainer(tiny, prompt_dataset, tmp_path, save_strategy="steps", save_steps=8)
    full.train()
    state = json.loads((tmp_path / "checkpoint-8" / "gspo_adaptive_clip.json").read_text())
    assert len(state["controller"]["window"]) == 1  # a partial window: one rollout decided on ...
    assert len(state["open_rollout"][0]) > 0  # ... and the open one, whose decision comes at step 8's boundary
    assert state["controller"]["epsilons"] != [3e-4, 4e-4]
    again = adaptive_trainer(build_tiny_model_and_tokenizer(), prompt_dataset, tmp_path / "again")
    again.args.output_dir = str(tmp_path)
    again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-8"))
    assert (again.epsilon_low, again.epsilon_high) == (full.epsilon_low, full.epsilon_high)
    assert again.adaptive_clip.controller.state_dict() == full.adaptive_clip.controller.state_dict()


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_minibatches=1), "num_minibatches"),
        (dict(importance_sampling_level="token"), "importance_sampling_level"),
        (dict(epsilon_adaptive_min_responses=0), "epsilon_adaptive_min_responses"),
        (dict(epsilon_target_clip=1.5), "epsilon_target_clip"),
    ],
)
def test_adaptive_config_refuses_settings_it_cannot_control(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(tmp_path, epsilon_adaptive=True, **overrides)


@pytest.mark.slow
def test_adaptive_two_gloo_processes_decide_identically_and_resume(tmp_path):
    from support import launch_two_cpu_processes

    full, resumed = tmp_path / "full.json", tmp_path / "resumed.json"
    launch_two_cpu_processes("two_process_adaptive_clip.py", str(tmp_path / "run"), str(full), cwd=tmp_path)
    ranks = json.loads(full.read_text())
    assert ranks[0] == ranks[1] and len({tuple(r) for r in ranks[0]}) > 1  # moved, alike on both processes
    launch_two_cpu_processes(
        "two_process_adaptive_clip.py", str(tmp_path / "run"), str(resumed), "resume", cwd=tmp_path
    )
    assert json.loads(resumed.read_text())[0][-1] == ranks[0][-1]
