"""How a sandboxed process is confined: which uid it runs as, its environment, and the command-line prefix that puts
it into each backend (`launch.py` describes the backends, picks one, and starts and supervises the process).

No process is started here: this module only builds command lines and hands out uids.
"""

from __future__ import annotations

import collections
import os
import random
import sys
import threading
import time
from pathlib import Path

SANDBOX_UID_BASE = int(os.environ.get("GSPO_SANDBOX_UID_BASE", "60000"))
SANDBOX_UIDS = 1024  # 60000-61023: below systemd's DynamicUser range (61184-65519), like isolate's boxes
# Processes on one machine (trainer ranks, test runs) start at different points of the range, so that they rarely
# share a uid, and with it a process limit.
_UID_OFFSET = random.Random(os.getpid() ^ time.time_ns()).randrange(SANDBOX_UIDS)
# The sandboxes' working directory: the folder an attempt's program and judge share (`shared_folder.py`), or, for a
# run that shares nothing (stdin/stdout cases, the fallback), a private one on the sandbox's own /tmp.
WORKDIR_IN_BWRAP = "/tmp/work"


def _host_root() -> bool:
    # Root of the host, not of a user namespace (where a forked judge is uid 0 without any power over the host):
    # found once, at import, in the process every sandbox is started from.
    try:
        full_map = Path("/proc/self/uid_map").read_text().split() == ["0", "0", "4294967295"]
    except OSError:
        full_map = True
    return os.geteuid() == 0 and full_map


_HOST_ROOT = _host_root()


def is_root() -> bool:
    """Whether this process runs as the host's root (cached at import: see `_host_root`)."""
    return _HOST_ROOT


_slot_lock = threading.Lock()
_free_slots: collections.deque[int] = collections.deque()
_next_slot = 0


class uid_slot:
    """Hands out a uid no other run of this process is using at the same time (root only; else our own uid).

    A uid given back is handed out again as late as possible: fresh ones first, then the one given back longest
    ago. The processes an attempt leaves behind killed are re-parented to the system's init, which may take seconds
    to reap them (or, as a container's first process that is not an init, never does); until then they still count
    against their uid's process limit, and the next attempt under that uid could not start its own."""

    def __enter__(self) -> int:
        global _next_slot
        if not is_root():
            self.slot = None
            return os.getuid()
        with _slot_lock:
            if _next_slot < SANDBOX_UIDS or not _free_slots:
                self.slot, _next_slot = _next_slot, _next_slot + 1
            else:
                self.slot = _free_slots.popleft()
        return SANDBOX_UID_BASE + (_UID_OFFSET + self.slot) % SANDBOX_UIDS

    def __exit__(self, *exc) -> None:
        if self.slot is not None:
            with _slot_lock:
                _free_slots.append(self.slot)


def sandbox_env(workdir: str) -> dict[str, str]:
    """The whole environment of a sandboxed process: nothing of the parent's (tokens, keys, proxies) crosses over."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def drop_privileges(uid: int) -> list[str]:
    """As root: become `uid`, with no groups, no capabilities and no way to regain them. Otherwise nothing to do."""
    if not is_root():
        return []
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--",
    ]  # fmt: skip


def bwrap_prefix(binary: str, uid: int, tmpfs_mb: int, shared: str | None = None) -> list[str]:
    """bubblewrap (`binary`: `bwrap_binary.py`): a read-only minimal root with the interpreter, a private `tmpfs_mb`
    MB /tmp, no network, new PID/IPC/UTS namespaces, and a process that dies with its parent. `shared`: the host
    folder the attempt shares with its judge (`shared_folder.py`), bound read-write as the working directory."""
    command = [binary, "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    command += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    if not is_root():
        command.append("--unshare-user")  # unprivileged bwrap needs a user namespace; root drops to a uid instead
    command += ["--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    command += _system_dir_binds()
    command += ["--proc", "/proc", "--dev", "/dev"]
    # A private /dev/shm (POSIX shared memory, multiprocessing's locks) that dies with the sandbox.
    command += ["--size", str(tmpfs_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
    command += ["--size", str(tmpfs_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    command += _python_binds()
    if shared is not None:
        command += ["--bind", shared, WORKDIR_IN_BWRAP]
    else:  # root's bwrap creates the directory as root; the uid it drops to must write there (it is private anyway)
        command += ["--perms", "0777" if is_root() else "0700", "--dir", WORKDIR_IN_BWRAP]
    command += ["--chdir", WORKDIR_IN_BWRAP, "--remount-ro", "/"]
    command += ["--clearenv"]
    for key, value in sandbox_env(WORKDIR_IN_BWRAP).items():
        command += ["--setenv", key, value]
    return command + ["--"] + drop_privileges(uid)


def unshare_prefix(uid: int) -> list[str]:
    """util-linux `unshare`: new PID/network/mount/IPC/UTS namespaces; the host filesystem stays visible."""
    command = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net", "--ipc", "--uts"]
    if not is_root():
        command[1:1] = ["--user", "--map-root-user"]
    return command + ["--"] + drop_privileges(uid)


def _system_dir_binds() -> list[str]:
    # /bin, /lib & co. are symlinks into /usr on merged-/usr systems and real directories elsewhere: mirror either.
    binds = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            binds += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            binds += ["--ro-bind", str(path), str(path)]
    return binds


# bwrap's --dev, less what no program needs: the usual device nodes, bound from the host, and the /dev/fd links.
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_DEVICE_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
                 "stderr": "/proc/self/fd/2"}  # fmt: skip


def system_root_plan() -> list[list[str]]:
    """The read-only part of bwrap's root for `confine.build_root`: /usr, /etc, the system directories, the device
    nodes, and mount points for /proc, /tmp and /dev/shm (mounted fresh for every attempt)."""
    plan = [["ro", "/usr", "/usr"], ["ro", "/etc", "/etc"]]
    binds = _system_dir_binds()
    for kind, source, target in zip(binds[::3], binds[1::3], binds[2::3]):  # ["--symlink"|"--ro-bind", src, dst]*
        plan.append(["symlink" if kind == "--symlink" else "ro", source, target])
    plan += [["dev", f"/dev/{name}", f"/dev/{name}"] for name in DEVICE_NODES]
    plan += [["symlink", source, f"/dev/{name}"] for name, source in _DEVICE_LINKS.items()]
    return plan + [["dir", "", path] for path in ("/proc", "/tmp", "/dev/shm")]


def program_root_plan() -> list[list[str]]:
    """bwrap's root for the warm zygote (`zygote.py`): `system_root_plan` and the interpreter's directories, read-only
    (with a kept copy of those under /tmp, see `with_kept_copies`)."""
    return with_kept_copies(system_root_plan() + [["ro", root, root] for root in _python_mounts()])


KEPT_UNDER = "/.gspo-kept"  # in a zygote's root: what each attempt's own /tmp and /dev/shm would hide


def with_kept_copies(plan: list[list[str]]) -> list[list[str]]:
    """`plan`, with each read-only directory under /tmp or /dev/shm (an interpreter or venv there) also bound at
    KEPT_UNDER + its path: each attempt mounts a fresh /tmp over the original and binds it back from there."""
    kept = [["ro", source, KEPT_UNDER + target] for kind, source, target in plan if kind == "ro" and _hidden(target)]
    return plan + kept


def tmp_rebinds(plan: list[list[str]]) -> list[list[str]]:
    """[kept copy, path] for each directory an attempt binds back after mounting its own /tmp (`with_kept_copies`)."""
    return [[target, target[len(KEPT_UNDER) :]] for kind, _, target in plan if target.startswith(KEPT_UNDER + "/")]


def _hidden(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in ("/tmp", "/dev/shm"))


def _python_binds() -> list[str]:
    # The interpreter's directories, read-only, with their parents created first (bwrap cannot bind into a path
    # that does not exist on the empty root). /tmp and /usr are already there.
    binds = []
    for root in _python_mounts():
        for parent in reversed(Path(root).parents[:-1]):
            if str(parent) not in ("/tmp", "/usr"):
                binds += ["--perms", "0755", "--dir", str(parent)]
        binds += ["--ro-bind", root, root]
    return binds


def site_dirs() -> list[str]:
    """Where the interpreter's packages are: its site-packages and, when Python uses it, the user's site directory."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.add(site.getusersitepackages())
    return sorted(dirs)


def _python_mounts() -> list[str]:
    """Directories the interpreter and its packages live in, outside /usr (a venv, pyenv, conda...)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site_dirs()}
    roots |= {os.path.realpath(root) for root in roots}
    roots |= {str(Path(os.path.realpath(sys.executable)).parent.parent)}
    roots = sorted(root for root in roots if not root.startswith("/usr/") and root != "/usr" and os.path.isdir(root))
    return [root for root in roots if not any(root.startswith(other + "/") for other in roots)]
