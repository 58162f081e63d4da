"""old_logps_source="sampler", the sampler mismatch monitor and vLLM's geometric-mean correction, on the tiny model.

vLLM cannot run here: its branch is exercised through TRL's own vLLM code path, with `trainer.vllm_generation`
replaced by a stand-in that returns completions and per-token log-probabilities the way `VLLMGeneration.generate` does.
"""

import logging
import math

import pytest
import torch
from support import digit_count_reward, tiny_config
from trl import GRPOTrainer, TrlParser

from gspo_recipes import GSPOConfig, GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
from gspo_recipes.sampler.generation_logprobs import GenerationLogprobRecorder
from gspo_recipes.sampler.mismatch import MISMATCH_PREFIX
from gspo_recipes.sampler.vllm_is_weight import bound_is_weight, sequence_is_log_weight

PROMPTS = ["1+2=", "3+0="]


def make_trainer(tmp_path, tiny, dataset, **overrides):
    model, tokenizer = tiny
    settings = dict(gspo_diagnostics=False, sampler_mismatch_steps=0)
    settings.update(overrides)
    cfg = tiny_config(tmp_path, **settings)
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.model.train()
    return trainer


def generation_batch(trainer):
    """Inputs of `_generate_and_score_completions`: each prompt repeated num_generations times."""
    return [{"prompt": p} for p in PROMPTS for _ in range(trainer.num_generations)]


class ScoringPasses:
    """Counts the trainer's scoring forward passes (TRL's fused LM head); generation's own calls are not counted.

    `during_generation` counts those inside `_generate_and_score_completions`, where TRL's old-policy pass lives.
    """

    def __init__(self, trainer):
        self.total = self.during_generation = 0
        self._in_generation = False
        trainer.model.register_forward_pre_hook(self._count, with_kwargs=True)
        original = trainer._generate_and_score_completions

        def wrapped(inputs):
            self._in_generation = True
            try:
                return original(inputs)
            finally:
                self._in_generation = False

        trainer._generate_and_score_completions = wrapped

    def _count(self, module, args, kwargs):
        if kwargs.get("fused_lm_head"):
            self.total += 1
            self.during_generation += self._in_generation


def recomputed_logps(trainer, out):
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, trainer.model, ids, mask, out["completion_ids"].size(1)
        )
    return logps


def assert_close_on(mask, a, b, atol):
    mask = mask.bool()
    assert torch.allclose(a[mask], b[mask], atol=atol, rtol=0), (a[mask] - b[mask]).abs().max()


# ----------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field,value",
    [
        ("old_logps_source", "vllm"),
        ("sampler_mismatch_steps", -1),
        ("vllm_importance_sampling_sequence_ratio", "mean"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(tmp_path, field, value):
    with pytest.raises(ValueError, match=field):
        GSPOConfig(output_dir=str(tmp_path), report_to="none", **{field: value})


def test_config_sampler_needs_a_generator_with_logprobs(tmp_path):
    with pytest.raises(ValueError, match="continuous batching"):
        GSPOConfig(
            output_dir=str(tmp_path),
            report_to="none",
            old_logps_source="sampler",
            use_transformers_continuous_batching=True,
        )


def test_config_defaults_and_parser(tmp_path):
    cfg = GSPOConfig(output_dir=str(tmp_path), report_to="none")
    assert cfg.old_logps_source == "recompute"
    assert cfg.vllm_importance_sampling_sequence_ratio == "geometric_mean"
    assert cfg.sampler_mismatch_steps > 0
    (cfg,) = TrlParser((GSPOConfig,)).parse_args_and_config(
        ["--output_dir", str(tmp_path), "--old_logps_source", "sampler", "--report_to", "none"]
    )
    assert cfg.old_logps_source == "sampler"


# ----------------------------------------------------------------------------------------------- transformers


def test_recorder_reads_the_unfiltered_temperature_scaled_distribution(tiny):
    """The recorded values are log_softmax(raw logits / T) of the sampled tokens, not the top-k/top-p scores."""
    model, tokenizer = tiny
    prompt = tokenizer(["1+2=", "30+4="], return_tensors="pt", padding=True)
    recorder = GenerationLogprobRecorder(temperature=0.7)
    torch.manual_seed(0)
    with recorder.attached(model), torch.no_grad():
        out = model.generate(
            **prompt, do_sample=True, temperature=0.7, top_k=10, top_p=0.9, max_new_tokens=6,
            output_logits=True, output_scores=True, return_dict_in_generate=True,
        )  # fmt: skip
    new = out.sequences[:, prompt["input_ids"].size(1) :]
    completions = [row.tolist() for row in new]
    recorded = torch.tensor(recorder.logprobs_for(completions))
    raw = torch.stack(out.logits, 1)
    expected = torch.log_softmax(raw / 0.7, -1).gather(-1, new[..., None]).squeeze(-1)
    assert torch.allclose(recorded, expected, atol=1e-6)
    filtered = torch.log_softmax(torch.stack(out.scores, 1), -1).gather(-1, new[..., None]).squeeze(-1)
    assert not torch.allclose(recorded, filtered, atol=1e-3), "top-k/top-p renormalisation should differ"


def test_transformers_sampler_logps_equal_the_recomputed_ones(tmp_path, tiny, prompt_dataset):
    trainer = make_trainer(
        tmp_path, tiny, prompt_dataset, old_logps_source="sampler", temperature=0.7, top_k=10, top_p=0.9
    )
    passes = ScoringPasses(trainer)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    assert passes.during_generation == 0, "the old-policy forward pass should be skipped"
    assert trainer.sampler_logprobs.old_policy_passes_skipped == 1
    assert torch.equal(out["old_per_token_logps"], out["sampling_per_token_logps"])
    mask = out["completion_mask"]
    assert_close_on(mask, out["old_per_token_logps"], recomputed_logps(trainer, out), atol=1e-5)


def tiny_gpt2(tokenizer):
    """GPT-2: learned absolute position embeddings, where left padding changes the log-probabilities."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=2,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def test_sampler_logps_equal_the_trainers_for_absolute_position_models(tmp_path, tiny, prompt_dataset):
    """Prompts of several lengths, left-padded: the sampler's values are what the trainer scores, token by token."""
    _, tokenizer = tiny
    trainer = make_trainer(
        tmp_path, (tiny_gpt2(tokenizer), tokenizer), prompt_dataset, old_logps_source="sampler", disable_dropout=True
    )  # GPT-2 has dropout: random in both passes
    batch = [{"prompt": p} for p in ("1+2=", "30+41=", "123+4567=", "9=") for _ in range(trainer.num_generations)]
    out = trainer._generate_and_score_completions(batch)
    assert trainer.sampler_logprobs.old_policy_passes_skipped == 1
    assert out["prompt_mask"].sum(1).unique().numel() > 1, "prompts of different lengths, so some are padded"
    assert_close_on(out["completion_mask"], out["old_per_token_logps"], recomputed_logps(trainer, out), atol=1e-5)


PROMPTS_OF_SEVERAL_LENGTHS = ("1+2=", "30+41=", "123+4567=", "9=")


def gpt2_mismatch(tmp_path, tiny, prompt_dataset, caplog, **overrides):
    """One monitored generation batch of a tiny GPT-2 over left-padded prompts: mismatch figures and the sampler's
    warnings (others, such as group health's on a reward of unknown kind, are not what these tests judge)."""
    _, tokenizer = tiny
    torch.manual_seed(0)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.sampler"):
        trainer = make_trainer(
            tmp_path, (tiny_gpt2(tokenizer), tokenizer), prompt_dataset, sampler_mismatch_steps=1, **overrides
        )
        batch = [{"prompt": p} for p in PROMPTS_OF_SEVERAL_LENGTHS for _ in range(trainer.num_generations)]
        out = trainer._generate_and_score_completions(batch)
    assert out["prompt_mask"].sum(1).unique().numel() > 1, "prompts of different lengths, so some are padded"
    metrics = trainer._metrics["train"]
    warnings = "".join(r.getMessage() + "\n" for r in caplog.records if r.name.startswith("gspo_recipes.sampler"))
    return {name: metrics[MISMATCH_PREFIX + name][-1] for name in ("log_s_mean", "outside_clip_frac")}, warnings


def test_recompute_mode_monitor_predicts_what_sampler_mode_sees_on_absolute_position_models(
    tmp_path, tiny, prompt_dataset, caplog
):
    """GPT-2 (learned positions), left-padded prompts, dropout off: sampler mode sees no mismatch, so the monitor in
    recompute mode must report none either, nor advise that switching would clip."""
    for source in ("recompute", "sampler"):
        figures, warnings = gpt2_mismatch(
            tmp_path / source, tiny, prompt_dataset, caplog, old_logps_source=source, disable_dropout=True
        )
        assert abs(figures["log_s_mean"]) < 1e-6 and figures["outside_clip_frac"] == 0.0, (source, figures)
        assert "Mismatch" not in warnings, source


def test_dropout_is_named_as_the_cause_of_the_mismatch(tmp_path, tiny, prompt_dataset, caplog):
    """GPT-2 with its default dropout on (TRL's disable_dropout=False): in sampler mode a warning at start and the
    mismatch warning name dropout and its fix; recompute mode's monitor predicts the same; with dropout off, silence."""
    for source in ("sampler", "recompute"):
        figures, warnings = gpt2_mismatch(
            tmp_path / source, tiny, prompt_dataset, caplog, old_logps_source=source, disable_dropout=False
        )
        assert figures["outside_clip_frac"] > 0.5, (source, figures)
        assert "Mismatch" in warnings and "applies dropout" in warnings and "disable_dropout=True" in warnings
        assert ("with dropout on" in warnings) == (source == "sampler")
    _, warnings = gpt2_mismatch(tmp_path / "off", tiny, prompt_dataset, caplog, old_logps_source="sampler",
                                disable_dropout=True)  # fmt: skip
    assert warnings == ""


def test_bf16_mismatch_is_measured_and_warned_when_it_alone_would_clip(tmp_path, tiny, prompt_dataset, caplog):
    """Under bf16 autocast the generator's and the trainer's log-probabilities differ by about the clip range's size;
    the monitor measures it, and warns once the mismatch alone puts responses outside the range."""
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, bf16=True, sampler_mismatch_steps=1)
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.sampler.mismatch"):
        trainer._generate_and_score_completions(generation_batch(trainer))
    metrics = trainer._metrics["train"]
    mean = metrics[MISMATCH_PREFIX + "log_s_mean"][-1]
    std = metrics[MISMATCH_PREFIX + "log_s_std"][-1]
    outside = metrics[MISMATCH_PREFIX + "outside_clip_frac"][-1]
    assert metrics[MISMATCH_PREFIX + "token_max_abs"][-1] > 1e-4, "bf16 rounding should show"
    assert (outside > 0.1) == ("by the mismatch alone" in caplog.text), (mean, std, outside)


def test_sampler_mode_trains_without_old_policy_passes(tmp_path, tiny, prompt_dataset):
    """Over a training run, "sampler" runs no forward pass for the old policy and "recompute" runs one per batch."""
    counts = {}
    for source in ("recompute", "sampler"):
        model, tokenizer = build_tiny_model_and_tokenizer()  # the same weights each time (seed 0)
        trainer = make_trainer(tmp_path / source, (model, tokenizer), prompt_dataset, old_logps_source=source)
        passes = ScoringPasses(trainer)
        trainer.train()
        assert trainer.state.global_step == 4
        counts[source] = (passes.during_generation, passes.total)
        assert any(h.get("clip_ratio/region_mean", 0) > 0 for h in trainer.state.log_history), "off-policy steps clip"
    # one generation batch of 32 responses, scored in chunks of per_device_train_batch_size = 8
    assert counts["recompute"] == (4, 8)
    assert counts["sampler"] == (0, 4)  # only the loss's own passes


def test_peft_with_kl_keeps_the_reference_pass(tmp_path, tiny, prompt_dataset):
    """Under LoRA the reference pass also scores with the policy model (adapter off): only the old pass is skipped."""
    from peft import LoraConfig
    from trl.trainer.utils import use_adapter

    model, tokenizer = tiny
    cfg = tiny_config(tmp_path, gspo_diagnostics=False, sampler_mismatch_steps=0, old_logps_source="sampler", beta=0.1)
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=cfg, train_dataset=prompt_dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )  # fmt: skip
    with torch.no_grad():  # a non-trivial adapter, so that the policy and the reference differ
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    trainer.model.train()
    passes = ScoringPasses(trainer)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    assert passes.during_generation == 1  # the reference pass only
    mask = out["completion_mask"]
    assert_close_on(mask, out["old_per_token_logps"], recomputed_logps(trainer, out), atol=1e-5)
    with use_adapter(trainer.model, adapter_name=None):
        reference = recomputed_logps(trainer, out)
    assert_close_on(mask, out["ref_per_token_logps"], reference, atol=1e-5)
    assert not torch.allclose(out["ref_per_token_logps"][mask.bool()], out["old_per_token_logps"][mask.bool()])


def test_on_policy_sampler_mode_changes_nothing(tmp_path, tiny, prompt_dataset):
    """With one optimizer step per generation batch TRL runs no old-policy pass, so there is nothing to replace."""
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, old_logps_source="sampler", num_minibatches=1)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    assert "old_per_token_logps" not in out and "sampling_per_token_logps" not in out
    assert trainer.sampler_logprobs.old_policy_passes_skipped == 0


def test_monitor_in_recompute_mode_logs_and_leaves_training_unchanged(tmp_path, tiny, prompt_dataset):
    weights, histories = {}, {}
    for steps in (0, 1):
        model, tokenizer = build_tiny_model_and_tokenizer()  # the same weights each time (seed 0)
        trainer = make_trainer(
            tmp_path / str(steps), (model, tokenizer), prompt_dataset, sampler_mismatch_steps=steps, max_steps=5
        )
        trainer.train()
        weights[steps] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        histories[steps] = trainer.state.log_history
        assert all("sampling_per_token_logps" not in batch for batch in trainer._buffered_inputs)
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])
    assert not any(MISMATCH_PREFIX + "log_s_mean" in h for h in histories[0])
    measured = [h for h in histories[1] if MISMATCH_PREFIX + "log_s_mean" in h]
    assert len(measured) == 2  # the generation batches at steps 0 and 4
    for h in measured:
        assert abs(h[MISMATCH_PREFIX + "log_s_mean"]) < 1e-5
        assert h[MISMATCH_PREFIX + "log_s_std"] < 1e-5
        assert h[MISMATCH_PREFIX + "token_max_abs"] < 1e-4
        assert h[MISMATCH_PREFIX + "outside_clip_frac"] == 0


def test_monitor_in_sampler_mode_costs_one_pass(tmp_path, tiny, prompt_dataset):
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, old_logps_source="sampler", sampler_mismatch_steps=1)
    passes = ScoringPasses(trainer)
    trainer._generate_and_score_completions(generation_batch(trainer))
    assert passes.during_generation == 1  # 8 responses, one chunk: the monitor's, not the old policy's
    assert abs(trainer._metrics["train"][MISMATCH_PREFIX + "log_s_mean"][-1]) < 1e-5


# ----------------------------------------------------------------------------------------------- vLLM


class FakeVLLM:
    """Stands in for TRL's `VLLMGeneration`: completions of varied length, and each token's log-probability under the
    trainer's current model (log_softmax(logits / T), no fused head) plus `bias` and Gaussian `noise`, in vLLM's
    per-token top-k layout. Tokens listed in `missing` come back as None, as vLLM reports a NaN."""

    def __init__(self, trainer, bias=0.0, noise=0.0, missing=(), seed=0):
        self.trainer, self.bias, self.noise, self.missing = trainer, bias, noise, set(missing)
        self.generator = torch.Generator().manual_seed(seed)
        self.fed = None

    def sync_weights(self):
        pass

    def generate(self, prompts, images, num_generations, profiler=None):
        t = self.trainer
        vocab, eos = t.model.config.vocab_size, t.eos_token_ids[0]
        completions = []
        for i in range(len(prompts)):
            ids = torch.randint(4, vocab, (3 + i % 6,), generator=self.generator).tolist()
            if i % 2:
                ids[-1] = eos
            completions.append(ids)
        true = self._true_logps(prompts, completions)
        noise = [self.noise * torch.randn(len(row), generator=self.generator) for row in true]
        fed = [
            [None if (i, j) in self.missing else lp + self.bias + noise[i][j].item() for j, lp in enumerate(row)]
            for i, row in enumerate(true)
        ]
        self.fed = fed
        return prompts, completions, [[[lp] for lp in row] for row in fed], None

    def _true_logps(self, prompts, completions):
        t = self.trainer
        rows = []
        with torch.no_grad():
            for prompt, completion in zip(prompts, completions):
                ids = torch.tensor([prompt + completion])
                logits = t.model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
                logps = torch.log_softmax(logits / t.temperature, -1).gather(-1, torch.tensor(completion)[:, None])
                rows.append(logps.squeeze(-1).tolist())
        return rows


def with_fake_vllm(trainer, **kwargs):
    trainer.use_vllm = True
    trainer.vllm_generation = FakeVLLM(trainer, **kwargs)
    trainer._last_loaded_step = trainer.state.global_step
    return trainer.vllm_generation


def fed_tensor(fed, like):
    out = torch.zeros_like(like)
    for i, row in enumerate(fed):
        out[i, : len(row)] = torch.tensor([math.nan if x is None else x for x in row])
    return out


def test_vllm_sampler_mode_uses_vllms_logprobs_as_old(tmp_path, tiny, prompt_dataset):
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, old_logps_source="sampler")
    fake = with_fake_vllm(trainer, bias=1e-3, noise=1e-3)
    passes = ScoringPasses(trainer)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    assert passes.during_generation == 0
    mask = out["completion_mask"]
    assert_close_on(mask, out["old_per_token_logps"], fed_tensor(fake.fed, out["old_per_token_logps"]), atol=1e-6)
    # the sampler is compared with itself: TRL's correction is exactly 1, the mismatch lives in s_i
    assert torch.equal(out["importance_sampling_ratio"], torch.ones_like(out["importance_sampling_ratio"]))


def test_vllm_sampler_mode_recomputes_tokens_vllm_could_not_score(tmp_path, tiny, prompt_dataset):
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, old_logps_source="sampler")
    fake = with_fake_vllm(trainer, bias=1e-2, missing={(0, 1), (5, 0)})
    passes = ScoringPasses(trainer)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    old, mask = out["old_per_token_logps"], out["completion_mask"]
    assert not torch.isnan(old).any()
    assert passes.during_generation == 1  # the fallback pass
    recomputed = recomputed_logps(trainer, out)
    assert abs(old[0, 1] - recomputed[0, 1]) < 1e-5 and abs(old[5, 0] - recomputed[5, 0]) < 1e-5
    others = mask.bool().clone()
    others[0, 1] = others[5, 0] = False
    assert_close_on(others, old, fed_tensor(fake.fed, old), atol=1e-6)


@pytest.mark.parametrize("ratio", ["geometric_mean", "product"])
def test_vllm_recompute_mode_importance_weight(tmp_path, tiny, prompt_dataset, ratio):
    trainer = make_trainer(
        tmp_path, tiny, prompt_dataset, vllm_importance_sampling_sequence_ratio=ratio, sampler_mismatch_steps=1
    )
    fake = with_fake_vllm(trainer, bias=2e-3, noise=1e-3)
    passes = ScoringPasses(trainer)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    assert passes.during_generation == 1  # TRL's own pass; the monitor reuses it
    old, mask = out["old_per_token_logps"], out["completion_mask"]
    sampling = fed_tensor(fake.fed, old)
    assert_close_on(mask, out["sampling_per_token_logps"], sampling, atol=1e-6)
    expected = torch.exp(sequence_is_log_weight(old, sampling, mask, ratio))
    expected = bound_is_weight(expected, "sequence_mask", None, trainer.args.vllm_importance_sampling_clip_max)
    assert torch.allclose(out["importance_sampling_ratio"], expected, atol=1e-6)
    if ratio == "geometric_mean":  # per token, the weight is exp(-bias)
        assert torch.allclose(out["importance_sampling_ratio"], torch.full_like(expected, math.exp(-2e-3)), atol=1e-2)
    metrics = trainer._metrics["train"]
    assert metrics["sampling/importance_sampling_ratio/mean"][-1] == pytest.approx(expected.mean().item(), abs=1e-6)
    assert metrics[MISMATCH_PREFIX + "log_s_mean"][-1] == pytest.approx(-2e-3, abs=2e-3)


def test_monitor_warns_when_the_bias_alone_clips_one_side(tmp_path, tiny, prompt_dataset, caplog):
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, sampler_mismatch_steps=1)
    with_fake_vllm(trainer, bias=2e-3)  # the sampler is 2e-3 nats per token above the trainer
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.sampler_logps"):
        trainer._generate_and_score_completions(generation_batch(trainer))
    metrics = trainer._metrics["train"]
    assert metrics[MISMATCH_PREFIX + "log_s_mean"][-1] == pytest.approx(-2e-3, abs=1e-5)
    assert metrics[MISMATCH_PREFIX + "log_s_std"][-1] < 1e-5
    assert metrics[MISMATCH_PREFIX + "token_max_abs"][-1] == pytest.approx(2e-3, abs=1e-5)
    assert metrics[MISMATCH_PREFIX + "outside_clip_frac"][-1] == 1.0
    assert "negative advantage" in caplog.text and "old_logps_source='recompute'" in caplog.text
    staged = trainer.gspo_diagnostics_sections["warnings"]  # recorded for gspo report's list
    assert [w["kind"] for w in staged] == ["sampler_mismatch_clips"] and "negative advantage" in staged[0]["message"]
    caplog.clear()
    trainer.state.global_step = 1  # the same bias on the next measurement: no second warning
    with caplog.at_level(logging.WARNING, logger="gspo_recipes.sampler_logps"):
        trainer._generate_and_score_completions(generation_batch(trainer))
    assert "Systematic mismatch" not in caplog.text
    assert len(trainer.gspo_diagnostics_sections["warnings"]) == 1


def test_vllm_sampler_mode_trains_end_to_end(tmp_path, tiny, prompt_dataset):
    trainer = make_trainer(tmp_path, tiny, prompt_dataset, old_logps_source="sampler", max_steps=5)
    with_fake_vllm(trainer, noise=1e-4)
    passes = ScoringPasses(trainer)
    trainer.train()
    assert trainer.state.global_step == 5
    assert passes.during_generation == 0
    assert trainer.sampler_logprobs.old_policy_passes_skipped == 2


# ----------------------------------------------------------------------------------------------- the weight


def test_geometric_mean_weight_stays_near_one_where_the_product_collapses():
    g = torch.Generator().manual_seed(0)
    n, length = 64, 4096
    old = -torch.rand(n, length, generator=g) * 3
    mask = torch.ones(n, length)
    for bias in (2e-3, -2e-3):  # a small per-token mismatch, either way, with noise
        sampling = old + bias + 0.02 * torch.randn(n, length, generator=g)
        product = torch.exp(sequence_is_log_weight(old, sampling, mask, "product"))
        geometric = torch.exp(sequence_is_log_weight(old, sampling, mask, "geometric_mean"))
        assert ((geometric - 1).abs() < 0.01).all()
        # exp(-/+ 8 +- 1.3): every long response is weighted to nothing, or masked under sequence_mask (C_max = 3)
        collapsed = bound_is_weight(product, "sequence_mask", None, 3.0)
        assert (collapsed < 0.1).all()
        assert torch.equal(bound_is_weight(geometric, "sequence_mask", None, 3.0), geometric)
    # masked tokens and tokens the sampler could not score are left out of the mean
    sampling = old + 1e-3
    sampling[:, -10:] = math.nan
    mask[:, :100] = 0
    log_w = sequence_is_log_weight(old, sampling, mask, "geometric_mean")
    assert torch.allclose(log_w, torch.full_like(log_w, -1e-3), atol=1e-6)
