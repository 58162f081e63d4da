"""The shipped accelerate configs (recipes/accelerate_configs/), each on two CPU processes with no extra flag, against
one process: what engine each engages, that its precision is the training config's, and that it trains the weights
one process trains. The fast tests check the precision rule and the FSDP warning without launching anything."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import torch
from support import SCRIPTS

from gspo_recipes.trainer.engine import follow_training_precision, unengaged_engine

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "accelerate_configs")
SHIPPED = sorted(os.path.basename(path) for path in glob.glob(os.path.join(CONFIGS, "*.yaml")))
# What each config is on CPU processes: (accelerate's distributed type, the model's wrapper, weights sharded).
ON_CPU = {
    "cpu_2proc.yaml": ("MULTI_CPU", "DistributedDataParallel", False),
    "ddp.yaml": ("MULTI_CPU", "DistributedDataParallel", False),
    "fsdp.yaml": ("MULTI_CPU", "DistributedDataParallel", False),  # accelerate engages FSDP on accelerators only
    "zero2.yaml": ("DEEPSPEED", "DeepSpeedEngine", False),
    "zero3.yaml": ("DEEPSPEED", "DeepSpeedEngine", True),
}
# Float rounding of a different summation order, through two Adam steps at lr 1e-2: about 5e-6 here. bf16 autocast,
# which the configs turned on before, moves the weights by 3e-2.
WEIGHT_TOLERANCE = 5e-5


def test_every_shipped_config_is_described():
    assert SHIPPED == sorted(ON_CPU)


def test_the_training_configs_precision_wins_over_the_launchers(monkeypatch, tmp_path):
    from gspo_recipes import GSPOConfig

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `mixed_precision: bf16` in a config file sets
    config = GSPOConfig(str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    assert config.mixed_precision == "no"
    config.bf16 = True
    assert follow_training_precision(config) == "no" and config.mixed_precision == "bf16"
    assert follow_training_precision(config) is None  # agreeing: nothing replaced, nothing said


def test_a_launch_asking_for_fsdp_that_accelerate_does_not_engage_says_what_runs(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    message = unengaged_engine("MULTI_CPU")
    assert "DDP over gloo" in message and "nothing sharded" in message and "\n" not in message
    assert unengaged_engine("FSDP") is None
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    assert unengaged_engine("MULTI_CPU") is None


def run_engine_script(out_dir, config: str | None):
    script = os.path.join(SCRIPTS, "engine_config.py")
    if config is None:
        command = [sys.executable, script, str(out_dir)]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", os.path.join(CONFIGS, config),
                   "--num_processes", "2", script, str(out_dir)]  # fmt: skip
    os.makedirs(out_dir, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out_dir,
                          env=dict(os.environ, PYTHONPATH=SCRIPTS))  # fmt: skip
    assert done.returncode == 0, f"{config}:\n{done.stdout[-2000:]}\n{done.stderr[-5000:]}"
    return done


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    run_engine_script(out, None)
    return json.loads((out / "rank0.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("config", SHIPPED)
def test_each_shipped_config_trains_on_two_cpu_processes_as_one_process_does(tmp_path, one_process, config):
    done = run_engine_script(tmp_path, config)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    distributed_type, wrapper, sharded = ON_CPU[config]
    for rank in ranks:
        assert rank["processes"] == 2
        assert (rank["distributed_type"], rank["wrapper"], rank["sharded"]) == (distributed_type, wrapper, sharded)
        # The training config says bf16=False (a CPU run): no autocast, whatever the config file's mixed_precision.
        assert rank["mixed_precision"] == "no" and rank["autocast"] is None and rank["param_dtype"] == "torch.float32"
    warned = "accelerate does not engage it on CPU processes" in done.stderr
    assert warned == (config == "fsdp.yaml"), done.stderr[-3000:]
    weights = ranks[0]["weights"]
    assert weights.keys() == one_process["weights"].keys()
    for name, expected in one_process["weights"].items():
        difference = (torch.tensor(weights[name]) - torch.tensor(expected)).abs().max().item()
        assert difference < WEIGHT_TOLERANCE, f"{config}: {name} differs from one process by {difference:.2e}"
