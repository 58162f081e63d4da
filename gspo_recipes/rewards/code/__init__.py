"""Code rewards: the completion's program runs in a sandbox, the dataset's tests run in a judge that never runs it.

Four parts, imports running down only (docs/code-sandbox.md, "The four parts"): this folder is the face TRL calls
(`reward`, `plan`, `hacking`, `audit_cases`); `judge/` runs the dataset's tests, never model code; `sandbox/` is the
host side that launches, confines, limits and supervises; `sandbox/inside/` is what runs in the sandboxed
interpreter (standard library only, concatenated in the order `sandbox/inside/assembly.py` keeps).
"""

from .reward import code_execution, code_execution_binary, extract_code

__all__ = ["code_execution", "code_execution_binary", "extract_code"]
