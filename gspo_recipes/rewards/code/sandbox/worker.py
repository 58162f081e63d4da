"""A long-lived sandboxed process that runs the model's program and answers calls as plain data.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/worker.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import selectors
import signal
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from . import launch, warm
from .attempt_limits import AttemptGuard, Watchdog, orphan_uid
from .inside.wire import MAX_MESSAGE_BYTES, NotPlainData, dumps, loads
from .isolation import uid_slot

# Where the program's own file (`solution.py`) lives when the working directory is the folder shared with the judge:
# on the sandbox's private /tmp, so the shared folder starts empty and the test never sees the program's source.
PROGRAM_DIR = "/tmp/program"

# Errors that mean the judge's own process ran out of something (descriptors, processes, memory): its failure, which
# scores the completion 0 (and gets the process replaced), never a None that says "no sandbox here".
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN}


class WorkerGone(RuntimeError):
    """The worker died, overran its deadline or broke the protocol: the call it was serving fails."""


class JudgeExhausted(RuntimeError):
    """The judge's process could not start a worker for lack of its own resources: the completion scores 0."""


class WorkerSpec(NamedTuple):
    """What one worker is started for (judge -> sandbox): the attempt's program, its backend and its limits."""

    backend: str
    program: str
    per_test_s: float
    limits: launch.Limits
    # The attempt's own uid and folder where its judge is confined (`judge/broker.py`): the program runs as the
    # judge's uid, in the folder both share (`shared_folder.py`). Else a uid of its own and a private folder.
    uid: int | None = None
    shared: str | None = None


# Where a worker comes from when the judge may not start sandboxes itself (confined: `judge/broker.py`): the
# judge's ends of its pipes (requests, replies) and what ends it.
WorkerStarter = Callable[[WorkerSpec], tuple[int, int, Callable[[], None]]]


class WorkerProcess:
    """The harness in serve mode, started in the sandbox: `requests` (write) and `replies` (read) are the judge's
    ends of its pipes. Always `end()` it."""

    def __init__(self, spec: WorkerSpec):
        backend, program, per_test_s, limits, given_uid, shared = spec
        self.namespaced = backend != "plain"
        self.requests = self.replies = self.process = self._guard = self._watchdog = None
        self._cleanup = lambda: None
        # The judge's uid and folder only where the program gets a sandbox of full strength: under the weak backends
        # (no root of its own, `plain` not even a PID namespace) a program could reach the judge's processes by uid.
        full = backend == "bwrap"
        self._uid = _GivenUid(given_uid) if given_uid is not None and full else uid_slot()
        uid = self._uid.__enter__()
        shared = shared if full else None
        try:
            with contextlib.ExitStack() as child_ends:  # the worker's ends of its pipes: closed here once it has them
                request_read, self.requests = os.pipe()
                child_ends.callback(os.close, request_read)
                self.replies, reply_write = os.pipe()
                child_ends.callback(os.close, reply_write)
                self.process, job_write, self._cleanup = _spawn(backend, uid, limits, request_read, reply_write, shared)
            # The attempt's limits, before the job is written (no model code has run yet); its reader is the judge,
            # so a thread checks them.
            self._guard = AttemptGuard.for_launch(self.process.pid, limits, orphan_uid(backend, uid))
            self._watchdog = Watchdog(self._guard, _killer(self.process.pid, self._guard))
        except BaseException:
            if self.process is not None:  # spawned: its job pipe is ours to close
                os.close(job_write)
            self.end()
            raise
        job = {"mode": "serve", "program": program, "per_test_s": per_test_s, "rlimits": limits.rlimits(),
               "sys_path": launch.SITE_DIRS, "ipc_namespace": self.namespaced,
               "program_dir": PROGRAM_DIR if shared else None}  # fmt: skip
        try:
            write_all(job_write, json.dumps(job).encode())
        except OSError:
            pass  # it died before reading its job: the first receive reports it
        finally:
            os.close(job_write)

    def hand_over(self) -> tuple[int, int]:
        """(requests, replies), now the caller's to close; `end()` still kills and reaps the process."""
        fds, self.requests, self.replies = (self.requests, self.replies), None, None
        return fds

    def end(self) -> None:
        """Close the pipes, kill what is left of the process group, reap it and give its uid back. Every step runs
        even when an earlier one raises, and the judge's alarm waits until they have."""
        requests, replies, process, cleanup = self.requests, self.replies, self.process, self._cleanup
        guard, watchdog = self._guard, self._watchdog
        self.requests = self.replies = self.process = self._guard = self._watchdog = None
        self._cleanup = lambda: None
        with _alarms_held(), contextlib.ExitStack() as steps:  # callbacks run last to first
            steps.callback(self._uid.__exit__, None, None, None)
            steps.callback(cleanup)
            if guard is not None:
                steps.callback(guard.close)
            if replies is not None:
                steps.callback(os.close, replies)
            if process is not None:
                steps.callback(_end_process, process, self.namespaced)
            if requests is not None:
                steps.callback(os.close, requests)
            if guard is not None:
                steps.callback(guard.kill_all)  # before the pipe closes: its processes in new sessions too
            if watchdog is not None:
                steps.callback(watchdog.stop)  # first: no kill from its thread once the process is being reaped


def _spawn(backend: str, uid: int, limits: launch.Limits, request_read: int, reply_write: int, shared: str | None):
    """(process, write end of its job pipe, cleanup): forked from this process's warm zygote where there is one
    (`warm.py`), else a sandbox started for this attempt alone."""
    zygote = warm.zygote_for(backend)
    if zygote is not None:
        with contextlib.suppress(warm.ZygoteFailed):  # this attempt starts cold; the next one gets a new zygote
            fds = (request_read, reply_write)
            process, job_write = zygote.start_with_job(uid, limits.tmpfs_mb, limits.processes, fds, shared)
            return process, job_write, lambda: None
    return launch._spawn(backend, uid, limits, (request_read, reply_write), False, False, False, shared)


class _GivenUid:
    """The attempt's uid, handed in by whoever holds its slot (the broker): nothing to give back here."""

    def __init__(self, uid: int):
        self.uid = uid

    def __enter__(self) -> int:
        return self.uid

    def __exit__(self, *exc) -> None:
        pass


def _killer(pid: int, guard: AttemptGuard):
    """What the watchdog does from its thread: SIGKILL to every process of the attempt and the launched process's
    group, without reaping (the owner reaps in `end`, after stopping the watchdog: the group id stays reserved)."""

    def kill(why: str) -> None:
        guard.kill_all()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    return kill


def _end_process(process, namespaced: bool) -> None:
    if isinstance(process, warm.WarmProcess):
        process.end()
        return
    # Not reaped yet: the group's id stays reserved for the kill that follows (see launch._supervise).
    launch._kill_group(process, namespaced, exited=_exits_within(process.pid, 0.05))
    process.wait()


class SandboxWorker:
    """The judge's end of one worker. Use it, then always `close()` it. `start`, when given, starts the worker
    elsewhere (a confined judge's broker); else it starts here."""

    def __init__(self, spec: WorkerSpec, start: WorkerStarter | None = None):
        try:
            if start is not None:
                self._requests, self._replies, self._end = start(spec)
            else:
                process = WorkerProcess(spec)
                self._requests, self._replies = process.hand_over()
                self._end = process.end
        except OSError as error:
            if error.errno in _EXHAUSTED:
                raise JudgeExhausted(f"the judge could not start a worker: {error}") from None
            raise
        self._buffer = bytearray()
        self._sent = 0
        self._closed = False
        self._selector = None
        try:
            self._selector = selectors.DefaultSelector()
            self._selector.register(self._replies, selectors.EVENT_READ)
        except BaseException:
            self.close()
            raise

    def request(self, message: list, timeout_s: float) -> list:
        """Send one request and wait at most `timeout_s` for its reply; `WorkerGone` (and the worker killed) when
        none comes, or when what comes is not a well-formed reply to this very request (each carries a number the
        reply must echo: a line the program writes itself onto the pipe puts the conversation out of step)."""
        self._sent += 1
        try:
            write_all(self._requests, dumps([self._sent, *message]))
        except BaseException as error:
            self.close()
            if isinstance(error, OSError):
                raise WorkerGone("worker is gone") from None
            raise
        reply = self.receive(timeout_s)
        if reply[0] != self._sent:
            self.close()
            raise WorkerGone("worker answered out of turn")
        return reply[1:]

    def receive(self, timeout_s: float) -> list:
        try:
            return self._receive(time.monotonic() + timeout_s)
        except BaseException:  # an alarm in the judge, or anything else mid-reply: the conversation is out of step
            self.close()
            raise

    def _receive(self, deadline: float) -> list:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if self._closed or remaining <= 0 or not self._selector.select(remaining):
                self.close()
                raise WorkerGone("worker did not answer in time")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk or len(self._buffer) + len(chunk) > MAX_MESSAGE_BYTES:
                self.close()
                raise WorkerGone("worker died or sent too much")
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            message = loads(line)
        except (ValueError, NotPlainData):
            message = None
        if type(message) is not list or not message or type(message[0]) not in (str, int):
            self.close()
            raise WorkerGone("worker sent a malformed reply")
        return message

    @property
    def alive(self) -> bool:
        return not self._closed

    def close(self) -> None:
        """Close both pipes and the selector, and end the process; every step runs, and the judge's alarm waits
        until they have (it is delivered as soon as `close` returns)."""
        if self._closed:
            return
        self._closed = True
        with _alarms_held(), contextlib.ExitStack() as steps:  # callbacks run last to first
            steps.callback(os.close, self._replies)
            if self._selector is not None:
                steps.callback(self._selector.close)
            steps.callback(self._end)
            steps.callback(os.close, self._requests)  # first: a worker waiting for a request exits on its own


@contextlib.contextmanager
def _alarms_held():
    """SIGALRM held for the block's duration (the judge's per-test alarm would otherwise land mid-cleanup), and
    delivered to the real handler when it ends. Held twice over: blocked in the kernel, and, for an alarm that
    arrived just before the block (the kernel already delivered it; Python runs the handler at its next
    instruction, inside the block), taken by a stand-in handler that only notes it."""
    if threading.current_thread() is not threading.main_thread():  # Python runs handlers in the main one only
        yield
        return
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    noted = []
    previous_handler = signal.signal(signal.SIGALRM, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous_handler is None else previous_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)  # one the kernel held arrives now
        if noted:
            signal.raise_signal(signal.SIGALRM)  # and one that came just before, to the real handler now


def _exits_within(pid: int, timeout_s: float) -> bool:
    """Whether the process exits within `timeout_s`, without reaping it."""
    fd = launch._pidfd(pid)
    if fd is None:
        return False
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a pipe takes it in pieces)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
