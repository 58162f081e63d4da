"""The shipped real configs (gsm8k, math, code) train under `use_vllm: true, vllm_mode: colocate` through the recipes'
own entry points, with the built-in cold-start model and data in place of the hub's, and leave a complete
diagnostics file and `gspo report`.

Only what cannot run on 2 CPU cores is changed from the YAML: the model and data (offline), the step count, the batch,
the completion length and the held-out set's size. Everything else (vLLM colocate, GSPO's clip range, bf16, gradient
checkpointing, LoRA for code, tensorboard, checkpoints, the held-out evaluation) is the shipped config's.
"""

import json
import os

import pytest
import yaml
from vllm_support import RECIPES, run

pytestmark = pytest.mark.vllm

CASES = {
    "gsm8k_gspo.py": ("builtin:coldstart-gsm8k", "builtin:gsm8k-generated", "gsm8k_accuracy"),
    "math_gspo.py": ("builtin:coldstart-math", "builtin:math-generated", "math_accuracy"),
    "code_gspo.py": ("builtin:coldstart-code", "builtin:mbpp-generated", "code_execution"),
}
STEPS = 3
SMALL = ["--max_steps", str(STEPS), "--per_device_train_batch_size", "8", "--max_completion_length", "48",
         "--heldout_max_prompts", "4", "--heldout_num_samples", "2"]  # fmt: skip
FIGURES = {"gspo_clip_fraction_by_length.png", "gspo_log_s_heatmap.png", "gspo_reward.png", "gspo_heldout.png"}


@pytest.mark.parametrize("recipe", list(CASES))
def test_real_config_trains_with_vllm_colocate(recipe, tmp_path, subprocess_env):
    model, data, reward = CASES[recipe]
    config = os.path.join(RECIPES, "configs", recipe.replace(".py", ".yaml"))
    with open(config) as f:
        shipped = yaml.safe_load(f)
    assert shipped["use_vllm"] is True and shipped["vllm_mode"] == "colocate"
    out = tmp_path / "out"
    args = [os.path.join(RECIPES, recipe), "--config", config, "--model_name_or_path", model, "--dataset_name", data,
            "--output_dir", str(out), *SMALL]  # fmt: skip
    result = run(args, tmp_path, subprocess_env)
    assert "Done. Output in" in result.stdout

    with open(out / "trainer_state.json") as f:
        history = json.load(f)["log_history"]
    steps = [entry for entry in history if "loss" in entry]
    assert [entry["step"] for entry in steps] == list(range(1, STEPS + 1))
    assert any(f"rewards/{reward}/mean" in entry for entry in steps), "scored with the config's reward"
    # vLLM generated them: TRL logs its importance-sampling weights only on the vLLM path
    assert any("sampling/importance_sampling_ratio/mean" in entry for entry in steps)
    assert any("gspo/sampler_mismatch/log_s_mean" in entry for entry in steps), "the monitor compared vLLM's values"
    for entry in steps:
        assert all(value == value for value in entry.values() if isinstance(value, float)), f"NaN logged: {entry}"

    with open(out / "gspo_diagnostics.jsonl") as f:
        lines = [json.loads(line) for line in f]
    assert [line["step"] for line in lines] == list(range(1, STEPS + 1))
    for line in lines:
        assert line["responses"] > 0 and sum(m["responses"] for m in line["minibatches"].values()) == line["responses"]
        assert line["epsilon_low"] == shipped["epsilon"] and line["epsilon_high"] == shipped["epsilon_high"]
    sections = {key for line in lines for key in line}
    assert {"groups", "heldout_start", "heldout"} <= sections, sections
    assert lines[-1]["heldout"], "the held-out evaluation ran at the last step"
    if shipped.get("use_peft"):
        assert os.path.exists(out / "adapter_config.json"), "LoRA as the config asks (vLLM got the merged weights)"

    report = run(["-m", "gspo_recipes.commands.cli", "report", str(out)], tmp_path, subprocess_env)
    text = (out / "gspo_report.txt").read_text()
    assert f"steps 1-{STEPS}" in text and "clip fraction by minibatch" in text
    assert f"held-out {reward}" in text and "groups (judged on" in text
    assert FIGURES <= {p.name for p in out.iterdir()}, report.stdout
