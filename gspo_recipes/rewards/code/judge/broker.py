"""The unconfined side of a confined judge: the broker that starts and ends the program's workers when the judge
asks (the judge, confined, cannot start sandboxes itself), and the judge's client for it (`BrokerClient`).

The judge chooses nothing but when: the broker starts the attempt's own program with the attempt's own limits, and
hands the judge the worker's two pipes. Every worker it started is ended before `Broker.serve` returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import time

from ..sandbox import worker
from .records import JudgeJob, Verdict

OVERRAN = "the judge overran its deadline and was killed"
MAX_WORKER_STARTS = 64  # per attempt: restarts after crashes; the judge cannot ask for more than this


class WorkerStartsCapped(Exception):  # noqa: N818 (a state, as the judge reads it)
    """The attempt has had its `MAX_WORKER_STARTS` workers: its remaining tests fail (the program crashed that
    often), and the report says so (`worker_cap`), never a None that reads as "no sandbox here"."""


class Broker:
    """The unconfined side of one attempt: starts and ends the program's workers when the judge asks, and collects
    the verdict. Every worker it started is ended before `serve` returns."""

    def __init__(self, job: JudgeJob, sock: socket.socket, result_read: int, uid: int, shared: str):
        self.job, self.sock, self.result_read = job, sock, result_read
        self.uid, self.shared = uid, shared  # the attempt's: its judge's uid, and the folder both halves share
        self.workers: dict[int, worker.WorkerProcess] = {}
        self.starts = 0
        self.result = bytearray()

    def serve(self, deadline: float):
        with selectors.DefaultSelector() as selector, contextlib.ExitStack() as workers:
            workers.callback(self._end_all)
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(self.result_read, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return OVERRAN
                for key, _ in selector.select(remaining):
                    if key.fileobj is self.sock:
                        if not self._answer():
                            selector.unregister(self.sock)
                    else:
                        chunk = os.read(self.result_read, 1 << 16)
                        if not chunk:  # the judge has exited: its verdict is complete, or there is none
                            return self._verdict()
                        self.result += chunk

    def _verdict(self):
        try:
            verdict = json.loads(self.result)
        except ValueError:
            raise RuntimeError("the confined judge exited without a verdict") from None
        return Verdict(*verdict) if isinstance(verdict, list) else verdict

    def _answer(self) -> bool:
        """Serve one request from the judge; False once it has hung up."""
        try:
            data = self.sock.recv(4096)
            request = json.loads(data) if data else None
        except (OSError, ValueError):
            return False
        if not isinstance(request, list) or not request:
            return False
        if request[0] == "start":
            self._start()
        elif request[0] == "end" and len(request) == 2:  # no reply: see `BrokerClient`
            process = self.workers.pop(request[1], None)
            if process is not None:
                process.end()
        return True

    def _start(self) -> None:
        if self.starts >= MAX_WORKER_STARTS:
            return self._send(["capped", MAX_WORKER_STARTS])
        self.starts += 1
        job = self.job
        try:
            spec = worker.WorkerSpec(job.backend, job.program, job.per_test_s, job.limits, self.uid, self.shared)
            process = worker.WorkerProcess(spec)
        except OSError as error:
            return self._send(["failed", error.errno or 0, str(error)[:200]])
        self.workers[self.starts] = process
        fds = process.hand_over()
        try:
            socket.send_fds(self.sock, [json.dumps(["started", self.starts]).encode()], list(fds))
        except OSError:
            pass  # the judge is gone; the worker is ended with the others
        finally:
            for fd in fds:
                os.close(fd)

    def _send(self, message: list) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(json.dumps(message).encode())

    def _end_all(self) -> None:
        with contextlib.ExitStack() as steps:
            for process in self.workers.values():
                steps.callback(process.end)
            self.workers = {}


class BrokerClient:
    """The judge's way to start workers (the confined judge's `start_worker`)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.settimeout(60.0)  # the broker answers at once; this only bounds a broker that died

    def __call__(self, spec: worker.WorkerSpec):
        # The broker starts the attempt's own program with its own limits: the judge chooses nothing but when.
        self.sock.send(b'["start"]')
        message, fds, _, _ = socket.recv_fds(self.sock, 4096, 2)
        reply = json.loads(message) if message else ["failed", 0, "the broker is gone"]
        if reply[0] == "capped":
            raise WorkerStartsCapped(f"{MAX_WORKER_STARTS} workers started for one attempt")
        if reply[0] != "started" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise OSError(reply[1] if len(reply) > 1 else 0, reply[2] if len(reply) > 2 else "no worker")
        worker_id = reply[1]

        def end() -> None:
            # Not waited for: the broker serves requests in order (a worker started next starts after this one has
            # ended) and ends every worker before it returns the verdict. The judge goes on to its verdict meanwhile:
            # a worker's end waits for the kernel to tear its namespaces down (an RCU grace period, asleep), and its
            # own exit waits for the same; the two then overlap instead of following each other.
            with contextlib.suppress(OSError):
                self.sock.send(json.dumps(["end", worker_id]).encode())

        return fds[0], fds[1], end
