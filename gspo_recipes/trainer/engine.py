"""What the launcher's accelerate config asks for against what the run does: the precision follows the training
config, and an engine accelerate does not engage is named in one line.

Precision: transformers takes `mixed_precision` from the launcher (`ACCELERATE_MIXED_PRECISION`, the config file's
`mixed_precision`) unless `bf16` or `fp16` is set, so a config file saying bf16 turned on bf16 autocast in a run whose
training config says `bf16=False` (every CPU run: GSPOConfig turns TRL's bf16 default off there), and DeepSpeed then
refused the mismatch. Here the training config decides, in both directions.

Engine: accelerate 1.x engages FSDP only on accelerator devices (its state builds FSDP from MULTI_GPU and the like,
never from MULTI_CPU), although torch's FSDP2 `fully_shard` itself runs on CPU over gloo. On CPU processes the FSDP
config therefore trains plain data parallel (DDP over gloo). DeepSpeed's ZeRO does engage on CPU processes.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def training_precision(config) -> str:
    """The mixed precision the training config asks for: "fp16", "bf16" or "no"."""
    return "fp16" if config.fp16 else "bf16" if config.bf16 else "no"


def follow_training_precision(config) -> str | None:
    """Make accelerate's mixed precision (and a launcher-built DeepSpeed plugin's) the training config's. Returns the
    launcher's value it replaced, or None when they agreed."""
    wanted = training_precision(config)
    launcher = config.mixed_precision
    if launcher == wanted:
        return None
    config.mixed_precision = wanted
    if config.deepspeed_plugin is not None and not config.deepspeed:  # built from the launcher's environment
        from accelerate.utils import DeepSpeedPlugin

        config.deepspeed_plugin = DeepSpeedPlugin()
        config.deepspeed_plugin.set_mixed_precision(wanted)
        config.deepspeed_plugin.set_deepspeed_weakref()
    return launcher


def precision_message(replaced: str, config) -> str:
    return (
        f"accelerate's mixed_precision='{replaced}' (from the launcher or its config file) is replaced by the training "
        f"config's: bf16={config.bf16}, fp16={config.fp16}, so this run trains with mixed_precision="
        f"'{training_precision(config)}'. Set bf16=True (or fp16=True) in the training config to train in it."
    )


def unengaged_engine(distributed_type: str) -> str | None:
    """The one-line warning when the launcher asked for FSDP and accelerate did not engage it; None otherwise."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true" or distributed_type == "FSDP":
        return None
    what = "plain data parallel (DDP over gloo)" if distributed_type == "MULTI_CPU" else f"'{distributed_type}'"
    return (
        f"The accelerate config asks for FSDP, but accelerate does not engage it on CPU processes: this run trains "
        f"{what}, every process holding the whole model and nothing sharded. On GPUs the same config shards with FSDP."
    )


def vllm_server_refusal(config) -> str | None:
    """Why `vllm_mode="server"` cannot train here, or None: TRL 1.16 pushes the weights to the server over NCCL
    (`VLLMClient.init_communicator`, trl/generation/vllm_client.py), which needs a CUDA device in the training process,
    and without one TRL first waits for the server (`vllm_server_timeout`) and then fails on the device."""
    if not (getattr(config, "use_vllm", False) and getattr(config, "vllm_mode", None) == "server"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return (
        "vllm_mode='server' needs a CUDA GPU in the training process (TRL sends the weights to the vLLM server over "
        "NCCL) and this machine has none: use vllm_mode='colocate' (vLLM's CPU build runs it), or use_vllm=false."
    )
