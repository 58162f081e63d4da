"""`old_logps_source="sampler"` and the mismatch monitor against vLLM's own log-probabilities.

vLLM's per-token values become pi_old and the monitor scores the same responses with the trainer's forward pass
(`gspo/sampler_mismatch/*`, docs/sampler.md). Where vLLM and the trainer compute in the same dtype and sampling is not
truncated, the two agree within the tolerances of docs/vllm.md; TRL's defaults (vLLM in bf16 beside a float32
trainer) and top_p/top_k open a gap that the monitor reports and its warning names the fix for.

TRL 1.16 passes vLLM no dtype and vLLM runs a float32 checkpoint in bf16 (`_resolve_auto_dtype` in
vllm/config/model.py), so a shared dtype is either bf16 (the policy loaded in bf16, as the real configs' `dtype:
bfloat16` does) or float32, which only a `dtype` argument to vLLM gives: `vllm_in_float32` passes it, the one
setting TRL does not expose, to measure the sampler path without bf16 rounding.
"""

import logging

import pytest
import torch
from vllm_support import vllm_trainer

from gspo_recipes.sampler.mismatch import MISMATCH_PREFIX

pytestmark = pytest.mark.vllm
LOGGER = "gspo_recipes.sampler.mismatch"


@pytest.fixture
def vllm_in_float32(monkeypatch, vllm_environment):
    import trl.generation.vllm_generation as vllm_generation

    engine = vllm_generation.LLM
    monkeypatch.setattr(vllm_generation, "LLM", lambda *args, **kwargs: engine(*args, dtype="float32", **kwargs))


def measurements(trainer):
    """One dict per monitored generation batch: log_s_mean, log_s_std, token_max_abs, outside_clip_frac."""
    rows = [entry for entry in trainer.state.log_history if MISMATCH_PREFIX + "log_s_mean" in entry]
    return [
        {k.removeprefix(MISMATCH_PREFIX): v for k, v in row.items() if k.startswith(MISMATCH_PREFIX)} for row in rows
    ]


def engine_dtype(trainer):
    return trainer.vllm_generation.llm.llm_engine.model_config.dtype


def test_shared_float32_sampler_logps_equal_the_recompute_pass_before_and_after_updates(
    tmp_path, vllm_in_float32, caplog
):
    """Two generation batches 4 optimizer steps apart at lr 1e-3: the second is generated after a weight sync, so
    agreement there means vLLM sampled from the updated policy (without the sync the gap is 3-5 nats a token)."""
    trainer = vllm_trainer(tmp_path, old_logps_source="sampler", sampler_mismatch_steps=1, bf16=False,
                           learning_rate=1e-3, max_steps=8)  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.train()
    assert engine_dtype(trainer) == torch.float32
    moved = max((p.detach() - before[n]).abs().max().item() for n, p in trainer.model.named_parameters())
    assert moved > 1e-3, "the policy moved between the two generation batches"
    assert trainer.sampler_logprobs.old_policy_passes_skipped == 2  # pi_old came from vLLM, not a forward pass
    batches = measurements(trainer)
    assert len(batches) == 2, batches
    for batch in batches:
        assert abs(batch["log_s_mean"]) < 1e-5 and batch["log_s_std"] < 1e-5, batch
        assert batch["token_max_abs"] < 1e-3 and batch["outside_clip_frac"] == 0.0, batch
    assert "Mismatch between" not in caplog.text


def test_shared_bfloat16_sampler_logps_are_within_the_documented_bf16_tolerance(tmp_path, vllm_environment):
    trainer = vllm_trainer(tmp_path, dtype=torch.bfloat16, old_logps_source="sampler", sampler_mismatch_steps=1,
                           bf16=False)  # fmt: skip
    trainer.train()
    assert engine_dtype(trainer) == torch.bfloat16 and trainer.model.dtype == torch.bfloat16
    (batch,) = measurements(trainer)
    # docs/vllm.md: |mean log s_i| inside the paper's range (3e-4), per-response spread under 2e-3, no token off by 0.1
    assert abs(batch["log_s_mean"]) < 3e-4 and batch["log_s_std"] < 2e-3 and batch["token_max_abs"] < 0.1, batch


def test_default_dtypes_gap_is_reported_and_the_warning_names_the_fix(tmp_path, vllm_environment, caplog):
    """TRL's defaults: vLLM bf16 beside a float32 trainer. The monitor (recompute mode) reports the gap, the warning
    names the dtype fix, and it is recorded for `gspo report`."""
    trainer = vllm_trainer(tmp_path, sampler_mismatch_steps=1, bf16=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.train()
    assert engine_dtype(trainer) == torch.bfloat16 and trainer.model.dtype == torch.float32
    (batch,) = measurements(trainer)
    assert batch["log_s_std"] > 1e-4 and batch["token_max_abs"] > 1e-2, batch  # float32 shared: < 1e-5 and 1e-3
    assert batch["outside_clip_frac"] > 0.1, batch
    assert "Mismatch between the sampler's and the trainer's" in caplog.text
    assert "same dtype and kernels in both engines" in caplog.text and "old_logps_source='recompute'" in caplog.text
    recorded = trainer.gspo_diagnostics_sections.get("warnings") or []
    assert "sampler_mismatch_clips" in [w["kind"] for w in recorded] or any(
        "sampler_mismatch_clips" in line for line in open(tmp_path / "gspo_diagnostics.jsonl")
    )


@pytest.mark.parametrize("truncation", [{"top_p": 0.8}, {"top_k": 2}], ids=["top_p", "top_k"])
def test_truncated_sampling_bias_is_reported_and_the_warning_names_keep_sampling_mask(
    tmp_path, vllm_in_float32, caplog, truncation
):
    """vLLM's processed log-probabilities are renormalised over the kept set: every token sits log S above the
    trainer's full softmax, so log s_i is biased negative, beyond float rounding (float32 on both sides here, so the
    bias is the truncation's alone)."""
    trainer = vllm_trainer(tmp_path, sampler_mismatch_steps=1, bf16=False, **truncation)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.train()
    (batch,) = measurements(trainer)
    assert batch["log_s_mean"] < -trainer.epsilon_low, batch
    assert "keep_sampling_mask=True" in caplog.text and "renormalised" in caplog.text
