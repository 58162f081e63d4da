"""The judge's own isolation and the attempt's bounds (issue 26, items 1, 4-7): each attack scores what it deserves (0,
or the canary untouched) and the honest control beside it 1.0.

  1. the dataset's tests run in a sandbox of the judge's own: no host path to remove, not root, a private working
     directory that is fresh for every attempt;
  5. limits hold per attempt as a whole: memory summed over its processes, one core of CPU;
  6. each row ends on its own deadline, not the batch's longest;
  7. the judge's descriptors are closed on every path, a pool process that leaks is replaced, and the judge's own
     failures score 0, never None.
(4, the page cache, is in test_sandbox_persistence.py.)
"""

import collections
import dataclasses
import errno
import os
import signal
import subprocess
import time

import pytest
from support import sandbox_backend_params

from gspo_recipes.rewards import code_execution, pool
from gspo_recipes.rewards.code import reward
from gspo_recipes.rewards.code.judge import confined, judge
from gspo_recipes.rewards.code.sandbox import attempt_limits, isolation, worker
from gspo_recipes.rewards.code.sandbox import launch as sandbox

ADD = "def add(a, b):\n    return a + b\n"
# The judge is confined for every user (as root, or in a user namespace of the user's): never skipped.
needs_confinement = lambda test: test  # noqa: E731


def _backends(slow_beyond_bwrap: bool = False):
    """Every backend, skipped where it does not work; the fallbacks in the slow tier when `slow_beyond_bwrap`."""
    return [pytest.param(*param.values, marks=[*param.marks] + ([pytest.mark.slow] if slow_beyond_bwrap and
            param.values[0] != "bwrap" else [])) for param in sandbox_backend_params(sandbox.BACKENDS)]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# 1. The judge's sandbox


@needs_confinement
def test_a_test_that_removes_the_returned_path_leaves_the_host_alone(tmp_path, monkeypatch):
    """The row's test removes whatever the program names: a host file by absolute path, and one in the trainer's
    working directory by a relative one. Both canaries survive, and the attack scores 0."""
    canary = tmp_path / "canary.txt"
    canary.write_text("keep me")
    monkeypatch.chdir(tmp_path)
    test = "import os\nos.remove(where())\nassert not os.path.exists(where())\n"
    attacks = [f"def where():\n    return {str(canary)!r}\n", "def where():\n    return 'canary.txt'\n"]
    assert code_execution(attacks, tests=[[test]] * 2) == [0.0, 0.0]
    assert canary.read_text() == "keep me"
    # The control: the same kind of test on a file the test itself made, in its own working directory.
    honest = "import os\nopen(where(), 'w').close()\nos.remove(where())\nassert not os.path.exists(where())\n"
    assert code_execution(["def where():\n    return 'scratch.txt'\n"], tests=[[honest]]) == [1.0]
    assert sorted(os.listdir(tmp_path)) == ["canary.txt"]


@needs_confinement
def test_a_host_path_the_program_returns_is_not_there_for_the_tests(tmp_path):
    existing = tmp_path / "report.csv"
    existing.write_text("a,b\n")
    test = "import os\nassert os.path.isfile(write_report())\n"
    assert code_execution([f"def write_report():\n    return {str(existing)!r}\n"], tests=[[test]]) == [0.0]


@needs_confinement
def test_the_judge_is_not_root_and_starts_in_an_empty_directory_of_its_own():
    test = "import os\nassert os.getuid() != 0 and os.geteuid() != 0\nassert os.listdir('.') == []\n"
    test += "assert add(1, 2) == 3\n"
    assert code_execution([ADD, ADD.replace("+", "-")], tests=[[test]] * 2) == [1.0, 0.0]


def test_completions_of_a_row_with_a_fixed_fixture_path_do_not_share_it():
    """Eight honest completions of a row whose test makes `fixture/` (and fails if it is there already): each attempt
    has its own working directory, fresh, so every one scores 1.0, in this batch and the next."""
    test = "import os\nos.mkdir('fixture')\nopen('fixture/data.txt', 'x').close()\nassert add(1, 2) == 3\n"
    for _ in range(2):
        assert code_execution([ADD] * 8, tests=[[test]] * 8) == [1.0] * 8


@pytest.mark.slow
@needs_confinement
def test_a_judge_stalled_in_c_ends_on_its_rows_deadline_and_leaves_no_fixture_behind():
    """A program whose answer sends the row's test into C-level work (no alarm interrupts it) beside a 40-assert
    row: the stalled judge is killed at its own row's deadline, not the long row's, and scores 0; the fixture it
    made is gone with its sandbox, so the row's honest completions after it score 1.0."""
    test = "import os\nos.mkdir('fixture')\nassert sum(range(add(0, 0))) == 0\nassert add(1, 2) == 3\n"
    stall = "def add(a, b):\n    return a + b if (a, b) != (0, 0) else 10 ** 15\n"
    long_row = [f"assert add({i}, 1) == {i + 1}" for i in range(40)]
    start = time.monotonic()
    scores = code_execution([stall, ADD], tests=[[test], long_row], timeout_s=0.2)
    elapsed = time.monotonic() - start
    assert scores == [0.0, 1.0]
    long_deadline = confined.row_deadline_s((1.0 + 0.2) * 42)
    assert elapsed < long_deadline / 2, (
        f"the stalled row ran {elapsed:.1f}s (the long row's deadline: {long_deadline}s)"
    )
    assert code_execution([ADD] * 2, tests=[[test]] * 2) == [1.0, 1.0]


# ----------------------------------------------------------------------------------------------------------------
# 5. Limits per attempt as a whole

SLOW_ADD = "import time\ndef add(a, b):\n    time.sleep(1.5)\n    return a + b\n"


@pytest.mark.parametrize("backend", _backends())
def test_memory_is_summed_over_the_attempts_processes(backend):
    """Four processes of 90 MB each stay under a 200 MB per-process limit but hold 360 MB together: killed, 0. One
    process of 120 MB (under the budget) scores 1.0."""
    touch = "b = bytearray({mb} << 20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"
    hoard = "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n" + (
        "        " + touch.format(mb=90).replace("\n", "\n        ") + "time.sleep(30)\n"
    ) + touch.format(mb=90)  # fmt: skip
    single = touch.format(mb=120)
    scores = code_execution([hoard + SLOW_ADD, single + SLOW_ADD], tests=[["assert add(1, 2) == 3"]] * 2,
                            backend=backend, memory_mb=200, timeout_s=3.0)  # fmt: skip
    assert scores == [0.0, 1.0]


@pytest.mark.parametrize("backend", _backends(slow_beyond_bwrap=True))
def test_busy_processes_in_their_own_sessions_are_one_attempt_on_one_core(backend):
    """31 busy processes, each in a session of its own, are one attempt using every core: killed as soon as it has
    run more than half a second ahead of one core (a fraction of a second on an idle machine, more where other work
    shares the cores), so its correct answer, due three seconds later, scores 0 (with limits per process only it
    scored 1.0 while the completion beside it starved); the CPU-bound honest completion beside it scores 1.0."""
    hogs = "import os\nfor _ in range(31):\n    if os.fork() == 0:\n        os.setsid()\n"
    hogs += "        while True:\n            pass\n"
    slow_add = "import time\ndef add(a, b):\n    time.sleep(3.0)\n    return a + b\n"
    busy_add = "def add(a, b):\n    total = 0\n    for i in range(2_000_000):\n        total += i\n    return a + b\n"
    scores = code_execution([hogs + slow_add, busy_add], tests=[["assert add(1, 2) == 3"]] * 2, backend=backend,
                            timeout_s=5.0)  # fmt: skip
    assert scores == [0.0, 1.0]


@pytest.mark.parametrize("backend", _backends(slow_beyond_bwrap=True))
def test_processes_that_leave_their_parent_are_still_the_attempts(backend):
    """An io program whose child starts 31 busy daemons in new sessions and exits, so that they belong to no live
    process of the attempt: still killed with it (plain: found by the attempt's uid), 0; the CPU-bound honest
    program beside it prints its answer in time, 1.0."""
    daemons = "import os, time\nif os.fork() == 0:\n    for _ in range(31):\n        if os.fork() == 0:\n"
    daemons += "            os.setsid()\n            while True:\n                pass\n    os._exit(0)\n"
    daemons += "time.sleep(3)\nprint(3)\n"
    busy = "total = 0\nfor i in range(2_000_000):\n    total += i\nprint(3)\n"
    scores = code_execution([daemons, busy], io_tests=[[{"input": "", "output": "3"}]] * 2, backend=backend,
                            timeout_s=5.0)  # fmt: skip
    assert scores == [0.0, 1.0]


@pytest.mark.parametrize("backend", _backends(slow_beyond_bwrap=True))
def test_an_attempt_killed_with_its_processes_leaves_the_next_one_its_process_limit(backend, one_judging_process):
    """31 busy processes killed with their attempt are reaped by the system's init when it gets to them (seconds
    later on this machine): the honest completion judged next, by the same pool process, still starts its 16
    children and scores 1.0 (when a uid given back was the next one handed out, its fork failed: 0)."""
    hogs = "import os, time\nfor _ in range(31):\n    if os.fork() == 0:\n        while True:\n            pass\n"
    forks = "import os\ndef add(a, b):\n    children = []\n    for _ in range(16):\n        child = os.fork()\n"
    forks += "        if child == 0:\n            os._exit(0)\n        children.append(child)\n"
    forks += "    for child in children:\n        os.waitpid(child, 0)\n    return a + b\n"
    killed = code_execution([hogs + SLOW_ADD], tests=[["assert add(1, 2) == 3"]], backend=backend, timeout_s=5.0)
    honest = code_execution([forks], tests=[["assert add(1, 2) == 3"]], backend=backend, timeout_s=5.0)
    assert (killed, honest) == ([0.0], [1.0])


def test_a_uid_given_back_is_the_last_one_handed_out_again(monkeypatch):
    """As root: 1,024 attempts one after another each get a uid of their own, then the first one's comes back."""
    monkeypatch.setattr(isolation, "_HOST_ROOT", True)
    monkeypatch.setattr(isolation, "_free_slots", collections.deque())
    monkeypatch.setattr(isolation, "_next_slot", 0)
    handed = []
    for _ in range(isolation.SANDBOX_UIDS + 1):
        with isolation.uid_slot() as uid:
            handed.append(uid)
    base, count = isolation.SANDBOX_UID_BASE, isolation.SANDBOX_UIDS
    assert len(set(handed[:-1])) == count and handed[-1] == handed[0]
    assert all(base <= uid < base + count for uid in handed)


def test_the_meter_sums_what_it_sees():
    """The fallback's arithmetic on this very process: its own memory and CPU, and the verdicts at the edges."""
    meter = attempt_limits.AttemptMeter(os.getpid(), memory_mb=1 << 20, cpu_s=1e9)
    memory, cpu = meter.usage()
    assert memory > 1 << 20 and cpu > 0
    assert attempt_limits.AttemptMeter(os.getpid(), memory_mb=1, cpu_s=1e9).over().startswith("its processes hold")
    meter.started = time.monotonic() + 1e6  # as if it had used its CPU in no time at all
    assert "more than one core" in meter.over()


@pytest.mark.skipif(attempt_limits.cgroup_parent() is None, reason="no delegated cgroup v2 (set GSPO_SANDBOX_CGROUP "
                    "to one with memory, pids and cpu enabled); the meter enforces the limits here")  # fmt: skip
def test_with_a_cgroup_the_kernel_holds_the_attempt():
    """A launched process lands in an attempt cgroup of its own with the attempt's limits, dies with it, and the
    cgroup is removed. (The attacks above then run against the kernel's limits instead of the meter's.)"""
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    guard = attempt_limits.AttemptGuard(process.pid, memory_mb=64, cpu_s=10, processes=8)
    try:
        assert guard.cgroup is not None, "the cgroup was refused (see the log)"
        assert str(process.pid) in (guard.cgroup.path / "cgroup.procs").read_text().split()
        assert (guard.cgroup.path / "memory.max").read_text().strip() == str(64 << 20)
        assert (guard.cgroup.path / "cpu.max").read_text().split() == ["100000", "100000"]
        guard.kill_all()
        assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        process.kill()
        process.wait()
        guard.close()
    assert not guard.cgroup.path.exists()


# ----------------------------------------------------------------------------------------------------------------
# 6. A deadline per row


def test_each_item_of_a_pool_batch_ends_on_its_own_deadline():
    deadline_pool = pool.DeadlinePool(workers=2)
    try:
        start = time.monotonic()
        results = deadline_pool.map("time:sleep", [(60,), (0.1,)], deadline_s=[1.0, 60.0], on_timeout="overran")
        assert results == ["overran", None]
        assert time.monotonic() - start < 20
    finally:
        deadline_pool.close()


# ----------------------------------------------------------------------------------------------------------------
# 7. Descriptors, and 0 rather than None


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


class _Alarm(BaseException):
    pass


def test_an_alarm_during_close_leaks_no_descriptor_and_still_arrives(monkeypatch):
    """A slow-dying worker: the judge's per-test alarm fires while `close()` waits for it. Every pipe and the
    selector are closed anyway, and the alarm is raised once `close` returns. (A sandbox per attempt; the warm
    path's twin is in test_warm_workers.py.)"""
    monkeypatch.setenv("GSPO_SANDBOX_WARM", "0")
    backend = sandbox.resolve_backend()
    before = _open_fds()
    slow_exit = worker._exits_within
    monkeypatch.setattr(worker, "_exits_within", lambda pid, timeout_s: time.sleep(0.2) or slow_exit(pid, timeout_s))

    def on_alarm(signum, frame):
        raise _Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        channel = worker.SandboxWorker(worker.WorkerSpec(backend, ADD, 1.0, sandbox.Limits(wall_s=10)))
        assert channel.receive(10.0) == ["ready"]
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(_Alarm):
            channel.close()
            time.sleep(1)  # the alarm, held during close, is delivered here at the latest
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _open_fds() == before


def test_a_pool_process_that_leaks_descriptors_is_replaced():
    deadline_pool = pool.DeadlinePool(workers=1)
    try:
        first, second = deadline_pool.map("os:getpid", [(), ()], deadline_s=30)
        assert first == second  # a clean task keeps its process
        leaked = deadline_pool.map("os:open", [(os.devnull, os.O_RDONLY)], deadline_s=30)
        assert isinstance(leaked[0], int)  # the leaking item still gets its own result
        [after] = deadline_pool.map("os:getpid", [()], deadline_s=30)
        assert after != first
    finally:
        deadline_pool.close()


def test_a_judge_out_of_descriptors_scores_zero_not_none(monkeypatch):
    """Starting the program's worker fails with EMFILE (the judge's own shortage): the completion scores 0 with the
    reason in the report, never the None that means "no sandbox on this machine". (A sandbox per attempt; the
    warm path's twin is in test_warm_workers.py.)"""
    monkeypatch.setenv("GSPO_SANDBOX_WARM", "0")

    def exhausted(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(sandbox, "_spawn", exhausted)
    job = reward._plan(0, ADD, ["assert add(1, 2) == 3"], None, None, None, None, None, [], 1.0,
                       sandbox.Limits(), "code_execution")[0].payload  # fmt: skip
    verdict = judge.judge_tests(dataclasses.replace(job, backend=sandbox.resolve_backend()))
    assert verdict is not None and verdict[0] == 0
    assert "EMFILE" in verdict[2].get("judge_error", "") or "Too many open files" in verdict[2].get("judge_error", "")


def test_the_unconfined_fallback_still_gives_each_attempt_a_fresh_directory(monkeypatch):
    """Where the judge cannot be confined it runs in place, in a private directory made for the attempt and removed
    after it; the caller's working directory is left as it was."""
    monkeypatch.setattr(confined, "_warned", True)
    test = "import os\nassert os.listdir('.') == []\nopen('left.txt', 'w').close()\nassert add(1, 2) == 3\n"
    job = reward._plan(0, ADD, [test], None, None, None, None, None, [], 1.0, sandbox.Limits(),
                       "code_execution")[0].payload  # fmt: skip
    before = os.getcwd()
    for _ in range(2):
        verdict = confined._judge_unconfined(dataclasses.replace(job, backend=sandbox.resolve_backend()))
        assert verdict[:2] == (1, 1)
    assert os.getcwd() == before and not os.path.exists(os.path.join(before, "left.txt"))
