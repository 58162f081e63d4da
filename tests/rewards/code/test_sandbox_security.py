"""Attacks on the code sandbox. Each must end with the right reward, the caller unharmed, nothing outside the sandbox
changed, no process left behind, and the wall time bounded.

Every attack runs under bubblewrap (the packaged binary: never skipped) and under the fallbacks, except
where a fallback is documented not to protect (network for `plain`; world-writable host paths for both).
"""

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support import sandbox_backend_params

from gspo_recipes.rewards import code_execution, pool
from gspo_recipes.rewards.code import reward
from gspo_recipes.rewards.code.sandbox import launch as sandbox

TIMEOUT_S = 0.5  # per test; a run's wall deadline is start-up allowance (1 s) + TIMEOUT_S * (tests + 1)
SLACK_S = 1.5  # past a run's deadline, what killing and reaping may take on a loaded machine
ADD = "def add(a, b):\n    return a + b\n"
PROTECTS = {"bwrap": {"network", "pids", "host_files"}, "unshare": {"network", "pids"}, "plain": set()}


def _backend_param(name):
    return sandbox_backend_params([name])[0]


@pytest.fixture(scope="module", autouse=True)
def launch_log(tmp_path_factory):
    """Every sandbox run starts a new session whose id is the launched pid; the sandbox writes those pids here, from
    this process and from the judge processes (restarted so that they see the setting)."""
    path = tmp_path_factory.mktemp("launches") / "sessions.txt"
    path.write_text("")
    os.environ["GSPO_SANDBOX_LAUNCH_LOG"] = str(path)
    pool.get_pool(reward._JUDGE_POOL).close()
    # Started before the timed attacks: their bounds are about the attack, not the judge processes' start-up.
    code_execution([ADD] * 2, tests=[["assert add(1, 2) == 3"]] * 2)
    yield path
    del os.environ["GSPO_SANDBOX_LAUNCH_LOG"]
    pool.get_pool(reward._JUDGE_POOL).close()


@pytest.fixture(params=[_backend_param(name) for name in sandbox.BACKENDS])
def backend(request, launch_log):
    # Look for leftovers by session: other test runs on the same machine may be sandboxing at the same time.
    launch_log.write_text("")
    yield request.param
    sessions = {int(line) for line in launch_log.read_text().split()}
    deadline = time.monotonic() + 2  # a killed namespace takes a moment to be torn down
    while _left_behind(sessions) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left_behind(sessions) == [], "sandboxed processes or zombies left behind"


def _left_behind(sessions):
    """Live processes of our runs, and zombies nobody reaped among our children. (Orphans that died are the host
    init's to reap: bwrap's own init can end up there.)"""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, parent, session = stat_fields[0], int(stat_fields[1]), int(stat_fields[3])
        if (session in sessions and state != "Z") or (state == "Z" and parent in _our_processes()):
            found.append((entry.name, state))
    return found


def _our_processes():
    """This process and the judge processes: the ones that must reap what they started."""
    judges = pool._pools.get(reward._JUDGE_POOL)
    return {os.getpid(), *(worker.process.pid for worker in (judges._workers if judges else []))}


def score(backend, program, tests, timeout_s=TIMEOUT_S, **kwargs):
    start = time.monotonic()
    [result] = code_execution([program], tests=[tests], backend=backend, timeout_s=timeout_s, **kwargs)
    elapsed = time.monotonic() - start
    runs = 1 if isinstance(tests, str) else len(tests)
    assert elapsed < 1.0 + timeout_s * (runs + 1) + SLACK_S, f"took {elapsed:.1f}s"
    return result


def score_io(backend, program, cases, timeout_s=TIMEOUT_S):
    start = time.monotonic()
    [result] = code_execution([program], io_tests=[cases], backend=backend, timeout_s=timeout_s)
    assert time.monotonic() - start < 1.0 + timeout_s + SLACK_S
    return result


def program(source):
    return textwrap.dedent(source).strip() + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Resource exhaustion


def test_fork_bomb(backend):
    bomb = program(
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """
    )
    assert score(backend, bomb + ADD, ["assert add(1, 2) == 3"]) == 0.0


def test_memory_bomb_hits_the_memory_limit(backend):
    bomb = program(
        """
        def allocated():
            try:
                block = bytearray(4 << 30)
                return True
            except MemoryError:
                return False
        hoard = []
        def hoarded():
            try:
                while True:
                    hoard.append(bytearray(64 << 20))
            except MemoryError:
                return False
        """
    )
    assert score(backend, bomb, ["assert allocated()", "assert hoarded() is None"]) == 0.0


def test_infinite_loop(backend):
    assert score(backend, "def add(a, b):\n    while True:\n        pass\n", ["assert add(1, 2) == 3"]) == 0.0


def test_infinite_loop_that_ignores_the_per_test_alarm_is_killed_at_the_deadline(backend):
    loop = program(
        """
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            pass
        """
    )
    assert score(backend, loop, ["assert True"]) == 0.0


def test_sleeping_forever_with_alarms_blocked(backend):
    sleeper = program(
        """
        import signal, time
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(10 ** 6)
        """
    )
    assert score(backend, sleeper, ["assert True"]) == 0.0


def test_a_thread_spinning_after_the_code_returns_does_not_hold_the_result(backend):
    spinner = program(
        """
        import threading
        def spin():
            while True:
                pass
        threading.Thread(target=spin).start()
        """
    )
    start = time.monotonic()
    assert score(backend, spinner + ADD, ["assert add(1, 2) == 3", "assert add(1, 1) == 3"]) == 0.5
    assert time.monotonic() - start < 1.8  # not held until the 2.5 s deadline


def test_100_mb_of_output(backend):
    noisy = "import sys\nsys.stdout.write('x' * (100 << 20))\nsys.stderr.write('y' * (100 << 20))\n"
    # Output does not decide tests (and writing 200 MB takes a while on a busy machine: a longer budget).
    assert score(backend, noisy + ADD, ["assert add(1, 2) == 3"], timeout_s=3.0) == 1.0
    start = time.monotonic()
    assert score_io(backend, noisy, [{"input": "", "output": "x"}], timeout_s=3.0) == 0.0
    assert time.monotonic() - start < 3.0  # cut off at the output cap, not held until the 4 s deadline


# ----------------------------------------------------------------------------------------------------------------
# Escaping


@pytest.fixture
def host_files(tmp_path):
    """A file the test process owns, one to be deleted, and a world-writable directory with a world-writable file."""
    owned = tmp_path / "owned.txt"
    owned.write_text("original")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    open_dir = Path(tempfile.mkdtemp(prefix="gspo-open-"))
    open_dir.chmod(0o777)
    open_file = open_dir / "open.txt"
    open_file.write_text("original")
    open_file.chmod(0o666)
    yield owned, victim, open_dir, open_file
    for path in open_dir.iterdir():
        path.unlink()
    open_dir.rmdir()


def test_writing_or_deleting_files_outside_the_working_directory(backend, host_files):
    owned, victim, open_dir, open_file = host_files
    if "host_files" not in PROTECTS[backend] and os.geteuid() != 0:
        pytest.skip("without bwrap or root, the sandbox runs as the caller's own user")
    planted = [owned.parent / "planted.txt", Path(sys.prefix) / "planted.txt"]
    targets = [owned, *planted]
    if "host_files" in PROTECTS[backend]:  # the fallbacks run as another uid, but see the host's world-writable paths
        targets += [open_file, open_dir / "planted.txt"]
    attack = program(
        f"""
        import os
        def attack():
            wins = 0
            for path in {[str(p) for p in targets]!r}:
                try:
                    with open(path, "w") as f:
                        f.write("pwned")
                    wins += 1
                except OSError:
                    pass
            for path in [{str(victim)!r}, "/etc/hostname"]:
                try:
                    os.remove(path)
                    wins += 1
                except OSError:
                    pass
            return wins
        """
    )
    assert score(backend, attack, ["assert attack() > 0"]) == 0.0
    assert owned.read_text() == "original" and victim.read_text() == "keep me"
    assert not any(path.exists() for path in planted)
    if "host_files" in PROTECTS[backend]:
        assert open_file.read_text() == "original" and sorted(p.name for p in open_dir.iterdir()) == ["open.txt"]


def test_reading_environment_secrets(backend, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_TOPSECRET_1234")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_TOPSECRET_5678")
    # Every backend starts the program with an environment of its own, none of ours. Where it has no PID namespace
    # and runs as the caller's own user (`plain` without root: the WEAK SANDBOX the run is told about), the host's
    # /proc shows the caller's processes, and reading what they hold is what that backend is documented to allow
    # (a reward worker started after the setenv above carries the secrets): there the environment alone is checked.
    processes = "[]" if "pids" not in PROTECTS[backend] and os.geteuid() != 0 else 'os.listdir("/proc")'
    snoop = program(
        f"""
        import os
        def leaked():
            seen = " ".join(os.environ.values())
            for pid in {processes}:
                for name in ("environ", "cmdline"):
                    try:
                        with open(f"/proc/{{pid}}/{{name}}", "rb") as f:
                            seen += f.read().decode(errors="replace")
                    except OSError:
                        pass
            return "TOPSECRET" in seen
        """
    )
    assert score(backend, snoop, ["assert leaked()"]) == 0.0


def test_opening_a_socket_to_localhost(backend):
    if "network" not in PROTECTS[backend]:
        pytest.skip(f"{backend} shares the host network")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(10)
    connections = []

    def accept():
        try:
            connections.append(server.accept())
        except OSError:  # closed at the end of the test, or timed out: no connection came
            pass

    threading.Thread(target=accept, daemon=True).start()
    client = program(
        f"""
        import socket
        def connected():
            with socket.create_connection(("127.0.0.1", {server.getsockname()[1]}), timeout=0.5) as s:
                s.sendall(b"exfiltrated")
            return True
        """
    )
    try:
        assert score(backend, client, ["assert connected()"]) == 0.0
        assert connections == []
    finally:
        server.close()


def test_killing_the_parent_process(backend):
    if "pids" not in PROTECTS[backend] and os.geteuid() != 0:
        pytest.skip("without a PID namespace or root, the sandbox may signal the caller's processes")
    # The reward is called from a child Python, so that a successful attack shows as that child dying.
    killer = program(
        """
        import os, signal
        for pid in [os.getppid(), 1] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            if os.getpgid(os.getppid()) != os.getpgid(0):
                os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        def add(a, b):
            return a + b
        """
    )
    caller = textwrap.dedent(
        f"""
        from gspo_recipes.rewards import code_execution
        print(code_execution([{killer!r}], tests=[["assert add(1, 2) == 3", "assert add(2, 2) == 5"]],
                             backend={backend!r}, timeout_s={TIMEOUT_S}))
        """
    )
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", caller], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    # The harness survived too: one of two tests passes. Under the opt-in `unshare` backend without root (found running
    # the suites as a user, issue 35) the attack takes its own worker down with it: 0.0, the caller unharmed.
    survivors = ("[0.5]", "[0.0]") if backend == "unshare" and os.geteuid() != 0 else ("[0.5]",)
    assert done.stdout.strip() in survivors


# ----------------------------------------------------------------------------------------------------------------
# Faking a pass


def test_exiting_zero_before_the_tests_run(backend):
    assert score(backend, ADD.replace("a + b", "a - b") + "import os\nos._exit(0)\n", ["assert True"]) == 0.0
    assert score(backend, ADD + "import sys\nsys.exit(0)\n", ["assert add(1, 2) == 3"]) == 0.0
    in_test = "import os\ndef add(a, b):\n    os._exit(0)\n"
    assert score(backend, in_test, ["assert add(1, 2) == 3"]) == 0.0


def test_exiting_zero_from_an_atexit_hook(backend):
    wrong = ADD.replace("a + b", "a - b")
    for hook in ("atexit.register(os._exit, 0)", "atexit.register(sys.exit, 0)"):
        cheat = f"import atexit, os, sys\n{hook}\n{wrong}"
        assert score(backend, cheat, ["assert add(1, 2) == 3"]) == 0.0


def test_redefining_check_or_the_test_helpers(backend):
    humaneval = "def check(candidate):\n    assert abs(candidate(1, 2) - 3) < 1e-9\n\ncheck(add)\n"
    wrong = ADD.replace("a + b", "a - b")
    cheats = [
        wrong + "def check(candidate):\n    return True\n",
        wrong + "import builtins\nbuiltins.abs = lambda x: 0\n",
        # Turn every exit status into "one more test passed".
        wrong + "import os, sys\n_exit = os._exit\nos._exit = lambda code: _exit(code + 1)\nsys.exit = os._exit\n",
    ]
    for cheat in cheats:
        assert score(backend, cheat, humaneval, entry_point=["add"]) == 0.0
    assert score(backend, ADD, humaneval, entry_point=["add"]) == 1.0


def test_reading_the_tests_to_print_the_expected_output(backend):
    expected = "EXPECTED-7f3a9c"
    snoop = program(
        """
        import os, sys
        found = []
        def look(path):
            try:
                with open(path, errors="replace") as f:
                    text = f.read(1 << 20)
            except (OSError, ValueError):
                return
            found.extend(line for line in text.splitlines() if "EXPECTED-" in line)
        for fd in os.listdir("/proc/self/fd"):
            if int(fd) > 2:  # reopening our own stdout pipe for reading would just block
                look(f"/proc/self/fd/{fd}")
        for top in {".", os.path.expanduser("~"), "/tmp", "/dev/shm"}:
            for root, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if os.path.join(root, d) != sys.prefix]  # the interpreter's own files
                for name in files:
                    look(os.path.join(root, name))
        for pid in os.listdir("/proc"):
            look(f"/proc/{pid}/cmdline")
        print(found[0] if found else "nothing found")
        """
    )
    assert score_io(backend, snoop, [{"input": "", "output": expected}]) == 0.0
    # With assert tests the program can even find the tests in memory: printing them changes nothing.
    gc_snoop = "import gc\nprint([o for o in gc.get_objects() if isinstance(o, dict) and 'tests' in o])\n"
    assert score(backend, gc_snoop + ADD.replace("a + b", "a - b"), ["assert add(1, 2) == 3"]) == 0.0


def test_model_code_never_runs_as_root(backend):
    if os.geteuid() != 0:
        pytest.skip("only meaningful when the caller is root")
    probe = "import os\ndef uid():\n    return os.getuid(), os.geteuid()\n"
    assert score(backend, probe, ["assert 0 not in uid()"]) == 1.0
