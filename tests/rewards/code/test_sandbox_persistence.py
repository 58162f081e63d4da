"""Nothing survives an attempt: a first attempt writes state where it can, a second attempt in a new sandbox must find
nothing (else a program could learn, attempt after attempt, which answers passed).

Each probe is scored as `add(a, b)`, correct only when the state is found: the second attempt must score what an
honest wrong answer scores (0.0). The same write and read inside one attempt shows that the probe does find its own
state where the sandbox lets it write at all.
"""

import errno
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import sandbox_backend_params

from gspo_recipes.rewards import code_execution

TESTS = ["assert add(1, 2) == 3"]
LIBC = (
    "import ctypes, errno, os, socket, time\nlibc = ctypes.CDLL(None, use_errno=True)\nKEY = {key}\nNAME = '{name}'\n"
    "PORT = {port}\n"
    "def port_taken():\n    try:\n        socket.socket().bind(('127.0.0.1', PORT))\n"
    "    except OSError as error:\n        return error.errno == errno.EADDRINUSE\n    return False\n"
    "def tcp_opens():\n    rows = [line.split() for line in open('/proc/net/snmp') if line.startswith('Tcp:')]\n"
    "    return int(rows[1][rows[0].index('ActiveOpens')])\n"
)
# name: (write, expression that is True when the state is there)
PROBES = {
    "user_keyring": (
        "libc.syscall(248, b'user', NAME.encode(), b'1', 1, -4)",  # add_key(..., KEY_SPEC_USER_KEYRING)
        "libc.syscall(250, 10, -4, b'user', NAME.encode(), 0) > 0",  # keyctl(KEYCTL_SEARCH, user keyring, ...)
    ),
    "persistent_keyring": (
        "k = libc.syscall(250, 22, -1, -4); k > 0 and libc.syscall(248, b'user', NAME.encode(), b'1', 1, k)",
        "libc.syscall(250, 22, -1, 0) > 0 and libc.syscall(250, 10, libc.syscall(250, 22, -1, 0), b'user', "
        "NAME.encode(), 0) > 0",
    ),
    "sysv_shm": ("libc.shmget(KEY, 4096, 0o1666)", "libc.shmget(KEY, 0, 0) >= 0"),
    "sysv_semaphore": ("libc.semget(KEY, 1, 0o1666)", "libc.semget(KEY, 0, 0) >= 0"),
    "sysv_message_queue": ("libc.msgget(KEY, 0o1666)", "libc.msgget(KEY, 0) >= 0"),
    "posix_message_queue": (
        "libc.mq_open(('/' + NAME).encode(), os.O_CREAT | os.O_RDWR, 0o666, None)",
        "libc.mq_open(('/' + NAME).encode(), os.O_RDWR) >= 0",
    ),
    "posix_shm_file": ("open('/dev/shm/' + NAME, 'w').close()", "os.path.exists('/dev/shm/' + NAME)"),
    "tmp_file": ("open('/tmp/' + NAME, 'w').close()", "os.path.exists('/tmp/' + NAME)"),
    "var_tmp_file": ("open('/var/tmp/' + NAME, 'w').close()", "os.path.exists('/var/tmp/' + NAME)"),
    "home_file": (
        "open(os.path.expanduser('~/') + NAME, 'w').close()",
        "os.path.exists(os.path.expanduser('~/') + NAME)",
    ),
    "abstract_socket_daemon": (
        textwrap.dedent(
            """\
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    server = socket.socket(socket.AF_UNIX)
                    server.bind('\\0' + NAME)
                    server.listen(1)
                    time.sleep(60)
                os._exit(0)
            time.sleep(0.3)"""
        ),
        "socket.socket(socket.AF_UNIX).connect_ex('\\0' + NAME) == 0",
    ),
    # The network namespace: a connection the first attempt closed leaves its port in TIME_WAIT (a server on a fixed
    # port then cannot bind it) and the namespace's counters raised (how many attempts connected before this one).
    "tcp_time_wait": (
        textwrap.dedent(
            """\
            server = socket.create_server(('127.0.0.1', PORT))
            client = socket.create_connection(('127.0.0.1', PORT))
            server.accept()[0].close()
            client.close()
            server.close()"""
        ),
        "port_taken()",
    ),
    "tcp_counters": ("socket.socket().connect_ex(('127.0.0.1', PORT))", "tcp_opens() > 0"),
    # The page cache: the first attempt reads a file, the second asks whether it is cached, without blocking.
    "page_cache_nowait": (
        "open(os.__file__, 'rb').read()",
        "os.preadv(os.open(os.__file__, os.O_RDONLY), [bytearray(4096)], 0, os.RWF_NOWAIT) == 4096",
    ),
    "page_cache_mincore": (
        "open(os.__file__, 'rb').read()",
        "(setattr(libc.mmap, 'restype', ctypes.c_void_p), libc.mincore(ctypes.c_void_p(libc.mmap(None, 4096, 1, 1, "
        "os.open(os.__file__, os.O_RDONLY), ctypes.c_long(0))), 4096, vec := ctypes.create_string_buffer(1)) == 0 "
        "and vec.raw[0] & 1)[1]",
    ),
    "page_cache_cachestat": (
        "open(os.__file__, 'rb').read()",
        "(lambda stat: libc.syscall(451, os.open(os.__file__, os.O_RDONLY), (ctypes.c_uint64 * 2)(0, 4096), stat, 0)"
        " == 0 and stat[0] > 0)((ctypes.c_uint64 * 8)())",
    ),
}
PAGE_CACHE = {"page_cache_nowait", "page_cache_mincore", "page_cache_cachestat"}
# What each backend promises: bwrap everything; unshare no files (the host filesystem is visible); plain only what
# the syscall filter refuses (it has no namespaces).
KERNEL_GLOBAL = {"user_keyring", "persistent_keyring"}
PROMISED = {
    "bwrap": set(PROBES),
    "unshare": set(PROBES) - {"posix_shm_file", "tmp_file", "var_tmp_file", "home_file"},
    "plain": KERNEL_GLOBAL | PAGE_CACHE | {"sysv_shm", "sysv_semaphore", "sysv_message_queue"},
}
# bwrap's root is read-only: /var/tmp refuses the write itself. `unshare --net` leaves the loopback down: no
# connection is made (the server the time-wait probe bound is still open, so it finds that).
REFUSED = {
    "bwrap": KERNEL_GLOBAL | PAGE_CACHE | {"var_tmp_file"},
    "unshare": KERNEL_GLOBAL | PAGE_CACHE | {"tcp_counters"},
    "plain": PROMISED["plain"],
}


def _program(name: str, token: str, write: bool, read: bool) -> str:
    write_code, found = PROBES[name]
    source = LIBC.format(key=int(token[:7], 16) + 1, name=f"gspo-probe-{token}", port=20000 + int(token, 16) % 20000)
    if write:
        source += f"try:\n{textwrap.indent(write_code, '    ')}\nexcept Exception:\n    pass\n"
    source += f"try:\n    found = bool({found if read else 'False'})\nexcept Exception:\n    found = False\n"
    return source + "def add(a, b):\n    return a + b if found else a - b\n"


def _backends():
    """Every backend, and bwrap twice: its attempts forked from the warm zygote (the default) and started one by one
    (`bwrap-cold`)."""
    return sandbox_backend_params(("bwrap", "bwrap-cold", "unshare", "plain"))


@pytest.fixture
def backend(request):
    if request.param == "bwrap-cold":
        request.getfixturevalue("cold_code_workers")
    return request.param.split("-")[0]


@pytest.mark.parametrize("backend", _backends(), indirect=True)
def test_a_second_attempt_finds_nothing_the_first_one_wrote(backend):
    token = secrets.token_hex(6)
    names = sorted(PROMISED[backend])
    first = code_execution([_program(n, token, True, False) for n in names], tests=[TESTS] * len(names),
                           backend=backend)  # fmt: skip
    assert first == [0.0] * len(names)
    second = code_execution([_program(n, token, False, True) for n in names], tests=[TESTS] * len(names),
                            backend=backend)  # fmt: skip
    assert dict(zip(names, second)) == dict.fromkeys(names, 0.0)


@pytest.mark.parametrize("backend", _backends(), indirect=True)
def test_the_probes_find_their_own_state_within_one_attempt(backend):
    """So that a 0 above means isolation, not a broken probe; the refused calls write nothing even within one."""
    token = secrets.token_hex(6)
    names = sorted(PROMISED[backend])
    scores = code_execution([_program(n, token, True, True) for n in names], tests=[TESTS] * len(names),
                            backend=backend)  # fmt: skip
    assert dict(zip(names, scores)) == {n: 0.0 if n in REFUSED[backend] else 1.0 for n in names}


def test_the_filter_is_what_refuses_the_keyring():
    """The same add_key that works in a plain process here fails with EPERM once the harness's filter is installed."""
    from gspo_recipes.rewards.code.sandbox.inside import syscall_filter

    # A fresh session keyring first (keyctl JOIN_SESSION_KEYRING), so the test's key dies with its process.
    attempt = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall(250, 1, None)\n{}" + (
        "r = libc.syscall(248, b'user', b'gspo-filter-test', b'1', 1, -3)\nprint(r > 0, ctypes.get_errno())\n"
    )
    run = lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)  # noqa: E731
    if run(attempt.format("")).stdout.split()[:1] != ["True"]:
        pytest.skip("this machine refuses keyrings to every process (a container's seccomp profile)")
    filtered = f"import sys\nsys.path.insert(0, {str(Path(syscall_filter.__file__).parent)!r})\n" + (
        "from syscall_filter import install_syscall_filter\nassert install_syscall_filter(False)\n"
    )
    assert run(attempt.format(filtered)).stdout.split() == ["False", str(errno.EPERM)]


@pytest.mark.parametrize("name", sorted(PAGE_CACHE))
def test_the_filter_is_what_refuses_the_page_cache_probes(name, tmp_path):
    """Each page-cache probe sees its file cached in a plain process, and fails once the harness's filter is in. The
    file is one this user owns and has just read: the kernel itself refuses cachestat on a file the caller can neither
    write nor owns (the interpreter's, for a user who is not root), and a sandbox without root runs as that user."""
    from gspo_recipes.rewards.code.sandbox.inside import syscall_filter

    owned = tmp_path / "cached.bin"
    owned.write_bytes(b"x" * 8192)
    owned.read_bytes()
    check = PROBES[name][1].replace("os.__file__", repr(str(owned)))
    probe = LIBC.format(key=1, name="unused", port=1) + f"found = bool({check})\nprint(found)\n"
    filtered = f"import sys\nsys.path.insert(0, {str(Path(syscall_filter.__file__).parent)!r})\n" + (
        "from syscall_filter import install_syscall_filter\nassert install_syscall_filter(False)\n"
        "try:\n{}\nexcept OSError:\n    print(False)\n"
    )
    run = lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)  # noqa: E731
    assert run(probe).stdout.split() == ["True"]
    assert run(filtered.format(textwrap.indent(probe, "    "))).stdout.split() == ["False"]


def _fresh_python(program: str, tests: list[str]) -> float:
    """The reference: the share of `tests` that pass when the program and each test run as one file in a fresh
    `python` process, as a user would run them."""
    passed = [subprocess.run([sys.executable, "-c", program + "\n" + test], capture_output=True, timeout=60)
              .returncode == 0 for test in tests]  # fmt: skip
    return sum(passed) / len(tests)


# Forty processes orphaned one after another, each gone at once: a `python` run from a shell has them reaped by
# init and never holds more than a few; an attempt whose first process never reaped them ran out of its 32.
ORPHANS = textwrap.dedent(
    """\
    import os, time
    def orphan():
        child = os.fork()
        if child == 0:
            if os.fork() == 0:
                os._exit(0)
            os._exit(0)
        os.waitpid(child, 0)
        time.sleep(0.005)
    for _ in range(40):
        orphan()
    def add(a, b):
        return a + b
    """
)
# Three forked readers of a 400 MB buffer the parent filled: 400 MB of memory in all, as the kernel holds it (each
# child shares the parent's pages), but 1,600 MB summed as resident sizes, over the attempt's 1,024.
SHARED_PAGES = textwrap.dedent(
    """\
    import os, time
    data = b"x" * (400 << 20)
    children = []
    for _ in range(3):
        child = os.fork()
        if child == 0:
            time.sleep(0.6)
            os._exit(0 if data[-1:] == b"x" else 1)
        children.append(child)
    statuses = [os.waitpid(child, 0)[1] for child in children]
    def add(a, b):
        return a + b if statuses == [0, 0, 0] else 0
    """
)


@pytest.mark.parametrize("backend", [b for b in _backends() if b.values[0].startswith("bwrap")], indirect=True)
def test_an_attempt_reaps_its_orphans_as_a_shell_would(backend):
    assert _fresh_python(ORPHANS, TESTS) == 1.0
    assert code_execution([ORPHANS], tests=[TESTS], backend=backend) == [1.0]


@pytest.mark.parametrize("backend", _backends(), indirect=True)
def test_pages_shared_between_an_attempts_processes_count_once(backend):
    assert _fresh_python(SHARED_PAGES, TESTS) == 1.0
    assert code_execution([SHARED_PAGES], tests=[TESTS], backend=backend) == [1.0]
    # The limit still holds on what is really held: four processes that each fill 400 MB of their own are over.
    own = SHARED_PAGES.replace("time.sleep(0.6)", "mine = b'y' * (400 << 20); time.sleep(0.6)")
    assert code_execution([own], tests=[TESTS], backend=backend) == [0.0]
