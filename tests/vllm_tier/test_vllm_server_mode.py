"""`vllm_mode="server"` on a machine without CUDA: TRL 1.16 sends the weights to the server over NCCL, so it cannot
train there. The recipes and GSPOTrainer refuse in one line naming the reason, before any data or model is loaded
(TRL itself would first wait `vllm_server_timeout`, 240 s, for a server, then fail on the device)."""

import os
import time

import pytest
from vllm_support import RECIPES, on_cpu, run

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def cpu_only(vllm_environment):
    if not on_cpu():
        pytest.skip("a GPU machine can train against a vLLM server: nothing to refuse")


def test_recipe_refuses_server_mode_in_one_line_before_loading_anything(tmp_path, subprocess_env):
    config = os.path.join(RECIPES, "configs", "gsm8k_gspo.yaml")
    args = [os.path.join(RECIPES, "gsm8k_gspo.py"), "--config", config, "--model_name_or_path",
            "builtin:coldstart-gsm8k", "--dataset_name", "builtin:gsm8k-generated", "--vllm_mode", "server",
            "--output_dir", str(tmp_path / "out")]  # fmt: skip
    start = time.monotonic()
    result = run(args, tmp_path, subprocess_env, check=False, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: vllm_mode='server' needs a CUDA GPU"), result.stderr
    assert "NCCL" in lines[0] and "vllm_mode='colocate'" in lines[0]
    assert "GSPO on GSM8K" not in result.stdout  # the banner comes after the data: nothing was loaded
    assert not (tmp_path / "out").exists() and time.monotonic() - start < 60


def test_trainer_refuses_server_mode_before_loading_the_model(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from gspo_recipes import GSPOConfig, GSPOTrainer
    from gspo_recipes.builtin.coldstart import COLDSTART_CONFIGS, SHIPPED_DIR, coldstart_dir

    loads = []
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: loads.append(a))
    path = str(SHIPPED_DIR / coldstart_dir(None, COLDSTART_CONFIGS["gsm8k"]).name)
    args = GSPOConfig(output_dir=str(tmp_path), use_vllm=True, vllm_mode="server", report_to="none")
    with pytest.raises(ValueError, match=r"^vllm_mode='server' needs a CUDA GPU in the training process \(TRL sends"):
        GSPOTrainer(model=path, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args)
    assert loads == []
