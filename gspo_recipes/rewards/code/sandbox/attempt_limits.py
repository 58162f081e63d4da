"""Limits per attempt as a whole, not per process.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/attempt_limits.py.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from pathlib import Path

from .isolation import is_root

logger = logging.getLogger(__name__)

POLL_S = 0.02
ORPHAN_SCAN_EVERY = 10  # polls between two looks for a `plain` attempt's orphans (about 200 ms)
CPU_GRACE_S = 0.5  # start-up bursts (bwrap, the interpreter) and the granularity of the kernel's CPU accounting
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


class AttemptMeter:
    """The fallback: sums the memory and CPU of the processes under `root_pid` and says when the attempt is over
    its limits."""

    def __init__(self, root_pid: int, memory_mb: int, cpu_s: float, orphan_uid: int | None = None):
        self.root_pid, self.memory_bytes, self.cpu_s = root_pid, memory_mb << 20, cpu_s
        self.orphan_uid, self.orphans, self.polls = orphan_uid, [], 0
        self.started = time.monotonic()

    def processes(self) -> list[int]:
        """The root and all its descendants, and (with `orphan_uid`) the attempt's orphans with theirs: those are
        looked for every `ORPHAN_SCAN_EVERY` polls, a scan of all of /proc being the costly part."""
        if self.orphan_uid is not None and self.polls % ORPHAN_SCAN_EVERY == 0:
            self.orphans = orphans_of(self.orphan_uid)
        self.polls += 1
        found, frontier = [], [self.root_pid, *self.orphans]
        while frontier:
            pid = frontier.pop()
            found.append(pid)
            frontier += children(pid)
        return found

    def usage(self, proportional: bool = False) -> tuple[int, float]:
        """(bytes of memory, CPU seconds) summed over the attempt's live processes; CPU includes the children they
        have reaped. Memory is each process's resident size, or with `proportional` its proportional share (PSS): a
        page shared by n processes counts 1/n in each, so pages a forked child shares with its parent (or the
        attempt with its zygote) count once, as the kernel holds them, not once per process."""
        memory, ticks = 0, 0
        for pid in self.processes():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
                memory += proportional_bytes(pid) if proportional else resident_bytes(pid)
        return memory, ticks / _TICK

    def over(self) -> str | None:
        """Why the attempt must be killed now, or None."""
        memory, cpu = self.usage()
        # PSS never exceeds the resident size, and reading it walks every page table (milliseconds for a large
        # process, against microseconds for the resident size): it is read only when the resident sizes are over.
        if memory > self.memory_bytes:
            memory = self.usage(proportional=True)[0]
        if memory > self.memory_bytes:
            return f"its processes hold {memory >> 20} MB together (limit {self.memory_bytes >> 20} MB)"
        if cpu > self.cpu_s:
            return f"its processes used {cpu:.1f} s of CPU together (limit {self.cpu_s:.1f} s)"
        elapsed = time.monotonic() - self.started
        if cpu > elapsed + CPU_GRACE_S:
            return f"its processes used {cpu:.1f} s of CPU in {elapsed:.1f} s: more than one core"
        return None


def proportional_bytes(pid: int) -> int:
    """The process's proportional set size (`Pss` of /proc/PID/smaps_rollup, Linux 4.14+); its resident size where
    that file is missing, which over-counts shared pages but never under-counts."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) << 10
    except FileNotFoundError:
        pass
    return resident_bytes(pid)


def resident_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


def children(pid: int) -> list[int]:
    """The process's children, read from /proc (every thread's: threads can fork too)."""
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                found += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


class AttemptGuard:
    """One attempt's limits, by the strongest means here: a cgroup when `cgroup_parent()` gives one, else the
    meter. Create it after the launch and before the job is sent; `over()` says why to kill; always `close()`."""

    def __init__(self, root_pid: int, memory_mb: int, cpu_s: float, processes: int, orphan_uid: int | None = None):
        self.orphan_uid = orphan_uid
        self.cgroup = self.meter = None
        parent = cgroup_parent()
        if parent is not None:
            try:
                self.cgroup = AttemptCgroup(parent, memory_mb, processes)
                if not self.cgroup.add_tree(root_pid):
                    raise OSError("the launched process could not be moved into its cgroup")
            except OSError as error:  # a cgroup that cannot hold the attempt: the meter does, and the log says why
                logger.warning("per-attempt cgroup under %s unusable (%s); using the /proc meter", parent, error)
                if self.cgroup is not None:
                    self.cgroup.close()
                self.cgroup = None
        if self.cgroup is None:
            self.meter = AttemptMeter(root_pid, memory_mb, cpu_s, orphan_uid)

    @classmethod
    def for_launch(cls, pid: int, limits, orphans: int | None = None) -> AttemptGuard:
        """The guard for a process just launched under `limits` (a `sandbox.Limits`); `orphans`: see `orphan_uid`."""
        return cls(pid, limits.memory_mb, limits.cpu_budget_s, limits.processes, orphans)

    def over(self) -> str | None:
        return self.cgroup.over() if self.cgroup is not None else self.meter.over()

    def kill_all(self) -> None:
        """SIGKILL to every process of the attempt, new sessions and process groups included (a kill by process
        group misses those). Whoever launched the root still reaps it."""
        if self.cgroup is not None:
            self.cgroup.kill()
            return
        self.meter.polls = 0  # the last look, so that orphans made since the last scan are found too
        for pid in self.meter.processes():
            if pid == self.meter.root_pid:  # its owner kills and reaps it (its group id stays reserved till then)
                continue
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.close()


def orphan_uid(backend: str, uid: int) -> int | None:
    """Without a PID namespace (`plain`), a process that leaves its parent leaves the attempt's process tree; as root
    the attempt's own uid still names it, and its orphans are killed with the attempt."""
    return uid if backend == "plain" and is_root() else None


def orphans_of(uid: int) -> list[int]:
    """Processes of `uid` whose parent has died (re-parented to pid 1): what a `plain` attempt left running by
    leaving its parent. The uid is the attempt's for as long as it runs; a live attempt of another process that
    happens to share it keeps its processes, whose parents live."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                status = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines())
                if int(status["PPid"]) == 1 and int(status["Uid"].split()[0]) == uid:
                    found.append(int(entry))
    return found


class Watchdog:
    """Checks an `AttemptGuard` every `POLL_S` on a thread of its own and calls `kill(reason)` once when the attempt
    goes over (for the long-lived workers, whose reader is the judge). `stop()` before ending the process."""

    def __init__(self, meter: AttemptMeter, kill):
        self.meter, self.kill, self.reason = meter, kill, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gspo-attempt-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            reason = self.meter.over()
            if reason is not None:
                self.reason = reason
                self.kill(reason)
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


# ----------------------------------------------------------------------------------------------------------------
# cgroup v2


_counter = itertools.count()


def cgroup_parent() -> Path | None:
    """The delegated cgroup v2 directory named by `GSPO_SANDBOX_CGROUP`, when it can hold attempts; else None."""
    name = os.environ.get("GSPO_SANDBOX_CGROUP")
    if not name:
        return None
    parent = Path(name)
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return None
    return parent if {"memory", "pids", "cpu"} <= enabled and os.access(parent, os.W_OK) else None


class AttemptCgroup:
    """One attempt's cgroup under `parent`: the kernel enforces memory, process count and one core of CPU."""

    def __init__(self, parent: Path, memory_mb: int, processes: int):
        self.path = parent / f"gspo-attempt-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            for key, value in (("memory.max", memory_mb << 20), ("pids.max", processes), ("cpu.max", "100000 100000")):
                (self.path / key).write_text(f"{value}\n")
            with contextlib.suppress(FileNotFoundError):  # absent where the kernel accounts no swap
                (self.path / "memory.swap.max").write_text("0\n")
        except BaseException:
            self.close()
            raise

    def add_tree(self, root_pid: int) -> bool:
        """Move the launched process and everything it has started into the cgroup; whether the launched process is
        now inside. Called before the job is sent (no model code runs before that); each process is moved before
        its children are read, so a child forked in between is born inside."""
        frontier = [root_pid]
        while frontier:
            pid = frontier.pop()
            with contextlib.suppress(ProcessLookupError):  # one that exited meanwhile
                (self.path / "cgroup.procs").write_text(f"{pid}\n")
            frontier += children(pid)
        return str(root_pid) in (self.path / "cgroup.procs").read_text().split()

    def over(self) -> str | None:
        with contextlib.suppress(OSError, ValueError):
            events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            if int(events.get("oom_kill", 0)):
                return "the attempt's cgroup ran out of memory"
        return None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1\n")  # Linux 5.14+

    def close(self) -> None:
        """Kill whatever is left in the cgroup and remove it."""
        self.kill()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # still populated: the kill takes a moment
                time.sleep(0.01)
