"""The judge in a sandbox of its own: the dataset's tests run confined, apart from the host and from the program.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", judge/confined.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..sandbox import launch as sandbox
from ..sandbox import shared_folder, warm, worker
from ..sandbox.inside import confine, zygote
from ..sandbox.isolation import (
    SANDBOX_UID_BASE,
    SANDBOX_UIDS,
    _python_mounts,
    is_root,
    sandbox_env,
    system_root_plan,
    tmp_rebinds,
    uid_slot,
    with_kept_copies,
)
from . import judge
from .broker import Broker, BrokerClient
from .records import JudgeJob, Verdict

JUDGE_UID_BASE = SANDBOX_UID_BASE - SANDBOX_UIDS  # 58976-59999: the probe's (`confinement_works`) alone
JUDGE_WORKDIR = shared_folder.SHARED_IN_SANDBOX  # the program's too: the folder both share, at one path
JUDGE_TMPFS_MB = 64
JUDGE_PROCESSES = 64
_PACKAGE_DIR = str(Path(__file__).resolve().parents[3])  # gspo_recipes: the judge imports its own modules lazily
_NAMESPACES = (
    confine.CLONE_NEWNS | confine.CLONE_NEWPID | confine.CLONE_NEWNET | confine.CLONE_NEWIPC | confine.CLONE_NEWUTS
)


def row_deadline_s(wall_s: float) -> float:
    """How long one attempt's judge may run in all: its row's wall budget, with room for start-up and teardown."""
    return wall_s * 1.5 + 3.0


def start_warm_workers(warm_up_jobs: Sequence[JudgeJob] = ()) -> None:
    """Run once in each judging pool process before its first attempt: the judge's zygote (a fork of this process,
    clean: it has judged nothing yet) and the program's (`warm.py`), so that both are the process's own from the
    start. `warm_up_jobs` (planned by the caller, `plan.start_judge_workers`) are judged here first, once."""
    try:
        backend = sandbox.resolve_backend()
        if warm.zygote_for(backend) is not None:
            _warm_up(backend, warm_up_jobs)
    except sandbox.SandboxUnavailable:
        pass  # every attempt reports it
    _judge_zygote()


def _warm_up(backend: str, jobs: Sequence[JudgeJob]) -> None:
    # Judged before the judge's zygote is forked from this process: the judge's code paths (the parser, the codec,
    # the collection) then have their lazy set-up done, which every attempt would otherwise pay again in copied pages.
    for job in jobs:
        with contextlib.suppress(Exception):  # a warm-up that fails costs only speed
            _judge_unconfined(dataclasses.replace(job, backend=backend), quiet=True)


def judge_isolated(job: JudgeJob) -> Verdict | str | None:
    """The pool's entry point: `judge.judge_tests(job)` in a confined process (see the module docstring). Returns
    its verdict, or `OVERRAN` when it ran past `row_deadline_s`."""
    if not confinement_works():
        # Unconfined only when a weak backend was asked for by name; else no verdict (the reward refused earlier).
        return _judge_unconfined(job) if job.backend in sandbox.WEAK_BACKENDS else None
    deadline = time.monotonic() + row_deadline_s(job.limits.wall_s)
    with contextlib.ExitStack() as stack:  # its callbacks run last to first: the folder goes once both halves have
        # One uid for the attempt's judge and every program it starts (as root; else the user's own), so that what
        # either makes in their folder the other can read, change and remove, as one process could. Each is the first
        # process of a PID namespace of its own: neither can see, signal or trace the other.
        uid = stack.enter_context(uid_slot())
        shared = shared_folder.make_folder(uid)
        stack.callback(shared_folder.remove_tree, shared)
        broker_end, judge_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stack.callback(broker_end.close)
        with judge_end:
            result_read, result_write = os.pipe()
            stack.callback(os.close, result_read)
            try:
                stack.callback(_start_judge(job, uid, shared, judge_end.fileno(), result_write))
            finally:
                os.close(result_write)
        return Broker(job, broker_end, result_read, uid, shared).serve(deadline)


def _start_judge(job: JudgeJob, uid: int, shared: str, sock_fd: int, result_write: int):
    """Start the attempt's confined judge, in the attempt's `shared` folder: forked from the judge's zygote, else
    from this process. Returns what ends it (and everything it started)."""
    zygote = _judge_zygote()
    if zygote is not None:
        try:
            fds = (sock_fd, result_write)
            process, job_write = zygote.start_with_job(uid, JUDGE_TMPFS_MB, JUDGE_PROCESSES, fds, shared)
        except warm.ZygoteFailed:
            pass  # this attempt's judge starts cold; the next one gets a new zygote
        else:
            with contextlib.suppress(BrokenPipeError):  # it died before reading: no verdict, the attempt's 0
                worker.write_all(job_write, json.dumps(job.to_wire()).encode())
            os.close(job_write)
            return process.end
    root = tempfile.mkdtemp(prefix="gspo-judge-root-")  # stays empty on the host: the judge mounts a tmpfs on it
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _child(job, root, uid, shared, sock_fd, result_write, parent)  # never returns
    with contextlib.suppress(OSError):
        os.setpgid(child, child)  # also done in the child: whichever runs first

    def end() -> None:
        try:
            _reap(child)
        finally:
            os.rmdir(root)

    return end


def _reap(child: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(child, 0)


# ----------------------------------------------------------------------------------------------------------------
# The confined process


def _child(job: JudgeJob, root: str, uid: int, shared: str, sock_fd: int, result_write: int, parent: int) -> None:
    """In the forked child: close everything inherited but the two channels, enter new namespaces, and let the
    first process of the new PID namespace build the root and judge. Never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        if not confine.die_with_parent() or os.getppid() != parent:  # the pool process died before that took effect
            return
        confine.keep_only(sock_fd, result_write)
        _own_user_namespace()
        confine.unshare(_NAMESPACES)
        inner = os.fork()  # the first process of the new PID namespace: it can mount a /proc of its own
        if inner == 0:
            _judge_confined(job, root, uid, shared, sock_fd, result_write)
        os.close(sock_fd)
        os.close(result_write)
        status = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
    finally:
        os._exit(status & 0xFF)


def _judge_confined(job: JudgeJob, root: str, uid: int, shared: str, sock_fd: int, result_write: int) -> None:
    try:
        _build_root(root, uid, shared)
        _drop_to(uid)
        _no_imports_from_the_shared_folder()
    except BaseException as error:  # noqa: BLE001 (no verdict: the broker turns an empty reply into the row's 0)
        _exit_failed(error)
    _judge_and_reply(job, sock_fd, result_write)


def _judge_payload(fds: tuple[int, int, int]) -> None:
    """What each attempt of the judge's zygote runs, confined: read the job, judge, reply. Never returns."""
    job_fd, sock_fd, result_write = fds
    try:
        with open(job_fd, "rb") as job_file:
            job = JudgeJob.from_wire(json.loads(job_file.read()))
    except BaseException as error:  # noqa: BLE001
        _exit_failed(error)
    _judge_and_reply(job, sock_fd, result_write)


def _judge_and_reply(job: JudgeJob, sock_fd: int, result_write: int) -> None:
    try:
        start_worker = BrokerClient(socket.socket(fileno=sock_fd))
        data = json.dumps(judge.judge_tests(job, start_worker), default=str).encode()
    except BaseException as error:  # noqa: BLE001
        _exit_failed(error)
    worker.write_all(result_write, data)
    os._exit(0)


def _exit_failed(error: BaseException) -> None:
    with contextlib.suppress(BaseException):
        os.write(2, f"gspo confined judge failed: {type(error).__name__}: {error}\n".encode())
    os._exit(1)


def _judge_root_plan() -> list[list[str]]:
    return with_kept_copies(system_root_plan() + [["ro", path, path] for path in read_only_roots()])


def _own_user_namespace() -> None:
    """Without root, the namespaces that follow are made inside a user namespace of this user's (see
    `confine.enter_user_namespace`); as root, in the host's."""
    if not is_root():
        confine.enter_user_namespace()


def _build_root(root: str, uid: int, shared: str | None = None) -> None:
    """The private filesystem (see the module docstring), then chroot into it. `shared`: the host folder bound as
    its working directory (the probe has none: a private one)."""
    confine.build_root(root, _judge_root_plan(), JUDGE_TMPFS_MB)
    top = Path(root)
    confine.mount("proc", str(top / "proc"), "proc", confine.MS_NOSUID | confine.MS_NODEV | confine.MS_NOEXEC)
    os.chmod(top / "tmp", 0o1777)  # on the root's own tmpfs: the judge's writes stay inside its size cap
    (top / JUDGE_WORKDIR.lstrip("/")).mkdir(mode=0o700)
    if shared is not None:
        confine.bind_shared(shared, str(top / JUDGE_WORKDIR.lstrip("/")))
    elif is_root():  # without root the attempt's uid is the user's own, which owns it already
        os.chown(top / JUDGE_WORKDIR.lstrip("/"), uid, uid)
    os.chroot(root)
    os.chdir(JUDGE_WORKDIR)


def read_only_roots() -> list[str]:
    """What the judge may read of the host: the interpreter's directories and every directory on `sys.path` (what
    the tests can import), outermost first, none inside another."""
    roots = set(_python_mounts())
    roots |= {os.path.realpath(entry) for entry in sys.path if os.path.isabs(entry) and os.path.isdir(entry)}
    roots.add(_PACKAGE_DIR)
    roots = sorted(root for root in roots if root not in ("/", "/tmp") and not root.startswith(("/usr/", "/etc/")))
    return [root for root in roots if not any(root.startswith(other + "/") for other in roots)]


def _drop_to(uid: int) -> None:
    if is_root():
        confine.drop_to(uid, JUDGE_PROCESSES)
    else:
        confine.drop_capabilities(JUDGE_PROCESSES)  # the user's uid: see `confine.drop_capabilities`
    _judge_environment()


def _no_imports_from_the_shared_folder() -> None:
    """The program writes to the folder it shares with the judge: nothing the judge could import lies there or
    anywhere else a program could write. Run in the confined judge's own filesystem, where an interpreter under /tmp
    is a read-only mount."""
    sys.path[:] = [entry for entry in sys.path if import_path_is_safe(entry)]


def import_path_is_safe(entry: str) -> bool:
    """Whether the import path `entry` lies where no program can write: an absolute path outside /tmp (the shared
    folder, and the judge's own private files, are under it), or a read-only mount there (an interpreter or venv
    under /tmp). `''` (the working directory: the shared folder) never is."""
    if not os.path.isabs(entry):
        return False
    real = os.path.realpath(entry)
    if real != "/tmp" and not real.startswith("/tmp/"):
        return True
    try:
        return bool(os.statvfs(real).f_flag & os.ST_RDONLY)
    except OSError:
        return False  # not there yet: it could be made


def _judge_environment() -> None:
    os.environ.clear()
    os.environ.update(sandbox_env(JUDGE_WORKDIR), USER="judge", LOGNAME="judge")  # getpass: the uid has no name
    tempfile.tempdir = None  # TMPDIR is the shared folder: the pool process's choice, cached in its tempfile, is not


# ----------------------------------------------------------------------------------------------------------------
# The judge's zygote


def _judge_zygote() -> warm.Zygote | None:
    """This process's judge zygote (`zygote.py`), or None where the judge cannot be confined, warm workers are off,
    or it failed to start (then each attempt forks its judge from this process)."""
    if os.environ.get("GSPO_SANDBOX_WARM", "1") == "0" or not confinement_works():
        return None
    return _JUDGE_ZYGOTE.get()


def _fork_judge_zygote() -> warm.Zygote:
    root = tempfile.mkdtemp(prefix="gspo-judge-root-")  # stays empty on the host
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    plan = _judge_root_plan() + [["rw", shared_folder.shared_parent(), shared_folder.PARENT_IN_ZYGOTE]]
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            confine.keep_only(theirs.fileno())  # the pool's pipes to the trainer among what it closes
            _judge_environment()
            config = {"root": root, "plan": plan, "tmpfs_mb": 8, "name": "gspo-zygote-jdg",
                      "user_namespace": not is_root()}  # fmt: skip
            own_pid_namespace = zygote.become_zygote(config)
            _no_imports_from_the_shared_folder()  # once, for every attempt it forks
            theirs.send(b'["ready"]')
            zygote.serve(theirs, _judge_payload, own_pid_namespace)
        except BaseException as error:  # noqa: BLE001
            with contextlib.suppress(BaseException):
                theirs.send(json.dumps(["failed", getattr(error, "errno", 0) or 0, str(error)[:200]]).encode())
        os._exit(1)
    theirs.close()
    started = warm.Zygote(pid, ours, root, JUDGE_WORKDIR, "gspo-judge", tmp_rebinds(plan))
    try:
        ours.settimeout(60.0)
        started.expect_ready()
    except BaseException:
        started.close()
        raise
    return started


_JUDGE_ZYGOTE = warm.ZygoteSlot(
    _fork_judge_zygote,
    "the judge's zygote could not start ({why}): each attempt forks its judge from the pool process, slower",
)


# ----------------------------------------------------------------------------------------------------------------
# Whether it works here, and the fallback


_works: bool | None = None
_warned = False


def confinement_works() -> bool:
    """Whether this machine lets the judge be confined (mount and PID namespaces: as root, or inside a user namespace
    of the user's): tried once per process, by confining a judge with nothing to judge."""
    global _works
    if _works is None:
        _works = _try_confinement()
    return _works


def _try_confinement() -> bool:
    root = tempfile.mkdtemp(prefix="gspo-judge-probe-")
    try:
        child = os.fork()
        if child == 0:
            status = 1
            try:
                confine.keep_only()
                _own_user_namespace()
                confine.unshare(confine.CLONE_NEWNS | confine.CLONE_NEWPID | confine.CLONE_NEWNET)
                inner = os.fork()
                if inner == 0:
                    try:
                        _build_root(root, JUDGE_UID_BASE)
                        _drop_to(JUDGE_UID_BASE)
                        if os.getcwd() != JUDGE_WORKDIR or os.path.exists(root):
                            os._exit(1)
                        os._exit(0 if _can_import_pytest() else UNREADABLE)
                    finally:
                        os._exit(1)
                status = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
            finally:
                os._exit(status & 0xFF)
        status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        if status == UNREADABLE:
            global unreadable_roots
            unreadable_roots = [path for path in read_only_roots() if os.stat(path).st_mode & 0o005 != 0o005]
        return status == 0
    except OSError:
        return False
    finally:
        os.rmdir(root)


UNREADABLE = 3  # the probe's status when the confined judge, as its own uid, cannot import pytest
unreadable_roots: list[str] | None = None  # then: the interpreter's directories other users cannot read


def _can_import_pytest() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("pytest") is not None
    except (ImportError, OSError, ValueError):
        return False


def _judge_unconfined(job: JudgeJob, quiet: bool = False):
    """The fallback: the judge here, in a fresh private working directory for this attempt only."""
    global _warned
    if not _warned and not quiet:
        _warned = True
        warnings.warn(
            "the code judge is not confined (a weak sandbox backend was asked for): the dataset's tests run "
            "in the reward worker, with the host filesystem visible, in a fresh private working directory per "
            "attempt",
            RuntimeWarning,
            stacklevel=2,
        )
    workdir = tempfile.mkdtemp(prefix="gspo-judge-")
    previous = os.getcwd()
    try:
        os.chdir(workdir)
        return judge.judge_tests(job)
    finally:
        os.chdir(previous)
        shutil.rmtree(workdir, ignore_errors=True)
