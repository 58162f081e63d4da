"""Every warning a run gives reaches its diagnostics file and `gspo report`'s list; lines that hold only sections, or
repeat a step, read and report without error; the lines carry what the report's replay needs."""

import json

from support import digit_count_reward, plain_grpo_config, tiny_config
from trl import GRPOTrainer

import gspo_recipes.commands.report as rep
from gspo_recipes import GSPOTrainer
from gspo_recipes.callbacks import ClipFractionByLengthCallback, LogRatioHistogramCallback
from gspo_recipes.commands.calibrate import read_off_policy
from gspo_recipes.runfiles.diagnostics import read_diagnostics
from gspo_recipes.runfiles.run_warnings import record_warning, recorded_warnings


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_a_real_run_whose_trust_region_does_nothing_has_the_warning_in_its_file_and_in_the_reports_list(
    tmp_path, tiny, prompt_dataset
):
    """A clip range of [0, 2] on a plain GRPOTrainer: minibatches 2-4 never clip. The warning lands in its step's line
    and `gspo report` lists it as given by the run."""
    model, tokenizer = tiny
    cfg = plain_grpo_config(tmp_path, importance_sampling_level="sequence", epsilon=1.0, epsilon_high=1.0,
                            steps_per_generation=4, max_steps=8)  # fmt: skip
    trainer = GRPOTrainer(model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset,
                          processing_class=tokenizer)  # fmt: skip
    clip = ClipFractionByLengthCallback(trainer, quiet_steps=3)
    trainer.add_callback(clip)
    trainer.add_callback(LogRatioHistogramCallback(trainer))
    trainer.train()
    assert [w["kind"] for w in clip.warnings.history] == ["never_clips"]
    lines = read_lines(tmp_path / "gspo_diagnostics.jsonl")
    recorded = recorded_warnings(lines)
    assert [(w["kind"], w["message"]) for w in recorded] == [("never_clips", clip.warnings.history[0]["message"])]
    step = recorded[0]["step"]
    assert step == 4  # windows 2, 3, 4 have off-policy minibatches and clip nothing
    assert any(line["step"] == step and "warnings" in line and "off_policy" in line for line in lines)
    assert all(line["applied_clip"] == "sequence" and not line["calibrating"] for line in lines)
    rep.report(str(tmp_path))
    summary = (tmp_path / rep.SUMMARY_FILE).read_text()
    listed = summary.split("warnings the run gave (recorded as they fired):\n")[1].split("replayed clip")[0]
    assert listed.startswith(f"  step {step} [never_clips]: GSPO health: nothing clipped")
    assert "replayed clip health warnings" in summary


def test_the_on_policy_warning_of_a_gspo_run_reaches_the_report(tmp_path, tiny, prompt_dataset, capsys):
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, steps_per_generation=1, max_steps=2)  # one optimizer step per generation batch
    GSPOTrainer(model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset,
                processing_class=tokenizer).train()  # fmt: skip
    kinds = [(w["step"], w["kind"]) for w in recorded_warnings(read_diagnostics(str(tmp_path / rep.DIAGNOSTICS_FILE)))]
    assert kinds == [(0, "on_policy")]  # given at train begin, written with the first line
    rep.report(str(tmp_path))
    assert "  step 0 [on_policy]: GSPO health: training is fully on-policy" in capsys.readouterr().out


def test_the_lines_of_a_calibrating_run_say_so_and_where_the_range_changed(tmp_path, tiny, prompt_dataset):
    """Calibrated after 3 steps, logging every 2: the window 1-2 was recorded while calibrating, and the window 3-4
    trained with both ranges (calibration happens at the start of step 4's loss)."""
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, epsilon_calibration_steps=3, logging_steps=2, max_steps=4)
    trainer = GSPOTrainer(model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset,
                          processing_class=tokenizer)  # fmt: skip
    trainer.train()
    lines = read_lines(tmp_path / rep.DIAGNOSTICS_FILE)
    flags = [(line["step"], line["calibrating"], line["clip_range_changed"]) for line in lines]
    assert flags == [(2, True, False), (4, False, True)]
    assert lines[-1]["epsilon_high"] == trainer.epsilon_high != cfg.epsilon_high


def full_line(step):
    return {
        "step": step,
        "epsilon_low": 3e-4,
        "epsilon_high": 4e-4,
        "responses": 2,
        "bin_edges": [-1e-3, 0.0, 1e-3],
        "counts": [1, 1],
        "buckets": [{"lo": 1, "hi": 8, "responses": 2, "clipped_low": 1, "clipped_high": 0, "log_s_std": 1e-3}],
        "minibatches": {"2": {"responses": 2, "clipped_low": 1, "clipped_high": 0}},
        "off_policy": {"log_s": [-1e-3, 1e-3], "advantage_sign": [-1, -1], "length": [4, 5]},
    }


def test_lines_with_only_sections_read_report_and_calibrate_without_error(tmp_path, capsys):
    """As LogRatioHistogramCallback writes at a step without responses: `{"step": N, ...sections}`."""
    warning = {"kind": "low_signal", "message": "GSPO health: only 0% of the responses ..."}
    groups = {"batches": 1, "groups": 2, "responses": 8, "solve_all": 0, "solve_none": 2, "zero_std": 2, "effective": 0}
    lines = [full_line(1), {"step": 2, "groups": groups, "warnings": [warning]}, full_line(3)]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / rep.DIAGNOSTICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert rep.report(str(run_dir)) in (0, 1)  # 1: without matplotlib
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    assert "steps 1-3 (2 logged windows), 4 responses" in summary
    assert "  step 2 [low_signal]: GSPO health: only 0%" in summary
    assert "groups (signal reward, 2 groups in 1 generation batches)" in summary
    data = read_off_policy(str(run_dir / rep.DIAGNOSTICS_FILE))
    assert data["steps"] == [1, 3] and data["log_s"].numel() == 4
    from gspo_recipes.commands.cli import main

    assert main(["calibrate", str(run_dir)]) == 0
    # A file of sections only: the report says there are no responses and still lists the warning.
    (run_dir / rep.DIAGNOSTICS_FILE).write_text(json.dumps(lines[1]) + "\n")
    assert rep.report(str(run_dir)) in (0, 1)
    summary = (run_dir / rep.SUMMARY_FILE).read_text()
    assert "responses: none recorded" in summary and "[low_signal]" in summary
    assert main(["calibrate", str(run_dir)]) == 2  # nothing to calibrate from, said plainly
    assert "holds no off-policy responses" in capsys.readouterr().out


def test_a_second_line_for_a_step_merges_into_the_first_keeping_both_warnings(tmp_path):
    """The writer adds one when a callback stages a warning after that step's line went out (at the run's end)."""
    first = {**full_line(4), "warnings": [{"kind": "a", "message": "A"}]}
    path = tmp_path / rep.DIAGNOSTICS_FILE
    path.write_text(json.dumps(first) + "\n" + json.dumps({"step": 4, "warnings": [{"kind": "b", "message": "B"}]}))
    (line,) = read_diagnostics(str(path))
    assert line["off_policy"] == first["off_policy"]
    assert [w["kind"] for w in recorded_warnings([line])] == ["a", "b"]


def test_record_warning_notes_the_step_it_was_given_at():
    from types import SimpleNamespace

    trainer = SimpleNamespace(state=SimpleNamespace(global_step=7))
    record_warning(trainer, "entropy_collapse", "GSPO health: ...")
    line = {"step": 9, **trainer.gspo_diagnostics_sections}
    assert recorded_warnings([line]) == [{"step": 7, "kind": "entropy_collapse", "message": "GSPO health: ..."}]
    assert recorded_warnings([{"step": 9, "warnings": [{"kind": "k", "message": "m"}]}])[0]["step"] == 9


def test_the_routing_monitor_hands_its_warning_to_the_hook(caplog):
    """When a kernel bypasses the experts' hooks, volatility stops being measured: said once, and recorded."""
    import torch
    from support import tiny_moe_model_and_tokenizer

    from gspo_recipes.moe.monitor import RoutingMonitor

    model, _ = tiny_moe_model_and_tokenizer()
    monitor = RoutingMonitor(model)
    monitor.measure = True
    given = []
    monitor.on_warning = lambda kind, message: given.append((kind, message))
    old_routes = torch.zeros(1, 4, monitor.num_layers, 2, dtype=torch.long)
    assert monitor.score_current(lambda: "no forward", old_routes, torch.ones(1, 2), minibatch=2) == "no forward"
    assert given == [("routing_not_measured", "Routing volatility is off: the MoE layers' hooks saw no forward "
                      "call (a hub kernel?).")]  # fmt: skip
    assert not monitor.measure


def test_wasted_rollouts_in_the_run_quotes_the_calibrated_epsilon_high_not_the_configured_one(
    tmp_path, tiny, prompt_dataset, caplog
):
    """The trainer's range after calibration (1e-3, 2e-3) against the config's 4e-4: the fix names the one in force."""
    import logging

    import torch
    from transformers import TrainerControl, TrainerState

    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, gspo_diagnostics=False)
    trainer = GSPOTrainer(model=model, reward_funcs=digit_count_reward, args=cfg, processing_class=tokenizer,
                          train_dataset=prompt_dataset)  # fmt: skip
    trainer.epsilon_low, trainer.epsilon_high = 1e-3, 2e-3
    callback = ClipFractionByLengthCallback(trainer, min_responses=4)
    state = TrainerState(max_steps=100)
    log_s, adv = torch.tensor([5e-3] * 8), torch.tensor([1.0, -1.0] * 4)
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.stats.health"):
        for _ in range(2):
            trainer.response_stats.record(log_s, torch.full((8,), 5), adv, torch.zeros(8, dtype=torch.bool),
                                          adv > 0, minibatch=2)  # fmt: skip
            state.global_step += 1
            callback.on_step_end(cfg, state, TrainerControl(should_log=True))
    assert cfg.epsilon_high == 4e-4
    assert "widen epsilon_high (now 0.002)" in caplog.text and "0.0004" not in caplog.text
