"""The sandboxed interpreter's source: this folder's files, concatenated in the one order kept here.

Each file may use, as a global, what an earlier one defines; none imports anything of ours (see docs/code-sandbox.md).
"""

from pathlib import Path

# The plain-data codec first (the harness's serve mode uses it), then the syscall filter the
# harness installs on itself. The warm zygote's interpreter (`sandbox/warm.py`) runs the same with the confinement
# calls before the harness and the zygote after it: the zygote runs the harness in each attempt, and its main block
# comes last.
HARNESS_FILES = ("wire.py", "syscall_filter.py", "harness.py")
ZYGOTE_FILES = ("wire.py", "syscall_filter.py", "confine.py", "harness.py", "zygote.py")


def assemble(files: tuple[str, ...]) -> str:
    return "".join(Path(__file__).with_name(name).read_text() for name in files)


HARNESS_SOURCE = assemble(HARNESS_FILES)
ZYGOTE_SOURCE = assemble(ZYGOTE_FILES)
