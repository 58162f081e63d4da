"""A pool of worker processes in which every task has a deadline.

A worker that overruns is killed and replaced, and its task gets the caller's `on_timeout` value, so a batch returns
on time even when some item sends sympy into big-integer work that no signal can interrupt. Workers are plain
subprocesses talking over pipes: this works from any thread, inside daemonic
processes (where `multiprocessing` may not start children), and without re-importing the caller's `__main__`.

Pools are created on first use, reused across calls, and killed at exit. `get_pool(name)` gives the shared one.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

WORKER_MEMORY_MB = int(os.environ.get("GSPO_REWARD_WORKER_MEMORY_MB", "4096"))
_EXIT_GRACE_S = 5.0  # closing a pool: how long its idle workers get to exit on their own before they are killed
_STARTUP_TIMEOUT_S = 120.0  # a fresh worker imports sympy; on a loaded machine that can take a while
_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])

# A worker loads the modules it is told to run and what they import, never a package's `__init__`: every package
# of ours is a stand-in there. The top level's pulls in the trainer (torch, transformers, TRL), seconds of start-up
# and hundreds of MB that a verifier never uses; `rewards`' pulls in every reward, 18 MB that the code judge's
# zygote would copy into each attempt it forks.
_WORKER_BOOT = """
import os, sys, types
top = sys.argv[1]
for folder, _, files in os.walk(top):
    if "__init__.py" in files:
        inner = os.path.relpath(folder, top)
        name = "gspo_recipes" if inner == "." else "gspo_recipes." + inner.replace(os.sep, ".")
        package = sys.modules[name] = types.ModuleType(name)
        package.__path__ = [folder]
from gspo_recipes.rewards.pool import _worker_main
_worker_main(int(sys.argv[2]), sys.argv[3:])
# The pool closed the pipe: the exit handlers close what the worker started (the code reward's zygotes, and their
# folders); the interpreter's own teardown is skipped (a tenth of a second a worker, for nothing).
import atexit
atexit._run_exitfuncs()
os._exit(0)
"""


class PoolUnavailable(RuntimeError):
    """Workers could not be started: an infrastructure failure, not a verdict on any item."""


class _Worker:
    def __init__(self, process: subprocess.Popen, to_worker: Connection, from_worker: Connection):
        self.process, self.to_worker, self.from_worker = process, to_worker, from_worker
        self.ready = False

    def kill(self) -> None:
        self.end(0.0)

    def end(self, grace_s: float) -> None:
        """Wait up to `grace_s` for the process to exit, then kill it (at once with 0); close both pipes."""
        self.to_worker.close()  # idempotent; an idle worker exits on the end of its command pipe
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.from_worker.close()


@dataclasses.dataclass
class _Batch:
    """One `map` call in flight: the items still to hand out, which worker has which item (and until when), and the
    results so far."""

    function: str
    items: Sequence[tuple]
    deadlines_s: Sequence[float]
    on_timeout: Any
    on_error: Any
    results: list[Any] = dataclasses.field(init=False)
    queue: deque[int] = dataclasses.field(init=False)
    busy: dict[_Worker, tuple[int, float]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.items)
        self.queue = deque(range(len(self.items)))


class DeadlinePool:
    """`workers` subprocesses that run `module:function` tasks, each under its own deadline."""

    def __init__(self, workers: int | None = None, preload: Sequence[str] = ()):
        """`preload`: modules every worker imports before its first task, or "module:function" entries it also
        calls once then (what they open, a long-lived helper process's socket say, is the worker's own, not a
        task's leak)."""
        self.size = workers or len(os.sched_getaffinity(0))
        self.preload = tuple(preload)
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._failed_starts = 0
        # Workers ask the kernel to kill them when their parent *thread* dies, so they are started from this one
        # long-lived thread rather than from whichever short-lived thread happened to call.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gspo-pool-spawner")

    def map(
        self,
        function: str,
        items: Sequence[tuple],
        *,
        deadline_s: float | Sequence[float],
        on_timeout: Any = None,
        on_error: Any = None,
    ) -> list[Any]:
        """Call `function(*item)` for every item; each call gets `deadline_s` seconds from when a worker takes it
        (one figure for all, or one per item: a short item's stall is cut at its own deadline, not the batch's
        longest).

        An item whose worker overruns or dies gets `on_timeout`; one whose call raises gets `on_error`. Raises
        `PoolUnavailable` only when no worker can be started at all.
        """
        deadlines = [float(deadline_s)] * len(items) if isinstance(deadline_s, (int, float)) else list(deadline_s)
        if len(deadlines) != len(items):
            raise ValueError(f"{len(deadlines)} deadlines for {len(items)} items")
        batch = _Batch(function, items, deadlines, on_timeout, on_error)
        if not items:
            return batch.results
        with self._lock:
            self._top_up()
            startup_deadline = time.monotonic() + _STARTUP_TIMEOUT_S
            while batch.queue or batch.busy:
                self._hand_out(batch)
                now = time.monotonic()
                # Give up only when nothing has been working or ready for a whole start-up timeout.
                if batch.busy or any(worker.ready for worker in self._workers):
                    startup_deadline = now + _STARTUP_TIMEOUT_S
                elif now > startup_deadline:
                    raise PoolUnavailable(f"no reward worker became ready within {_STARTUP_TIMEOUT_S:.0f}s")
                next_deadline = min((deadline for _, deadline in batch.busy.values()), default=startup_deadline)
                self._take_messages(batch, timeout_s=max(0.0, next_deadline - now))
                self._replace_overdue(batch)
        return batch.results

    def close(self) -> None:
        """End every worker. Each is asked to exit first (the end of its command pipe), so that its exit handlers
        close what it started (the code reward's zygotes, and the folders they made under /tmp); one still running
        after `_EXIT_GRACE_S` is killed. The pool starts new ones if used again."""
        with self._lock:
            workers, self._workers = self._workers, []
            for worker in workers:
                worker.to_worker.close()
            deadline = time.monotonic() + _EXIT_GRACE_S
            for worker in workers:
                worker.end(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------------------------------------------------

    def _hand_out(self, batch: _Batch) -> None:
        """Give each ready, idle worker the next item of the batch."""
        for worker in list(self._workers):
            if batch.queue and worker.ready and worker not in batch.busy:
                index = batch.queue.popleft()
                try:
                    worker.to_worker.send((index, batch.function, batch.items[index]))
                except OSError:  # it died while idle: the item was never its fault
                    batch.queue.appendleft(index)
                    self._replace(worker, batch, "died while idle")
                    continue
                batch.busy[worker] = (index, time.monotonic() + batch.deadlines_s[index])

    def _take_messages(self, batch: _Batch, timeout_s: float) -> None:
        """Wait up to `timeout_s` for workers to report: ready, a result, an error, or (by hanging up) their death."""
        by_connection = {worker.from_worker: worker for worker in self._workers}
        for conn in wait(list(by_connection), timeout=timeout_s):
            worker = by_connection[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):
                if not worker.ready:
                    self._failed_starts += 1
                    if self._failed_starts > 3 * self.size:
                        raise PoolUnavailable("reward workers keep dying during start-up") from None
                self._replace(worker, batch, "died")
                continue
            if message[0] == "ready":
                worker.ready = True
                self._failed_starts = 0
            else:
                kind, index, value, retiring = message
                batch.results[index] = value if kind == "ok" else batch.on_error
                if kind != "ok":
                    logger.warning("reward worker task %s failed: %s", batch.function, value)
                batch.busy.pop(worker, None)
                if retiring:  # it leaked descriptors: a fresh one takes its place before it is given more
                    logger.info("reward worker %d leaked descriptors; replaced", worker.process.pid)
                    self._replace(worker, batch, "leaked descriptors")

    def _replace_overdue(self, batch: _Batch) -> None:
        now = time.monotonic()
        for worker, (_, deadline) in list(batch.busy.items()):
            if now >= deadline:
                self._replace(worker, batch, "overran its deadline")

    def _replace(self, worker: _Worker, batch: _Batch, why: str) -> None:
        """Kill `worker` and start another; the item it was working on, if any, gets the batch's `on_timeout`."""
        if worker in batch.busy:
            index, _ = batch.busy.pop(worker)
            batch.results[index] = batch.on_timeout
            logger.warning("reward worker %d %s on item %d; killed and replaced", worker.process.pid, why, index)
        worker.kill()
        self._workers.remove(worker)
        self._top_up()

    def _top_up(self) -> None:
        while len(self._workers) < self.size:
            self._workers.append(self._spawner.submit(self._start_worker).result())

    def _start_worker(self) -> _Worker:
        process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, _PACKAGE_DIR, str(os.getpid()), *self.preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(os.environ, GSPO_REWARD_WORKER="1"),
            # Its own session: Ctrl-C in the terminal interrupts the trainer, not a worker mid-item (the pool
            # kills workers itself, and they die with this process through PR_SET_PDEATHSIG).
            start_new_session=True,
        )
        to_worker = Connection(os.dup(process.stdin.fileno()), readable=False)
        from_worker = Connection(os.dup(process.stdout.fileno()), writable=False)
        process.stdin.close()
        process.stdout.close()
        return _Worker(process, to_worker, from_worker)


_pools: dict[str, DeadlinePool] = {}
_pools_lock = threading.Lock()


def get_pool(name: str, preload: Sequence[str] = (), workers: int | None = None) -> DeadlinePool:
    """The process-wide pool called `name`, created on first use (workers default to the number of usable CPUs,
    or `GSPO_REWARD_WORKERS`)."""
    with _pools_lock:
        if name not in _pools:
            workers = workers or int(os.environ.get("GSPO_REWARD_WORKERS", 0)) or None
            _pools[name] = DeadlinePool(workers=workers, preload=preload)
        return _pools[name]


def close_pool(name: str) -> None:
    """Kill the workers of the pool called `name` and forget it: the next `get_pool(name)` starts one anew, reading
    `GSPO_REWARD_WORKERS` and the environment its workers inherit again."""
    with _pools_lock:
        pool = _pools.pop(name, None)
    if pool is not None:
        pool.close()


@atexit.register
def _close_pools() -> None:
    for pool in list(_pools.values()):
        pool.close()


def _forget_pools_after_fork() -> None:
    # A forked child inherits the pools but not their workers (they are its siblings): it starts its own.
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_after_fork)


# ----------------------------------------------------------------------------------------------------------------
# Worker side


def _worker_main(parent_pid: int, preload: Sequence[str]) -> None:
    _die_with_parent(parent_pid)
    import resource

    memory = WORKER_MEMORY_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))  # a runaway sympy result fails here, not the host
    commands = Connection(os.dup(0), writable=False)
    replies = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # stray prints from libraries must not corrupt the reply pipe
    for entry in preload:  # "module", imported; or "module:function", imported and called once, before any task
        module, _, function = entry.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
    functions: dict[str, Callable] = {}
    descriptors = _open_descriptors()
    replies.send(("ready",))
    while True:
        try:
            index, name, args = commands.recv()
        except (EOFError, OSError):
            return
        try:
            if name not in functions:
                module, _, attribute = name.partition(":")
                functions[name] = getattr(importlib.import_module(module), attribute)
                descriptors = _open_descriptors()  # what importing opened is kept on purpose
            reply = ("ok", index, functions[name](*args))
        except Exception as error:  # the item's problem; report and keep serving
            reply = ("error", index, f"{type(error).__name__}: {error}")
        # A task leaves the worker with the descriptors it found, or the worker retires: one that leaked would run
        # out of them and fail every later item. The reply says so, and the pool replaces it.
        retiring = _open_descriptors() > descriptors
        replies.send((*reply, retiring))
        if retiring:
            return


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        return 0


def _die_with_parent(parent_pid: int) -> None:
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(0)
