"""A seccomp filter the harness installs on itself before any model code runs: the system calls that reach kernel
objects no namespace confines, refused with EPERM.

Kernel keyrings belong to the uid, not to any namespace, and outlive every process: a program could store in its
uid's keyring whether its last answer passed and, attempt after attempt, learn the answers. eBPF maps are global
too. SysV IPC objects are confined by an IPC namespace, which the `plain` backend does not have: refused there.
Nothing an honest solution needs goes through these calls.

Prepended to the harness source (see `sandbox.py`): standard library only, no `from __future__` import.
"""

# (audit arch, x32 bit or 0, keyring + bpf calls, SysV IPC calls)
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 0x40000000, (248, 249, 250, 321), (29, 64, 68)),  # add_key request_key keyctl bpf
    "aarch64": (0xC00000B7, 0, (217, 218, 219, 280), (194, 190, 186)),  # shmget semget msgget
}


def install_syscall_filter(block_sysv_ipc):
    """Refuse keyrings and bpf (and SysV IPC when `block_sysv_ipc`) for this process and everything it starts.
    Returns whether the filter is in place (False on an architecture or kernel it does not know)."""
    import ctypes
    import os

    arch = _SECCOMP_ARCHES.get(os.uname().machine)
    if arch is None:
        return False
    audit_arch, x32_bit, blocked, sysv = arch
    blocked = blocked + (sysv if block_sysv_ipc else ())

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    load, jump_eq, jump_ge, ret = 0x20, 0x15, 0x35, 0x06
    allow, refuse, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # ALLOW, ERRNO(EPERM), KILL_PROCESS
    code = [(load, 0, 0, 4), (jump_eq, 1, 0, audit_arch), (ret, 0, 0, kill), (load, 0, 0, 0)]
    if x32_bit:  # the x32 ABI numbers the same calls differently: refuse all of it
        code.append((jump_ge, len(blocked) + 1, 0, x32_bit))
    for index, number in enumerate(blocked):
        code.append((jump_eq, len(blocked) - index, 0, number))
    code += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    instructions = (Instruction * len(code))(*[Instruction(*op) for op in code])
    program = Program(len(code), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to install a filter without privileges
        return False
    return libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
