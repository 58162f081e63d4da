"""A seccomp filter the harness installs on itself before any model code runs: the system calls that reach state no
namespace confines are refused.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/inside/syscall_filter.py.
"""

# (audit arch, x32 bit or 0, keyring + bpf calls, SysV IPC calls, page-cache probes)
_SECCOMP_ARCHES = {
    # add_key request_key keyctl bpf | shmget semget msgget | mincore preadv2 pwritev2 io_uring x3 cachestat
    "x86_64": (0xC000003E, 0x40000000, (248, 249, 250, 321), (29, 64, 68), (27, 327, 328, 425, 426, 427, 451)),
    "aarch64": (0xC00000B7, 0, (217, 218, 219, 280), (194, 190, 186), (232, 286, 287, 425, 426, 427, 451)),
}
PAGE_CACHE_SYSCALLS = ("mincore", "preadv2", "pwritev2", "io_uring_setup", "io_uring_enter", "io_uring_register",
                       "cachestat")  # fmt: skip


def install_syscall_filter(block_sysv_ipc):
    """Refuse keyrings and bpf (and SysV IPC when `block_sysv_ipc`) with EPERM, and the page-cache probes with
    ENOSYS, for this process and everything it starts. Returns whether the filter is in place (False on an
    architecture or kernel it does not know)."""
    import ctypes

    built = syscall_filter_program(block_sysv_ipc)
    if built is None:
        return False
    libc, program = built
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to install a filter without privileges
        return False
    return libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


_BUILT_FILTERS = {}


def syscall_filter_program(block_sysv_ipc):
    """(libc, the BPF program) for `install_syscall_filter`, built once per process (the warm zygote builds it
    before any attempt, so each attempt only installs it); None on an architecture the filter does not know."""
    import ctypes
    import os

    if block_sysv_ipc in _BUILT_FILTERS:
        return _BUILT_FILTERS[block_sysv_ipc]
    arch = _SECCOMP_ARCHES.get(os.uname().machine)
    if arch is None:
        return None
    audit_arch, x32_bit, blocked, sysv, page_cache = arch
    blocked = blocked + (sysv if block_sysv_ipc else ())

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    load, jump_eq, jump_ge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill = 0x7FFF0000, 0x80000000  # ALLOW, KILL_PROCESS
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38  # ERRNO(EPERM), ERRNO(ENOSYS)
    code = [(load, 0, 0, 4), (jump_eq, 1, 0, audit_arch), (ret, 0, 0, kill), (load, 0, 0, 0)]
    if x32_bit:  # the x32 ABI numbers the same calls differently: refuse all of it
        code.append((jump_ge, len(blocked) + len(page_cache) + 2, 0, x32_bit))
    # Each refused number jumps to its verdict at the end: [..., ALLOW, ENOSYS, EPERM].
    for index, number in enumerate(blocked):
        code.append((jump_eq, len(blocked) - index + len(page_cache) + 1, 0, number))
    for index, number in enumerate(page_cache):
        code.append((jump_eq, len(page_cache) - index, 0, number))
    code += [(ret, 0, 0, allow), (ret, 0, 0, enosys), (ret, 0, 0, eperm)]
    instructions = (Instruction * len(code))(*[Instruction(*op) for op in code])
    program = Program(len(code), instructions)
    program._instructions = instructions  # kept alive with the program
    _BUILT_FILTERS[block_sysv_ipc] = (ctypes.CDLL(None, use_errno=True), program)
    return _BUILT_FILTERS[block_sysv_ipc]
