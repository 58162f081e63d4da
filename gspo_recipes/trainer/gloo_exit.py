"""A clean exit for a finished run on a gloo process group (CPU runs under `accelerate launch`).

The rule: before the interpreter starts to shut down, destroy the group and let gloo's worker threads drop the last
collective they ran. Dropping it frees tensors that have Python objects, which takes the GIL; a worker that asks for
the GIL once finalization has begun is stopped mid-destructor, and the process aborts after a good run
("terminate called without an active exception", SIGABRT), so the launcher kills the other ranks and the run fails.

Destroying the group is not enough on its own: DDP's reducer (and any module that captured `group.WORLD`) keeps the
backend, and so its worker threads, alive until the interpreter's last garbage collection (pytorch/pytorch#190489
asks torch to warn about this). So the hook also yields the GIL until no worker thread is running.

When: the hook is registered when this module is imported (with the package, before a script registers its own exit
handlers) and armed when `train` returns. atexit runs handlers last-registered first, so a script's own clean-up
(`atexit.register(dist.destroy_process_group)`, common in launch scripts) runs before it, and the hook then only
settles the threads of the group the script destroyed. Registered after `train`, it ran first and destroyed the group
under the script's handler ("AssertionError: Process group cannot be None" at exit on every rank).
"""

from __future__ import annotations

import atexit
import os
import time

# gloo's worker threads (c10d::ProcessGroupGloo::runLoop) name themselves so.
WORKER_THREAD_NAME = "pt_gloo_runloop"
SETTLE_SECONDS = 0.02  # one GIL hand-off is microseconds; a descheduled thread on a loaded machine needs a few ms
MAX_WAIT_SECONDS = 1.0

_armed = False


def end_gloo_process_group_at_exit() -> None:
    """Arm the exit hook that destroys the default gloo group and lets its worker threads settle.

    Called after `train` returns (no collective is pending then; a run that failed leaves the group to the
    interpreter, as before). At exit, after the script's own handlers, the group is destroyed unless something did so
    already (`accelerate launch` never does); the threads are settled in both cases. Other backends have no such
    threads: a no-op.
    """
    global _armed
    _armed = True


def _at_exit() -> None:
    if _armed:
        _destroy_and_settle()


def _destroy_and_settle() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and "gloo" in str(dist.get_backend()):
        dist.destroy_process_group()
    if _worker_states():  # also after a caller's own destroy: the threads outlive the group
        settle_worker_threads()


def settle_worker_threads(max_wait: float = MAX_WAIT_SECONDS) -> bool:
    """Yield the GIL until no gloo worker thread of this process is running; True once they all wait.

    A worker that is freeing a finished collective either holds the GIL or waits for it; sleeping hands it over, and a
    thread's state in /proc says whether it is still running ("R") or back to waiting for work ("S").
    """
    deadline = time.monotonic() + max_wait
    while True:
        time.sleep(SETTLE_SECONDS)
        running = "R" in _worker_states()
        if not running or time.monotonic() > deadline:
            return not running


def _worker_states() -> list[str]:
    states = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # no procfs: the sleep alone is the settling
        return states
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != WORKER_THREAD_NAME:
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:  # the thread ended between the listing and the read
            continue
    return states


atexit.register(_at_exit)  # at import: before the script's handlers are registered, so it runs after them
