"""The shared /tmp's two ends (sandbox/inside/shared_tmp.py) on folders of the host: what crosses, and what a side
that lies about its files cannot do to the other (the judge applies what the program's sandbox sends)."""

import base64
import os

import pytest

from gspo_recipes.rewards.code.sandbox.inside import shared_tmp


@pytest.fixture
def sides(tmp_path, monkeypatch):
    """Two /tmp folders, `here` and `there`, and a function that makes one of them SHARED_TOP."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()

    def be(side):
        monkeypatch.setattr(shared_tmp, "SHARED_TOP", str(side))

    return here, there, be


def test_changes_cross_and_are_not_sent_back(sides):
    here, there, be = sides
    be(here)
    seen_here = shared_tmp.shared_tmp_scan()
    (here / "out").mkdir()
    (here / "out" / "table.csv").write_bytes(b"a,1\n\xff\x00")
    entries, seen_here = shared_tmp.shared_tmp_changes(seen_here)
    assert [entry[:2] for entry in entries] == [["d", "out"], ["f", "out/table.csv"]]
    be(there)
    seen_there = shared_tmp.shared_tmp_apply(entries)
    assert (there / "out" / "table.csv").read_bytes() == b"a,1\n\xff\x00"
    assert shared_tmp.shared_tmp_changes(seen_there)[0] == []  # what arrived is not echoed back
    (there / "out" / "table.csv").unlink()
    entries, seen_there = shared_tmp.shared_tmp_changes(seen_there)
    assert entries == [["x", "out/table.csv"]]
    be(here)
    shared_tmp.shared_tmp_apply(entries)
    assert os.listdir(here / "out") == []


def test_a_same_size_rewrite_is_a_change(sides):
    here, _, be = sides
    be(here)
    (here / "n.txt").write_text("1")
    seen = shared_tmp.shared_tmp_scan()
    (here / "n.txt").write_text("2")
    os.utime(here / "n.txt", ns=(os.stat(here / "n.txt").st_atime_ns, seen["n.txt"][4]))  # a coarse clock's tie
    assert [entry[:2] for entry in shared_tmp.shared_tmp_changes(seen)[0]] == [["f", "n.txt"]]


def test_what_is_past_the_cap_and_what_is_no_plain_file_stays(sides):
    here, _, be = sides
    be(here)
    seen = shared_tmp.shared_tmp_scan()
    (here / "big.bin").write_bytes(b"x" * (shared_tmp.MAX_SHARED_BYTES + 1))
    (here / "small.txt").write_text("kept")
    (here / "link").symlink_to("/etc/hostname")
    entries, seen = shared_tmp.shared_tmp_changes(seen)
    assert [entry[:2] for entry in entries] == [["f", "small.txt"]]
    assert shared_tmp.shared_tmp_changes(seen)[0] == []  # not offered again until it changes


@pytest.mark.parametrize(
    "entry",
    [
        ["f", "../escaped", 0o644, "aGk="],
        ["f", "/etc/escaped", 0o644, "aGk="],
        ["f", "a//b", 0o644, "aGk="],
        ["f", "ok", "rwx", "aGk="],
        ["f", "ok", 0o644, "not base64!"],
        ["f", "ok", 0o644],
        ["d", "ok"],
        ["x", "ok", 0o644],
        [["d"], "ok", 0o755],
        ["d", "a\x00b", 0o755],
        ["y", "ok"],
        "ok",
    ],
)
def test_a_malformed_entry_is_refused_and_writes_nothing(sides, entry):
    here, _, be = sides
    be(here)
    with pytest.raises(ValueError, match="shared files"):
        shared_tmp.shared_tmp_apply([["f", "first", 0o644, "aGk="], entry])
    assert not (here.parent / "escaped").exists()


def test_more_than_the_cap_in_one_call_is_refused(sides):
    here, _, be = sides
    be(here)
    chunk = base64.b64encode(b"x" * (shared_tmp.MAX_SHARED_BYTES // 2 + 1)).decode()
    with pytest.raises(ValueError, match="MAX_SHARED_BYTES"):
        shared_tmp.shared_tmp_apply([["f", "a", 0o644, chunk], ["f", "b", 0o644, chunk]])


def test_no_link_on_this_side_is_followed(sides, tmp_path):
    here, _, be = sides
    be(here)
    outside = tmp_path / "outside"
    outside.mkdir()
    (here / "through").symlink_to(outside)
    (here / "target").symlink_to(outside / "file")
    shared_tmp.shared_tmp_apply([["f", "through/file", 0o644, "aGk="], ["f", "target", 0o644, "aGk="]])
    assert os.listdir(outside) == []


def test_import_paths_the_program_could_write_are_unsafe(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_tmp, "SHARED_TOP", str(tmp_path))
    assert not shared_tmp.shared_path_is_safe("")
    assert not shared_tmp.shared_path_is_safe(str(tmp_path / "work"))
    assert not shared_tmp.shared_path_is_safe(str(tmp_path / "not-yet-made"))
    assert shared_tmp.shared_path_is_safe(os.path.dirname(os.__file__))


@pytest.mark.parametrize(
    ("tests", "setup", "reach"),
    [
        ("METADATA = {}\ndef check(candidate):\n    assert candidate(2) == 4\n", "", False),  # HumanEval's shape
        (["assert add(1, 2) == 3", "assert add(0, 0) == 0"], "", False),  # MBPP's
        ("import os\ndef test_a():\n    assert os.path.exists(f())\n", "", True),
        ("def test_a():\n    assert open(f()).read() == 'x'\n", "", True),
        ("def test_a():\n    assert pd.read_csv(f()).shape == (1, 1)\n", "", True),  # an alias the judge imports
        (["assert add(1, 2) == 3"], "from pathlib import Path", True),  # the setup counts
    ],
)
def test_files_cross_only_for_tests_that_can_reach_a_file(tests, setup, reach):
    """A row's job says whether /tmp's files cross (`JudgeJob.share_files`): where its tests import, name `open` or
    use an alias; tests with none of these can neither leave a file for the program nor read one it wrote."""
    from gspo_recipes.rewards.code.judge.judge import tests_reach_files
    from gspo_recipes.rewards.code.plan import plan_row
    from gspo_recipes.rewards.code.sandbox.launch import Limits

    (job,) = plan_row("def f():\n    return 1\n", tests, None, "f", setup, [], 1.0, Limits())
    assert job.payload.share_files is reach
    assert tests_reach_files(["def check(:"]) is True  # what does not parse counts as reaching


@pytest.mark.parametrize(
    ("backend", "share_files", "shares"),
    [("bwrap", True, True), ("bwrap", False, False), ("unshare", True, False), ("plain", True, False)],
)
def test_only_a_namespace_backends_tmp_is_shared(backend, share_files, shares):
    """A weak backend's program writes the host's /tmp: nothing there is scanned or sent, whatever the tests do."""
    from gspo_recipes.rewards.code.judge.records import JudgeJob
    from gspo_recipes.rewards.code.sandbox.launch import Limits

    job = JudgeJob("", "asserts", [], None, "", [], 1.0, 1, Limits(), backend, share_files)
    assert job.shares_tmp is shares
