"""Groups that carry signal: gspo/groups/* metrics, the low-signal warning, and dynamic sampling in GSPOTrainer."""

from __future__ import annotations

import pytest
import torch
from support import launch_two_cpu_processes, tiny_config, tiny_moe_model_and_tokenizer

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.stats.groups import LowSignalWarning, group_counts, group_fractions, signal_reward_index
from gspo_recipes.trainer.dynamic_sampling import RefillStream, merge_rows

KINDS = ("dead", "solved", "live", "live")


def toy_accuracy(completions, kind, **kwargs):
    """'dead' prompts are never solved, 'solved' always, 'live' when the completion has a digit (varies)."""
    return [0.0 if k == "dead" else 1.0 if k == "solved" else float(any(ch.isdigit() for ch in c))
            for c, k in zip(completions, kind)]  # fmt: skip


toy_accuracy.reward_kind = "accuracy"  # what it measures: solved (1) or not (0)


def soft_overlong_punishment(completions, **kwargs):
    """A stand-in named like the package's shaping reward, varying within every group."""
    return [len(c) / 8.0 for c in completions]


def kinds_dataset(n=48):
    from datasets import Dataset

    # Prompt lengths differ ("q7:" and "q12:"), so merged rounds need padding.
    return Dataset.from_list([{"prompt": f"q{i}:", "kind": KINDS[i % len(KINDS)]} for i in range(n)])


def direct_counts(rewards: list[float], G: int) -> dict:
    """The group statistics written out by hand, per group of G consecutive rewards."""
    groups = [rewards[i : i + G] for i in range(0, len(rewards), G)]
    out = dict(groups=len(groups), responses=len(rewards), solve_all=0, solve_none=0, zero_std=0, effective=0)
    for group in groups:
        mean = sum(group) / G
        out["solve_all"] += all(r == 1.0 for r in group)
        out["solve_none"] += all(r == 0.0 for r in group)
        out["zero_std"] += len(set(group)) == 1
        out["effective"] += sum(abs(r - mean) > 1e-6 for r in group) if len(set(group)) > 1 else 0
    return out


def test_group_counts_equal_a_direct_computation():
    torch.manual_seed(0)
    signal = (torch.rand(50, 4) < torch.rand(50, 1)).float()
    signal[:5] = 1.0
    signal[5:10] = 0.0
    signal[10, 1] = 0.5  # a continuous reward in one group
    assert group_counts(signal, 1e-6) == direct_counts(signal.flatten().tolist(), 4)


def test_unscorable_responses_carry_no_signal():
    signal = torch.tensor([[1.0, float("nan"), float("nan"), float("nan")], [1.0, 0.0, float("nan"), 1.0]])
    counts = group_counts(signal, 1e-6)
    assert counts["zero_std"] == 1 and counts["effective"] == 3  # one scorable response is no signal; NaN never counts


def test_the_signal_reward_is_known_by_what_it_is_never_by_its_name():
    from trl.rewards import accuracy_reward, get_soft_overlong_punishment, think_format_reward

    from gspo_recipes.rewards import get_reward
    from gspo_recipes.rewards.registry import reward_kind

    def correct(completions, **kwargs):
        return [1.0] * len(completions)

    def my_accuracy(completions, **kwargs):  # named like one, but says nothing
        return [1.0] * len(completions)

    rewards = [get_soft_overlong_punishment(8, 4), think_format_reward, get_reward("format"), my_accuracy, correct]
    names = ["soft_overlong_punishment_reward", "think_format_reward", "format_reward", "my_accuracy", "correct"]
    kinds = [reward_kind(f) for f in rewards]
    assert signal_reward_index(names, kinds) is None  # nothing identified: no guess
    correct.reward_kind = "accuracy"
    assert signal_reward_index(names, [reward_kind(f) for f in rewards]) == 4
    assert reward_kind(get_reward("gsm8k_accuracy")) == reward_kind(accuracy_reward) == "accuracy"
    assert reward_kind(get_reward({"code_execution": {"timeout": 2}})) == "accuracy"  # configured from the registry
    assert signal_reward_index(names, kinds, "my_accuracy") == 3  # named explicitly
    with pytest.raises(ValueError, match="shaping term"):
        signal_reward_index(names, kinds, "format_reward")
    with pytest.raises(ValueError, match="dynamic_sampling_reward='format'"):
        GSPOConfig("out", dynamic_sampling=True, dynamic_sampling_reward="format", use_cpu=True)


def test_dapos_pairing_with_trls_overlong_punishment_trains_on_the_accuracy_reward(tmp_path, tiny):
    """reward_funcs=[get_soft_overlong_punishment(...), correct], DAPO's pairing: the punishment varies within every
    group, so taking it for the signal would keep zero-std groups; with `correct` unmarked the run stops and says so,
    marked it decides and the kept groups are those that vary on it."""
    from trl.rewards import get_soft_overlong_punishment

    def correct(completions, kind, **kwargs):
        return globals()["toy_accuracy"](completions, kind)

    rewards = (get_soft_overlong_punishment(8, 4), correct)
    with pytest.raises(ValueError, match="dynamic_sampling_reward=NAME"):
        make_trainer(tmp_path, tiny, rewards=rewards, dynamic_sampling=True)
    correct.reward_kind = "accuracy"
    trainer = make_trainer(tmp_path, tiny, rewards=rewards, dynamic_sampling=True, max_steps=4)
    assert trainer.group_health.signal_name == "correct"
    seen = spy_loss(trainer)
    trainer.train()
    kinds = {f"q{i}:": KINDS[i % len(KINDS)] for i in range(48)}
    trained = [prompt for prompt, _, has_tokens in seen if has_tokens]
    assert trained and all(kinds[prompt] == "live" for prompt in trained)


def test_config_names_the_field_and_the_fix():
    with pytest.raises(ValueError, match="dynamic_sampling_max_rounds=0"):
        GSPOConfig("out", dynamic_sampling=True, dynamic_sampling_max_rounds=0, use_cpu=True)


def test_low_signal_warning_fires_on_dead_groups_and_stays_silent_on_healthy_ones(caplog):
    dead = group_counts(torch.zeros(8, 4), 1e-6)
    healthy = group_counts(torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 8), 1e-6)
    quiet = LowSignalWarning(window=3)
    assert [quiet.update(healthy) for _ in range(6)] == [None] * 6
    loud = LowSignalWarning(window=3)
    fired = [loud.update(dead) for _ in range(6)]
    assert fired[:2] == [None, None] and fired[2] is not None and fired[3:] == [None] * 3  # once per occurrence
    assert "dynamic_sampling=True" in fired[2] and "gspo passrate" in fired[2] and "harder" in fired[2]


def make_trainer(tmp_path, tiny, rewards=(toy_accuracy,), **overrides):
    model, tokenizer = tiny
    settings = dict(gspo_diagnostics=False, max_steps=4, sampler_mismatch_steps=0)
    settings.update(overrides)
    return GSPOTrainer(
        model=model,
        reward_funcs=list(rewards),
        args=tiny_config(tmp_path, **settings),
        train_dataset=kinds_dataset(),
        processing_class=tokenizer,
    )


def spy_loss(trainer):
    """Every loss call's (prompt text, advantage, has tokens) per row."""
    seen, compute_loss, tok = [], trainer._compute_loss, trainer.processing_class

    def spy(model, inputs):
        for ids, pmask, adv, cmask in zip(
            inputs["prompt_ids"], inputs["prompt_mask"], inputs["advantages"], inputs["completion_mask"]
        ):
            seen.append((tok.decode(ids[pmask.bool()]), float(adv), bool(cmask.any())))
        return compute_loss(model, inputs)

    trainer._compute_loss = spy
    return seen


def test_group_metrics_equal_a_direct_computation_from_the_completions(tmp_path, tiny):
    scored = []

    def toy_accuracy(completions, kind, **kwargs):  # noqa: F811 - the same reward, recording what it scored
        scored.append((list(completions), list(kind)))
        return globals()["toy_accuracy"](completions, kind)

    toy_accuracy.reward_kind = "accuracy"
    trainer = make_trainer(tmp_path, tiny, rewards=(toy_accuracy,), max_steps=8)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "gspo/groups/effective_frac" in e]
    assert len(logged) == len(scored) == 2  # one generation batch every 4 steps
    for entry, (texts, kinds) in zip(logged, scored):
        by_hand = [0.0 if k == "dead" else 1.0 if k == "solved" else float(any(c.isdigit() for c in t))
                   for t, k in zip(texts, kinds)]  # fmt: skip
        expected = group_fractions(direct_counts(by_hand, 4))
        assert {name: entry[name] for name in expected} == pytest.approx(expected)
    assert logged[0]["gspo/groups/solve_none_frac"] >= 0.25  # the dead prompts are a quarter of the data


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # 4 minibatches per generation batch
        {"gradient_accumulation_steps": 2, "steps_per_generation": 3},  # accumulation not lined up
        {"num_iterations": 2, "steps_per_generation": 2},
    ],
    ids=["default", "gas2-spg3", "iterations2"],
)
def test_zero_std_groups_never_reach_the_loss_with_dynamic_sampling(tmp_path, tiny, overrides):
    trainer = make_trainer(tmp_path, tiny, dynamic_sampling=True, **overrides)
    seen = spy_loss(trainer)
    trainer.train()
    trained = [(prompt, adv) for prompt, adv, has_tokens in seen if has_tokens]
    assert trained, "nothing reached the loss"
    kinds = {f"q{i}:": KINDS[i % len(KINDS)] for i in range(48)}
    assert all(kinds[prompt] == "live" for prompt, _ in trained)
    assert all(abs(adv) > 0 for _, adv in trained)
    per_micro_step = trainer.args.per_device_train_batch_size
    assert len(seen) == per_micro_step * trainer._step  # the batch keeps its size on every micro-step
    assert trainer.dynamic_sampler.last_fill["rounds"] >= 2  # half the groups are dead or solved: refills ran


def test_padding_groups_leave_the_kept_responses_gradient_as_a_batch_of_them_alone(tmp_path, tiny):
    """One round only, so the batch is padded with zero-std groups: each micro-step's gradient equals the gradient of
    the same micro-step with the padding rows removed (the README: the loss averages over the kept responses)."""
    from gspo_recipes.trainer.dynamic_sampling import FILLER_KEY

    trainer = make_trainer(tmp_path, tiny, dynamic_sampling=True, dynamic_sampling_max_rounds=1, max_steps=4)
    compute_loss, compared = trainer._compute_loss, []

    def spy(model, inputs):
        loss = compute_loss(model, inputs)
        kept = ~inputs[FILLER_KEY]
        if 0 < int(kept.sum()) < kept.numel():
            rows = kept.numel()
            alone = {key: value[kept] if isinstance(value, torch.Tensor) and value.dim() and value.size(0) == rows
                     else value for key, value in inputs.items()}  # fmt: skip
            alone.pop(FILLER_KEY)
            weight = model.get_output_embeddings().weight
            with_padding = torch.autograd.grad(loss, weight, retain_graph=True)[0]
            without = torch.autograd.grad(compute_loss(model, alone), weight)[0]
            compared.append((with_padding.norm().item(), without.norm().item()))
        return loss

    trainer._compute_loss = spy
    trainer.train()
    assert compared, "no micro-step mixed kept and padding rows"
    for with_padding, without in compared:
        assert with_padding == pytest.approx(without, rel=1e-4) and without > 0


def test_the_reward_metric_is_the_mean_over_every_generated_response(tmp_path, tiny):
    """Rounds of different sizes: the logged `reward` (and its std) are those of all the responses generated for the
    batch, not the mean of the rounds' means."""
    scored = []

    def toy_accuracy(completions, kind, **kwargs):  # noqa: F811 - the same reward, recording what it paid
        rewards = globals()["toy_accuracy"](completions, kind)
        scored.append(rewards)
        return rewards

    toy_accuracy.reward_kind = "accuracy"
    trainer = make_trainer(tmp_path, tiny, rewards=(toy_accuracy,), dynamic_sampling=True, max_steps=4)
    trainer.train()
    assert len({len(r) for r in scored}) > 1, "the rounds had one size"
    every = torch.tensor([r for rewards in scored for r in rewards])
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert len(logged) == 1  # one generation batch
    assert logged[0]["reward"] == pytest.approx(every.mean().item())
    assert logged[0]["reward_std"] == pytest.approx(every.std().item())
    assert logged[0]["rewards/toy_accuracy/mean"] == pytest.approx(every.mean().item())


def test_without_dynamic_sampling_zero_std_groups_do_reach_the_loss(tmp_path, tiny):
    trainer = make_trainer(tmp_path, tiny)
    seen = spy_loss(trainer)
    trainer.train()
    assert any(prompt in {"q0:", "q1:"} or adv == 0 for prompt, adv, has_tokens in seen if has_tokens)


def test_a_shaping_reward_with_variance_does_not_keep_a_group(tmp_path, tiny):
    def toy_accuracy(completions, **kwargs):  # noqa: F811 - never solved: no group carries signal
        return [0.0] * len(completions)

    toy_accuracy.reward_kind = "accuracy"
    trainer = make_trainer(tmp_path, tiny, rewards=(soft_overlong_punishment, toy_accuracy), dynamic_sampling=True,
                           dynamic_sampling_max_rounds=2)  # fmt: skip
    assert trainer.group_health.signal_name == "toy_accuracy"
    seen = spy_loss(trainer)
    trainer.train()
    assert seen and not any(has_tokens for _, _, has_tokens in seen)  # all masked: the budget ran out
    name = "gspo/dynamic_sampling/kept_groups"
    assert [e[name] for e in trainer.state.log_history if name in e] == [0.0]


def test_dynamic_sampling_refuses_when_only_shaping_rewards(tmp_path, tiny):
    with pytest.raises(ValueError, match="known to measure success"):
        make_trainer(tmp_path, tiny, rewards=(soft_overlong_punishment,), dynamic_sampling=True)


def test_merge_keeps_each_rows_prompt_and_completion():
    a = {"prompt_ids": torch.tensor([[0, 5], [6, 7]]), "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
         "completion_ids": torch.tensor([[8], [9]]), "completion_mask": torch.tensor([[1], [1]]),
         "advantages": torch.tensor([1.0, -1.0])}  # fmt: skip
    b = {"prompt_ids": torch.tensor([[4, 4, 4]]), "prompt_mask": torch.tensor([[1, 1, 1]]),
         "completion_ids": torch.tensor([[3, 3, 3]]), "completion_mask": torch.tensor([[1, 1, 0]]),
         "advantages": torch.tensor([0.5])}  # fmt: skip
    merged = merge_rows([a, b], [(1, 0), (0, 1)], 1, pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[4, 4, 4], [0, 6, 7]]
    assert merged["prompt_mask"].tolist() == [[1, 1, 1], [0, 1, 1]]
    assert merged["completion_ids"].tolist() == [[3, 3, 3], [9, 0, 0]]
    assert merged["completion_mask"].tolist() == [[1, 1, 0], [1, 0, 0]]
    assert merged["advantages"].tolist() == [0.5, -1.0]


def test_refill_stream_resumed_equals_uninterrupted(tmp_path, tiny):
    whole = RefillStream(10, seed=3)
    first = whole.take(7) + whole.take(9)
    part = RefillStream(10, seed=3)
    part.take(7)
    resumed = RefillStream(10, seed=3)
    resumed.position = part.position
    assert part.take(9) == resumed.take(9) == first[7:]
    assert sorted(first[:10]) == list(range(10))  # a pass is a permutation

    trainer = make_trainer(tmp_path, tiny, dynamic_sampling=True, save_strategy="steps", save_steps=4)
    trainer.train()
    restored = make_trainer(tmp_path / "b", tiny, dynamic_sampling=True)
    restored.dynamic_sampler.load(str(tmp_path / "checkpoint-4"))
    assert restored.dynamic_sampler.refill.position == trainer.dynamic_sampler.refill.position > 0


@pytest.mark.slow
def test_two_processes_keep_equal_group_counts_and_finish(tmp_path):
    import json

    launch_two_cpu_processes("two_process_dynamic_sampling.py", str(tmp_path), cwd=tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["loss_rows"] == ranks[1]["loss_rows"] and ranks[0]["loss_rows"]
    assert ranks[0]["kept_per_process"] == ranks[1]["kept_per_process"]  # both ranks decided the same picks
    assert ranks[0]["rounds"] == ranks[1]["rounds"] and max(ranks[0]["rounds"]) >= 2
    assert all(ranks[r]["trained_kinds"] == ["live"] for r in (0, 1))


@pytest.mark.parametrize("feature", ["sampler_logps", "beta_and_diagnostics", "peft", "moe_replay"])
def test_dynamic_sampling_with_the_other_features(tmp_path, tiny, feature):
    overrides, model_and_tokenizer, peft_config = {}, tiny, None
    if feature == "sampler_logps":
        overrides = {"old_logps_source": "sampler", "sampler_mismatch_steps": 1}
    elif feature == "beta_and_diagnostics":
        overrides = {"beta": 0.1, "gspo_diagnostics": True}
    elif feature == "peft":
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    else:
        overrides = {"routing_replay": True, "gspo_diagnostics": True}
        model_and_tokenizer = tiny_moe_model_and_tokenizer()
    model, tokenizer = model_and_tokenizer
    if feature == "beta_and_diagnostics":  # TRL loads the reference model by name: give it one on disk
        model.save_pretrained(tmp_path / "model")
        model = str(tmp_path / "model")
    args = tiny_config(tmp_path, max_steps=4, dynamic_sampling=True, **{"gspo_diagnostics": False, **overrides})
    trainer = GSPOTrainer(model=model, reward_funcs=[toy_accuracy], args=args, train_dataset=kinds_dataset(),
                          processing_class=tokenizer, peft_config=peft_config)  # fmt: skip
    seen, rows, compute_loss = [], [], trainer._compute_loss

    def spy(model, inputs):
        rows.append({k: v.size(0) for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.dim()})
        return compute_loss(model, inputs)

    trainer._compute_loss = spy
    seen = spy_loss(trainer)
    trainer.train()
    kinds = {f"q{i}:": KINDS[i % len(KINDS)] for i in range(48)}
    assert seen and all(kinds[p] == "live" and adv != 0 for p, adv, has_tokens in seen if has_tokens)
    assert all(set(r.values()) == {8} for r in rows)  # every per-row field, routes included, has the batch's rows
    if feature == "moe_replay":
        assert all("old_routes" in r for r in rows)
    if feature == "beta_and_diagnostics":
        from gspo_recipes.runfiles.diagnostics import diagnostics_path, read_diagnostics

        lines = read_diagnostics(diagnostics_path(args.output_dir))
        sections = [line["groups"] for line in lines if "groups" in line]
        assert len(sections) == 1 and sections[0]["groups"] == 8  # one generation batch of 32 rows, 4 per group
        assert any("dynamic_sampling" in line for line in lines)


@pytest.mark.slow
def test_resumed_run_draws_the_refills_an_uninterrupted_one_draws(tmp_path, tiny):
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    whole = make_trainer(tmp_path / "whole", tiny, dynamic_sampling=True, max_steps=8)
    whole.train()
    first = make_trainer(tmp_path / "cut", build_tiny_model_and_tokenizer(), dynamic_sampling=True, max_steps=8,
                         save_strategy="steps", save_steps=4)  # fmt: skip
    first.train()
    resumed = make_trainer(tmp_path / "cut", build_tiny_model_and_tokenizer(), dynamic_sampling=True, max_steps=8)
    resumed.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-4"))
    assert resumed.dynamic_sampler.last_fill["refill_indices"] == whole.dynamic_sampler.last_fill["refill_indices"]
    assert resumed.dynamic_sampler.refill.position == whole.dynamic_sampler.refill.position


@pytest.mark.parametrize("kind", ["dead", "healthy"])
def test_the_trainer_warns_on_a_run_of_dead_groups_and_not_on_a_healthy_one(tmp_path, tiny, kind):
    def toy_accuracy(completions, **kwargs):  # noqa: F811
        if kind == "dead":
            return [0.0] * len(completions)
        return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]  # varies within every group

    toy_accuracy.reward_kind = "accuracy"

    trainer = make_trainer(tmp_path, tiny, rewards=(toy_accuracy,), max_steps=8, steps_per_generation=1)
    trainer.group_health.warning = LowSignalWarning(window=4)
    trainer.train()
    fired = [w["kind"] for w in trainer.group_health.warning.history]
    assert fired == (["low_signal"] if kind == "dead" else [])
    staged = trainer.__dict__.get("gspo_diagnostics_sections", {}).get("warnings", [])  # for gspo report's list
    assert [w["kind"] for w in staged] == fired


def test_report_replays_the_low_signal_warning_from_the_diagnostics_file():
    from gspo_recipes.commands.report.groups import groups_summary

    def line(step, effective):
        counts = {"batches": 1, "groups": 4, "responses": 16, "solve_all": 0, "solve_none": 0}
        return {"step": step, "groups": {**counts, "zero_std": 4 - effective // 4, "effective": effective}}

    assert any("warning at step 3" in text for text in groups_summary([line(s, 0) for s in range(1, 6)]))
    assert not any("warning" in text for text in groups_summary([line(s, 12) for s in range(1, 6)]))


@pytest.mark.parametrize("declared", [True, False], ids=["accuracy_reward", "plain_rewards"])
def test_group_health_is_logged_with_or_without_an_accuracy_reward_and_names_its_reward(tmp_path, tiny, declared):
    """Without a declared accuracy reward, gspo/groups/* come from TRL's total reward (weighted, over every function)
    instead of going missing; the diagnostics file names the reward each section was judged on."""
    from gspo_recipes.runfiles.diagnostics import diagnostics_path, read_diagnostics

    scored = []

    def plain(completions, kind, **kwargs):  # varies within the 'live' groups only
        scored.append(list(zip(completions, kind)))
        return [0.0 if k == "dead" else 1.0 if k == "solved" else float(any(c.isdigit() for c in t))
                for t, k in zip(completions, kind)]  # fmt: skip

    def digits(completions, **kwargs):  # shaping-like: differs within almost every group
        return [float(sum(ch.isdigit() for ch in c)) for c in completions]

    if declared:
        plain.reward_kind = "accuracy"
    trainer = make_trainer(tmp_path, tiny, rewards=(plain, digits), max_steps=4, gspo_diagnostics=True,
                           reward_weights=[1.0, 0.5])  # fmt: skip
    assert trainer.group_health.signal_name == ("plain" if declared else "total")
    trainer.train()
    logged = [e for e in trainer.state.log_history if "gspo/groups/effective_frac" in e]
    assert len(logged) == len(scored) == 1
    texts, kinds = zip(*scored[0])
    by_hand = [0.0 if k == "dead" else 1.0 if k == "solved" else float(any(c.isdigit() for c in t))
               for t, k in zip(texts, kinds)]  # fmt: skip
    if not declared:
        by_hand = [r + 0.5 * d for r, d in zip(by_hand, digits(list(texts)))]
    expected = group_fractions(direct_counts(by_hand, 4))
    if not declared:  # "solved" needs a 0/1 success reward; a total is not one
        expected = {name: value for name, value in expected.items() if "/solve_" not in name}
        assert not any("/solve_" in name for name in logged[0])
    assert {name: logged[0][name] for name in expected} == pytest.approx(expected)
    assert 0 < logged[0]["gspo/groups/zero_std_frac"] < 1  # some groups carry signal, some do not
    sections = [line["groups"] for line in read_diagnostics(diagnostics_path(str(tmp_path))) if "groups" in line]
    assert [section["reward"] for section in sections] == ["plain" if declared else "total"]


def test_the_total_reward_weighs_the_functions_and_keeps_unscorable_rows_unscorable():
    from gspo_recipes.trainer.group_health import total_reward

    nan = float("nan")
    per_func = torch.tensor([[1.0, 2.0], [nan, 2.0], [nan, nan]])
    total = total_reward(per_func, torch.tensor([1.0, 0.5]))
    assert total[:2].tolist() == [2.0, 1.0] and torch.isnan(total[2])


def test_the_open_windows_sections_go_into_the_checkpoint_and_come_back_on_resume(tmp_path, tiny):
    from transformers import TrainerControl, TrainerState

    from gspo_recipes.callbacks import LogRatioHistogramCallback

    def writer(trainer):
        return next(c for c in trainer.callback_handler.callbacks if isinstance(c, LogRatioHistogramCallback))

    trainer = make_trainer(tmp_path, tiny, gspo_diagnostics=True)
    staged = {"groups": {"batches": 1, "groups": 4, "reward": "toy_accuracy"}, "dynamic_sampling": {"rounds": 2}}
    trainer.gspo_diagnostics_sections.update(staged)
    state = TrainerState(global_step=2)
    (tmp_path / "checkpoint-2").mkdir()
    writer(trainer).on_save(trainer.args, state, TrainerControl())
    trainer.gspo_diagnostics_sections.clear()  # what a fresh process resuming from checkpoint-2 starts with
    writer(trainer).on_train_begin(trainer.args, state, TrainerControl())
    assert trainer.gspo_diagnostics_sections == staged


@pytest.mark.slow
def test_a_resume_inside_a_logging_window_keeps_the_windows_group_counts(tmp_path, tiny):
    """Resumed from a checkpoint in the middle of a logging window, the next diagnostics line counts the groups and
    dynamic sampling's rounds of the whole window, as the uninterrupted run's line does: nothing lost, nothing twice."""
    import shutil

    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
    from gspo_recipes.runfiles.diagnostics import diagnostics_path, read_diagnostics

    settings = dict(dynamic_sampling=True, gspo_diagnostics=True, max_steps=4, steps_per_generation=2,
                    logging_steps=4, save_strategy="steps", save_steps=2)  # fmt: skip
    whole = make_trainer(tmp_path, tiny, **settings)
    whole.train()
    path = diagnostics_path(str(tmp_path))
    uninterrupted = read_diagnostics(path)
    shutil.rmtree(tmp_path / "checkpoint-4")
    resumed = make_trainer(tmp_path, build_tiny_model_and_tokenizer(), **settings)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    after_resume = read_diagnostics(path)
    sections = ("groups", "dynamic_sampling")
    assert [line["step"] for line in after_resume] == [line["step"] for line in uninterrupted] == [4]
    assert uninterrupted[0]["groups"]["batches"] == 2  # the window holds generation batches from both sides
    assert {s: after_resume[0][s] for s in sections} == {s: uninterrupted[0][s] for s in sections}


@pytest.mark.slow
def test_clip_frac_equals_trls_region_mean_with_filler_rows(tmp_path, tiny):
    """With dynamic sampling's filler rows the micro-steps count different numbers of responses; TRL's rule (the mean
    of the micro-steps' shares) would then differ from gspo/clip_frac (0.0714 against 0.0833 in the issue). Both are
    the share of the window's responses instead."""
    trainer = make_trainer(tmp_path, tiny, dynamic_sampling=True, dynamic_sampling_max_rounds=1, gspo_diagnostics=True,
                           gradient_accumulation_steps=2, num_minibatches=2, max_steps=2, learning_rate=5e-2,
                           epsilon=1e-4, epsilon_high=1e-4)  # fmt: skip
    micro_steps, log_loss_metrics = [], trainer._log_loss_metrics

    def spy(mode, mask, entropies, low, high, lengths, per_token_kl):
        counted = lengths > 0  # filler rows have no completion tokens
        micro_steps.append((trainer.state.global_step + 1, int(((low | high) & counted).sum()), int(counted.sum())))
        return log_loss_metrics(mode, mask, entropies, low, high, lengths, per_token_kl)

    trainer._log_loss_metrics = spy
    trainer.train()
    trls_rule_differs = False
    for entry in (e for e in trainer.state.log_history if "gspo/clip_frac" in e):
        steps = [(clipped, counted) for step, clipped, counted in micro_steps if step == entry["step"] and counted]
        pooled = sum(c for c, _ in steps) / sum(n for _, n in steps)
        assert entry["clip_ratio/region_mean"] == pytest.approx(entry["gspo/clip_frac"]) == pytest.approx(pooled)
        trls_rule_differs |= abs(pooled - sum(c / n for c, n in steps) / len(steps)) > 1e-6
    assert trls_rule_differs, "no step had micro-steps of different sizes with a clip: the test shows nothing"
