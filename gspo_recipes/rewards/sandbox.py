"""Run model-written Python with hard limits, in the strongest isolation this machine allows.

Every run is a fresh process in its own process group, with a scrubbed environment, isolated Python (`-I`),
resource limits, an empty working directory, a wall-clock deadline after which the whole group is killed and reaped,
and a cap on captured output. Backends, strongest first:

  bwrap    bubblewrap: a minimal read-only root, private /tmp (a small tmpfs), no network, new PID/IPC/UTS namespaces,
           dies with its parent.
  unshare  util-linux `unshare`: new PID/network/mount namespaces, but the host filesystem stays visible.
  plain    only the process group, the limits and the unprivileged user.

`auto` (the default, or `GSPO_SANDBOX_BACKEND`) takes the first that works here and warns once when that is not
bwrap. When this process is root, model code runs as an unprivileged uid of its own (from 60000 up, like `isolate`'s
boxes), so concurrent runs neither share a process limit nor can signal each other.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from pathlib import Path

BACKENDS = ("bwrap", "unshare", "plain")
SANDBOX_UID_BASE = int(os.environ.get("GSPO_SANDBOX_UID_BASE", "60000"))
SANDBOX_UIDS = 1024  # 60000-61023: below systemd's DynamicUser range (61184-65519), like isolate's boxes
# Processes on one machine (trainer ranks, test runs) start at different points of the range, so that they rarely
# share a uid, and with it a process limit.
_UID_OFFSET = random.Random(os.getpid() ^ time.time_ns()).randrange(SANDBOX_UIDS)
# The plain-data codec first: the harness's serve mode uses it (see wire.py and harness.py).
_HARNESS_SOURCE = Path(__file__).with_name("wire.py").read_text() + Path(__file__).with_name("harness.py").read_text()
_WORKDIR_IN_BWRAP = "/tmp/work"
# The interpreter starts without `site` (-S): processing the environment's .pth files is most of its start-up time.
# Its package directories are put on sys.path by the harness instead, so model code can still import numpy & co.
SITE_DIRS = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds for one sandboxed run. `cpu_s` defaults to the wall-clock deadline."""

    wall_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    file_size_mb: int = 16
    processes: int = 32
    open_files: int = 64
    output_bytes: int = 4 << 20
    tmpfs_mb: int = 64

    def rlimits(self) -> dict[str, tuple[int, int]]:
        cpu = max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.wall_s))
        memory = self.memory_mb << 20
        return {
            # The soft CPU limit sends SIGXCPU; one second later the hard limit kills.
            "RLIMIT_CPU": (cpu, cpu + 1),
            "RLIMIT_AS": (memory, memory),
            "RLIMIT_FSIZE": (self.file_size_mb << 20, self.file_size_mb << 20),
            "RLIMIT_NPROC": (self.processes, self.processes),
            "RLIMIT_NOFILE": (self.open_files, self.open_files),
            "RLIMIT_CORE": (0, 0),
        }


@dataclasses.dataclass
class Execution:
    """What came back from one run. `returncode` is negative when a signal ended the process."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_exceeded: bool
    wall_s: float


def run_harness(
    job: dict,
    *,
    stdin: bytes | None = None,
    limits: Limits = Limits(),
    capture_stdout: bool = False,
    capture_stderr: bool = False,
    backend: str | None = None,
) -> Execution:
    """Run the harness (see `harness.py`) on `job` in the sandbox and return what it did.

    Raises `SandboxUnavailable` when the requested backend cannot run here: an infrastructure failure, which callers
    report as "cannot judge" rather than as a wrong answer.
    """
    backend = resolve_backend(backend)
    with _uid_slot() as uid:
        job = dict(job, rlimits=limits.rlimits(), sys_path=SITE_DIRS)
        return _launch(backend, uid, job, stdin, limits, capture_stdout, capture_stderr)


class SandboxUnavailable(RuntimeError):
    """No sandbox backend (or not the one asked for) works on this machine."""


# ----------------------------------------------------------------------------------------------------------------
# Backend choice


_probe_lock = threading.Lock()
_probed: dict[str, bool] = {}
_warned_weak = False


def resolve_backend(backend: str | None = None) -> str:
    """The backend runs will use: the one asked for (argument, then `GSPO_SANDBOX_BACKEND`), or the strongest that
    works here."""
    global _warned_weak
    requested = backend or os.environ.get("GSPO_SANDBOX_BACKEND", "auto")
    if requested != "auto":
        if requested not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {requested!r}; choose from {BACKENDS} or 'auto'")
        if not _works(requested):
            raise SandboxUnavailable(f"sandbox backend {requested!r} does not work on this machine")
        return requested
    for candidate in BACKENDS:
        if _works(candidate):
            if candidate != "bwrap" and not _warned_weak:
                _warned_weak = True
                warnings.warn(
                    f"bubblewrap (bwrap) is not usable here; model code runs under the weaker {candidate!r} sandbox: "
                    f"it sees the host filesystem{' and network' if candidate == 'plain' else ''}. "
                    "Install the `bubblewrap` package for full isolation.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return candidate
    raise SandboxUnavailable("no sandbox backend works on this machine")


def _works(backend: str) -> bool:
    with _probe_lock:
        if backend not in _probed:
            _probed[backend] = _probe(backend)
        return _probed[backend]


def _probe(backend: str) -> bool:
    if backend == "bwrap" and not shutil.which("bwrap"):
        return False
    if backend == "unshare" and not shutil.which("unshare"):
        return False
    if _is_root() and not shutil.which("setpriv"):
        return False
    job = {"mode": "asserts", "program": "", "tests": ["assert True"], "per_test_s": 5, "nonce": 42}
    try:
        with _uid_slot() as uid:
            result = _launch(backend, uid, dict(job, rlimits=Limits().rlimits()), None, Limits(wall_s=30), False, True)
    except OSError:
        return False
    return result.returncode == 43


# ----------------------------------------------------------------------------------------------------------------
# Launching


def _is_root() -> bool:
    return os.geteuid() == 0


_slot_lock = threading.Lock()
_free_slots: list[int] = []
_next_slot = 0


class _uid_slot:
    """Hands out a uid no other run of this process is using at the same time (root only; else our own uid)."""

    def __enter__(self) -> int:
        global _next_slot
        if not _is_root():
            self.slot = None
            return os.getuid()
        with _slot_lock:
            if _free_slots:
                self.slot = _free_slots.pop()
            else:
                self.slot, _next_slot = _next_slot, _next_slot + 1
        return SANDBOX_UID_BASE + (_UID_OFFSET + self.slot) % SANDBOX_UIDS

    def __exit__(self, *exc) -> None:
        if self.slot is not None:
            with _slot_lock:
                _free_slots.append(self.slot)


def _sandbox_env(workdir: str) -> dict[str, str]:
    # Nothing of the parent's environment (tokens, keys, proxies) crosses over.
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


def _drop_privileges(uid: int) -> list[str]:
    if not _is_root():
        return []
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--",
    ]  # fmt: skip


def _python_command() -> list[str]:
    return [sys.executable, "-I", "-S", "-B", "-c", _HARNESS_SOURCE]


def _python_mounts() -> list[str]:
    """Directories the interpreter and its packages live in, outside /usr (a venv, pyenv, conda...)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots |= {os.path.realpath(root) for root in roots}
    roots |= {str(Path(os.path.realpath(sys.executable)).parent.parent)}
    roots = sorted(root for root in roots if not root.startswith("/usr/") and root != "/usr" and os.path.isdir(root))
    return [root for root in roots if not any(root.startswith(other + "/") for other in roots)]


def _bwrap_command(uid: int, limits: Limits) -> list[str]:
    command = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    command += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    if not _is_root():
        command.append("--unshare-user")  # unprivileged bwrap needs a user namespace; root drops to a uid instead
    command += ["--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    command += ["--proc", "/proc", "--dev", "/dev"]
    command += ["--size", str(limits.tmpfs_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    for root in _python_mounts():
        for parent in reversed(Path(root).parents[:-1]):
            if str(parent) not in ("/tmp", "/usr"):
                command += ["--perms", "0755", "--dir", str(parent)]
        command += ["--ro-bind", root, root]
    # Root's bwrap creates the directory as root; the uid it drops to must write there (it is private anyway).
    command += ["--perms", "0777" if _is_root() else "0700", "--dir", _WORKDIR_IN_BWRAP]
    command += ["--chdir", _WORKDIR_IN_BWRAP, "--remount-ro", "/"]
    command += ["--clearenv"]
    for key, value in _sandbox_env(_WORKDIR_IN_BWRAP).items():
        command += ["--setenv", key, value]
    return command + ["--"] + _drop_privileges(uid)


def _unshare_command(uid: int) -> list[str]:
    command = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net", "--ipc", "--uts"]
    if not _is_root():
        command[1:1] = ["--user", "--map-root-user"]
    return command + ["--"] + _drop_privileges(uid)


def _launch(backend, uid, job, stdin, limits, capture_stdout, capture_stderr) -> Execution:
    process, job_write, cleanup = _spawn(
        backend, uid, limits, (), stdin is not None, capture_stdout, capture_stderr
    )
    try:
        job_bytes = json.dumps(job).encode()
        return _supervise(process, job_write, job_bytes, stdin or b"", limits, namespaced=backend != "plain")
    finally:
        cleanup()


def _spawn(backend, uid, limits, extra_fds, pipe_stdin, capture_stdout, capture_stderr):
    """Start the harness in the sandbox: (process, write end of its job pipe, cleanup). `extra_fds` stay open in it
    and are appended to its arguments."""
    host_workdir = None
    if backend == "bwrap":
        prefix, cwd, env = _bwrap_command(uid, limits), "/", {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    else:
        host_workdir = tempfile.mkdtemp(prefix="gspo-sandbox-")
        if _is_root():
            os.chown(host_workdir, uid, uid)
        prefix = _unshare_command(uid) if backend == "unshare" else _drop_privileges(uid)
        cwd, env = host_workdir, _sandbox_env(host_workdir)

    def cleanup():
        if host_workdir:
            shutil.rmtree(host_workdir, ignore_errors=True)

    job_read, job_write = os.pipe()
    try:
        process = subprocess.Popen(
            prefix + _python_command() + [str(fd) for fd in (job_read, *extra_fds)],
            stdin=subprocess.PIPE if pipe_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE if capture_stderr else subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            start_new_session=True,  # its own process group, so the deadline can kill everything it started
            pass_fds=(job_read, *extra_fds),
        )
    except BaseException:
        os.close(job_write)
        cleanup()
        raise
    finally:
        os.close(job_read)
    if os.environ.get("GSPO_SANDBOX_LAUNCH_LOG"):  # tests: every run's session, to look for leftovers by session
        with open(os.environ["GSPO_SANDBOX_LAUNCH_LOG"], "a") as log:
            log.write(f"{process.pid}\n")
    return process, job_write, cleanup


_STDERR_CAP = 64 << 10


def _supervise(
    process: subprocess.Popen, job_write: int, job: bytes, stdin: bytes, limits: Limits, namespaced: bool
) -> Execution:
    """Feed the job and stdin, collect capped output, and kill the whole group at the deadline or on overflow."""
    start = time.monotonic()
    deadline = start + limits.wall_s
    writers = {job_write: (memoryview(job), lambda: os.close(job_write))}
    if process.stdin is not None:
        writers[process.stdin.fileno()] = (memoryview(stdin), process.stdin.close)
    stdout_fd = process.stdout.fileno() if process.stdout else None
    stderr_fd = process.stderr.fileno() if process.stderr else None
    readers = {}
    for stream, cap in ((process.stdout, limits.output_bytes), (process.stderr, _STDERR_CAP)):
        if stream is not None:
            readers[stream.fileno()] = (bytearray(), cap)
    selector = selectors.DefaultSelector()
    for fd in writers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_WRITE)
    for fd in readers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    exit_fd = _pidfd(process.pid)  # readable once the process exits, without reaping it
    if exit_fd is not None:
        selector.register(exit_fd, selectors.EVENT_READ)
    exited = timed_out = exceeded = False
    try:
        while not exceeded and (not exited or selector.get_map()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = not exited
                break
            # Once it has exited, take only what is already in the pipes: a straggler may hold them open for ever.
            events = selector.select(0 if exited else remaining if exit_fd is not None else min(remaining, 0.01))
            if exit_fd is None and not exited and process.poll() is not None:
                exited = True
                continue
            if exited and not events:
                break
            for key, _ in events:
                fd = key.fd
                if fd == exit_fd:
                    exited = True
                    selector.unregister(fd)
                elif fd in writers:
                    data, close = writers[fd]
                    try:
                        data = data[os.write(fd, data[:65536]) :]
                    except (BrokenPipeError, BlockingIOError):
                        data = data[:0]  # it stopped reading: what it did not read it does not get
                    writers[fd] = (data, close)
                    if not data:
                        selector.unregister(fd)
                        close()
                        del writers[fd]
                else:
                    buffer, cap = readers[fd]
                    chunk = os.read(fd, 65536)
                    buffer += chunk
                    if not chunk:
                        selector.unregister(fd)
                    elif len(buffer) > cap:
                        exceeded = True
    finally:
        _kill_group(process, namespaced, exited)
        process.wait()
        selector.close()
        if exit_fd is not None:
            os.close(exit_fd)
        for _, close in writers.values():
            close()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    stdout = bytes(readers[stdout_fd][0]) if stdout_fd is not None else b""
    stderr = bytes(readers[stderr_fd][0]) if stderr_fd is not None else b""
    return Execution(process.returncode, stdout, stderr, timed_out, exceeded, time.monotonic() - start)


def _kill_group(process: subprocess.Popen, namespaced: bool, exited: bool) -> None:
    if not exited and namespaced:
        # Kill the namespace's init first: the kernel then kills everything in the namespace, and bwrap/unshare
        # reap it and exit. Killing them first would orphan the init to the host's init, a zombie for a while.
        for child in _children(process.pid):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            process.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
    # Whatever is left of the group (everything, for `plain`). Its id stays reserved while any member lives, and
    # on the usual path the leader is not reaped yet, so this cannot hit a stranger's group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3, or a seccomp profile that forbids it: poll instead
        return None
