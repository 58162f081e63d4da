"""Zygotes: processes that never run untrusted code and fork one pristine, confined process per attempt.

The rest of this module's notes: docs/code-sandbox.md, "Module notes", sandbox/inside/zygote.py.
"""

if __name__ == "__main__":  # inside the harness source: confine.py's functions are this script's own globals
    import sys as _sys

    confine = _sys.modules["__main__"]
else:  # imported: the judge's zygote (judge/confined.py)
    from . import confine


# What each attempt of this zygote gets beyond its PID, mount, IPC and UTS namespaces, set once by `become_zygote`:
# the program's attempts a network namespace of their own (with its loopback up) and an init that reaps their orphans.
_PER_ATTEMPT = {"network": False, "reaper": False}


def become_zygote(config):
    """Once, at start: own mount and network namespaces, the read-only root `config["root"]` built from
    `config["plan"]`, chroot into it. Returns a descriptor of the zygote's PID namespace (for `serve`); raises
    OSError where the kernel refuses. `config["loopback"]`: every attempt also gets a network namespace of its own,
    and an init that reaps what its program orphans."""
    import os

    if not confine.die_with_parent():
        os._exit(1)
    confine.set_name(config["name"])
    if config.get("user_namespace"):
        _own_user_and_pid_namespaces()
    own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY)  # see `_start_attempt`; no /proc after chroot
    confine.unshare(confine.CLONE_NEWNS | confine.CLONE_NEWNET)
    if config.get("loopback"):
        confine.loopback_up()
        _PER_ATTEMPT.update(network=True, reaper=True)
    confine.build_root(config["root"], config["plan"], config["tmpfs_mb"])
    flags = confine.MS_REMOUNT | confine.MS_RDONLY | confine.MS_NOSUID | confine.MS_NODEV
    confine.mount(None, config["root"], None, flags)
    os.chroot(config["root"])
    os.chdir("/")
    return own_pid_namespace


def _own_user_and_pid_namespaces():
    """Without root: the zygote enters a user namespace of its own (as its user's uid), and becomes the first
    process of a PID namespace that namespace owns, so that `_start_attempt` may step back into it after each attempt
    (the host's is not ours to enter). The process the host started stays as a shim: it waits, and exits with it."""
    import os

    confine.enter_user_namespace()
    confine.unshare(confine.CLONE_NEWPID)
    child = os.fork()
    if child != 0:
        confine.keep_only()  # the zygote's socket closes with the zygote alone
        status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        os._exit(status & 0xFF)
    if not confine.die_with_parent():
        os._exit(1)


def serve(sock, payload, own_pid_namespace):
    """The zygote's loop: one attempt per request (see the module docstring), until the socket closes. `payload(fds)`
    runs in B, confined, with the request's three descriptors; it never returns."""
    import gc
    import json
    import os
    import signal
    import socket

    # Everything alive now is frozen out of the collector: a collection in an attempt would otherwise touch, and so
    # copy, every page of the zygote's objects.
    gc.freeze()
    # Attempts are reaped as soon as they end (no zombie waits for the next request); `_start_attempt` holds the
    # signal back while it forks and opens the pidfd, so a pid is never reaped before it is held.
    signal.signal(signal.SIGCHLD, lambda signum, frame: _reap_finished())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4096, 3)
        except OSError:
            os._exit(0)
        if not message:  # the judging process has gone: so do we (and, by their death signals, every attempt)
            os._exit(0)
        _reap_finished()
        try:
            reply, pidfds = _start_attempt(json.loads(message), fds, sock, payload, own_pid_namespace)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], pidfds)
        finally:
            for fd in pidfds:
                os.close(fd)


def _zygote(sock_fd, run_harness):
    """The program zygote's entry point in the harness (`python -I -S -B -c SOURCE zygote FD`): `run_harness` is
    harness.py's, which follows this file in the source and so passes it in."""
    import json
    import os
    import socket
    import sys

    sock = socket.socket(fileno=sock_fd)
    config = json.loads(sock.recv(1 << 20))
    sys.path.extend(config["sys_path"])
    try:
        own_pid_namespace = become_zygote(config)
        _warm_up()
    except OSError as error:
        sock.send(json.dumps(["failed", error.errno or 0, str(error)[:200]]).encode())
        os._exit(1)
    sock.send(b'["ready"]')
    serve(sock, lambda fds: run_harness(fds[0], (fds[1], fds[2])), own_pid_namespace)


def _warm_up():
    """What every attempt of the harness would otherwise do first, done once here: imports, the syscall filter's
    program, the parser's and the codec's first use (their lazy set-up costs each attempt a millisecond or more of
    copied pages). Our own code only: the zygote never runs a program.

    The standard library's modules that completions import most are imported here too (`typing`: one HumanEval
    prompt in eight, 2 to 4 ms of an attempt's CPU to import in the sandbox): an attempt finds them in
    `sys.modules`, as a program run twice in one interpreter would; nothing of them is the program's, each attempt
    being a fresh fork. Pure Python and built-in modules only: an extension module's library would add mappings that
    every fork copies, for the few programs that import it."""
    import collections  # noqa: F401
    import functools  # noqa: F401
    import itertools  # noqa: F401
    import re  # noqa: F401
    import resource  # noqa: F401
    import signal  # noqa: F401
    import string  # noqa: F401
    import typing  # noqa: F401

    globals()["syscall_filter_program"](False)
    exec(compile("def f(x):\n    return [x for _ in range(3)]\nf(1)\n", "warm-up", "exec"), {})
    codec = globals()
    codec["loads"](codec["dumps"]([1, "ready", [2.5, None, True], {"k": "v"}]))


def _reap_finished():
    import os

    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _start_attempt(request, fds, sock, payload, own_pid_namespace):
    """Fork the attempt's process (see the module docstring): (reply, [its pidfd])."""
    import os
    import signal

    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        try:
            confine.unshare(confine.CLONE_NEWPID)  # for the next child only: the first process of a new one
            attempt = confine.fork_bare()  # one thread here: see `fork_bare`
        except OSError as error:
            confine.setns(own_pid_namespace, confine.CLONE_NEWPID)
            return ["failed", error.errno or 0, str(error)[:200]], []
        if attempt == 0:
            confine.reseed_random()
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's reaper is not the attempt's
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            _attempt(request, fds, payload)  # never returns
        confine.setns(own_pid_namespace, confine.CLONE_NEWPID)  # children in ours again, until the next attempt
        return ["started", attempt], [os.pidfd_open(attempt)]  # not reaped while SIGCHLD is held: no reused pid
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _attempt(request, fds, payload):
    """The attempt's process, the first of its PID namespace: its own mount, IPC and UTS namespaces, /proc, /tmp and
    /dev/shm, working directory and uid, then the payload. Never returns."""
    import os
    import socket

    try:
        os.setsid()  # a group of its own: the watchdog's kill reaches everything that did not leave it
        confine.set_name(request["name"])
        if not confine.die_with_parent():
            os._exit(1)
        confine.keep_only(*fds)
        # A network namespace per attempt: sockets in TIME_WAIT, bound ports and the /proc/net counters of one attempt
        # are never the next one's.
        network = confine.CLONE_NEWNET if _PER_ATTEMPT["network"] else 0
        confine.unshare(confine.CLONE_NEWNS | confine.CLONE_NEWIPC | confine.CLONE_NEWUTS | network)
        if network:
            confine.loopback_up()
        confine.mount("proc", "/proc", "proc", confine.MS_NOSUID | confine.MS_NODEV | confine.MS_NOEXEC)
        confine.mount_tmpfs("/tmp", request["tmpfs_mb"])
        confine.mount_tmpfs("/dev/shm", request["tmpfs_mb"])
        socket.sethostname("sandbox")
        for kept, target in request.get("rebind", ()):  # an interpreter under /tmp, hidden by the new /tmp
            confine.bind_read_only(kept, target)
        uid, workdir, shared = request["uid"], request["workdir"], request.get("shared")
        os.mkdir(workdir, 0o700)
        if shared:  # the folder this attempt shares with its other half (made, and owned by `uid`, on the host)
            confine.bind_shared(shared, workdir)
        if request.get("parent"):  # every attempt's folder is under it: this one keeps its own alone
            confine.cover(request["parent"])
        os.chdir(workdir)
        if _PER_ATTEMPT["reaper"]:
            _become_init(fds)  # returns in the payload's process only
        if request.get("user_namespace"):  # no uid but the user's: it owns the workdir already
            confine.drop_capabilities(request["processes"])
        else:
            if not shared:
                os.chown(workdir, uid, uid)
            confine.drop_to(uid, request["processes"])
    except BaseException:  # noqa: BLE001 (no confinement, no attempt: the judge sees a worker that never got ready)
        os._exit(1)
    payload(fds)
    os._exit(0)


def _become_init(fds):
    """Split the attempt in two: this process stays the first of the namespace and reaps every process re-parented
    to it (as `python` run from a shell has its orphans reaped by the system's init, so they never hold a process
    slot), and exits with the payload's status; the child returns and runs the payload, a process like any other
    (not one the kernel shields from signals as it does a namespace's init). Ending this process ends the
    namespace, as before."""
    import os

    child = confine.fork_bare()  # the attempt is one thread still, and `random` was reseeded already
    if child == 0:
        return
    # It stays root, as bwrap's own init does: it counts against no process limit of the attempt's uid, and a
    # process of that uid can neither signal nor trace it. It holds nothing: no descriptor, no capability it uses.
    for fd in fds:
        os.close(fd)
    confine.set_name("gspo-init")
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":  # the last file of the zygote's source (`assembly.py`): everything it takes is defined
    _zygote(int(_sys.argv[2]), globals()["_run_harness"])
