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
LIBC = "import ctypes, os, socket, time\nlibc = ctypes.CDLL(None, use_errno=True)\nKEY = {key}\nNAME = '{name}'\n"
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
# bwrap's root is read-only: /var/tmp refuses the write itself.
REFUSED = {
    "bwrap": KERNEL_GLOBAL | PAGE_CACHE | {"var_tmp_file"},
    "unshare": KERNEL_GLOBAL | PAGE_CACHE,
    "plain": PROMISED["plain"],
}


def _program(name: str, token: str, write: bool, read: bool) -> str:
    write_code, found = PROBES[name]
    source = LIBC.format(key=int(token[:7], 16) + 1, name=f"gspo-probe-{token}")
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
    probe = LIBC.format(key=1, name="unused") + f"found = bool({check})\nprint(found)\n"
    filtered = f"import sys\nsys.path.insert(0, {str(Path(syscall_filter.__file__).parent)!r})\n" + (
        "from syscall_filter import install_syscall_filter\nassert install_syscall_filter(False)\n"
        "try:\n{}\nexcept OSError:\n    print(False)\n"
    )
    run = lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)  # noqa: E731
    assert run(probe).stdout.split() == ["True"]
    assert run(filtered.format(textwrap.indent(probe, "    "))).stdout.split() == ["False"]
