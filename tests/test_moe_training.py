"""Routing volatility and Routing Replay in real GRPO/GSPO steps on a tiny Qwen3-MoE with the character tokenizer."""

import json

import pytest
import torch
from support import (
    digit_count_reward,
    launch_two_cpu_processes,
    plain_grpo_config,
    tiny_config,
    tiny_moe_model_and_tokenizer,
)
from trl import GRPOTrainer

from gspo_recipes import GSPOConfig, GSPOTrainer, _trl
from gspo_recipes.builtin.tiny import build_tokenizer
from gspo_recipes.callbacks import RoutingVolatilityCallback
from gspo_recipes.moe import build_tiny_moe, find_moe_layers


@pytest.fixture
def tiny_moe():
    return tiny_moe_model_and_tokenizer()


def moe_trainer(tmp_path, tiny_moe, dataset, **overrides):
    model, tokenizer = tiny_moe
    settings = {"steps_per_generation": 4, "max_steps": 8, "learning_rate": 3e-2}
    settings.update(overrides)
    args = tiny_config(tmp_path, **settings)
    return GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )


def logged(trainer, name):
    return [row[name] for row in trainer.state.log_history if name in row]


def test_volatility_is_logged_per_minibatch_and_zero_on_policy(tmp_path, tiny_moe, prompt_dataset):
    trainer = moe_trainer(tmp_path, tiny_moe, prompt_dataset)
    assert any(isinstance(cb, RoutingVolatilityCallback) for cb in trainer.callback_handler.callbacks)
    trainer.train()
    first = logged(trainer, "gspo/routing/changed_frac/minibatch_1")
    later = [v for k in (2, 3, 4) for v in logged(trainer, f"gspo/routing/changed_frac/minibatch_{k}")]
    assert len(first) == 2 and len(later) == 6  # two generation rounds of four minibatches
    assert first == [0.0, 0.0]
    assert sum(later) > 0 and max(later) > 0.01  # lr 3e-2 moves routes
    assert all(0.0 <= v <= 1.0 for v in logged(trainer, "gspo/routing/changed_slot_frac"))
    lines = [json.loads(line) for line in (tmp_path / "gspo_diagnostics.jsonl").read_text().splitlines()]
    sections = [line["routing"] for line in lines if "routing" in line]
    assert len(sections) == 8
    assert all(len(s["per_layer"]) == len(find_moe_layers(trainer.model)) for s in sections)
    assert max(max(s["per_layer"]) for s in sections) > 0
    # `gspo report` draws it and summarises it.
    from gspo_recipes.commands.report import report

    assert report(str(tmp_path)) == 0
    assert (tmp_path / "gspo_routing.png").stat().st_size > 0
    summary = (tmp_path / "gspo_report.txt").read_text()
    assert "MoE routing" in summary and "  1: 0.00% of" in summary


def our_hooks(model) -> list:
    """Module hooks installed by gspo_recipes (transformers and TRL install their own)."""
    hooks = [h for m in model.modules() for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())]
    return [h for h in hooks if getattr(h, "__module__", "").startswith("gspo_recipes")]


def test_dense_model_gets_no_routing_hook(tmp_path, tiny, prompt_dataset):
    model, tokenizer = tiny
    trainer = GSPOTrainer(
        model=model,
        reward_funcs=digit_count_reward,
        args=tiny_config(tmp_path, max_steps=1),
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    assert not any(isinstance(cb, RoutingVolatilityCallback) for cb in trainer.callback_handler.callbacks)
    callback = RoutingVolatilityCallback(trainer)  # dropped in by hand: still nothing installed
    assert callback.monitor is None and getattr(trainer, "routing_monitor", None) is None
    assert "training_step" not in vars(trainer) and "_prepare_inputs" not in vars(trainer)
    trainer.train()
    assert not our_hooks(trainer.model)
    assert not any("gspo/routing" in key for row in trainer.state.log_history for key in row)


def test_drop_in_on_plain_grpo_trainer(tmp_path, tiny_moe, prompt_dataset):
    model, tokenizer = tiny_moe
    args = plain_grpo_config(tmp_path, max_steps=4, steps_per_generation=4, learning_rate=3e-2)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=digit_count_reward,
        args=args,
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    trainer.add_callback(RoutingVolatilityCallback(trainer))
    trainer.train()
    assert logged(trainer, "gspo/routing/changed_frac/minibatch_1") == [0.0]
    later = [v for k in (2, 3, 4) for v in logged(trainer, f"gspo/routing/changed_frac/minibatch_{k}")]
    assert len(later) == 3 and max(later) > 0
    assert not our_hooks(trainer.model)  # every routing hook is removed after its pass


def spy_replayed_experts(trainer):
    """Per loss forward: (minibatch, experts the MoE layers were given, the batch's old routes, log s_i)."""
    seen, current = [], {}
    layers = find_moe_layers(trainer.model)

    def experts_pre_hook(module, args, kwargs):
        # The loss forward only (reentrant checkpointing runs it under no_grad), not its recomputation in backward.
        if torch._C._current_graph_task_id() == -1 and "routes" in current:
            current["routes"].append(args[1].detach().sort(dim=-1).values)

    for layer in layers:
        layer.experts.register_forward_pre_hook(experts_pre_hook, with_kwargs=True)
    compute_loss, record = trainer._compute_loss, trainer._record_responses

    def compute_loss_spy(model, inputs):
        current["routes"] = []
        loss = compute_loss(model, inputs)
        given = torch.stack(current.pop("routes"), dim=1)  # (tokens, layers, k)
        seen.append(
            {
                "minibatch": _trl.minibatch_index(trainer),
                "given": given,
                "old": inputs["old_routes"],
                "log_s": current.pop("log_s"),
            }
        )
        return loss

    def record_spy(log_s, *args):
        current["log_s"] = log_s.detach()
        return record(log_s, *args)

    trainer._compute_loss, trainer._record_responses = compute_loss_spy, record_spy
    return seen


@pytest.mark.parametrize("reentrant", [False, True])
def test_replay_uses_the_old_routes_through_checkpointed_backward(tmp_path, tiny_moe, prompt_dataset, reentrant):
    trainer = moe_trainer(
        tmp_path,
        tiny_moe,
        prompt_dataset,
        routing_replay=True,
        gradient_accumulation_steps=2,
        max_steps=4,
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={"use_reentrant": reentrant},
    )
    seen = spy_replayed_experts(trainer)
    trainer.train()
    assert any(getattr(m, "gradient_checkpointing", False) is True for m in trainer.model.modules())
    assert len(seen) == 8 and {s["minibatch"] for s in seen} == {1, 2}
    for s in seen:
        old = s["old"].long().reshape(-1, *s["old"].shape[2:])
        assert torch.equal(s["given"].long(), old)  # every MoE layer used the recorded experts
    on_policy = torch.cat([s["log_s"] for s in seen if s["minibatch"] == 1])
    assert on_policy.abs().max() < 1e-6
    # The metric reports the router's own choice, which the update moved even though replay forced old routes.
    assert max(logged(trainer, "gspo/routing/changed_frac/minibatch_2")) > 0


def test_replay_refusals_name_the_field(tmp_path, tiny, prompt_dataset):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="routing_replay=False"):
        GSPOTrainer(
            model=model,
            reward_funcs=digit_count_reward,
            args=tiny_config(tmp_path, routing_replay=True),
            train_dataset=prompt_dataset,
            processing_class=tokenizer,
        )
    with pytest.raises(ValueError, match="old_logps_source='recompute'"):
        GSPOConfig(output_dir=str(tmp_path), routing_replay=True, old_logps_source="sampler", report_to="none")
    with pytest.raises(ValueError, match="nothing to replay"):
        GSPOConfig(output_dir=str(tmp_path), routing_replay=True, num_minibatches=1, report_to="none")


def test_old_routes_follow_trls_shuffle_and_split():
    """The batch key carrying the routes is row-indexed like the prompts, so TRL's shuffle and split keep the pairs."""
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    rows = torch.arange(8)
    batch = {
        "prompt_ids": rows[:, None].repeat(1, 3),
        _trl.OLD_ROUTES_KEY: rows[:, None, None, None].repeat(1, 5, 2, 2),
    }
    for part in split_tensor_dict(shuffle_sequence_dict(batch), 4):
        routes = part[_trl.OLD_ROUTES_KEY]
        assert routes.shape == (2, 5, 2, 2)
        assert torch.equal(routes[:, 0, 0, 0], part["prompt_ids"][:, 0])


@pytest.mark.slow
def test_two_processes_sum_route_counts_before_dividing(tmp_path):
    from gspo_recipes.moe.monitor import routing_shares

    launch_two_cpu_processes("two_process_routing.py", str(tmp_path), cwd=tmp_path)
    counts = [json.loads((tmp_path / f"counts_{rank}.json").read_text()) for rank in (0, 1)]
    history = [row for row in json.loads((tmp_path / "history.json").read_text()) if "gspo/routing/changed_frac" in row]
    assert len(history) == 4 and len(counts[0]) == len(counts[1]) == 4
    for step, row in enumerate(history):
        tables = [torch.tensor(c[step], dtype=torch.float64) for c in counts]
        assert not torch.equal(tables[0], tables[1])  # each process measured its own responses
        expected = routing_shares(tables[0] + tables[1])
        assert row["gspo/routing/changed_frac"] == pytest.approx(expected["changed_frac"], abs=1e-9)
        for k, of_k in expected["per_minibatch"].items():
            assert row[f"gspo/routing/changed_frac/minibatch_{k}"] == pytest.approx(of_k["changed_frac"], abs=1e-9)
    assert history[0]["gspo/routing/changed_frac/minibatch_1"] == 0.0
    assert max(row.get("gspo/routing/changed_frac/minibatch_4", 0.0) for row in history) > 0


def test_moe_recipe_config_parses_with_the_metric_on_and_replay_off():
    import pathlib

    from trl import ModelConfig, TrlParser

    from gspo_recipes.recipe import RecipeArguments

    path = pathlib.Path(__file__).parent.parent / "recipes" / "configs" / "gsm8k_gspo_moe.yaml"
    _, args, model = TrlParser((RecipeArguments, GSPOConfig, ModelConfig)).parse_args_and_config(
        ["--config", str(path)]
    )
    assert "A3B" in model.model_name_or_path and args.gspo_diagnostics and not args.routing_replay
    assert args.importance_sampling_level == "sequence" and args.steps_per_generation == 4 * 4


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_moe", "olmoe", "mixtral", "gpt_oss", "deepseek_v3", "glm4_moe"])
def test_replay_and_metric_in_training_for_each_family(tmp_path, prompt_dataset, family):
    tokenizer = build_tokenizer()
    model = build_tiny_moe(family, vocab_size=len(tokenizer))
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 2
    trainer = moe_trainer(tmp_path, (model, tokenizer), prompt_dataset, routing_replay=True, max_steps=4)
    seen = spy_replayed_experts(trainer)
    trainer.train()
    for s in seen:
        assert torch.equal(s["given"].long(), s["old"].long().reshape(-1, *s["old"].shape[2:]))
    assert torch.cat([s["log_s"] for s in seen if s["minibatch"] == 1]).abs().max() < 1e-6
    assert logged(trainer, "gspo/routing/changed_frac/minibatch_1") == [0.0]
    assert max(v for k in (2, 3, 4) for v in logged(trainer, f"gspo/routing/changed_frac/minibatch_{k}")) > 0


def test_exactly_on_policy_setup_logs_zero_without_recording(tmp_path, tiny_moe, prompt_dataset):
    trainer = moe_trainer(tmp_path, tiny_moe, prompt_dataset, steps_per_generation=None, num_minibatches=1, max_steps=2)
    assert not _trl.recomputes_old_logps(trainer)
    batches = []
    prepare = trainer._prepare_inputs
    trainer._prepare_inputs = lambda generation_batch: batches.append(prepare(generation_batch)) or batches[-1]
    trainer.train()
    assert batches and all(_trl.OLD_ROUTES_KEY not in batch for batch in batches)  # no old pass, nothing recorded
    assert logged(trainer, "gspo/routing/changed_frac") == [0.0, 0.0]
    assert logged(trainer, "gspo/routing/changed_frac/minibatch_1") == [0.0, 0.0]


def test_replay_on_a_plain_grpo_trainer_without_old_pass_is_refused(tmp_path, tiny_moe, prompt_dataset):
    model, tokenizer = tiny_moe
    args = plain_grpo_config(tmp_path, max_steps=1)  # TRL's default: one optimizer step per rollout
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=digit_count_reward,
        args=args,
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    with pytest.raises(ValueError, match="nothing to replay"):
        _trl.attach_routing(trainer, replay=True)
