"""Round five: one folder, shared by mount (sandbox/shared_folder.py). The program and the test work in one folder,
bound at the same path into both sandboxes, so a file is one file (its times, mode, order, links, size), whatever
the row's tests import; the judge's own files (its copy of the test script, pytest's rootdir) are elsewhere, where the
program cannot read them; nothing the program plants there is imported or collected by the judge; and the folder is
gone when the attempt ends. Each case is judged against a fresh `python` process (`test_code_verdicts.fresh_python`)
on the warm path and on the per-attempt one.
"""

import glob
import os
import tempfile

import pytest
from test_code_verdicts import dedent, fresh_python, score

from gspo_recipes.rewards import code_execution
from gspo_recipes.rewards.code.sandbox import shared_folder

# (program, test script): honest file work that the copies paid 0, and a fresh process pays 1.0.
ONE_FILE = {
    "modification times cross (sort by mtime, copy2)": (
        dedent(
            """
            import os, shutil
            def newest_first(folder):
                names = sorted(os.listdir(folder), key=lambda n: os.path.getmtime(os.path.join(folder, n)))
                shutil.copy2(os.path.join(folder, names[0]), os.path.join(folder, "copy.txt"))
                return names[::-1]
            """
        ),
        dedent(
            """
            import os
            def test_newest_first(tmp_path):
                for i, name in enumerate(["b.txt", "c.txt", "a.txt"]):
                    (tmp_path / name).write_text(name)
                    os.utime(tmp_path / name, (1_000_000 + i * 100, 1_000_000 + i * 100))
                assert newest_first(str(tmp_path)) == ["a.txt", "c.txt", "b.txt"]
                assert os.path.getmtime(tmp_path / "copy.txt") == 1_000_000
            """
        ),
    ),
    "modes as set, without the writer's umask": (
        dedent(
            """
            import os
            def lock_down(path):
                os.chmod(path, 0o640)
                fd = os.open(path + ".new", os.O_CREAT | os.O_WRONLY, 0o777)
                os.close(fd)
                os.chmod(path + ".new", 0o751)
                return oct(os.stat(path).st_mode & 0o777)
            """
        ),
        dedent(
            """
            import os, stat
            def test_modes():
                open("data.txt", "w").close()
                os.chmod("data.txt", 0o666)
                assert lock_down("data.txt") == "0o640"
                assert stat.S_IMODE(os.stat("data.txt").st_mode) == 0o640
                assert stat.S_IMODE(os.stat("data.txt.new").st_mode) == 0o751
            """
        ),
    ),
    "a read-only folder made after its files": (
        dedent(
            """
            import os
            def archive(name):
                os.mkdir(name)
                for i in range(3):
                    with open(os.path.join(name, f"part{i}.txt"), "w") as f:
                        f.write(str(i) * (i + 1))
                os.chmod(name, 0o555)
                return sorted(os.listdir(name))
            """
        ),
        dedent(
            """
            import os
            def test_archive():
                assert archive("kept") == ["part0.txt", "part1.txt", "part2.txt"]
                assert open(os.path.join("kept", "part2.txt")).read() == "222"
                assert not os.access("kept", os.W_OK) or os.getuid() == 0
            """
        ),
    ),
    "one listing order on both sides": (
        "import os\ndef listing(folder):\n    return os.listdir(folder)\n",
        dedent(
            """
            import os, tempfile
            def test_order():
                folder = tempfile.mkdtemp()
                for i in range(60):
                    open(os.path.join(folder, f"f{i * 7919 % 101}"), "w").close()
                assert listing(folder) == os.listdir(folder)
            """
        ),
    ),
    "no cap on entries": (
        "import os\ndef count(folder):\n    return len(os.listdir(folder))\n",
        dedent(
            """
            import os
            def test_many(tmp_path):
                for i in range(2500):
                    (tmp_path / str(i)).touch()
                assert count(str(tmp_path)) == 2500
            """
        ),
    ),
    "pytest's tmp_path, nothing imported": (
        "def shout(path):\n    with open(path) as f:\n        return f.read().upper()\n",
        "def test_shout(tmp_path):\n    p = tmp_path / 'in.txt'\n    p.write_text('hi')\n"
        "    assert shout(str(p)) == 'HI'\n",
    ),
    "links, as made": (
        dedent(
            """
            import os
            def link(name):
                os.symlink(name, name + ".soft")
                os.link(name, name + ".hard")
                with open(name + ".soft", "a") as f:
                    f.write("!")
                return os.stat(name).st_nlink
            """
        ),
        dedent(
            """
            import os
            def test_links():
                with open("doc.txt", "w") as f:
                    f.write("hello")
                assert link("doc.txt") == 2
                assert os.readlink("doc.txt.soft") == "doc.txt"
                assert os.path.samefile("doc.txt", "doc.txt.hard")
                assert open("doc.txt").read() == "hello!"
            """
        ),
    ),
    "either side renames and removes what the other made": (
        dedent(
            """
            import os
            def tidy(folder, name):
                os.rename(os.path.join(folder, name), os.path.join(folder, name + ".done"))
                os.remove(os.path.join(folder, name + ".done"))
                os.mkdir(os.path.join(folder, "out"), 0o700)
                fd = os.open(os.path.join(folder, "out", "private.txt"), os.O_CREAT | os.O_WRONLY, 0o600)
                os.write(fd, b"secret")
                os.close(fd)
                return sorted(os.listdir(folder))
            """
        ),
        dedent(
            """
            import os, shutil
            def test_tidy(tmp_path):
                os.umask(0o077)
                (tmp_path / "task.txt").write_text("x")
                os.chmod(tmp_path / "task.txt", 0o600)
                assert tidy(str(tmp_path), "task.txt") == ["out"]
                assert (tmp_path / "out" / "private.txt").read_text() == "secret"
                with open(tmp_path / "out" / "private.txt", "a") as f:
                    f.write("!")
                os.rename(tmp_path / "out" / "private.txt", tmp_path / "out" / "moved.txt")
                shutil.rmtree(tmp_path / "out")
                assert os.listdir(tmp_path) == []
            """
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_FILE))
def test_a_file_is_one_file_for_the_test_and_the_program(case, path, tmp_path):
    program, script = ONE_FILE[case]
    assert fresh_python(program, script, tmp_path) == 1.0
    # A test's own file work (2,500 files on the host's disk, without root) gets time on a loaded machine.
    assert code_execution([program], tests=[script], timeout_s=10.0) == [1.0]


def test_an_mbpp_row_that_uses_os_from_the_judges_namespace(path):
    """Asserts that name `os` only (the judge imports it for them) reach files as any test does."""
    program = "def save(name, text):\n    with open(name, 'w') as f:\n        return f.write(text)\n"
    tests = [
        "assert save('out.txt', 'abc') == 3 and os.path.getsize('out.txt') == 3",
        "assert save(os.path.join(os.getcwd(), 'b.txt'), 'xy') == 2 and os.listdir('.').count('b.txt') == 1",
    ]
    assert code_execution([program], tests=[tests], timeout_s=2.0) == [1.0]
    lies = "def save(name, text):\n    return len(text)\n"  # writes nothing
    assert code_execution([lies], tests=[tests], timeout_s=2.0) == [0.0]


# ----------------------------------------------------------------------------------------------------------------
# The judge's own files are out of the program's reach

SECRET_SCRIPT = dedent(
    """
    import pytest
    EXPECTED = {"a": "kiwi-7310", "b": "plum-2291"}
    def reference(key):
        return EXPECTED[key]
    @pytest.mark.parametrize("key", ["a", "b"])
    def test_lookup(key, tmp_path):
        (tmp_path / "note.txt").write_text("the test was here")
        assert lookup(key) == reference(key)
    """
)

# Reads every Python file it can find where the test's script could be, and answers from what it finds: the
# expected literals (or the script's own reference helper, run). A fresh process, whose test file sits beside it,
# passes it.
READS_THE_TESTS = dedent(
    """
    import os, re
    def _scripts():
        seen = set()
        for top in (os.getcwd(), os.environ.get("TMPDIR", "/tmp"), "/tmp", os.path.dirname(os.getcwd())):
            for root, dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(root, name)
                    if name.endswith(".py") and name != "solution.py" and path not in seen:
                        seen.add(path)
                        try:
                            with open(path) as f:
                                yield f.read()
                        except OSError:
                            pass
    def lookup(key):
        for text in _scripts():
            if "def reference" in text:
                names = {}
                exec(text.replace("import pytest", "").replace("@pytest.mark", "#"), names)
                return names["reference"](key)
            found = re.search(repr(key) + r': "([a-z]+-[0-9]+)"', text)
            if found:
                return found.group(1)
        return None
    """
)


def test_the_program_never_reads_the_tests(path, tmp_path):
    """The judge's copy of the test script crossed to the program's /tmp on the first call (shared_tmp): a program
    that read it passed. Now the script lives in the judge's own /tmp and is removed once pytest has collected it."""
    assert fresh_python(READS_THE_TESTS, SECRET_SCRIPT, tmp_path) == 1.0  # beside the test file, it passes
    assert score(READS_THE_TESTS, SECRET_SCRIPT) == 0.0
    honest = "def lookup(key):\n    return {'a': 'kiwi-7310', 'b': 'plum-2291'}[key]\n"
    assert score(honest, SECRET_SCRIPT) == 1.0


# What a program plants in the folder it shares with the judge: a conftest.py that would pass every test, a .pth
# file and a module named like one the test imports afterwards. The judge collects from its own private folder, with
# no conftest and nothing of the shared folder on its import path.
PLANTS = dedent(
    """
    def double(x):
        with open("conftest.py", "w") as f:
            f.write("import pytest\\n@pytest.hookimpl(tryfirst=True)\\n"
                    "def pytest_runtest_call(item):\\n    return True\\n"
                    "def pytest_collection_modifyitems(items):\\n    items[:] = []\\n")
        with open("gspo.pth", "w") as f:
            f.write("import unittest; unittest.TestCase.assertEqual = lambda *a, **k: None\\n")
        with open("fractions.py", "w") as f:
            f.write("import unittest\\nunittest.TestCase.assertEqual = lambda *a, **k: None\\n")
        return 0
    """
)
PLANTED_FOR = dedent(
    """
    import unittest
    class TestDouble(unittest.TestCase):
        def test_double(self):
            got = double(2)
            import fractions
            self.assertEqual(got, 4)
        def test_again(self):
            self.assertEqual(double(3), 6)
    """
)


def test_what_the_program_plants_in_the_folder_changes_nothing(path):
    assert score(PLANTS, PLANTED_FOR) == 0.0
    assert score("def double(x):\n    return 2 * x\n", PLANTED_FOR) == 1.0


def test_the_folder_is_fresh_and_gone_after_the_attempt(path):
    """Each attempt starts in an empty folder (no program source, no earlier attempt's files) and leaves nothing on
    the host: after the batch no shared folder holds a file an attempt wrote."""
    marker = "gspo-round-five-" + os.urandom(6).hex()
    program = dedent(
        f"""
        import os
        def first_in(folder):
            seen = sorted(os.listdir("."))
            with open("left.txt", "w") as f:
                f.write("{marker}")
            return seen
        """
    )
    script = "def test_empty():\n    assert first_in('.') == []\n"
    assert code_execution([program] * 3, tests=[script] * 3, timeout_s=2.0) == [1.0, 1.0, 1.0]
    leftovers = []
    for parent in glob.glob(os.path.join(tempfile.gettempdir(), "gspo-shared-*")):
        for root, _, files in os.walk(parent):
            for name in files:
                try:
                    with open(os.path.join(root, name), errors="replace") as f:
                        if marker in f.read():
                            leftovers.append(os.path.join(root, name))
                except OSError:
                    pass
    assert leftovers == []


def test_no_attempt_sees_the_folders_of_others(path):
    """Every attempt's folder lives under one parent, which a zygote's attempt sees at `PARENT_IN_ZYGOTE` until it
    binds its own folder and covers that view: from the program and from the test alike, the parent then lists
    nothing (not even the attempt's own folder) and takes no file. Eight attempts at once, each with a file of its
    own, so that there is something to see if the cover slipped."""
    program = dedent(
        f"""
        import os
        def seen():
            with open("mine-" + os.urandom(4).hex(), "w") as f:
                f.write("x")
            try:
                listed = os.listdir({shared_folder.PARENT_IN_ZYGOTE!r})
            except FileNotFoundError:  # a program started per attempt has no such view at all
                return []
            try:
                open({shared_folder.PARENT_IN_ZYGOTE!r} + "/planted", "w").close()
                listed.append("planted")
            except OSError:
                pass
            return listed
        """
    )
    script = dedent(
        f"""
        import os
        def test_alone():
            assert seen() == []
            if os.path.exists({shared_folder.PARENT_IN_ZYGOTE!r}):
                assert os.listdir({shared_folder.PARENT_IN_ZYGOTE!r}) == []
        """
    )
    assert code_execution([program] * 8, tests=[script] * 8, timeout_s=2.0) == [1.0] * 8


def test_a_killed_pool_process_leaves_no_shared_parent_behind(tmp_path, monkeypatch):
    """A pool process killed before its exit handlers ran leaves its parent folder (as root, a tmpfs mounted on it);
    the next pool process to start removes those of processes that are gone, and only those."""
    import subprocess
    import sys

    from gspo_recipes.rewards.code.sandbox import shared_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"gspo-shared-{int(gone.stdout)}-abc123"
    (stale / "attempt-x" / "locked").mkdir(parents=True)
    (stale / "attempt-x" / "locked" / "left.txt").write_text("x")
    os.chmod(stale / "attempt-x" / "locked", 0o500)
    alive = tmp_path / f"gspo-shared-{os.getppid()}-def456"
    alive.mkdir()
    shared_folder._sweep_stale()
    assert not stale.exists()
    assert alive.exists()
