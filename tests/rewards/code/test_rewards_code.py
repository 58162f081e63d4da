"""code_execution: every test format, code extraction, scoring, parallelism and the sandbox backends."""

import json
import threading
import time

import pytest

from gspo_recipes.rewards import code_execution, code_execution_binary, extract_code
from gspo_recipes.rewards.code.sandbox import launch as sandbox

ADD = "def add(a, b):\n    return a + b\n"
SUB = "def add(a, b):\n    return a - b\n"
MBPP_TESTS = ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"]
HUMANEVAL_TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
SUM_PROGRAM = "n = int(input())\nprint(sum(int(x) for x in input().split()))\n"
SUM_CASES = [{"input": "3\n1 2 3\n", "output": "6\n"}, {"input": "2\n5 5\n", "output": "10"}]


def fenced(code: str, lang: str = "python") -> str:
    return f"Here is my solution:\n```{lang}\n{code}```\nIt adds the numbers."


# ----------------------------------------------------------------------------------------------------------------
# Code extraction


def test_extract_code_takes_the_last_python_block():
    text = "First try:\n```python\nx = 1\n```\nBetter:\n```python\nx = 2\n```\nOutput:\n```\n2\n```"
    assert extract_code(text).strip() == "x = 2"


def test_extract_code_skips_fences_in_other_languages():
    text = "Install:\n```bash\npip install nothing\n```\nThen:\n```python\nx = 3\n```\nRun:\n```sh\npython x.py\n```"
    assert extract_code(text).strip() == "x = 3"


def test_extract_code_falls_back_to_an_untagged_fence_then_to_the_whole_text():
    assert extract_code("```\ny = 3\n```").strip() == "y = 3"
    assert extract_code(ADD) == ADD
    assert extract_code("```py\nz = 1\n").strip() == "z = 1"  # truncated completion: the block runs to the end


# ----------------------------------------------------------------------------------------------------------------
# Test formats


def test_mbpp_asserts_are_scored_one_by_one():
    half_right = "def add(a, b):\n    return a + b if a >= 0 else 5\n"
    scores = code_execution([fenced(ADD), fenced(SUB), fenced(half_right)], tests=[MBPP_TESTS] * 3)
    assert scores == [1.0, pytest.approx(1 / 3), pytest.approx(2 / 3)]


def test_asserts_given_as_a_json_string_and_with_setup_code():
    tests = json.dumps(["assert add(1, 2) == HELPER - 1"])
    assert code_execution([ADD], tests=[tests], test_setup_code=["HELPER = 4"]) == [1.0]


def test_the_datasets_own_column_names_work():
    assert code_execution([ADD], test_list=[MBPP_TESTS]) == [1.0]  # MBPP
    assert code_execution([ADD], test=[HUMANEVAL_TEST], entry_point=["add"]) == [1.0]  # HumanEval
    apps = json.dumps({"inputs": ["3\n1 2 3\n"], "outputs": ["6\n"]})
    assert code_execution([SUM_PROGRAM], input_output=[apps]) == [1.0]  # APPS


def test_humaneval_script_with_and_without_the_check_call():
    with_call = HUMANEVAL_TEST + "\ncheck(add)\n"
    scores = code_execution(
        [fenced(ADD), fenced(SUB), fenced(ADD)],
        tests=[HUMANEVAL_TEST, HUMANEVAL_TEST, with_call],
        entry_point=["add", "add", None],
    )
    assert scores == [1.0, 0.0, 1.0]


def test_io_tests_compare_the_whole_output_line_by_line():
    trailing_spaces = "n = int(input())\nprint(str(sum(map(int, input().split()))) + '   ')\nprint()\n"
    prefix_only = "n = int(input())\nprint(sum(map(int, input().split())))\nprint('extra')\n"
    first_digit = "n = int(input())\nprint(str(sum(map(int, input().split())))[0])\n"
    scores = code_execution([SUM_PROGRAM, trailing_spaces, prefix_only, first_digit], io_tests=[SUM_CASES] * 4)
    # Trailing whitespace and blank lines do not matter; extra lines do, and so does printing only a prefix
    # ("1" for "10" would pass a prefix match).
    assert scores == [1.0, 1.0, 0.0, 0.5]


def test_expected_output_with_more_lines_than_printed_fails():
    cases = [{"input": "", "output": "1\n2\n"}]
    assert code_execution(["print(1)", "print(1)\nprint(2)"], io_tests=[cases] * 2) == [0.0, 1.0]


@pytest.mark.parametrize(
    "io_tests",
    [
        {"inputs": ["3\n1 2 3\n", "2\n5 5\n"], "outputs": ["6\n", "10\n"]},  # APPS
        {"input": ["3\n1 2 3\n", "2\n5 5\n"], "output": ["6\n", "10\n"]},  # CodeContests
        json.dumps({"inputs": ["3\n1 2 3\n", "2\n5 5\n"], "outputs": ["6\n", "10\n"]}),
        [{"stdin": "3\n1 2 3\n", "stdout": "6"}, {"stdin": "2\n5 5\n", "stdout": "10"}],
    ],
)
def test_io_tests_in_apps_and_codecontests_layouts(io_tests):
    assert code_execution([SUM_PROGRAM], io_tests=[io_tests]) == [1.0]


def test_io_program_that_reads_fd_0_directly_gets_all_its_input():
    program = "data = open(0).read().split()\nprint(sum(map(int, data[1:])))\n"
    assert code_execution([program], io_tests=[SUM_CASES]) == [1.0]


def test_a_crash_after_the_right_output_fails():
    program = SUM_PROGRAM + "raise SystemExit(3)\n"
    assert code_execution([program], io_tests=[SUM_CASES]) == [0.0]


def test_binary_variant_needs_every_test():
    half_right = "def add(a, b):\n    return a + b if a >= 0 else 5\n"
    assert code_execution_binary([ADD, half_right], tests=[MBPP_TESTS] * 2) == [1.0, 0.0]


def test_rows_that_cannot_be_judged_score_none():
    scores = code_execution([ADD, ADD, ADD], tests=[None, [], ["assert add(1, 2) == 3 ("]])
    assert scores == [None, None, None]
    assert code_execution([ADD, ADD], io_tests=["{not json", [{"input": "1"}]]) == [None, None]
    assert code_execution_binary([ADD], tests=[None]) == [None]


def test_prose_instead_of_code_scores_zero():
    assert code_execution(["I would add the two numbers."], tests=[MBPP_TESTS]) == [0.0]


def test_chat_message_completions():
    completion = [{"role": "assistant", "content": fenced(ADD)}]
    assert code_execution([completion], tests=[MBPP_TESTS]) == [1.0]


def test_many_asserts_are_split_across_runs():
    tests = [f"assert add({i}, 1) == {i + 1}" for i in range(100)] + ["assert add(0, 0) == 1"]
    assert code_execution([ADD], tests=[tests]) == [pytest.approx(100 / 101)]


def test_a_slow_test_fails_on_its_own_and_the_others_still_count():
    program = ADD + "def slow():\n    while True:\n        pass\n"
    tests = ["assert add(1, 2) == 3", "slow()", "assert add(2, 2) == 4"]
    assert code_execution([program], tests=[tests], timeout_s=0.5) == [pytest.approx(2 / 3)]


# ----------------------------------------------------------------------------------------------------------------
# Threads, parallelism, backends


def test_code_rewards_work_from_a_thread_that_is_not_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(code_execution([ADD], tests=[MBPP_TESTS])))
    thread.start()
    thread.join(60)
    assert results == [[1.0]]


def test_executions_run_in_parallel():
    sleepy = "import time\ndef add(a, b):\n    time.sleep(0.5)\n    return a + b\n"
    start = time.monotonic()
    assert code_execution([sleepy] * 4, tests=[["assert add(1, 2) == 3"]] * 4) == [1.0] * 4
    workers = len(__import__("os").sched_getaffinity(0))
    assert time.monotonic() - start < 0.5 * 4 / min(workers, 4) + 1.5


@pytest.mark.parametrize("backend", ["unshare", "plain"])
def test_fallback_backends_score_like_bwrap(backend):
    if not sandbox._works(backend):
        pytest.skip(f"{backend} does not work here")
    scores = code_execution([ADD, SUB], tests=[MBPP_TESTS] * 2, backend=backend)
    assert scores == [1.0, pytest.approx(1 / 3)]
    assert code_execution([SUM_PROGRAM], io_tests=[SUM_CASES], backend=backend) == [1.0]


def test_backend_can_be_forced_through_the_environment(monkeypatch):
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", "plain")
    assert sandbox.resolve_backend() == "plain"
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", "no-such-backend")
    with pytest.raises(ValueError):
        sandbox.resolve_backend()


def test_no_working_sandbox_means_a_refusal_not_a_score(monkeypatch):
    """Never a None the trainer would average over, nor a weaker sandbox taken silently: the reward refuses."""
    monkeypatch.setattr(sandbox, "_probed", {name: False for name in sandbox.BACKENDS})
    monkeypatch.delenv("GSPO_SANDBOX_BACKEND", raising=False)
    with pytest.raises(sandbox.SandboxUnavailable, match="no sandbox for model code"):
        code_execution([ADD], tests=[MBPP_TESTS])


def test_supervision_without_pidfd_still_waits_and_still_kills(monkeypatch):
    monkeypatch.setattr(sandbox, "_pidfd", lambda pid: None)  # old kernels, strict seccomp profiles
    sleepy = "import time\ndef add(a, b):\n    time.sleep(0.3)\n    return a + b\n"
    assert code_execution([sleepy], tests=[["assert add(1, 2) == 3"]]) == [1.0]
    assert code_execution([SUM_PROGRAM], io_tests=[SUM_CASES]) == [1.0]
    start = time.monotonic()
    hang = "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(100)\n"
    assert code_execution([hang], tests=[["assert True"]], timeout_s=0.3) == [0.0]
    assert time.monotonic() - start < 3
