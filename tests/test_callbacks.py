"""The diagnostics callbacks: metrics against hand-computed values, drop-in use on TRL's GRPOTrainer, trackers,
the diagnostics file across a resume, health warnings, and two processes."""

import json
import logging
import math
import os
import re
import sys

import pytest
import torch
from support import digit_count_reward, launch_two_cpu_processes, plain_grpo_config, tiny_config
from trl import GRPOTrainer

from gspo_recipes import GSPOTrainer
from gspo_recipes.callbacks import ClipFractionByLengthCallback, HealthWarnings, LogRatioHistogramCallback
from gspo_recipes.callbacks.clip_fraction import clip_fractions, one_token_fractions
from gspo_recipes.callbacks.log_ratio_histogram import histogram, log_s_summary
from gspo_recipes.stats.response_stats import ResponseStats, length_buckets

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "scripts"))
from crafted_responses import responses_of_rank  # noqa: E402

# ----------------------------------------------------------------------------------------- crafted window


def crafted_window():
    """Eight responses: minibatch 1 on-policy (log s = 0), minibatch 2 with known clips."""
    stats = ResponseStats()
    stats.record(
        torch.zeros(3),
        torch.tensor([4, 12, 30]),
        torch.tensor([1.0, -1.0, 1.0]),
        torch.zeros(3, dtype=torch.bool),
        torch.zeros(3, dtype=torch.bool),
        minibatch=1,
    )
    log_s = torch.tensor([1e-3, -1e-3, 2e-4, -2e-4, 5e-4])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0])
    stats.record(
        log_s,
        torch.tensor([5, 6, 20, 33, 0]).clone(),
        adv,
        torch.tensor([False, True, False, False, False]),
        torch.tensor([True, False, False, False, False]),
        minibatch=2,
    )
    return stats.window(step=1)


def test_window_drops_empty_responses_and_clears():
    stats = ResponseStats()
    stats.record(
        torch.tensor([0.1, 0.2]),
        torch.tensor([3, 0]),
        torch.tensor([1.0, 1.0]),
        torch.tensor([False, False]),
        torch.tensor([True, True]),
        minibatch=2,
    )
    window = stats.window(step=1)
    assert window["log_s"].tolist() == pytest.approx([0.1])
    assert stats.window(step=1) is window  # the second callback at the same step shares the window
    assert stats.window(step=2)["log_s"].numel() == 0


def test_clip_fractions_by_side_length_and_minibatch():
    window = crafted_window()  # 7 responses kept (one had no tokens)
    metrics = clip_fractions(window, length_buckets(64))  # buckets 1-8, 9-16, 17-32, 33-64
    assert metrics["gspo/clip_frac"] == pytest.approx(2 / 7)
    assert metrics["gspo/clip_frac_low"] == pytest.approx(1 / 7)
    assert metrics["gspo/clip_frac_high"] == pytest.approx(1 / 7)
    # lengths 4, 5, 6 fall in 1-8 (two of them clipped, one per side); 12 in 9-16; 20 and 30 in 17-32; 33 in 33-64
    assert metrics["gspo/clip_frac/len_1-8"] == pytest.approx(2 / 3)
    assert metrics["gspo/clip_frac_low/len_1-8"] == pytest.approx(1 / 3)
    assert metrics["gspo/clip_frac_high/len_1-8"] == pytest.approx(1 / 3)
    assert metrics["gspo/clip_frac/len_9-16"] == 0.0 and metrics["gspo/clip_frac/len_17-32"] == 0.0
    assert metrics["gspo/clip_frac/len_33-64"] == 0.0
    assert metrics["gspo/clip_frac/minibatch_1"] == 0.0
    assert metrics["gspo/clip_frac/minibatch_2"] == pytest.approx(2 / 4)


def test_log_s_statistics_are_over_off_policy_responses():
    window = crafted_window()
    selected = window["minibatch"] > 1
    values = [1e-3, -1e-3, 2e-4, -2e-4]
    metrics = log_s_summary(window["log_s"][selected], window, selected, length_buckets(64))
    mean = sum(values) / 4
    assert metrics["gspo/log_s/mean"] == pytest.approx(mean, abs=1e-9)
    assert metrics["gspo/log_s/std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 4), rel=1e-5)
    assert metrics["gspo/log_s/min"] == pytest.approx(-1e-3) and metrics["gspo/log_s/max"] == pytest.approx(1e-3)
    assert metrics["gspo/log_s/p50"] == pytest.approx(0.0, abs=1e-9)
    # linear interpolation: p05 lies 15% of the way from -1e-3 to -2e-4
    assert metrics["gspo/log_s/p05"] == pytest.approx(-1e-3 + 0.15 * 8e-4, rel=1e-4)
    assert metrics["gspo/log_s/p95"] == pytest.approx(2e-4 + 0.85 * 8e-4, rel=1e-4)
    assert metrics["gspo/log_s_std/len_1-8"] == pytest.approx(1e-3, rel=1e-5)  # {1e-3, -1e-3}
    assert metrics["gspo/log_s_std/len_17-32"] == 0.0  # one response
    assert "gspo/log_s_std/len_9-16" not in metrics  # only an on-policy response there


def test_histogram_counts_every_value():
    counts, edges = histogram(torch.tensor([-1.0, 0.0, 0.0, 1.0]), bins=4)
    assert edges == pytest.approx([-1.0, -0.5, 0.0, 0.5, 1.0])
    assert counts == [1, 0, 2, 1]


def test_length_buckets():
    assert length_buckets(256) == [(1, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256)]
    assert length_buckets(100) == [(1, 8), (9, 16), (17, 32), (33, 64), (65, 100)]
    assert length_buckets(999, [100, 10]) == [(1, 10), (11, 100)]
    with pytest.raises(ValueError, match="positive"):
        length_buckets(10, [0, 5])


# ----------------------------------------------------------------------------------------- health warnings


def off_policy_window(log_s, adv, eps_low=3e-4, eps_high=4e-4):
    log_s, adv = torch.tensor(log_s), torch.tensor(adv)
    stats = ResponseStats()
    stats.record(
        log_s,
        torch.full_like(log_s, 10),
        adv,
        (log_s < -eps_low) & (adv < 0),
        (log_s > eps_high) & (adv > 0),
        minibatch=2,
    )
    return stats.window(step=0)


def test_health_warnings_once_per_occurrence(caplog):
    args = tiny_config("/tmp/unused-health")
    health = HealthWarnings(quiet_steps=3, min_responses=1)
    wasted = off_policy_window([1e-3, 1e-3, -1e-3, 0.0], [1.0, 1.0, -1.0, 1.0])  # 2/3 positives clipped
    with caplog.at_level(logging.WARNING):
        health.check_window(wasted, args)
        health.check_window(wasted, args)
    assert caplog.text.count("rollouts are wasted") == 1 and "epsilon_high" in caplog.text
    calm = off_policy_window([0.0, 0.0], [1.0, -1.0])
    health.check_window(calm, args)  # clears the condition; the next occurrence warns again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        health.check_window(wasted, args)
    assert caplog.text.count("rollouts are wasted") == 1


def test_health_shares_wait_for_enough_responses(caplog):
    args = tiny_config("/tmp/unused-health")
    health = HealthWarnings(min_responses=6)
    wasted = off_policy_window([1e-3, 1e-3, -1e-3, -1e-3], [1.0, 1.0, -1.0, -1.0])  # 2 per side, all clipped
    with caplog.at_level(logging.WARNING):
        health.check_window(wasted, args)
        health.check_window(wasted, args)
        assert "rollouts are wasted" not in caplog.text  # 4 per side so far: too few to judge
        health.check_window(wasted, args)
    assert caplog.text.count("rollouts are wasted") == 1


def test_health_warning_trust_region_idle(caplog):
    args = tiny_config("/tmp/unused-health")
    health = HealthWarnings(quiet_steps=3)
    calm = off_policy_window([0.0, 1e-5], [1.0, -1.0])
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            health.check_window(calm, args)
        assert "trust region does nothing" not in caplog.text
        health.check_window(calm, args)
    assert "trust region does nothing" in caplog.text


def test_health_warning_one_sided_and_on_policy(caplog):
    args = tiny_config("/tmp/unused-health")
    health = HealthWarnings(min_responses=1)
    biased = off_policy_window([-1e-3] * 4, [1.0, 1.0, -1.0, -1.0])  # every log s_i shifted down
    with caplog.at_level(logging.WARNING):
        health.check_window(biased, args)
        health.check_setup(on_policy=True)
    assert "one side is clipped wholesale" in caplog.text and "sampler" in caplog.text
    assert "GSPO equals GRPO" in caplog.text
    assert [w["kind"] for w in health.history] == ["one_sided", "on_policy"]


# ----------------------------------------------------------------------------------------- real runs


def grpo_trainer(tmp_path, tiny, dataset, **overrides):
    model, tokenizer = tiny
    cfg = plain_grpo_config(
        tmp_path, importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4, steps_per_generation=4,
        max_steps=8, **overrides,
    )  # fmt: skip
    return GRPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_drop_in_on_plain_grpo_trainer(tmp_path, tiny, prompt_dataset):
    trainer = grpo_trainer(tmp_path, tiny, prompt_dataset)
    trainer.add_callback(ClipFractionByLengthCallback(trainer))
    trainer.add_callback(LogRatioHistogramCallback(trainer, bins=10))
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "clip_ratio/region_mean" in entry]
    assert len(logs) == 8
    for entry in logs:
        assert entry["gspo/clip_frac"] == pytest.approx(entry["clip_ratio/region_mean"], abs=1e-7)
        assert entry["gspo/clip_frac_low"] == pytest.approx(entry["clip_ratio/low_mean"], abs=1e-7)
    assert any(entry["gspo/clip_frac"] > 0 for entry in logs), "the paper's range should clip on this tiny run"
    assert sum("gspo/log_s/std" in entry for entry in logs) == 6  # minibatches 2-4 of two generation batches
    lines = read_lines(tmp_path / "gspo_diagnostics.jsonl")
    assert [line["step"] for line in lines] == list(range(1, 9))
    off_policy_line = lines[1]
    assert sum(off_policy_line["counts"]) == 8 and len(off_policy_line["bin_edges"]) == 11
    assert sum(b["responses"] for b in off_policy_line["buckets"]) == 8


def test_callbacks_never_change_training(tmp_path, tiny, prompt_dataset):
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    runs = []
    for diagnostics in (True, False):
        model, tokenizer = build_tiny_model_and_tokenizer()
        cfg = tiny_config(tmp_path / str(diagnostics), gspo_diagnostics=diagnostics, max_steps=6)
        trainer = GSPOTrainer(
            model=model,
            reward_funcs=digit_count_reward,
            args=cfg,
            train_dataset=prompt_dataset,
            processing_class=tokenizer,
        )
        trainer.train()
        runs.append([(e["loss"], e["grad_norm"]) for e in trainer.state.log_history if "loss" in e])
    assert runs[0] == runs[1]
    assert os.path.exists(tmp_path / "True" / "gspo_diagnostics.jsonl")
    assert not os.path.exists(tmp_path / "False" / "gspo_diagnostics.jsonl")


def test_tensorboard_event_file_holds_the_histogram(tmp_path, tiny, prompt_dataset, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, report_to=["tensorboard"])
    GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    ).train()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0}).Reload()
    assert "gspo/log_s" in events.Tags()["histograms"]
    histograms = events.Histograms("gspo/log_s")
    assert [h.step for h in histograms] == [2, 3, 4]  # the off-policy minibatches of the first generation batch
    assert all(h.histogram_value.num == 8 for h in histograms)
    assert "train/gspo/clip_frac" in events.Tags()["scalars"]


@pytest.mark.slow
@pytest.mark.parametrize("killed_mid_write", [False, True])
def test_diagnostics_file_continues_on_resume(tmp_path, tiny, prompt_dataset, killed_mid_write):
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, max_steps=8, save_strategy="steps", save_steps=4)
    GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    ).train()
    path = tmp_path / "gspo_diagnostics.jsonl"
    assert [line["step"] for line in read_lines(path)] == list(range(1, 9))
    if killed_mid_write:  # as if killed while writing step 6: steps 1-5 and half a line
        text = path.read_text().splitlines(keepends=True)
        path.write_text("".join(text[:5]) + text[5][: len(text[5]) // 2])
    # As if the run had died after step 8 and were resumed from the checkpoint at step 4.
    model, tokenizer = build_tiny_model_and_tokenizer()
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert [line["step"] for line in read_lines(path)] == list(range(1, 9))


def test_other_callbacks_add_sections_to_the_diagnostics_line(tmp_path, tiny, prompt_dataset):
    """A section staged in `gspo_diagnostics_sections` at on_step_end lands in that step's line, whatever the order
    in which the callbacks were added."""
    from transformers import TrainerCallback

    class Staging(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if control.should_log:
                trainer.__dict__.setdefault("gspo_diagnostics_sections", {})["extra"] = {"at": state.global_step}

    model, tokenizer = tiny
    trainer = GSPOTrainer(
        model=model,
        reward_funcs=digit_count_reward,
        args=tiny_config(tmp_path, max_steps=3),
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    trainer.add_callback(Staging())  # after the diagnostics callbacks
    trainer.train()
    lines = read_lines(tmp_path / "gspo_diagnostics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert [line["extra"]["at"] for line in lines] == [1, 2, 3]


@pytest.mark.slow
def test_two_processes_log_what_one_process_computes_over_the_same_responses(tmp_path):
    out = tmp_path / "metrics.json"
    launch_two_cpu_processes("two_process_stats.py", str(out), cwd=tmp_path, timeout=300)
    result = json.loads(out.read_text())
    stats = ResponseStats()
    for rank in (0, 1):
        for chunk in responses_of_rank(rank):
            stats.record(**chunk)
    window = stats.window(step=1)
    buckets = length_buckets(64)
    selected = window["minibatch"] > 1
    expected = {
        **clip_fractions(window, buckets),
        **one_token_fractions(window, buckets, selected),
        **log_s_summary(window["log_s"][selected], window, selected, buckets),
    }
    assert window["one_token"].sum() > 0 and "gspo/clip_frac/one_token" in expected  # the field is gathered too
    assert result["responses"] == 9
    assert result["metrics"].keys() == expected.keys()
    for name, value in expected.items():
        assert result["metrics"][name] == pytest.approx(value, abs=1e-7), name


@pytest.mark.parametrize("logging_steps,max_steps", [(2, 7), (3, 8)])
def test_diagnostics_file_holds_every_response_when_the_last_window_is_short(
    tmp_path, tiny, prompt_dataset, logging_steps, max_steps
):
    """max_steps not a multiple of logging_steps: the Trainer does not log the last step, yet its responses are written,
    and the last window's metrics reach the logs."""
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, logging_steps=logging_steps, max_steps=max_steps)
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    trainer.train()
    lines = read_lines(tmp_path / "gspo_diagnostics.jsonl")
    logging_points = list(range(logging_steps, max_steps + 1, logging_steps))
    assert [line["step"] for line in lines] == logging_points + [max_steps]
    assert sum(line["responses"] for line in lines) == 8 * max_steps  # 8 responses per optimizer step
    assert "gspo/clip_frac" in trainer.state.log_history[-1]  # the last window's, with the Trainer's summary


def test_diagnostics_line_after_a_resume_holds_the_responses_recorded_before_the_checkpoint(
    tmp_path, tiny, prompt_dataset
):
    """Checkpoint at step 3, logging every 2 steps: step 4's line counts steps 3 and 4 after a resume too."""
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, logging_steps=2, max_steps=4, save_strategy="steps", save_steps=3)
    GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    ).train()
    path = tmp_path / "gspo_diagnostics.jsonl"
    uninterrupted = read_lines(path)
    assert [(line["step"], line["responses"]) for line in uninterrupted] == [(2, 16), (4, 16)]
    model, tokenizer = build_tiny_model_and_tokenizer()
    GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    ).train(resume_from_checkpoint=str(tmp_path / "checkpoint-3"))
    resumed = read_lines(path)
    assert [(line["step"], line["responses"]) for line in resumed] == [(2, 16), (4, 16)]


def test_health_judges_nothing_while_calibrating_nor_across_a_change_of_the_range(
    tmp_path, tiny, prompt_dataset, caplog
):
    """The windows of a calibrating run, fed to the callback as the trainer would (logging every 2 steps): every
    positive response is clipped while calibrating (steps 1-5, silent) and in the window where the range changes
    (steps 5-6, silent); then healthy (silent); once the new range itself wastes rollouts, it warns."""
    from transformers import TrainerControl, TrainerState

    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, epsilon_calibration_steps=5, gspo_diagnostics=False)
    trainer = GSPOTrainer(model=model, reward_funcs=digit_count_reward, args=cfg, processing_class=tokenizer,
                          train_dataset=prompt_dataset)  # fmt: skip
    callback = ClipFractionByLengthCallback(trainer, min_responses=4)
    state = TrainerState(max_steps=100)

    def step(clipped: bool, calibrated_now: bool = False):
        if calibrated_now:
            trainer.calibration.epsilons = trainer.epsilon_low, trainer.epsilon_high = (1e-3, 2e-3)
        high = trainer.epsilon_high
        log_s = torch.tensor([2 * high, 2 * high, -0.1 * high, 0.1 * high] if clipped else [0.0, 0.1 * high] * 2)
        adv = torch.tensor([1.0, 1.0, -1.0, 1.0])
        trainer.response_stats.record(log_s, torch.full((4,), 5), adv, torch.zeros(4, dtype=torch.bool),
                                      (log_s > high) & (adv > 0), minibatch=2)  # fmt: skip
        state.global_step += 1
        control = TrainerControl(should_log=state.global_step % 2 == 0)
        callback.on_step_end(cfg, state, control)

    with caplog.at_level(logging.WARNING, logger="gspo_recipes.stats.health"):
        for _ in range(5):  # calibrating: everything clipped, no warning
            step(clipped=True)
        step(clipped=True, calibrated_now=True)  # step 6 trains with the calibrated range: window 5-6 has both
        assert "rollouts are wasted" not in caplog.text
        for _ in range(4):
            step(clipped=False)
        assert "rollouts are wasted" not in caplog.text
        for _ in range(4):
            step(clipped=True)
    assert caplog.text.count("rollouts are wasted") == 1


@pytest.mark.slow
def test_two_processes_show_every_warning_once_from_the_main_process_with_gathered_figures(tmp_path):
    """Two runs built to fire the config's, the sampler's, the mismatch monitor's, the calibration's and the health
    callback's warnings (tests/scripts/two_process_warnings.py): each shows once, from rank 0, with the figures the
    run logged (gathered from both processes)."""
    result = launch_two_cpu_processes("two_process_warnings.py", str(tmp_path), cwd=tmp_path, timeout=300)
    shown = re.findall(r"\[rank(\d)\] (gspo_recipes[\w.]*): (.*)", result.stdout + result.stderr)
    kinds = {
        "gspo_recipes.sampler.old_logps": "with dropout on",
        "gspo_recipes.sampler.mismatch": "Mismatch between the sampler's",
        "gspo_recipes.trainer.gspo_trainer": "Calibrated the clip range",
        "gspo_recipes.trainer.config": "training is fully on-policy",
        "gspo_recipes.stats.health": "GSPO health: training is fully on-policy",
    }
    for name, text in kinds.items():
        lines = [(rank, message) for rank, logger, message in shown if logger == name and text in message]
        assert [rank for rank, _ in lines] == ["0"], (name, shown)
    assert all(rank == "0" for rank, _, _ in shown), shown
    history = json.loads((tmp_path / "history.json").read_text())
    message = next(m for _, logger, m in shown if logger == "gspo_recipes.sampler.mismatch")
    warned_mean = float(re.search(r"mean log s_i \(trainer - sampler\) = (\S+) ", message).group(1))
    assert warned_mean == pytest.approx(history[0]["gspo/sampler_mismatch/log_s_mean"], rel=1e-2)
    message = next(m for _, logger, m in shown if logger == "gspo_recipes.trainer.gspo_trainer")
    warned = [float(v) for v in re.search(r"epsilon=(\S+), epsilon_high=(\S+) \(was", message).groups()]
    calibrated = [history[-2]["gspo/epsilon_low"], history[-2]["gspo/epsilon_high"]]
    assert warned == pytest.approx(calibrated, rel=1e-2)


def test_a_log_forced_by_a_later_callback_closes_the_gspo_window_too(tmp_path):
    """logging_steps=4 and a callback of the user's, registered after GSPOTrainer's, forcing a log at step 3: the
    gspo/ window follows the logs that happen (3, 4, 6), equal to TRL's count at each."""
    from datasets import Dataset
    from transformers import TrainerCallback

    from gspo_recipes import GSPOTrainer
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    class ForceALogAtStep3(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                control.should_log = True

    model, tokenizer = build_tiny_model_and_tokenizer()
    args = tiny_config(tmp_path, max_steps=6, logging_steps=4)
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    trainer = GSPOTrainer(model=model, reward_funcs=digit_count_reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer)  # fmt: skip
    trainer.add_callback(ForceALogAtStep3())  # after the diagnostics callbacks: their on_step_end has run
    trainer.train()
    ours = {e["step"]: e["gspo/clip_frac"] for e in trainer.state.log_history if "gspo/clip_frac" in e}
    trl = {e["step"]: e["clip_ratio/region_mean"] for e in trainer.state.log_history if "clip_ratio/region_mean" in e}
    assert sorted(ours) == sorted(trl) == [3, 4, 6]
    assert ours == pytest.approx(trl)
