"""GSPOConfig checks and GSPOTrainer against TRL's GRPOTrainer and the GSPO definition, on the tiny model."""

import copy
import logging

import pytest
import torch
from support import assert_grads_close, digit_count_reward, length_reward, tiny_config
from trl import GRPOConfig, GRPOTrainer, TrlParser

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.callbacks import attach_response_stats
from gspo_recipes.loss import gspo_loss

# ----------------------------------------------------------------------------------------------- config


def test_config_defaults_are_the_papers(tmp_path):
    cfg = GSPOConfig(output_dir=str(tmp_path), gradient_accumulation_steps=2, report_to="none")
    assert cfg.importance_sampling_level == "sequence"
    assert cfg.loss_type == "grpo" and cfg.beta == 0.0
    assert (cfg.epsilon, cfg.epsilon_high) == (3e-4, 4e-4)
    assert cfg.steps_per_generation == 8  # four minibatch updates per rollout batch


def test_config_from_yaml_and_command_line(tmp_path):
    yaml_path = tmp_path / "gspo.yaml"
    yaml_path.write_text(f"output_dir: {tmp_path}\nepsilon: 0.001\nnum_minibatches: 2\nreport_to: none\n")
    (cfg,) = TrlParser((GSPOConfig,)).parse_args_and_config(["--config", str(yaml_path), "--epsilon_high", "0.002"])
    assert cfg.epsilon == 0.001 and cfg.epsilon_high == 0.002
    assert cfg.steps_per_generation == 2 * cfg.gradient_accumulation_steps
    help_text = TrlParser((GSPOConfig,)).format_help()
    assert "num_minibatches" in help_text and "allow_length_weighted_loss" in help_text


@pytest.mark.parametrize("loss_type", ["bnpo", "dr_grpo", "dapo", "cispo"])
def test_token_summing_loss_is_an_error_unless_opted_in(tmp_path, loss_type):
    with pytest.raises(ValueError, match="allow_length_weighted_loss"):
        GSPOConfig(output_dir=str(tmp_path), loss_type=loss_type, report_to="none")
    cap = {"epsilon_high": 5.0} if loss_type == "cispo" else {}  # CISPO's cap on the ratio (test_cispo_...)
    cfg = GSPOConfig(
        output_dir=str(tmp_path), loss_type=loss_type, allow_length_weighted_loss=True, report_to="none", **cap
    )
    assert cfg.loss_type == loss_type


@pytest.mark.parametrize("field,value", [("epsilon", -0.1), ("epsilon_high", -1e-4), ("epsilon", 1.0)])
def test_impossible_clip_values_are_errors(tmp_path, field, value):
    with pytest.raises(ValueError, match=field):
        GSPOConfig(output_dir=str(tmp_path), report_to="none", **{field: value})


def test_token_sized_clip_and_on_policy_setups_warn(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.config"):
        GSPOConfig(output_dir=str(tmp_path), epsilon=0.2, epsilon_high=0.28, report_to="none")
    assert "3e-4" in caplog.text and "gspo calibrate" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.config"):
        GSPOConfig(output_dir=str(tmp_path), num_minibatches=1, report_to="none")
    assert "GSPO equals GRPO" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.config"):
        GSPOConfig(output_dir=str(tmp_path), report_to="none")
    assert caplog.text == ""


def test_plain_grpo_config_becomes_gspo_with_a_warning(tmp_path, tiny, prompt_dataset, caplog):
    model, tokenizer = tiny
    grpo_args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        bf16=False,
    )
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.grpo_conversion"):
        trainer = GSPOTrainer(
            model=model,
            reward_funcs=digit_count_reward,
            args=grpo_args,
            train_dataset=prompt_dataset,
            processing_class=tokenizer,
        )
    assert isinstance(trainer.args, GSPOConfig)
    assert trainer.importance_sampling_level == "sequence" and trainer.loss_type == "grpo"
    assert (trainer.epsilon_low, trainer.epsilon_high) == (3e-4, 4e-4)
    assert trainer.args.steps_per_generation == 4 and trainer.args.learning_rate == 1e-3  # user's values kept
    assert "plain trl.GRPOConfig" in caplog.text and "loss_type='dapo' -> 'grpo'" in caplog.text


def test_token_level_ratios_with_a_sequence_sized_range_warn(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.config"):
        GSPOConfig(output_dir=str(tmp_path), importance_sampling_level="token", report_to="none")
    assert "nearly every token is clipped" in caplog.text and "epsilon=0.2" in caplog.text


@pytest.mark.parametrize("gas,spg", [(2, 3), (4, 3)])
def test_misaligned_generation_is_not_called_on_policy(tmp_path, gas, spg, caplog):
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.trainer.config"):
        cfg = GSPOConfig(
            output_dir=str(tmp_path),
            gradient_accumulation_steps=gas,
            steps_per_generation=spg,
            epsilon_calibration_steps=4,
            report_to="none",
        )
    assert "GSPO equals GRPO" not in caplog.text and cfg.epsilon_calibration_steps == 4


# ----------------------------------------------------------------------------------------------- loss


def crafted_batch(tokenizer, advantages_shape="response", seed=0):
    """A batch as `_prepare_inputs` hands it to the loss, with off-policy old log-probabilities."""
    g = torch.Generator().manual_seed(seed)
    batch, prompt_len, completion_len = 6, 4, 7
    vocab = len(tokenizer)
    completion_mask = torch.ones(batch, completion_len, dtype=torch.long)
    for row, length in enumerate([7, 3, 5, 7, 1, 6]):
        completion_mask[row, length:] = 0
    inputs = {
        "prompt_ids": torch.randint(4, vocab, (batch, prompt_len), generator=g),
        "prompt_mask": torch.ones(batch, prompt_len, dtype=torch.long),
        "completion_ids": torch.randint(4, vocab, (batch, completion_len), generator=g),
        "completion_mask": completion_mask,
    }
    if advantages_shape == "response":
        inputs["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.5, -1.5])
    else:
        inputs["advantages"] = torch.randn(batch, completion_len, generator=g)
    return inputs


def loss_and_grads(trainer, inputs):
    trainer.model.train()
    trainer.model.zero_grad()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, trainer._metrics["train"]


def with_old_logps(trainer, inputs, shift=3e-3, seed=1):
    """Old log-probabilities = current ones plus noise, so some responses clip on each side."""
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, ids.size(1) - 4)
    g = torch.Generator().manual_seed(seed)
    return dict(inputs, old_per_token_logps=logps + shift * torch.randn(logps.shape, generator=g))


def make_pair(tmp_path, tiny, prompt_dataset, **overrides):
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, gspo_diagnostics=False, **overrides)
    if cfg.beta != 0.0:  # TRL loads the reference model by name: give it one on disk
        model.save_pretrained(tmp_path / "model")
        model = str(tmp_path / "model")
    gspo = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    trl = GRPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=digit_count_reward,
        args=cfg,
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    return gspo, trl


def test_equals_trl_grpo_trainer_on_response_advantages(tmp_path, tiny, prompt_dataset):
    gspo, trl = make_pair(tmp_path, tiny, prompt_dataset)
    inputs = with_old_logps(gspo, crafted_batch(tiny[1]))
    loss_gspo, grads_gspo, metrics_gspo = loss_and_grads(gspo, inputs)
    loss_trl, grads_trl, metrics_trl = loss_and_grads(trl, inputs)
    assert abs(loss_gspo - loss_trl) < 1e-6
    assert_grads_close(grads_gspo, grads_trl)
    clip = metrics_gspo["clip_ratio/region_mean"][-1]
    assert 0 < clip < 1, "the crafted batch should clip some responses and not others"
    trl_clip_metrics = sorted(key for key in metrics_trl if key.startswith("clip_ratio/"))
    assert trl_clip_metrics == sorted(key for key in metrics_gspo if key.startswith("clip_ratio/"))
    assert {"clip_ratio/low_min", "clip_ratio/high_max"} <= set(trl_clip_metrics)
    for key in trl_clip_metrics + ["entropy"]:
        assert metrics_gspo[key][-1] == pytest.approx(metrics_trl[key][-1], abs=1e-6), key


@pytest.mark.parametrize("bias_correction", [False, True])
def test_equals_trl_with_kl_term(tmp_path, tiny, prompt_dataset, bias_correction):
    gspo, trl = make_pair(tmp_path, tiny, prompt_dataset, beta=0.05, use_bias_correction_kl=bias_correction)
    inputs = with_old_logps(gspo, crafted_batch(tiny[1]))
    inputs["ref_per_token_logps"] = inputs["old_per_token_logps"] - 0.01
    loss_gspo, grads_gspo, _ = loss_and_grads(gspo, inputs)
    loss_trl, grads_trl, _ = loss_and_grads(trl, inputs)
    assert abs(loss_gspo - loss_trl) < 1e-6
    assert_grads_close(grads_gspo, grads_trl)


def test_gspo_token_in_the_trainer_matches_the_reference_loss(tmp_path, tiny, prompt_dataset):
    """Per-token advantages through the trainer give the reference GSPO-token loss and gradient."""
    gspo, _ = make_pair(tmp_path, tiny, prompt_dataset)
    inputs = with_old_logps(gspo, crafted_batch(tiny[1], advantages_shape="token"), shift=1e-3)
    loss, grads, _ = loss_and_grads(gspo, inputs)

    gspo.model.zero_grad()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logps, _, _ = gspo._get_per_token_logps_and_entropies(gspo.model, ids, mask, 7)
    ref_loss, _ = gspo_loss(logps, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"])
    ref_loss.backward()
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-6)
    assert_grads_close(grads, {name: param.grad for name, param in gspo.model.named_parameters()})


def test_per_token_advantages_through_trl_loss_are_refused(tmp_path, tiny, prompt_dataset):
    gspo, _ = make_pair(tmp_path, tiny, prompt_dataset, importance_sampling_level="token", epsilon=0.2)
    inputs = with_old_logps(gspo, crafted_batch(tiny[1], advantages_shape="token"))
    with pytest.raises(ValueError, match="importance_sampling_level='token'"):
        loss_and_grads(gspo, inputs)


# ----------------------------------------------------------------------------------------------- training


def test_training_clips_only_off_policy_minibatches(tmp_path, tiny, prompt_dataset):
    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, max_steps=8, gspo_diagnostics=False)
    assert cfg.steps_per_generation == 4
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    assert trainer.response_stats is None  # nothing is kept without a consumer
    stats = attach_response_stats(trainer)
    trainer.train()
    assert trainer.state.global_step == 8
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters()), "no optimizer step was taken"

    window = stats.window(step=trainer.state.global_step)
    on_policy = window["minibatch"] == 1
    assert on_policy.sum() == 16 and (~on_policy).sum() == 48  # 2 generation batches x 4 minibatches x 8
    assert torch.all(window["log_s"][on_policy] == 0)
    clipped = window["clipped_low"] + window["clipped_high"]
    assert clipped[on_policy].sum() == 0
    assert clipped[~on_policy].sum() > 0


@pytest.mark.parametrize("gas,spg", [(2, 3), (4, 3)])
def test_misaligned_minibatches_are_labelled_by_optimizer_steps(tmp_path, tiny, prompt_dataset, gas, spg):
    """gas and steps_per_generation that do not line up: responses labelled 1 are exactly on-policy, every later
    label has moved, and the off-policy ones reach the histogram's selection."""
    model, tokenizer = tiny
    cfg = tiny_config(
        tmp_path,
        max_steps=6,
        gradient_accumulation_steps=gas,
        steps_per_generation=spg,
        per_device_train_batch_size=4,
        gspo_diagnostics=False,
    )
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    stats = attach_response_stats(trainer)
    trainer.train()
    window = stats.window(step=trainer.state.global_step)
    first = window["minibatch"] == 1
    assert first.any() and (~first).any()
    assert torch.all(window["log_s"][first] == 0), "a response labelled on-policy was sampled before an update"
    assert torch.all(window["log_s"][~first] != 0)


def test_peft_lora_and_weighted_rewards(tmp_path, tiny, prompt_dataset):
    from peft import LoraConfig

    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, max_steps=4, reward_weights=[1.0, 0.5], gspo_diagnostics=False)
    trainer = GSPOTrainer(
        model=model,
        reward_funcs=[digit_count_reward, length_reward],
        args=cfg,
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert trainer.state.global_step == 4
    assert any(not torch.equal(lora_before[n], p) for n, p in trainer.model.named_parameters() if n in lora_before)
    logged = [entry for entry in trainer.state.log_history if "rewards/length_reward/mean" in entry]
    assert logged, "both reward functions are logged by name"


def test_default_args_are_gspo(tiny, prompt_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, tokenizer = tiny
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, train_dataset=prompt_dataset, processing_class=tokenizer
    )
    assert isinstance(trainer.args, GSPOConfig) and trainer.args.importance_sampling_level == "sequence"


_PINNED_GROUP = """
import os, sys
import torch, torch.distributed as dist
from gspo_recipes.trainer.gloo_exit import _destroy_and_settle, _worker_states
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
pinned = dist.group.WORLD  # as DDP's reducer holds it: destroying the group then stops none of its threads
out = [torch.zeros(2)]
dist.all_gather(out, torch.ones(2))
_destroy_and_settle()
print("initialized", dist.is_initialized(), "workers", len(_worker_states()), "running", _worker_states().count("R"))
"""


def test_the_exit_hook_finds_gloos_worker_threads_and_leaves_none_running(tmp_path):
    """The threads outlive a destroyed group while anything holds it; the hook must find them by name (a torch that
    renamed them would leave the abort at exit unguarded) and return only once none is running."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    done = subprocess.run([sys.executable, "-c", _PINNED_GROUP, port], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    assert words[:2] == ["initialized", "False"]
    assert int(words[3]) >= 1 and words[5] == "0", done.stdout


_USERS_OWN_DESTROY = """
import atexit, os, sys
import torch, torch.distributed as dist
from gspo_recipes import GSPOTrainer  # noqa: F401  (a script imports the package first, as every recipe does)
from gspo_recipes.trainer.gloo_exit import end_gloo_process_group_at_exit
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
atexit.register(dist.destroy_process_group)  # the script's own clean-up, registered before training
out = [torch.zeros(2)]
dist.all_gather(out, torch.ones(2))
end_gloo_process_group_at_exit()  # what GSPOTrainer.train does when the run has finished
"""


def test_the_exit_hook_leaves_the_users_own_destroy_alone(tmp_path):
    """A script that destroys the group in its own atexit handler ends cleanly: the trainer's hook runs after the
    script's handlers (and destroys nothing the script already destroyed), not before them."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    done = subprocess.run([sys.executable, "-c", _USERS_OWN_DESTROY, port], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Exception ignored" not in done.stderr and "Process group cannot be None" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_finished_run_destroys_its_gloo_group_before_the_interpreter_shuts_down(tmp_path):
    """Left to interpreter finalization, gloo's worker threads abort a process after a good run (SIGABRT, "terminate
    called without an active exception"), and the launcher then kills the other ranks."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    script = os.path.join(os.path.dirname(__file__), "scripts", "gloo_exit.py")
    result = subprocess.run([sys.executable, script, str(tmp_path), port], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "group alive at exit: False" in result.stdout
