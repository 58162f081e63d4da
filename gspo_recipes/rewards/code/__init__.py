"""Code rewards: the completion's program runs in a sandbox, the dataset's tests run in a judge that never runs it.

Layers, bottom to top: `isolation` (uids, environments, bwrap/unshare command lines), `syscall_filter` (what the
sandbox refuses), `attempt_limits` (memory and CPU per attempt as a whole) and `sandbox` (backends, launch,
supervision); `wire` (plain data across the boundary) and `harness` (what runs inside the sandbox); `worker` (the
long-lived sandboxed process) and `judge` (the tests, outside it), which `judge_sandbox` runs confined, one process
per attempt; `hacking` (a static scan of the completions); `reward` (the reward functions TRL calls).
"""

from .reward import code_execution, code_execution_binary, extract_code

__all__ = ["code_execution", "code_execution_binary", "extract_code"]
