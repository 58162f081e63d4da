"""Put on PYTHONPATH by tests/vllm_tier/conftest.py on CPU machines only: the tier's CPU workaround for the recipes and
commands it runs in subprocesses (see tests/vllm_tier/cpu_workarounds.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    from cpu_workarounds import skip_cpu_gemm_packing

    skip_cpu_gemm_packing()
finally:
    sys.path.pop(0)
