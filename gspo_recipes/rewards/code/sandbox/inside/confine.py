"""Confinement by hand: the namespace, mount and privilege calls bubblewrap makes, made from Python with ctypes.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/inside/confine.py.
"""

import ctypes

# Loaded once, here: making it costs milliseconds, and every attempt's process would otherwise pay them again.
_LIBC = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000
)  # fmt: skip
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18
)  # fmt: skip
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 24, 38
_MNT_DETACH = 2


def check(result, what):
    """Raise OSError (with errno) when a libc call returned non-zero."""
    if result != 0:
        import os

        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def unshare(flags):
    check(_LIBC.unshare(flags), "unshare")


def setns(fd, nstype):
    check(_LIBC.setns(fd, nstype), "setns")


def fork_bare():
    """fork(2) without the interpreter's after-fork work, for a zygote's attempts only: the pid in the parent, 0 in
    the child. A zygote is one thread by construction (`zygote.serve` starts none), so what `os.fork` does after a
    fork, making locks and thread records anew for threads that a one-thread process has none of, and running every
    `os.register_at_fork` callback the modules it imported left (threading's, logging's, random's reseed), is work
    for nothing in each attempt: 0.6 ms of CPU, mostly copied pages, in a judge forked from a zygote that has the
    pool process's modules. The child reseeds `random` itself (`reseed_random`)."""
    pid = _LIBC.fork()
    if pid < 0:
        import os

        number = ctypes.get_errno()
        raise OSError(number, f"fork: {os.strerror(number)}")
    return pid


def reseed_random():
    """In a child of `fork_bare`: what `random`'s own after-fork callback does, where the module is loaded (each
    attempt draws its own numbers, as a fresh interpreter would)."""
    import sys

    module = sys.modules.get("random")
    if module is not None:
        module.seed()


def mount(source, target, fstype, flags, data=None):
    encode = lambda text: None if text is None else str(text).encode()  # noqa: E731
    check(_LIBC.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def mount_tmpfs(target, size_mb, mode="1777"):
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode={mode}")


def bind_read_only(source, target):
    """Bind `source` (a file or directory) at `target`, creating the mount point, then make it read-only."""
    import os

    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def bind_shared(source, target):
    """Bind the folder `source` read-write at the directory `target`: no set-uid programs, no device nodes."""
    mount(source, target, None, MS_BIND)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV)


def detach(target):
    """Unmount `target` from this mount namespace (lazily: nothing of ours uses it any more)."""
    check(_LIBC.umount2(str(target).encode(), _MNT_DETACH), f"umount {target}")


def cover(target):
    """Hide the directory `target` and everything under it beneath an empty, read-only tmpfs, in this mount namespace
    alone. Where the namespace ends with its process (an attempt's), this does what unmounting `target` would, without
    the wait: the kernel takes an expedited RCU grace period for every unmount (`namespace_unlock`), a quarter of a
    millisecond asleep each, on the attempt's path; the namespace's end takes its one either way."""
    mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")


def build_root(root, plan, tmpfs_mb):
    """A fresh tmpfs at `root` holding what `plan` names (see the module docstring); nothing mounted here propagates
    back to the host. The caller chroots into it."""
    import os

    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount_tmpfs(root, tmpfs_mb, mode="0755")
    for kind, source, target in plan:
        path = root + "/" + target.lstrip("/")
        if os.path.lexists(path) and kind != "dev":
            continue  # already there (an interpreter under /tmp is bound before /tmp is made, say)
        if kind == "symlink":
            os.symlink(source, path)
        elif kind == "ro":
            bind_read_only(source, path)
        elif kind == "dir":
            os.makedirs(path, exist_ok=True)
        elif kind == "rw":  # a zygote's parent of the attempts' shared folders (`shared_folder.py`)
            os.makedirs(path, exist_ok=True)
            bind_shared(source, path)
        elif kind == "dev" and os.path.exists(source):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
            mount(source, path, None, MS_BIND)


def loopback_up():
    """Bring up `lo` in this network namespace (bwrap does it in the sandboxes it makes: programs may talk to
    themselves over 127.0.0.1, and nowhere else)."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = 0x1 | 0x8 | 0x40  # IFF_UP | IFF_LOOPBACK | IFF_RUNNING
        fcntl.ioctl(sock, 0x8914, struct.pack("16sh14x", b"lo", flags))  # SIOCSIFFLAGS


def set_name(name):
    """The process's name as `ps` and `top` show it (15 bytes at most)."""
    _LIBC.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def die_with_parent():
    """SIGKILL when the thread that started this process dies. Returns False when the parent is already gone."""
    import os
    import signal

    parent = os.getppid()
    check(_LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    return os.getppid() == parent


def drop_to(uid, processes):
    """Become `uid` for good: no groups, no capabilities (the bounding set emptied), no new privileges, at most
    `processes` processes, no core files, killed when the process that started it dies."""
    import os
    import resource
    import signal

    for capability in range(64):
        if _LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:  # EINVAL past the last capability
            break
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    check(_LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")  # the uid change cleared it


def enter_user_namespace():
    """Without root: a new user namespace where this process keeps its own uid and gid (the only ids an unprivileged
    process may map) and holds every capability over the namespaces it makes after this, none over the host's."""
    import os

    uid, gid = os.geteuid(), os.getegid()
    # A process made undumpable (the judge makes its pool process so) cannot write its own maps: dumpable while it
    # does, as before afterwards.
    dumpable = _LIBC.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    _LIBC.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    try:
        unshare(CLONE_NEWUSER)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    finally:
        _LIBC.prctl(4, max(dumpable, 0), 0, 0, 0)


def drop_capabilities(processes):
    """`drop_to` where no other uid can be had (inside `enter_user_namespace`, only the user's own is mapped): keep
    the uid, give up every capability for good (bounding, permitted, effective and inheritable sets emptied, no new
    privileges). Its own PID, mount, IPC and UTS namespaces keep the process from every other attempt and from the
    host's processes, as a uid of its own would."""
    import resource
    import signal

    for capability in range(64):
        if _LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    check(_LIBC.capset(header, (ctypes.c_uint32 * 6)()), "capset")  # all three sets empty, both 32-bit halves
    check(_LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    check(_LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")


def keep_only(*fds):
    """Close every inherited descriptor except stdio and `fds`; stdin becomes /dev/null."""
    import os
    import resource

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    keep = sorted({0, 1, 2, *fds})
    for low, high in zip(keep, [*keep[1:], resource.getrlimit(resource.RLIMIT_NOFILE)[0]]):
        os.closerange(low + 1, high)
