"""keep_sampling_mask: the sampler's kept sets recorded, carried in the batch, and used on both sides of the ratio.

vLLM cannot run here: its path is TRL's own vLLM branch with `trainer.vllm_generation` replaced by a stand-in that
samples from the tiny model's top-p set and returns vLLM's renormalised log-probabilities and CSR sampling masks
(`SamplingMask(token_ids, offsets)`, vLLM PR #49577). Nothing here runs against a vLLM server.
"""

import logging
import math
from types import SimpleNamespace

import pytest
import torch
from support import assert_grads_close, digit_count_reward, tiny_config
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

from gspo_recipes import GSPOTrainer
from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer
from gspo_recipes.sampler.generation_logprobs import GenerationLogprobRecorder
from gspo_recipes.sampler.mismatch import MISMATCH_PREFIX, SAMPLING_MASK_PREFIX, TRUNCATION_WARNING
from gspo_recipes.sampler.sampling_mask import KEPT_IDS_KEY

PROMPTS = ["1+2=", "3+0="]


def make_trainer(tmp_path, dataset, model_and_tokenizer=None, peft_config=None, **overrides):
    model, tokenizer = model_and_tokenizer or build_tiny_model_and_tokenizer()
    settings = dict(gspo_diagnostics=False, sampler_mismatch_steps=0, bf16=False)
    settings.update(overrides)
    trainer = GSPOTrainer(
        model=model, reward_funcs=digit_count_reward, args=tiny_config(tmp_path, **settings), train_dataset=dataset,
        processing_class=tokenizer, peft_config=peft_config,
    )  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; the loss is also called outside it here
    return trainer


def generation_batch(trainer):
    return [{"prompt": p} for p in PROMPTS for _ in range(trainer.num_generations)]


def full_logits(trainer, out):
    """Plain forward (no fused head): the temperature-scaled logits of every completion position."""
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    logits = trainer.model(input_ids=ids, attention_mask=mask).logits
    return logits[:, -out["completion_ids"].size(1) - 1 : -1].float() / trainer.temperature


def renormalised_reference(logits, kept, labels):
    """log_softmax over the kept set, written plainly: z_y - log sum_{k in kept} exp z_k (full softmax if no set)."""
    vocab = logits.size(-1)
    in_set = torch.zeros(*logits.shape[:-1], vocab + 1, dtype=torch.bool)  # padding (-1) lands in the extra column
    in_set.scatter_(-1, torch.where(kept >= 0, kept.long(), vocab), True)
    in_set = in_set[..., :vocab]
    has_set = kept[..., 0] >= 0
    in_set = torch.where(has_set[..., None], in_set, torch.ones_like(in_set))
    z = logits.masked_fill(~in_set, -math.inf)
    return z.gather(-1, labels[..., None]).squeeze(-1) - torch.logsumexp(z, -1)


# ----------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(), ["not truncated", "keep_sampling_mask=False"]),
        (dict(top_p=0.9, generation_kwargs={"num_beams": 2}), ["beam search", "num_beams"]),
        (dict(top_k=600), ["top_k=600", "sampling_mask_max_tokens"]),
        (dict(top_p=0.9, dynamic_sampling=True), ["dynamic_sampling"]),
    ],
)
def test_config_refuses_the_mask_where_it_cannot_work(tmp_path, overrides, words):
    with pytest.raises(ValueError) as err:
        tiny_config(tmp_path, keep_sampling_mask=True, **overrides)
    for word in words:
        assert word in str(err.value)


def test_config_accepts_each_truncation_and_a_cap(tmp_path):
    for overrides in (dict(top_p=0.8), dict(top_k=20), dict(min_p=0.05), dict(top_k=600, sampling_mask_max_tokens=600)):
        assert tiny_config(tmp_path, keep_sampling_mask=True, **overrides).keep_sampling_mask
    with pytest.raises(ValueError, match="sampling_mask_max_tokens=0"):
        tiny_config(tmp_path, sampling_mask_max_tokens=0)


# ----------------------------------------------------------------------------------------------- recording


@pytest.mark.parametrize("truncation", [dict(top_p=0.8, top_k=0), dict(top_k=20)])
def test_recorder_keeps_the_processed_support_and_renormalises(truncation):
    """Kept set = tokens with a finite processed score; recorded value = log_softmax of the processed scores."""
    model, tokenizer = build_tiny_model_and_tokenizer()
    prompt = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    recorder = GenerationLogprobRecorder(0.7, renormalise=True, max_kept=512)
    torch.manual_seed(0)
    with recorder.attached(model), torch.no_grad():
        out = model.generate(**prompt, do_sample=True, temperature=0.7, max_new_tokens=6, output_scores=True,
                             output_logits=True, return_dict_in_generate=True, **truncation)  # fmt: skip
    new = out.sequences[:, prompt["input_ids"].size(1) :]
    recorded = torch.tensor(recorder.logprobs_for([row.tolist() for row in new]))
    scores = torch.stack(out.scores, 1)
    expected = torch.log_softmax(scores, -1).gather(-1, new[..., None]).squeeze(-1)
    assert torch.allclose(recorded, expected, atol=1e-5)
    for row, kept in enumerate(recorder.kept_rows):
        for t in range(new.size(1)):
            ids = set(kept[t][kept[t] >= 0].tolist())
            assert ids == set(torch.isfinite(scores[row, t]).nonzero().flatten().tolist())
    full = torch.log_softmax(torch.stack(out.logits, 1) / 0.7, -1)
    mass = torch.logsumexp(full.masked_fill(~torch.isfinite(scores), -math.inf), -1)
    assert torch.allclose(torch.stack(recorder.log_mass_rows), mass, atol=1e-5)
    if "top_k" in truncation and truncation["top_k"]:
        assert max(k.size(1) for k in recorder.kept_rows) == 20


def test_sets_above_the_cap_fall_back_to_the_full_vocabulary():
    model, tokenizer = build_tiny_model_and_tokenizer()
    prompt = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    recorder = GenerationLogprobRecorder(1.0, renormalise=True, max_kept=5)
    torch.manual_seed(0)
    with recorder.attached(model), torch.no_grad():
        out = model.generate(**prompt, do_sample=True, top_k=0, top_p=0.8, max_new_tokens=4, output_logits=True,
                             return_dict_in_generate=True)  # fmt: skip
    new = out.sequences[:, prompt["input_ids"].size(1) :]
    recorded = torch.tensor(recorder.logprobs_for([row.tolist() for row in new]))
    assert all(o.all() for o in recorder.overflow_rows)  # a near-uniform model keeps far more than 5 tokens at 0.8
    assert all((k == -1).all() for k in recorder.kept_rows)
    unfiltered = torch.log_softmax(torch.stack(out.logits, 1), -1).gather(-1, new[..., None]).squeeze(-1)
    assert torch.allclose(recorded, unfiltered, atol=1e-6)


def test_kept_sets_travel_with_their_rows_through_shuffle_and_split(tmp_path, prompt_dataset):
    trainer = make_trainer(tmp_path, prompt_dataset, keep_sampling_mask=True, top_p=0.8)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    kept = out[KEPT_IDS_KEY]
    assert kept.shape[:2] == out["completion_ids"].shape and kept.dtype == torch.int32
    valid = out["completion_mask"].bool()
    assert (kept == out["completion_ids"][..., None]).any(-1)[valid].all()  # every sampled token is in its set
    assert (kept[~valid] == -1).all()  # padding has no set
    batch = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and v.dim() > 0}
    batch["row"] = torch.arange(kept.size(0))
    torch.manual_seed(1)
    for part in split_tensor_dict(shuffle_sequence_dict(batch), 2):
        assert torch.equal(part[KEPT_IDS_KEY], kept[part["row"]])
        assert torch.equal(part["completion_ids"], out["completion_ids"][part["row"]])


# ----------------------------------------------------------------------------------------------- scoring


@pytest.mark.parametrize("truncation", [dict(top_p=0.8), dict(top_k=20)])
def test_on_policy_log_s_is_zero_in_sampler_mode(tmp_path, prompt_dataset, truncation):
    """The monitor compares the trainer's kept-set log-probabilities with the sampler's: equal to float rounding."""
    trainer = make_trainer(
        tmp_path, prompt_dataset, keep_sampling_mask=True, old_logps_source="sampler", sampler_mismatch_steps=1,
        **truncation,
    )  # fmt: skip
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    metrics = trainer._metrics["train"]
    assert metrics[MISMATCH_PREFIX + "token_max_abs"][-1] < 5e-6
    assert abs(metrics[MISMATCH_PREFIX + "log_s_mean"][-1]) < 1e-6
    assert metrics[MISMATCH_PREFIX + "log_kept_mass"][-1] < -0.05  # the bias the mask removes is real here
    with torch.no_grad():
        reference = renormalised_reference(full_logits(trainer, out), out[KEPT_IDS_KEY], out["completion_ids"])
    valid = out["completion_mask"].bool()
    assert torch.allclose(out["old_per_token_logps"][valid], reference[valid], atol=5e-6)


@pytest.mark.parametrize("token_advantages", [False, True])
def test_gradients_equal_a_plain_renormalised_objective(tmp_path, prompt_dataset, token_advantages):
    trainer = make_trainer(tmp_path, prompt_dataset, keep_sampling_mask=True, top_p=0.8)
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    mask = out["completion_mask"].float()
    with torch.no_grad():
        current = renormalised_reference(full_logits(trainer, out), out[KEPT_IDS_KEY], out["completion_ids"])
    generator = torch.Generator().manual_seed(0)
    out["old_per_token_logps"] = current + 2e-4 * torch.randn(current.shape, generator=generator)
    if token_advantages:
        out["advantages"] = torch.randn(mask.shape, generator=generator)
    params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}

    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, out).backward()
    ours = {n: p.grad.clone() for n, p in params.items()}

    trainer.model.zero_grad()
    new = renormalised_reference(full_logits(trainer, out), out[KEPT_IDS_KEY], out["completion_ids"])
    log_s = ((new - out["old_per_token_logps"]) * mask).sum(-1) / mask.sum(-1)
    s = torch.exp(log_s)
    if token_advantages:  # GSPO-token: s_i,t = sg[s_i] * pi_t / sg[pi_t], its advantage per token
        s_tok = s.detach()[:, None] * torch.exp(new - new.detach())
        adv = out["advantages"]
        clipped = torch.clamp(s_tok, 1 - trainer.epsilon_low, 1 + trainer.epsilon_high)
        per_token = torch.minimum(s_tok * adv, clipped * adv)
        objective = (per_token * mask).sum(-1) / mask.sum(-1)
    else:
        adv = out["advantages"]
        clipped = torch.clamp(s, 1 - trainer.epsilon_low, 1 + trainer.epsilon_high)
        objective = torch.minimum(s * adv, clipped * adv)
    loss = -objective.mean() / trainer.current_gradient_accumulation_steps
    loss.backward()
    reference = {n: p.grad.clone() for n, p in params.items()}
    assert_grads_close(ours, reference, ulps=256)
    assert any(g.abs().max() > 0 for g in ours.values())


def test_mask_off_changes_nothing_bit_for_bit(tmp_path, prompt_dataset):
    """Off (the default) the trainer's scoring is TRL's own and the loss and gradient are the same tensors."""
    trainer = make_trainer(tmp_path, prompt_dataset, top_p=0.8, num_minibatches=2)
    assert trainer.sampler_logprobs.sampling_mask is None
    out = trainer._generate_and_score_completions(generation_batch(trainer))
    assert KEPT_IDS_KEY not in out
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        ours = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, out["completion_ids"].size(1))
        trls = GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, attn, ids.size(1) - 4)
    assert torch.equal(ours[0], trls[0])
    grads = []
    for compute in (trainer.compute_loss, GSPOTrainer._compute_loss.__get__(trainer)):  # with and without the hook
        trainer.model.zero_grad()
        loss = compute(trainer.model, out)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))


@pytest.mark.parametrize(
    "overrides",
    [
        dict(old_logps_source="recompute", num_iterations=2),
        dict(old_logps_source="sampler", gradient_accumulation_steps=2, steps_per_generation=3, max_steps=3),
        dict(old_logps_source="sampler", gradient_checkpointing=True, top_k=20),
        dict(old_logps_source="recompute", peft=True, beta=0.1),
    ],
    ids=["recompute-iterations", "sampler-accumulation-not-lined-up", "sampler-checkpointing-topk", "peft-kl"],
)
def test_trains_with_the_mask_in_settings_off_the_default_path(tmp_path, prompt_dataset, overrides):
    """A short run in each setting: finite losses, and the monitor's on-policy comparison shows no mismatch."""
    peft_config = None
    if overrides.pop("peft", False):
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    settings = dict(keep_sampling_mask=True, top_p=0.8, sampler_mismatch_steps=1, max_steps=2)
    settings.update(overrides)
    trainer = make_trainer(tmp_path, prompt_dataset, peft_config=peft_config, **settings)
    seen = []
    scorer = trainer.sampler_logprobs.sampling_mask
    original = scorer.score
    scorer.score = lambda *a, **k: seen.append(scorer._kept is not None) or original(*a, **k)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
    assert all(seen) and len(seen) >= trainer.state.global_step  # every scoring pass had the batch's kept sets
    mismatch = [
        h[MISMATCH_PREFIX + "token_max_abs"]
        for h in trainer.state.log_history
        if MISMATCH_PREFIX + "token_max_abs" in h
    ]
    assert mismatch and max(mismatch) < 1e-5


# ----------------------------------------------------------------------------------------------- the monitor


def test_truncation_bias_warning_fires_without_the_mask_and_not_with_it(tmp_path, prompt_dataset, caplog):
    for keep in (False, True):
        trainer = make_trainer(tmp_path, prompt_dataset, top_p=0.8, sampler_mismatch_steps=1, keep_sampling_mask=keep)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            trainer._generate_and_score_completions(generation_batch(trainer))
        metrics = trainer._metrics["train"]
        assert 0.8 <= metrics[MISMATCH_PREFIX + "kept_mass"][-1] < 0.9
        assert metrics[MISMATCH_PREFIX + "log_kept_mass"][-1] == pytest.approx(
            math.log(metrics[MISMATCH_PREFIX + "kept_mass"][-1]), abs=0.02
        )
        staged = trainer.__dict__.get("gspo_diagnostics_sections", {}).get("warnings", [])
        if keep:
            assert "keep_sampling_mask=True (both" not in caplog.text and not staged
            assert metrics[SAMPLING_MASK_PREFIX + "overflow_frac"][-1] == 0.0
        else:
            assert "keep_sampling_mask=True" in caplog.text and "top_p=0.8" in caplog.text
            assert [w["kind"] for w in staged] == [TRUNCATION_WARNING]


def test_no_kept_mass_without_truncation(tmp_path, prompt_dataset):
    trainer = make_trainer(tmp_path, prompt_dataset, sampler_mismatch_steps=1)
    trainer._generate_and_score_completions(generation_batch(trainer))
    assert MISMATCH_PREFIX + "kept_mass" not in trainer._metrics["train"]


# ----------------------------------------------------------------------------------------------- vLLM stand-in


class FakeMaskVLLM:
    """`VLLMGeneration.generate`'s return, sampled from the tiny model's top-p set: vLLM's processed (renormalised)
    log-probabilities, and, with `masks`, one CSR `SamplingMask(token_ids, offsets)` per completion."""

    def __init__(self, trainer, top_p, masks=True, seed=0):
        self.trainer, self.top_p, self.masks = trainer, top_p, masks
        self.generator = torch.Generator().manual_seed(seed)
        self.last_sampling_masks = None

    def sync_weights(self):
        pass

    def generate(self, prompts, images, num_generations, profiler=None):
        t = self.trainer
        completions, logprobs, masks = [], [], []
        with torch.no_grad():
            for prompt in prompts:
                ids, lps, kept_ids, offsets = list(prompt), [], [], [0]
                for _ in range(5):
                    logits = t.model(input_ids=torch.tensor([ids])).logits[0, -1] / t.temperature
                    probs = torch.softmax(logits.float(), -1)
                    order = probs.argsort(descending=True)
                    keep = order[: int((probs[order].cumsum(0) < self.top_p).sum()) + 1]
                    renorm = torch.log_softmax(logits[keep].float(), -1)
                    pick = torch.multinomial(renorm.exp(), 1, generator=self.generator).item()
                    ids.append(keep[pick].item())
                    lps.append([renorm[pick].item()])
                    kept_ids += keep.tolist()
                    offsets.append(len(kept_ids))
                completions.append(ids[len(prompt) :])
                logprobs.append(lps)
                masks.append(SimpleNamespace(token_ids=kept_ids, offsets=offsets))
        self.last_sampling_masks = masks if self.masks else None
        return prompts, completions, logprobs, None


def with_fake_vllm(trainer, **kwargs):
    trainer.use_vllm = True
    trainer.vllm_generation = FakeMaskVLLM(trainer, **kwargs)
    trainer._last_loaded_step = trainer.state.global_step
    return trainer.vllm_generation


def test_vllm_importance_weight_is_one_with_the_mask_and_kept_mass_without(tmp_path, prompt_dataset):
    weights = {}
    for keep in (False, True):
        settings = dict(top_p=0.8, vllm_importance_sampling_mode="sequence_truncate")
        trainer = make_trainer(tmp_path, prompt_dataset, keep_sampling_mask=keep, **settings)
        with_fake_vllm(trainer, top_p=0.8)
        out = trainer._generate_and_score_completions(generation_batch(trainer))
        weights[keep] = out["importance_sampling_ratio"]
    assert torch.allclose(weights[True], torch.ones_like(weights[True]), atol=1e-5)
    assert (weights[False] < 0.9).all()  # about the kept mass S per token: every response scaled down


def test_vllm_without_sampling_masks_is_refused_naming_the_version(tmp_path, prompt_dataset):
    trainer = make_trainer(tmp_path, prompt_dataset, keep_sampling_mask=True, top_p=0.8)
    with_fake_vllm(trainer, top_p=0.8, masks=False)
    with pytest.raises(RuntimeError) as err:
        trainer._generate_and_score_completions(generation_batch(trainer))
    assert "49577" in str(err.value) and "--return-sampling-mask" in str(err.value)


def test_models_that_rescale_logits_are_refused(tmp_path, prompt_dataset):
    model, tokenizer = build_tiny_model_and_tokenizer()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        make_trainer(tmp_path, prompt_dataset, (model, tokenizer), keep_sampling_mask=True, top_p=0.8)


@pytest.mark.slow
def test_two_processes_keep_each_rows_sets(tmp_path):
    """Two processes over gloo, sampler mode at top_p 0.8: the on-policy comparison (gathered from both) is exact."""
    import json

    from support import launch_two_cpu_processes

    launch_two_cpu_processes("two_process_sampling_mask.py", str(tmp_path), cwd=tmp_path, timeout=300)
    history = json.loads((tmp_path / "history.json").read_text())
    mismatch = [h[MISMATCH_PREFIX + "token_max_abs"] for h in history if MISMATCH_PREFIX + "token_max_abs" in h]
    assert len(mismatch) >= 1 and max(mismatch) < 1e-5
    assert all(math.isfinite(h["loss"]) for h in history if "loss" in h)
    assert any(h.get(MISMATCH_PREFIX + "log_kept_mass", 0) < -0.05 for h in history)
