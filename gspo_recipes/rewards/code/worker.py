"""A long-lived sandboxed process that runs the model's program and answers calls as plain data.

The judge (`judge.py`) talks to it over two pipes, one JSON line per message (`wire.py`). Nothing it sends back is
trusted: a reply that is late, malformed, oversized or missing ends the worker, and the call fails.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import time

from . import sandbox
from .isolation import uid_slot
from .wire import MAX_MESSAGE_BYTES, NotPlainData, dumps, loads


class WorkerGone(RuntimeError):
    """The worker died, overran its deadline or broke the protocol: the call it was serving fails."""


class SandboxWorker:
    """The harness in serve mode, inside the sandbox. Use `start_worker`; always `close()` it."""

    def __init__(self, backend: str, program: str, per_test_s: float, limits: sandbox.Limits):
        self._uid = uid_slot()
        uid = self._uid.__enter__()
        self._namespaced = backend != "plain"
        request_read, self._requests = os.pipe()
        self._replies, reply_write = os.pipe()
        try:
            self.process, job_write, self._cleanup = sandbox._spawn(
                backend, uid, limits, (request_read, reply_write), False, False, False
            )
        except BaseException:
            for fd in (request_read, reply_write, self._requests, self._replies):
                os.close(fd)
            self._uid.__exit__(None, None, None)
            raise
        os.close(request_read)
        os.close(reply_write)
        job = {"mode": "serve", "program": program, "per_test_s": per_test_s, "rlimits": limits.rlimits(),
               "sys_path": sandbox.SITE_DIRS, "ipc_namespace": self._namespaced}  # fmt: skip
        try:
            _write_all(job_write, json.dumps(job).encode())
        except OSError:
            pass  # it died before reading its job: the first receive reports it
        finally:
            os.close(job_write)
        self._buffer = bytearray()
        self._sent = 0
        self._closed = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._replies, selectors.EVENT_READ)

    def request(self, message: list, timeout_s: float) -> list:
        """Send one request and wait at most `timeout_s` for its reply; `WorkerGone` (and the worker killed) when
        none comes, or when what comes is not a well-formed reply to this very request (each carries a number the
        reply must echo: a line the program writes itself onto the pipe puts the conversation out of step)."""
        self._sent += 1
        try:
            _write_all(self._requests, dumps([self._sent, *message]))
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
        if self._closed:
            return
        self._closed = True
        os.close(self._requests)  # a worker waiting for its next request exits on its own: cheaper than a kill
        # Not reaped yet: the group's id stays reserved for the kill that follows (see sandbox._supervise).
        sandbox._kill_group(self.process, self._namespaced, exited=_exits_within(self.process.pid, 0.05))
        self.process.wait()
        self._selector.close()
        os.close(self._replies)
        self._cleanup()
        self._uid.__exit__(None, None, None)


def _exits_within(pid: int, timeout_s: float) -> bool:
    """Whether the process exits within `timeout_s`, without reaping it."""
    fd = sandbox._pidfd(pid)
    if fd is None:
        return False
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
