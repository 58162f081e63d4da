"""`gspo passrate`: resumable (a killed run continues and writes what an uninterrupted one does), the signal reward
alone decides the pass rate, --keep filters, and two processes each score one shard."""

from __future__ import annotations

import json

import pytest
from conftest import launch_two_cpu_processes

from gspo_recipes.commands import passrate, passrate_sampling
from gspo_recipes.commands.cli import main as gspo

ARGS = ["--max_train_samples", "12", "--num_generations", "4", "--passrate_batch_size", "4", "--keep", "0.1:0.9"]


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resumed_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    assert gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "whole")]) == 0

    append, calls = passrate.Work.append, []

    def killed_during_the_second_batch(self, lines):
        if len(calls) == 1:  # half of the second batch reaches the disk, then the process dies
            with open(self.path, "a") as f:
                f.write(json.dumps({"batch": lines[0]["batch"], **lines[0]}) + "\n" + json.dumps(lines[1])[:40])
            raise KeyboardInterrupt
        calls.append(lines[0]["batch"])
        append(self, lines)

    monkeypatch.setattr(passrate.Work, "append", killed_during_the_second_batch)
    with pytest.raises(KeyboardInterrupt):
        gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "resumed")])
    monkeypatch.setattr(passrate.Work, "append", append)
    scored = []

    original = passrate_sampling.Sampler.sample_and_score

    def counting(self, examples, *args):
        scored.append(len(examples))
        return original(self, examples, *args)

    monkeypatch.setattr(passrate_sampling.Sampler, "sample_and_score", counting)
    assert gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "resumed")]) == 0
    assert scored == [4, 4]  # batch 0 was kept; batches 1 and 2 scored once each
    for name in (passrate.RESULT_FILE, passrate.KEPT_FILE):
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "whole" / name).read_text()
    whole = rows(tmp_path / "whole" / passrate.RESULT_FILE)
    assert len(whole) == 12 and len({row["question"] for row in whole}) == 12


def test_only_the_accuracy_reward_decides_and_keep_filters(tmp_path):
    out = tmp_path / "run"
    assert gspo(["passrate", *ARGS, "--reward_funcs", "format", "gsm8k_accuracy", "--output_dir", str(out)]) == 0
    results = rows(out / passrate.RESULT_FILE)
    assert {row["signal_reward"] for row in results} == {"gsm8k_accuracy"}
    for row in results:
        accuracy = row["sample_rewards"]["gsm8k_accuracy"]
        assert row["pass_rate"] == sum(r == 1.0 for r in accuracy) / 4 and len(row["samples"]) == 4
        assert set(row["sample_rewards"]) == {"format_reward", "gsm8k_accuracy"}
    kept = rows(out / passrate.KEPT_FILE)
    assert [r["question"] for r in kept] == [r["question"] for r in results if 0.1 <= r["pass_rate"] <= 0.9]
    assert all(set(r) == {"question", "answer", "pass_rate"} for r in kept)  # ready for --dataset_name
    assert 0 < len(kept) < len(results)


def test_refusals_name_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit, match="--keep takes LO:HI"):
        gspo(["passrate", "--keep", "0.9:0.1", "--output_dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="known to measure success"):
        gspo(["passrate", *ARGS, "--reward_funcs", "format", "--output_dir", str(tmp_path / "a")])
    assert gspo(["passrate", *ARGS, "--output_dir", str(tmp_path / "b")]) == 0
    with pytest.raises(SystemExit, match="num_generations"):  # resuming with other settings would mix two runs
        gspo(["passrate", *ARGS, "--num_generations", "2", "--output_dir", str(tmp_path / "b")])


def test_two_processes_score_one_shard_each(tmp_path):
    out = tmp_path / "run"
    launch_two_cpu_processes("two_process_passrate.py", *ARGS, "--output_dir", str(out), cwd=tmp_path)
    results = rows(out / passrate.RESULT_FILE)
    assert len(results) == 12 and len({row["question"] for row in results}) == 12
    assert sorted(p.name for p in (out / passrate.SHARDS).iterdir()) == ["shard0of2.jsonl", "shard1of2.jsonl"]
