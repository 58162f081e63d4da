"""Zygotes: processes that never run untrusted code and fork one pristine, confined process per attempt.

Two kinds, one mechanism. The program zygote is the harness interpreter (this file is prepended to the harness
source with `confine.py`, so it uses only the standard library), started as root by the process that judges
(`warm.py`), with the harness compiled and the modules it needs imported. The judge zygote is a fork of that
judging process made before its first attempt, with the judge's imports loaded (`judge_sandbox.py`).

Once, at start (`become_zygote`): its own mount and network namespaces (no interface but a loopback that stays
down), a read-only root built from a plan (`confine.build_root`), chroot into it. Then, for each attempt asked for
(`serve`), a fork `A` that enters new mount, PID, IPC and UTS namespaces and forks `B`, the first process of its PID
namespace, which mounts its own /proc, /tmp and /dev/shm (fresh tmpfs each), makes its working directory, becomes
the attempt's uid with no capabilities, and runs the payload (the harness on its job, or the judge). `A` waits for
`B`: once `A` has exited, so has every process of the attempt (the kernel empties a PID namespace before its first
process is reaped), so nothing an attempt started outlives it into the next. A zygote only ever receives a uid,
sizes, a path and three descriptors; the job, its limits and everything after go straight to `B`.

Protocol, on a SOCK_SEQPACKET socket: each attempt `{"uid", "tmpfs_mb", "processes", "workdir"}` with three fds
(the payload's) -> `["started", pid_a, pid_b]` with two pidfds (A's, B's), or `["failed", errno, why]`. The program
zygote first gets `{"root", "plan", "sys_path", "tmpfs_mb"}` and answers `["ready"]` or `["failed", errno, why]`.
"""

if __name__ == "__main__":  # inside the harness source: confine.py's functions are this script's own globals
    import sys as _sys

    confine = _sys.modules["__main__"]
else:  # imported: the judge's zygote (judge_sandbox.py)
    from . import confine


def become_zygote(config):
    """Once, at start: own mount and network namespaces, the read-only root `config["root"]` built from
    `config["plan"]`, chroot into it. Raises OSError where the kernel refuses."""
    import os

    if not confine.die_with_parent():
        os._exit(1)
    confine.unshare(confine.CLONE_NEWNS | confine.CLONE_NEWNET)
    confine.build_root(config["root"], config["plan"], config["tmpfs_mb"])
    flags = confine.MS_REMOUNT | confine.MS_RDONLY | confine.MS_NOSUID | confine.MS_NODEV
    confine.mount(None, config["root"], None, flags)
    os.chroot(config["root"])
    os.chdir("/")


def serve(sock, payload):
    """The zygote's loop: one attempt per request (see the module docstring), until the socket closes. `payload(fds)`
    runs in B, confined, with the request's three descriptors; it never returns."""
    import json
    import os
    import socket

    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4096, 3)
        except OSError:
            os._exit(0)
        if not message:  # the judging process has gone: so do we (and, by their death signals, every attempt)
            os._exit(0)
        _reap_finished()
        try:
            reply, pidfds = _start_attempt(json.loads(message), fds, sock, payload)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], pidfds)
        finally:
            for fd in pidfds:
                os.close(fd)


def _zygote(sock_fd):
    """The program zygote's entry point in the harness (`python -I -S -B -c SOURCE zygote FD`)."""
    import json
    import os
    import socket
    import sys

    sock = socket.socket(fileno=sock_fd)
    config = json.loads(sock.recv(1 << 20))
    sys.path.extend(config["sys_path"])
    try:
        become_zygote(config)
        import resource  # noqa: F401 (imported once here, not in every attempt)
        import signal  # noqa: F401
    except OSError as error:
        sock.send(json.dumps(["failed", error.errno or 0, str(error)[:200]]).encode())
        os._exit(1)
    sock.send(b'["ready"]')
    run_harness = globals()["_run_harness"]  # harness.py's, which follows this file in the source
    serve(sock, lambda fds: run_harness(fds[0], (fds[1], fds[2])))


def _reap_finished():
    import os

    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _start_attempt(request, fds, sock, payload):
    """Fork A (see the module docstring); (reply, [pidfd of A, pidfd of B])."""
    import json
    import os
    import socket

    if len(fds) != 3:
        return ["failed", 0, "an attempt needs three descriptors"], []
    control, child_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with control:
        try:
            a = os.fork()
        except OSError as error:
            child_control.close()
            return ["failed", error.errno or 0, str(error)[:200]], []
        if a == 0:
            sock.close()
            _attempt_outer(request, fds, child_control, payload)  # never returns
        child_control.close()
        pidfd_a = os.pidfd_open(a)  # A is ours and not reaped until we do: the pid cannot have been reused
        control.settimeout(30.0)
        try:
            answer = json.loads(control.recv(4096) or b'["failed", 0, "the attempt died while starting"]')
        except (OSError, ValueError) as error:
            answer = ["failed", 0, f"the attempt did not start: {error}"]
        if answer[0] != "b":
            os.close(pidfd_a)
            return answer, []
        try:
            pidfd_b = os.pidfd_open(answer[1])  # A reaps B only after our go-ahead below
        except OSError as error:
            os.close(pidfd_a)
            return ["failed", error.errno or 0, f"pidfd of the attempt: {error}"], []
        control.send(b"go")
    return ["started", a, answer[1]], [pidfd_a, pidfd_b]


def _attempt_outer(request, fds, control, payload):
    """A: new namespaces, then B; report B's pid, wait for the go-ahead, and exit with B's status once B (and so
    its whole PID namespace) is gone. Never returns."""
    import json
    import os

    status = 1
    try:
        os.setsid()  # A and B in a group of their own: the watchdog's kill reaches both
        if not confine.die_with_parent():
            os._exit(1)
        confine.keep_only(*fds, control.fileno())
        try:
            confine.unshare(confine.CLONE_NEWNS | confine.CLONE_NEWPID | confine.CLONE_NEWIPC | confine.CLONE_NEWUTS)
            b = os.fork()
        except OSError as error:
            control.send(json.dumps(["failed", error.errno or 0, str(error)[:200]]).encode())
            os._exit(1)
        if b == 0:
            control.close()
            _attempt_inner(request, fds, payload)  # never returns
        for fd in fds:
            os.close(fd)
        control.send(json.dumps(["b", b]).encode())
        control.recv(16)  # the zygote holds B's pidfd now (or is gone: then so are we, by the death signal)
        control.close()
        status = os.waitstatus_to_exitcode(os.waitpid(b, 0)[1])
    finally:
        os._exit(status & 0xFF)


def _attempt_inner(request, fds, payload):
    """B: the attempt's own /proc, /tmp and /dev/shm, its working directory and uid, then the payload. Never
    returns."""
    import os
    import socket

    try:
        if not confine.die_with_parent():
            os._exit(1)
        confine.mount("proc", "/proc", "proc", confine.MS_NOSUID | confine.MS_NODEV | confine.MS_NOEXEC)
        confine.mount_tmpfs("/tmp", request["tmpfs_mb"])
        confine.mount_tmpfs("/dev/shm", request["tmpfs_mb"])
        socket.sethostname("sandbox")
        uid, workdir = request["uid"], request["workdir"]
        os.mkdir(workdir, 0o700)
        os.chown(workdir, uid, uid)
        os.chdir(workdir)
        confine.drop_to(uid, request["processes"])
    except BaseException:  # noqa: BLE001 (no confinement, no attempt: the judge sees a worker that never got ready)
        os._exit(1)
    payload(fds)
    os._exit(0)
