"""`keep_sampling_mask=True` with vLLM: what vLLM 0.32 offers, and what the trainer does with it here.

The masks themselves need vLLM's Model Runner V2 (Triton, so a GPU); on the CPU build the trainer's refusal names the
version and runner it needs. What can be checked anywhere is the format: the kept sets are read from vLLM 0.32's own
classes (`vllm.outputs.SamplingMask`, the engine's CSR `SamplingMaskLists`) and the stand-in client of
tests/test_sampling_mask.py speaks one of them; the routed experts vLLM returns for Routing Replay
(`CompletionOutput.routed_experts`) have the (tokens, layers, top-k) layout our route tensors have per response.
"""

import dataclasses
import inspect
import typing

import pytest
import torch
from vllm_support import on_cpu, vllm_trainer

from gspo_recipes.sampler.sampling_mask import kept_lists, vllm_kept_rows

pytestmark = pytest.mark.vllm

# One completion of three tokens: the kept ids of each step.
KEPT = [[5, 9, 2], [7], [3, 4]]


def test_vllm_sampling_mask_classes_are_read_as_the_trainer_expects(vllm_environment):
    from vllm.outputs import CompletionOutput, SamplingMask
    from vllm.v1.outputs import SamplingMaskLists

    # The installed classes, as their source declares them.
    assert [f.name for f in dataclasses.fields(SamplingMask)] == ["token_ids"]
    assert typing.get_type_hints(SamplingMask)["token_ids"] == list[list[int]]
    assert "sampling_mask" in {f.name for f in dataclasses.fields(CompletionOutput)}
    assert list(SamplingMaskLists._fields[:2]) == ["token_ids", "offsets"]

    public = SamplingMask(token_ids=KEPT)
    offsets = [0, 3, 4, 6]
    csr = SamplingMaskLists(
        token_ids=__import__("numpy").array(sum(KEPT, [])), offsets=__import__("numpy").array(offsets)
    )
    for mask in (public, csr, KEPT, {"token_ids": KEPT}):
        assert kept_lists(mask) == KEPT, type(mask)
    client = type("Client", (), {"last_sampling_masks": [public, csr]})()
    rows, overflow = vllm_kept_rows(client, [[9, 7, 4], [2, 7, 3]], max_kept=2)
    expected = torch.tensor([[-1, -1], [7, -1], [3, 4]], dtype=torch.int32)  # the 3-id set is above the cap of 2
    assert torch.equal(rows[0], expected) and torch.equal(rows[1], expected)
    assert overflow[0].tolist() == [True, False, False]


def test_the_stand_in_client_speaks_vllms_engine_format(vllm_environment):
    """tests/test_sampling_mask.py's FakeMaskVLLM returns (token_ids, offsets) per completion: the fields of vLLM's
    CSR `SamplingMaskLists`, read by the same `kept_lists`."""
    import test_sampling_mask
    from vllm.v1.outputs import SamplingMaskLists

    source = inspect.getsource(test_sampling_mask.FakeMaskVLLM.generate)
    assert "SimpleNamespace(token_ids=kept_ids, offsets=offsets)" in source
    assert {"token_ids", "offsets"} <= set(SamplingMaskLists._fields)


def test_routed_experts_in_vllms_layout_replay_in_our_routing_replay(vllm_environment):
    """vLLM returns `routed_experts` per completion as an integer array [seq_len, layer_num, topk] (vllm/outputs.py);
    stacked over responses that is the (rows, seq, moe_layers, k) tensor Routing Replay takes (gspo_recipes/moe/
    routing.py). On a tiny MoE model: the model's own routes, passed through vLLM's per-completion layout, replay to
    the same logits, and other routes in that layout change them (so they were used, axis by axis)."""
    import numpy as np
    from support import tiny_moe_model_and_tokenizer
    from vllm.outputs import CompletionOutput

    from gspo_recipes.moe.routing import RouteRecorder, RoutingReplay

    assert "routed_experts: np.ndarray | None = None  # [seq_len,layer_num,topk]" in inspect.getsource(CompletionOutput)
    model, _ = tiny_moe_model_and_tokenizer()
    model.eval()
    ids = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(0))
    with RouteRecorder(model) as recorder, torch.no_grad():
        plain = model(input_ids=ids).logits
    recorded = recorder.routes()
    seq, layers, k = recorded.shape[1:]
    assert seq != layers  # a swapped axis could not pass unnoticed
    as_vllm = [recorded[i].numpy().astype(np.int64) for i in range(2)]  # what vLLM hands back per completion
    assert as_vllm[0].shape == (seq, layers, k)

    def replayed(per_completion):
        with RoutingReplay(model, torch.from_numpy(np.stack(per_completion))), torch.no_grad():
            return model(input_ids=ids).logits

    assert torch.allclose(replayed(as_vllm), plain, atol=1e-6)
    other = [np.ascontiguousarray(np.roll(routes, 1, axis=-1) + 1) % model.config.num_experts for routes in as_vllm]
    other = [np.sort(routes, axis=-1) for routes in other]
    assert not torch.allclose(replayed(other), plain, atol=1e-3)


def test_cpu_build_refuses_sampling_masks_without_model_runner_v2(vllm_environment):
    """What needs a GPU: vLLM 0.32 asks for Model Runner V2 for the masks, which the CPU build cannot run."""

    if not on_cpu():
        pytest.skip("on a GPU machine vLLM's Model Runner V2 can return sampling masks")
    from vllm import LLM

    from gspo_recipes.builtin.coldstart import COLDSTART_CONFIGS, SHIPPED_DIR, coldstart_dir

    path = SHIPPED_DIR / coldstart_dir(None, COLDSTART_CONFIGS["gsm8k"]).name
    with pytest.raises(Exception, match="Model Runner V2"):
        LLM(model=str(path), return_sampling_mask=True)


def test_keep_sampling_mask_with_vllm_is_refused_naming_version_and_runner(tmp_path, vllm_environment):
    import vllm

    trainer = vllm_trainer(tmp_path, keep_sampling_mask=True, top_p=0.8, sampler_mismatch_steps=0, bf16=False)
    with pytest.raises(RuntimeError) as refusal:
        trainer.train()
    message = str(refusal.value)
    assert "vLLM 0.32 or later" in message and "Model Runner V2" in message and "return_sampling_mask" in message
    assert f"vllm {vllm.__version__} is installed" in message and "keep_sampling_mask=False" in message
