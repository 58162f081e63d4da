"""Warm workers: every attempt's sandboxed program forked from a zygote that never ran model code (`zygote.py`).

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/warm.py.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import warnings

from . import shared_folder
from .isolation import WORKDIR_IN_BWRAP, is_root, program_root_plan, sandbox_env, tmp_rebinds

_START_TIMEOUT_S = 60.0
_ATTEMPT_START_TIMEOUT_S = 30.0
_ROOT_TMPFS_MB = 8  # the zygote's root holds only mount points and symlinks


class ZygoteFailed(OSError):
    """The zygote could not start, or could not start an attempt."""


class WarmProcess:
    """One attempt's process, as `subprocess.Popen` would stand for it: the first process of the attempt's own PID
    namespace, in a process group of its own (see `zygote.py`). `end()` kills it, and with it the whole namespace,
    and returns once the kernel has emptied that namespace (the process counts as exited only then)."""

    def __init__(self, pid: int, pidfd: int):
        self.pid, self._pidfd = pid, pidfd
        self.returncode: int | None = None

    def end(self) -> None:
        try:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            _readable(self._pidfd, 10.0)  # at once, unless the machine is thrashing
        finally:
            self.returncode = -signal.SIGKILL
            os.close(self._pidfd)


def _host_pid(pidfd: int, fallback: int) -> int:
    """The process's pid as this process sees it: a zygote without root is in a PID namespace of its own, and the
    number it reports is its own namespace's."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as info:
            for line in info:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return fallback


def _readable(fd: int, timeout_s: float) -> bool:
    import select

    return bool(select.select([fd], [], [], timeout_s)[0])


class Zygote:
    """One zygote process (`zygote.py`) and the socket to it; `Zygote.program()` starts the program zygote.
    `start_attempt` is safe from any thread (one at a time)."""

    def __init__(self, pid: int, sock: socket.socket, root: str, workdir: str, attempt_name: str,
                 rebind: list[list[str]] = ()):  # fmt: skip
        self.pid, self.sock, self.root, self.workdir = pid, sock, root, workdir
        self.attempt_name = attempt_name  # what `ps` calls its attempts
        self.rebind = [list(pair) for pair in rebind]  # (kept copy, path under /tmp) for each attempt to bind again
        self._pidfd = os.pidfd_open(pid)
        self._lock = threading.Lock()

    @classmethod
    def program(cls) -> Zygote:
        """The harness interpreter as the program zygote, in bwrap's root."""
        from .inside.assembly import ZYGOTE_SOURCE
        from .launch import PYTHON, SITE_DIRS

        plan = program_root_plan() + [["rw", shared_folder.shared_parent(), shared_folder.PARENT_IN_ZYGOTE]]
        root = tempfile.mkdtemp(prefix="gspo-zygote-root-")  # stays empty on the host
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with theirs:
                process = subprocess.Popen(
                    [PYTHON, "-I", "-S", "-B", "-c", ZYGOTE_SOURCE, "zygote", str(theirs.fileno())],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    cwd="/", env=sandbox_env(WORKDIR_IN_BWRAP), start_new_session=True, pass_fds=(theirs.fileno(),),
                )  # fmt: skip
        except BaseException:
            ours.close()
            os.rmdir(root)
            raise
        zygote = cls(process.pid, ours, root, WORKDIR_IN_BWRAP, "gspo-program", tmp_rebinds(plan))
        zygote._popen = process  # reaped by `close`
        config = {"root": root, "plan": plan, "sys_path": SITE_DIRS, "tmpfs_mb": _ROOT_TMPFS_MB,
                  "name": "gspo-zygote-prog", "loopback": True, "user_namespace": not is_root()}  # fmt: skip
        try:
            ours.settimeout(_START_TIMEOUT_S)
            ours.send(json.dumps(config).encode())
            zygote.expect_ready()
        except BaseException:
            zygote.close()
            raise
        return zygote

    def expect_ready(self) -> None:
        try:
            reply = json.loads(self.sock.recv(4096) or b'["failed", 0, "the zygote exited while starting"]')
        except (OSError, ValueError) as error:
            raise ZygoteFailed(0, f"the zygote did not start: {error}") from None
        if reply[0] != "ready":
            raise ZygoteFailed(reply[1], f"the zygote could not start: {reply[2]}")

    @property
    def alive(self) -> bool:
        return self._pidfd >= 0 and not _readable(self._pidfd, 0)

    def start_attempt(self, uid: int, tmpfs_mb: int, processes: int, fds: tuple[int, int, int],
                      shared: str | None = None) -> WarmProcess:  # fmt: skip
        """Fork an attempt that runs as `uid` with its own `tmpfs_mb` MB /tmp and at most `processes` processes, and
        hands the payload `fds` (the caller keeps and closes its own copies). `shared`: the host folder (made by
        `shared_folder.make_folder` in this process) bound as the attempt's working directory."""
        request = {"uid": uid, "tmpfs_mb": tmpfs_mb, "processes": processes, "workdir": self.workdir,
                   "name": self.attempt_name, "rebind": self.rebind, "user_namespace": not is_root(),
                   "parent": shared_folder.PARENT_IN_ZYGOTE,
                   "shared": shared_folder.in_zygote(shared) if shared else None}  # fmt: skip
        with self._lock:
            try:
                self.sock.settimeout(_ATTEMPT_START_TIMEOUT_S)
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
                message, pidfds, _, _ = socket.recv_fds(self.sock, 4096, 1)
            except OSError as error:
                self.close()  # out of step, or gone: the next attempt gets a new zygote
                raise ZygoteFailed(error.errno or 0, f"the zygote is gone: {error}") from None
        reply = json.loads(message) if message else ["failed", 0, "the zygote is gone"]
        if reply[0] != "started" or len(pidfds) != 1:
            for fd in pidfds:
                os.close(fd)
            if not message:
                self.close()
            raise ZygoteFailed(reply[1] if len(reply) > 1 else 0, f"no attempt: {reply[-1]}")
        return WarmProcess(_host_pid(pidfds[0], reply[1]), pidfds[0])

    def start_with_job(self, uid: int, tmpfs_mb: int, processes: int, fds: tuple[int, int],
                       shared: str | None = None) -> tuple[WarmProcess, int]:  # fmt: skip
        """`start_attempt` with a fresh job pipe in front of the payload's `fds`: (the attempt, the write end of its
        job pipe, for the caller to write the job to and close). On failure both ends are closed."""
        job_read, job_write = os.pipe()
        try:
            return self.start_attempt(uid, tmpfs_mb, processes, (job_read, *fds), shared), job_write
        except BaseException:
            os.close(job_write)
            raise
        finally:
            os.close(job_read)

    def close(self) -> None:
        """Kill the zygote (its attempts die with it) and reap it. Idempotent."""
        if self._pidfd < 0:
            return
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        popen = getattr(self, "_popen", None)
        with contextlib.suppress(ChildProcessError):
            popen.wait() if popen is not None else os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self._pidfd)
        with contextlib.suppress(OSError):
            os.rmdir(self.root)
        self._pidfd = -1


# ----------------------------------------------------------------------------------------------------------------
# The process's zygotes


class ZygoteSlot:
    """One process's zygote of one kind: started by `start` on first use, replaced if it died; the first time it
    cannot be started, given up on for good with one warning (`give_up`, the `why` filled into `warning`). Closed at
    exit; forgotten in a forked child, which must never use its parent's zygotes (it asks its parent instead)."""

    def __init__(self, start, warning: str):
        self._start, self._warning = start, warning
        self._lock = threading.Lock()
        self.zygote: Zygote | None = None
        self.unavailable: str | None = None  # why this zygote cannot be had here, once found out
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> Zygote | None:
        with self._lock:
            if self.unavailable is not None:
                return None
            if self.zygote is not None and self.zygote.alive:
                return self.zygote
            if self.zygote is not None:
                self.zygote.close()
                self.zygote = None
            try:
                self.zygote = self._start()
            except OSError as error:
                self.give_up(error.strerror or str(error))
            return self.zygote

    def give_up(self, why: str) -> None:
        self.unavailable = why
        warnings.warn(self._warning.format(why=why), RuntimeWarning, stacklevel=4)

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()

    def _forget(self) -> None:
        self.zygote, self._lock = None, threading.Lock()


def _start_program_zygote() -> Zygote:
    from .bwrap_binary import bwrap_path

    if bwrap_path() is None:  # the per-attempt path needs it; so does "bwrap" meaning what it says
        raise ZygoteFailed(0, "bubblewrap does not work here")
    return Zygote.program()


PROGRAM_ZYGOTE = ZygoteSlot(
    _start_program_zygote,
    "warm code workers are off ({why}): every attempt starts its own sandbox, several times slower",
)


def zygote_for(backend: str) -> Zygote | None:
    """This process's program zygote for `backend`, or None where the warm path is not to be had: then the caller
    starts a sandbox per attempt."""
    if backend != "bwrap" or os.environ.get("GSPO_SANDBOX_WARM", "1") == "0":
        return None
    return PROGRAM_ZYGOTE.get()
