"""Choosing the clip range from data: `gspo calibrate` on a crafted file, and automatic calibration with resume."""

import json
import logging
import math
import re

import pytest
import torch
from conftest import digit_count_reward, launch_two_cpu_processes, tiny_config

from gspo_recipes import GSPOTrainer
from gspo_recipes.commands.calibrate import calibrate_epsilons
from gspo_recipes.commands.cli import main as gspo


def write_diagnostics(folder, lines):
    with open(folder / "gspo_diagnostics.jsonl", "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def crafted_line(step, log_s, signs, lengths):
    return {
        "step": step,
        "epsilon_low": 3e-4,
        "epsilon_high": 4e-4,
        "responses": len(log_s),
        "bin_edges": [],
        "counts": [],
        "buckets": [{"lo": 1, "hi": 8}, {"lo": 9, "hi": 16}],
        "minibatches": {},
        "off_policy": {"log_s": log_s, "advantage_sign": signs, "length": lengths},
    }


# Positive-advantage responses have log s = 1e-4 .. 1e-2, negative ones -1e-4 .. -1e-2, spread over two steps.
POSITIVE = [round(i * 1e-4, 6) for i in range(1, 101)]
NEGATIVE = [-v for v in POSITIVE]
# torch.quantile interpolates linearly: the 0.9 quantile of POSITIVE lies at index 89.1, between 90e-4 and 91e-4.
EXPECTED_HIGH = math.expm1(90.1e-4)
EXPECTED_LOW = -math.expm1(-90.1e-4)


def test_known_quantiles_give_known_epsilons():
    log_s = torch.tensor(POSITIVE + NEGATIVE)
    signs = torch.tensor([1] * 100 + [-1] * 100)
    eps_low, eps_high = calibrate_epsilons(log_s, signs, 0.1)
    assert eps_high == pytest.approx(EXPECTED_HIGH, rel=1e-6)
    assert eps_low == pytest.approx(EXPECTED_LOW, rel=1e-6)
    # Applied back, they clip the target fraction on each side.
    s = torch.exp(log_s.double())
    assert ((s > 1 + eps_high) & (signs > 0)).sum().item() == 10
    assert ((s < 1 - eps_low) & (signs < 0)).sum().item() == 10


def test_a_side_that_moved_the_other_way_gets_zero():
    eps_low, eps_high = calibrate_epsilons(torch.tensor([1e-3, 2e-3]), torch.tensor([-1, -1]), 0.1)
    assert eps_low == 0.0 and math.isnan(eps_high)
    with pytest.raises(ValueError, match="target_clip"):
        calibrate_epsilons(torch.tensor([0.0]), torch.tensor([1]), 1.5)


def test_calibrate_command_on_a_crafted_file(tmp_path, capsys):
    lengths = [4 if i % 2 else 12 for i in range(100)]
    write_diagnostics(
        tmp_path,
        [
            crafted_line(1, [], [], []),  # an on-policy step contributes nothing
            crafted_line(2, POSITIVE[:50] + NEGATIVE[:50], [1] * 50 + [-1] * 50, lengths),
            crafted_line(3, POSITIVE[50:] + NEGATIVE[50:], [1] * 50 + [-1] * 50, lengths),
        ],
    )
    assert gspo(["calibrate", str(tmp_path), "--target-clip", "0.1"]) == 0
    out = capsys.readouterr().out
    assert f"epsilon_high = {EXPECTED_HIGH:.3g}" in out and f"epsilon_low  = {EXPECTED_LOW:.3g}" in out
    assert f"epsilon: {EXPECTED_LOW:.3g}\nepsilon_high: {EXPECTED_HIGH:.3g}" in out  # the YAML snippet
    assert "200 (100 with A > 0, 100 with A < 0)" in out
    assert "1-8" in out and "9-16" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+-\d+\s+\d+\s", line)]
    assert [row[0] for row in rows] == ["1-8", "9-16"] and sum(int(row[1]) for row in rows) == 200
    ours = [float(value.rstrip("%")) for row in rows for value in row[2:4]]
    theirs = [float(value.rstrip("%")) for row in rows for value in row[4:6]]
    assert sum(ours) / 4 == pytest.approx(10.0, abs=1.0)  # the target, per side
    assert min(theirs) > 90  # the run's paper range clips nearly every off-policy response here


def test_calibrate_command_explains_missing_data(tmp_path, capsys):
    assert gspo(["calibrate", str(tmp_path)]) == 2
    assert "no gspo_diagnostics.jsonl" in capsys.readouterr().out
    write_diagnostics(tmp_path, [crafted_line(1, [], [], [])])
    assert gspo(["calibrate", str(tmp_path)]) == 2
    assert "no off-policy responses" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------- automatic calibration


def calibrating_trainer(output_dir, max_steps):
    from datasets import Dataset

    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    model, tokenizer = build_tiny_model_and_tokenizer()
    dataset = Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])
    cfg = tiny_config(
        output_dir,
        max_steps=max_steps,
        epsilon_calibration_steps=4,
        epsilon_target_clip=0.2,
        save_strategy="steps",
        save_steps=4,
        gspo_diagnostics=False,
    )
    return GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )


def logged_epsilons(trainer):
    return [
        (e["step"], e["gspo/epsilon_low"], e["gspo/epsilon_high"])
        for e in trainer.state.log_history
        if "gspo/epsilon_low" in e
    ]


@pytest.mark.slow
def test_automatic_calibration_and_resume(tmp_path, caplog):
    trainer = calibrating_trainer(tmp_path, max_steps=8)
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.gspo_trainer"):
        trainer.train()
    assert caplog.text.count("Calibrated the clip range") == 1
    epsilons = logged_epsilons(trainer)
    assert [step for step, *_ in epsilons] == list(range(1, 9))
    assert all(e[1:] == (3e-4, 4e-4) for e in epsilons[:4])  # the configured range while collecting
    calibrated = epsilons[4][1:]
    assert calibrated != (3e-4, 4e-4) and all(e[1:] == calibrated for e in epsilons[4:])
    assert json.loads((tmp_path / "checkpoint-8" / "gspo_calibration.json").read_text())["epsilons"] == list(calibrated)

    # Resumed after calibration: keeps the range and does not calibrate again.
    caplog.clear()
    resumed = calibrating_trainer(tmp_path, max_steps=10)
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.gspo_trainer"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-8"))
    assert "Calibrated the clip range" not in caplog.text
    assert all(e[1:] == calibrated for e in logged_epsilons(resumed) if e[0] > 8)

    # Resumed from before calibration finished: the saved samples give the same range as the uninterrupted run.
    again = calibrating_trainer(tmp_path / "again", max_steps=8)
    again.args.output_dir = str(tmp_path)  # read the checkpoint above, write nowhere that matters
    again.args.save_strategy = "no"
    again.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert (again.epsilon_low, again.epsilon_high) == calibrated


@pytest.mark.slow
def test_two_process_resume_calibrates_as_the_uninterrupted_run(tmp_path):
    """Both processes' samples survive the checkpoint, and each is counted once after resuming. (The range is fixed
    from the saved samples alone: training after a two-process resume is not bit-identical, so later samples
    could not be compared.)"""
    full, resumed = tmp_path / "full.json", tmp_path / "resumed.json"
    launch_two_cpu_processes("two_process_calibration.py", str(tmp_path / "run"), str(full), cwd=tmp_path)
    state = json.loads((tmp_path / "run" / "checkpoint-4" / "gspo_calibration.json").read_text())
    # Steps 2-4 of the first generation batch are off-policy: 3 micro-steps x 8 responses x 2 processes.
    assert state["epsilons"] is None and len(state["log_s"]) == 48
    launch_two_cpu_processes("two_process_calibration.py", str(tmp_path / "run"), str(resumed), "resume", cwd=tmp_path)
    assert json.loads(resumed.read_text()) == json.loads(full.read_text())
