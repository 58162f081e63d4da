"""`gspo passrate --use_vllm`: vLLM's offline engine samples, the package's rewards score, and the run is resumable
and shows its progress as the transformers path does; on a greedy decode (top_k=1, float32 in both engines) both
paths give the same pass rates and samples."""

import json
import shutil

import pytest
from vllm_support import run

from gspo_recipes.commands import passrate

pytestmark = pytest.mark.vllm

ARGS = ["-m", "gspo_recipes.commands.cli", "passrate", "--max_train_samples", "24", "--num_generations", "4",
        "--passrate_batch_size", "8", "--keep", "0.1:0.9"]  # fmt: skip


def rows(folder):
    return [json.loads(line) for line in (folder / passrate.RESULT_FILE).read_text().splitlines()]


def test_vllm_passrate_is_resumable(tmp_path, subprocess_env):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    first = run([*ARGS, "--use_vllm", "--output_dir", str(whole)], tmp_path, subprocess_env)
    assert "gspo passrate: 24 rows" in first.stdout and "gspo passrate:" in first.stderr  # the progress bar
    results = rows(whole)
    assert len(results) == 24 and all(len(row["samples"]) == 4 for row in results)
    assert len({s for row in results for s in row["samples"]}) > 24, "sampled at temperature 1, not one answer each"
    assert any(0 < row["pass_rate"] < 1 for row in results)

    # A run cut short in its third batch: its shard holds two finished batches and half a line of the third.
    (resumed / passrate.SHARDS).mkdir(parents=True)
    shutil.copy(whole / passrate.RUN_FILE, resumed / passrate.RUN_FILE)
    (shard,) = (whole / passrate.SHARDS).iterdir()
    lines = shard.read_text().splitlines()
    (resumed / passrate.SHARDS / shard.name).write_text("\n".join(lines[:16]) + "\n" + lines[16][:30])
    again = run([*ARGS, "--use_vllm", "--output_dir", str(resumed)], tmp_path, subprocess_env)
    assert "2/3" in again.stderr  # the bar starts at the two finished batches
    redone = rows(resumed)
    assert [r["question"] for r in redone] == [r["question"] for r in results]
    assert redone[:16] == results[:16], "the finished batches are kept as they were"
    assert all(len(row["samples"]) == 4 for row in redone[16:])
    # The third batch is drawn again by a fresh engine: its samples are not the first run's (docs/vllm.md).


def test_vllm_and_transformers_give_the_same_pass_rates_on_a_greedy_decode(tmp_path, subprocess_env):
    greedy = ["--top_k", "1", "--seed", "3"]
    run([*ARGS, *greedy, "--use_vllm", "--dtype", "float32", "--output_dir", str(tmp_path / "vllm")], tmp_path,
        subprocess_env)  # fmt: skip
    run([*ARGS, *greedy, "--output_dir", str(tmp_path / "hf")], tmp_path, subprocess_env)
    by_vllm, by_hf = rows(tmp_path / "vllm"), rows(tmp_path / "hf")
    assert [r["question"] for r in by_vllm] == [r["question"] for r in by_hf]
    assert [r["pass_rate"] for r in by_vllm] == [r["pass_rate"] for r in by_hf]
    assert {r["pass_rate"] for r in by_hf} == {0.0, 1.0}, "greedy: every sample of a prompt is the same"
    assert 0 < sum(r["pass_rate"] for r in by_hf) < len(by_hf)
    same = sum(a["samples"] == b["samples"] for a, b in zip(by_vllm, by_hf))
    assert same == len(by_hf), f"{len(by_hf) - same} prompts decoded differently"


def test_a_run_cannot_switch_sampler_on_resume(tmp_path, subprocess_env):
    out = tmp_path / "run"
    run([*ARGS, "--max_train_samples", "8", "--output_dir", str(out)], tmp_path, subprocess_env)
    refused = run([*ARGS, "--max_train_samples", "8", "--use_vllm", "--output_dir", str(out)], tmp_path,
                  subprocess_env, check=False)  # fmt: skip
    assert refused.returncode != 0 and "other settings (dtype, sampler)" in refused.stderr
