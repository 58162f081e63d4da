"""Run model-written Python with hard limits, in the strongest isolation this machine allows.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/launch.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import bwrap_binary
from .attempt_limits import POLL_S, AttemptGuard, orphan_uid
from .inside.assembly import HARNESS_SOURCE
from .isolation import (  # noqa: F401 (SANDBOX_UID_BASE, SANDBOX_UIDS: this module's public names, kept importable)
    SANDBOX_UID_BASE,
    SANDBOX_UIDS,
    bwrap_prefix,
    drop_privileges,
    is_root,
    sandbox_env,
    site_dirs,
    uid_slot,
    unshare_prefix,
)

BACKENDS = ("bwrap", "unshare", "plain")
# The interpreter starts without `site` (-S): processing the environment's .pth files is most of its start-up time.
# Its package directories are put on sys.path by the harness instead, so model code can still import numpy & co.
# The interpreter every sandbox runs, normalised: `venv/../.venv/bin/python` names a directory the sandbox's root
# does not have (and a program's `sys.executable` is this path, on the warm path and the per-attempt one alike).
PYTHON = os.path.abspath(sys.executable)
SITE_DIRS = site_dirs()


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

    @property
    def cpu_budget_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.wall_s

    def rlimits(self) -> dict[str, tuple[int, int]]:
        # Per process: the backstop under the per-attempt limits of `attempt_limits.py`.
        cpu = max(1, math.ceil(self.cpu_budget_s))
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
    over_limits: str | None = None  # why the attempt's processes together were killed (see attempt_limits.py)


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
    with uid_slot() as uid:
        job = dict(job, rlimits=limits.rlimits(), sys_path=SITE_DIRS)
        return _launch(backend, uid, job, stdin, limits, capture_stdout, capture_stderr)


class SandboxUnavailable(RuntimeError):
    """No sandbox backend (or not the one asked for) works on this machine."""


# ----------------------------------------------------------------------------------------------------------------
# Backend choice


_probe_lock = threading.Lock()
_probed: dict[str, bool] = {}
WEAK_BACKENDS = ("unshare", "plain")


def resolve_backend(backend: str | None = None) -> str:
    """The backend runs will use: the one asked for (argument, then `GSPO_SANDBOX_BACKEND`), else bwrap.

    Only bwrap is full strength; `unshare` and `plain` see the host filesystem and run only when asked for by name
    (`weak_sandbox_note` says so). Raises `SandboxUnavailable`, with what is missing, why and the fix, when the
    backend asked for (or bwrap) does not work here: never a silent step down."""
    requested = backend or os.environ.get("GSPO_SANDBOX_BACKEND") or "auto"
    if requested == "auto":
        requested = "bwrap"
    if requested not in BACKENDS:
        raise ValueError(
            f"unknown sandbox backend {requested!r} (argument or GSPO_SANDBOX_BACKEND): use one of {BACKENDS} or 'auto'"
        )
    if not _works(requested):
        if requested == "bwrap":
            raise SandboxUnavailable(bwrap_binary.why_not())
        raise SandboxUnavailable(f"sandbox backend {requested!r} does not work on this machine")
    return requested


def weak_sandbox_note(backend: str) -> str | None:
    """What a run must say on every start when model code runs under a weaker backend (None for bwrap)."""
    if backend not in WEAK_BACKENDS:
        return None
    sees = "the host filesystem" + (" and network, as your own user" if backend == "plain" else "")
    return (
        f"WEAK SANDBOX: model code and the dataset's tests run under the {backend!r} backend, asked for by "
        f"GSPO_SANDBOX_BACKEND or backend=: they can read and write {sees}. Unset it for bubblewrap's full sandbox."
    )


def _works(backend: str) -> bool:
    with _probe_lock:
        if backend not in _probed:
            _probed[backend] = _probe(backend)
        return _probed[backend]


def _probe(backend: str) -> bool:
    if backend == "bwrap" and bwrap_binary.bwrap_path() is None:
        return False
    if backend == "unshare" and not shutil.which("unshare"):
        return False
    if is_root() and not shutil.which("setpriv"):
        return False
    job = {"mode": "asserts", "program": "", "tests": ["assert True"], "per_test_s": 5, "nonce": 42}
    try:
        with uid_slot() as uid:
            result = _launch(backend, uid, dict(job, rlimits=Limits().rlimits()), None, Limits(wall_s=30), False, True)
    except OSError:
        return False
    return result.returncode == 43


# ----------------------------------------------------------------------------------------------------------------
# Launching


def _python_command() -> list[str]:
    return [PYTHON, "-I", "-S", "-B", "-c", HARNESS_SOURCE]


def _launch(backend, uid, job, stdin, limits, capture_stdout, capture_stderr) -> Execution:
    process, job_write, cleanup = _spawn(backend, uid, limits, (), stdin is not None, capture_stdout, capture_stderr)
    try:
        job_bytes = json.dumps(dict(job, ipc_namespace=backend != "plain")).encode()
        return _supervise(process, job_write, job_bytes, stdin or b"", limits, backend != "plain",
                          orphan_uid(backend, uid))  # fmt: skip
    finally:
        cleanup()


def _spawn(backend, uid, limits, extra_fds, pipe_stdin, capture_stdout, capture_stderr, shared=None):
    """Start the harness in the sandbox: (process, write end of its job pipe, cleanup). `extra_fds` stay open in it
    and are appended to its arguments. `shared`: the host folder the attempt shares with its judge (bwrap only)."""
    host_workdir = None
    if backend == "bwrap":
        prefix = bwrap_prefix(bwrap_binary.bwrap_path(), uid, limits.tmpfs_mb, shared)
        cwd, env = "/", {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    else:
        host_workdir = tempfile.mkdtemp(prefix="gspo-sandbox-")
        if is_root():
            os.chown(host_workdir, uid, uid)
        prefix = unshare_prefix(uid) if backend == "unshare" else drop_privileges(uid)
        cwd, env = host_workdir, sandbox_env(host_workdir)

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


# ----------------------------------------------------------------------------------------------------------------
# Supervision. It stays beside `_pidfd`, which it looks up here at each run: tests replace `sandbox._pidfd` to
# take the polling path that kernels without pidfds (or strict seccomp profiles) force.


_STDERR_CAP = 64 << 10
_CHUNK = 65536  # bytes per read or write: one default Linux pipe buffer


def _supervise(
    process: subprocess.Popen,
    job_write: int,
    job: bytes,
    stdin: bytes,
    limits: Limits,
    namespaced: bool,
    orphans: int | None = None,
) -> Execution:
    """Feed the job and stdin, collect capped output, and kill the whole group at the deadline or on overflow."""
    start = time.monotonic()
    try:
        guard = AttemptGuard.for_launch(process.pid, limits, orphans)  # before the job: no model code has run yet
    except BaseException:
        os.close(job_write)
        _kill_group(process, namespaced, False)
        process.wait()
        raise
    run = _Supervision(process, job_write, job, stdin, limits.output_bytes, guard)
    try:
        run.pump_until_done(start + limits.wall_s)
    finally:
        try:
            guard.kill_all()
            _kill_group(process, namespaced, run.exited)
            process.wait()
        finally:
            guard.close()
            run.close()
    stdout, stderr = run.captured()
    return Execution(process.returncode, stdout, stderr, run.timed_out, run.exceeded, time.monotonic() - start,
                     run.over_limits)  # fmt: skip


class _Supervision:
    """One run's pipes on one selector: the job and stdin written without blocking, stdout and stderr read up to
    their caps, and (where the kernel allows) a pidfd that says when the process exits."""

    def __init__(self, process: subprocess.Popen, job_write: int, job: bytes, stdin: bytes, output_cap: int,
                 guard: AttemptGuard):  # fmt: skip
        self.process, self.guard = process, guard
        self.exited = self.timed_out = self.exceeded = False
        self.over_limits = None
        self.next_check = time.monotonic() + POLL_S
        self.writers = {job_write: (memoryview(job), lambda: os.close(job_write))}
        if process.stdin is not None:
            self.writers[process.stdin.fileno()] = (memoryview(stdin), process.stdin.close)
        # Remembered now: the streams are closed (and forget their fds) before the output is read back.
        self.stdout_fd = process.stdout.fileno() if process.stdout else None
        self.stderr_fd = process.stderr.fileno() if process.stderr else None
        self.readers = {}
        for fd, cap in ((self.stdout_fd, output_cap), (self.stderr_fd, _STDERR_CAP)):
            if fd is not None:
                self.readers[fd] = (bytearray(), cap)
        self.selector = selectors.DefaultSelector()
        for fd in self.writers:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_WRITE)
        for fd in self.readers:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ)
        self.exit_fd = _pidfd(process.pid)  # readable once the process exits, without reaping it
        if self.exit_fd is not None:
            self.selector.register(self.exit_fd, selectors.EVENT_READ)

    def pump_until_done(self, deadline: float) -> None:
        """Move data until the process has exited and its pipes are drained, the deadline passes, or the output
        overflows its cap."""
        while not self.exceeded and (not self.exited or self.selector.get_map()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = not self.exited
                return
            # Once it has exited, take only what is already in the pipes: a straggler may hold them open for ever.
            # Without a pidfd, poll for the exit every 10 ms. The attempt's limits are checked every POLL_S.
            if not self.exited and time.monotonic() >= self.next_check:
                self.next_check = time.monotonic() + POLL_S
                self.over_limits = self.guard.over()
                if self.over_limits is not None:
                    return
            until_check = max(0.0, self.next_check - time.monotonic())
            timeout = 0 if self.exited else min(remaining, until_check, 0.01 if self.exit_fd is None else remaining)
            events = self.selector.select(timeout)
            if self.exit_fd is None and not self.exited and self.process.poll() is not None:
                self.exited = True
                continue
            if self.exited and not events:
                return
            for key, _ in events:
                self._on_ready(key.fd)

    def _on_ready(self, fd: int) -> None:
        if fd == self.exit_fd:
            self.exited = True
            self.selector.unregister(fd)
        elif fd in self.writers:
            self._feed(fd)
        else:
            self._drain(fd)

    def _feed(self, fd: int) -> None:
        data, close = self.writers[fd]
        try:
            data = data[os.write(fd, data[:_CHUNK]) :]
        except (BrokenPipeError, BlockingIOError):
            data = data[:0]  # it stopped reading: what it did not read it does not get
        self.writers[fd] = (data, close)
        if not data:
            self.selector.unregister(fd)
            close()
            del self.writers[fd]

    def _drain(self, fd: int) -> None:
        buffer, cap = self.readers[fd]
        chunk = os.read(fd, _CHUNK)
        buffer += chunk
        if not chunk:
            self.selector.unregister(fd)
        elif len(buffer) > cap:
            self.exceeded = True

    def close(self) -> None:
        self.selector.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)
        for _, close in self.writers.values():
            close()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def captured(self) -> tuple[bytes, bytes]:
        """(stdout, stderr) as read, each empty when it was not captured."""
        return tuple(bytes(self.readers[fd][0]) if fd is not None else b"" for fd in (self.stdout_fd, self.stderr_fd))


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
