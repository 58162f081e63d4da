"""Warm code workers (issue 29): attempts forked from zygotes instead of started from disk, with every guarantee of
the per-attempt path. The persistence, escape, reward-hacking and fail-closed suites run on the warm path as the
default; this file covers what is the warm path's own:

  - attempts are forked, not launched: no sandbox is started from disk, and the verdicts are the cold path's;
  - bad input stays local: a completion that crashes, hangs, forks, fills memory or the disk, or kills what it can
    reach scores 0 on its own, its honest neighbours 1.0, and the batch ends within the slowest attempt's limit;
  - a zygote that dies is replaced; descriptors are not leaked; the judge's own shortage scores 0, never None;
  - where the warm path cannot be had, attempts start one by one and the reward says so once.
"""

import dataclasses
import errno
import os
import signal
import time
import warnings

import pytest

from gspo_recipes.rewards import code_execution, pool
from gspo_recipes.rewards.code import reward
from gspo_recipes.rewards.code.judge import confined, judge
from gspo_recipes.rewards.code.sandbox import launch as sandbox
from gspo_recipes.rewards.code.sandbox import warm, worker

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-4, 4) == 0"]
# The warm path is there for every user wherever bubblewrap works (which the package ships): never skipped.
needs_warm = lambda test: test  # noqa: E731


def _launches(path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


@needs_warm
def test_attempts_are_forked_from_the_zygote_and_judged_as_the_cold_path_judges(tmp_path, monkeypatch):
    """Eight completions, right and wrong: no sandbox process is started from disk for any of them, and the scores
    are the per-attempt path's."""
    completions = [ADD, "def add(a, b):\n    return a + b if a > 0 else 1\n", "def add(a, b):\n    return 4\n",
                   "x = ("] * 2  # fmt: skip
    log = tmp_path / "launches"
    sandbox.resolve_backend()  # this process's own probe, made once: before the log (the file alone ran it after)
    monkeypatch.setenv("GSPO_SANDBOX_LAUNCH_LOG", str(log))
    pool.close_pool("code-judge")  # new pool processes see the log setting
    warm_scores = code_execution(completions, tests=[TESTS] * len(completions))
    assert warm_scores == [1.0, 0.5, 0.0, 0.0] * 2
    probes = _launches(log)
    assert probes <= pool.get_pool("code-judge").size  # each pool process's one probe of the backend, no attempt
    monkeypatch.setenv("GSPO_SANDBOX_WARM", "0")
    pool.close_pool("code-judge")
    try:
        cold_scores = code_execution(completions, tests=[TESTS] * len(completions))
        assert _launches(log) - probes >= len(completions)  # one sandbox per attempt (and the new processes' probes)
    finally:
        monkeypatch.delenv("GSPO_SANDBOX_WARM")
        pool.close_pool("code-judge")
    assert cold_scores == warm_scores


# Each one scores 0 on its own; `add` is defined first, so only the move itself can make it fail.
BAD = {
    "crash": ADD + "import ctypes\nctypes.string_at(0)\n",
    "exit": ADD + "import os\nos._exit(0)\n",
    "hang": ADD + "while True:\n    pass\n",
    "fork_bomb": ADD + "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory": ADD + "blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 24))\n",
    "disk": ADD + "with open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
    "kill_all": ADD + "import os, signal\nos.kill(-1, signal.SIGKILL)\nos.kill(os.getppid() or 1, 9)\n",
}


@needs_warm
def test_each_attempt_draws_its_own_random_numbers(one_judging_process):
    """Attempts are forked without the interpreter's after-fork work (`confine.fork_bare`): `random` is reseeded in
    each, as a fresh interpreter seeds it, so the tests of 24 attempts judged by one zygote do not all draw the same
    number (its state, shared, would give 24 equal verdicts; fresh seeds do so once in 8 million)."""
    test = "import random\nassert add(1, 2) == 3 and random.random() < 0.5\n"
    scores = code_execution([ADD] * 24, tests=[[test]] * 24)
    assert set(scores) == {0.0, 1.0}


@needs_warm
def test_bad_input_costs_only_its_own_attempt_and_the_batch_ends_on_time():
    names = sorted(BAD)
    completions = [program for name in names for program in (BAD[name], ADD)]  # each bad one beside an honest one
    start = time.monotonic()
    scores = code_execution(completions, tests=[TESTS] * len(completions), timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert dict(zip(names, scores[::2])) == dict.fromkeys(names, 0.0)
    assert scores[1::2] == [1.0] * len(names)
    # The slowest attempt's own bound (its row's deadline) plus room for a loaded machine; many times less than
    # the attempts' limits added up.
    row_limit = confined.row_deadline_s(1.0 * len(TESTS) + 1.0 + 1.0)
    assert elapsed < row_limit + 20.0, elapsed
    # And the next batch is served as usual.
    assert code_execution([ADD, "def add(a, b):\n    return 0\n"], tests=[TESTS] * 2) == [1.0, 0.5]


@needs_warm
def test_a_zygote_that_died_is_replaced():
    first = warm.zygote_for("bwrap")
    os.kill(first.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while first.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    second = warm.zygote_for("bwrap")
    assert second is not None and second is not first and second.alive
    channel = worker.SandboxWorker(worker.WorkerSpec("bwrap", ADD, 1.0, sandbox.Limits()))
    try:
        assert channel.receive(10.0) == ["ready"]
        assert channel.request(["call", ["name", "add"], [1, 2], [], 1.0], 10.0)[:2] == ["ok", 3]
    finally:
        channel.close()


def test_closing_the_pool_leaves_no_folder_behind(tmp_path, monkeypatch):
    """The zygotes make their roots in the temporary folder. A closed pool (as at the trainer's exit) leaves none of
    them there: its workers exit on their own and close their zygotes (killed, they left two folders each in /tmp
    on every run)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    pool.close_pool("code-judge")  # new pool processes see TMPDIR
    try:
        assert code_execution([ADD], tests=[TESTS]) == [1.0]
        made = {path.name.rsplit("-", 1)[0] for path in tmp_path.iterdir()}
        assert {"gspo-zygote-root", "gspo-judge-root"} <= made  # the check below would pass vacuously otherwise
    finally:
        pool.close_pool("code-judge")
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


@needs_warm
def test_where_the_warm_path_works_nothing_is_said():
    """The other side of the fallback's one warning: on a machine that has the warm path, none."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warm.zygote_for("bwrap") is not None
        assert confined._judge_zygote() is not None
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


@needs_warm
def test_a_warm_attempt_leaks_no_descriptor(monkeypatch):
    """Started, answered and ended, crashed, or ended while its end is slow: the process keeps the descriptors it
    had (the zygote's socket, opened once, among them)."""
    warm.zygote_for("bwrap")
    before = _open_fds()
    for program in (ADD, "import os\nos._exit(3)\n", "x = ("):
        channel = worker.SandboxWorker(worker.WorkerSpec("bwrap", program, 1.0, sandbox.Limits()))
        channel.receive(10.0) if program == ADD else None
        channel.close()
    slow = warm._readable
    monkeypatch.setattr(warm, "_readable", lambda fd, timeout_s: time.sleep(0.2) or slow(fd, timeout_s))
    channel = worker.SandboxWorker(worker.WorkerSpec("bwrap", ADD, 1.0, sandbox.Limits()))
    channel.close()
    assert _open_fds() == before


@needs_warm
def test_a_judge_out_of_descriptors_on_the_warm_path_scores_zero_not_none(monkeypatch):
    def exhausted(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(warm.Zygote, "start_attempt", exhausted)
    job = reward._plan(0, ADD, ["assert add(1, 2) == 3"], None, None, None, None, None, [], 1.0,
                       sandbox.Limits(), "code_execution")[0].payload  # fmt: skip
    verdict = judge.judge_tests(dataclasses.replace(job, backend="bwrap"))
    assert verdict is not None and verdict[0] == 0
    assert "Too many open files" in verdict[2].get("judge_error", "")


def test_without_the_warm_path_attempts_start_one_by_one_and_it_is_said_once(monkeypatch):
    """A kernel that refuses the zygote's namespaces: one warning, then every attempt as before, right verdicts."""
    monkeypatch.setattr(warm.PROGRAM_ZYGOTE, "zygote", None)
    monkeypatch.setattr(warm.PROGRAM_ZYGOTE, "unavailable", None)
    monkeypatch.setattr(warm.Zygote, "program", classmethod(lambda cls: (_ for _ in ()).throw(
        warm.ZygoteFailed(0, "a kernel that refuses the zygote's namespaces"))))  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warm.zygote_for("bwrap") is None
        assert warm.zygote_for("bwrap") is None
    messages = [str(w.message) for w in caught if "warm code workers are off" in str(w.message)]
    assert len(messages) == 1 and "refuses" in messages[0]
    if sandbox._works("bwrap"):
        channel = worker.SandboxWorker(worker.WorkerSpec("bwrap", ADD, 1.0, sandbox.Limits()))
        try:
            assert channel.receive(30.0) == ["ready"]
        finally:
            channel.close()


@pytest.mark.parametrize("backend", [b for b in ("unshare", "plain") if sandbox._works(b)])
def test_backends_without_the_warm_path_use_the_per_attempt_one(backend):
    assert warm.zygote_for(backend) is None
    assert code_execution([ADD, "def add(a, b):\n    return a * b\n"], tests=[TESTS] * 2, backend=backend) == [1.0, 0.0]


LOOPBACK = """import socket
def add(a, b):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    socket.create_connection(server.getsockname(), timeout=2).close()
    return a + b
"""
OUTSIDE = """import socket
def add(a, b):
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1).close()
        return 0
    except OSError:
        return a + b
"""


@needs_warm
@pytest.mark.parametrize("path", ["warm", "cold"])
def test_the_program_has_its_loopback_and_no_other_network_on_both_paths(path, request):
    """As bwrap leaves it: 127.0.0.1 works inside the sandbox, nothing outside is reachable."""
    if path == "cold":
        request.getfixturevalue("cold_code_workers")
    assert code_execution([LOOPBACK, OUTSIDE], tests=[TESTS] * 2) == [1.0, 1.0]


def test_a_batch_planned_in_chunks_keeps_every_row_in_its_place():
    """The reward starts judging the first rows while it plans the rest, in chunks: a long batch mixing judged rows,
    stdin/stdout rows, rows with no tests and unreadable programs scores each row as it scores alone."""
    wrong, echo, reverse = "def add(a, b):\n    return a * b\n", "print(input())\n", "print(input()[::-1])\n"
    case = [{"input": "abc\n", "output": "cba\n"}]
    rows = [(ADD, TESTS, None), (wrong, TESTS, None), (reverse, None, case), ("x = (", TESTS, None),
            (ADD, None, None), (echo, None, case)] * 4  # fmt: skip
    batch = code_execution([r[0] for r in rows], tests=[r[1] for r in rows], io_tests=[r[2] for r in rows])
    alone = [code_execution([r[0]], tests=[r[1]], io_tests=[r[2]])[0] for r in rows[:6]] * 4
    assert batch == alone == [1.0, 0.0, 1.0, 0.0, None, 0.0] * 4
