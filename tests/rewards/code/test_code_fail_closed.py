"""The judge fails closed (issue 17): every attack here scores what the honest wrong answer scores, next to honest
controls in each test shape that score 1.0; nothing turns a 0 into None; one completion cannot fail another."""

import logging
import textwrap

import pytest

from gspo_recipes.rewards import code_execution

TIMEOUT_S = 2.0
CORRECT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 5) == 7\n"
UNITTEST = textwrap.dedent(
    """\
    import unittest

    class TestCases(unittest.TestCase):
        def setUp(self):
            self.pairs = [(1, 2, 3), (2, 5, 7)]

        def test_pairs(self):
            for a, b, want in self.pairs:
                self.assertEqual(task_func(a, b), want)

        def test_zero(self):
            self.assertEqual(task_func(0, 4), 4)

    if __name__ == "__main__":
        unittest.main()
    """
)
PYTEST = "def test_small():\n    assert add(1, 2) == 3\n\ndef test_larger():\n    assert add(20, 22) == 42\n"


def score(programs, **columns):
    n = len(programs)
    return code_execution(programs, timeout_s=TIMEOUT_S, **{key: [value] * n for key, value in columns.items()})


def renamed(source: str, name: str) -> str:
    return source.replace("def add(", f"def {name}(")


# ----------------------------------------------------------------------------------------------------------------
# 1. Every supported shape: correct 1.0, wrong 0.0


def test_each_test_shape_pays_the_correct_program_and_not_the_wrong_one():
    assert score([CORRECT, WRONG], tests=["assert add(1, 2) == 3", "assert add(2, 2) == 4"]) == [1.0, 0.0]
    assert score([CORRECT, WRONG], test=CHECK, entry_point="add") == [1.0, 0.0]
    assert score([CORRECT, WRONG], test=CHECK + "\ncheck(add)\n") == [1.0, 0.0]
    assert score([CORRECT, WRONG], test=PYTEST) == [1.0, 0.0]
    assert score([CORRECT, WRONG], test="assert add(1, 2) == 3\nassert add(2, 2) == 4\n") == [1.0, 0.0]


def test_bigcodebench_unittest_rows_score_each_method_with_and_without_an_entry_point():
    correct, wrong = renamed(CORRECT, "task_func"), renamed(WRONG, "task_func")
    half = "def task_func(a, b):\n    return b if a == 0 else a - b\n"  # passes test_zero only
    assert score([correct, wrong, half], test=UNITTEST, entry_point="task_func") == [1.0, 0.0, 0.5]
    assert score([correct, wrong, half], test=UNITTEST) == [1.0, 0.0, 0.5]


# ----------------------------------------------------------------------------------------------------------------
# 1. A test that never calls the program scores 0, with a warning and a metric


@pytest.mark.parametrize(
    "test, entry_point",
    [
        ("def check(candidate):\n    assert candidate(1, 2) == 3\n", "no_such_function"),  # entry point missing
        ("import unittest\nclass T(unittest.TestCase):\n    def helper(self):\n        pass\n", "add"),  # no tests
        ('"""Run as:\ncheck(add)\n"""\ndef check(candidate):\n    assert True\n', "add"),  # a check that checks nothing
        ("def test_nothing():\n    assert 1 + 1 == 2\n", None),  # a pytest function that never calls the program
        ("assert True\n", None),
        ("x = 3\nassert x == 3\n", None),
    ],
)
def test_tests_that_never_call_the_program_pay_nothing_and_say_so(test, entry_point, caplog):
    logged = {}
    with caplog.at_level(logging.INFO, logger="gspo_recipes.rewards.code.reward"):
        scores = code_execution([CORRECT, WRONG], test=[test] * 2, entry_point=[entry_point] * 2, timeout_s=TIMEOUT_S,
                                log_metric=logged.__setitem__)  # fmt: skip
    assert scores == [0.0, 0.0]
    if entry_point != "no_such_function":  # a missing entry point is a NameError: the test failed, it did not pass
        assert logged["rewards/code_execution/uncalled_frac"] == 1.0
        assert "without calling the program" in caplog.text


def test_the_uncalled_warning_stays_silent_on_healthy_rows(caplog):
    logged = {}
    with caplog.at_level(logging.INFO, logger="gspo_recipes.rewards.code.reward"):
        code_execution([CORRECT, WRONG], test=[CHECK] * 2, entry_point=["add"] * 2, log_metric=logged.__setitem__)
    assert logged["rewards/code_execution/uncalled_frac"] == 0.0
    assert "without calling" not in caplog.text


def test_a_program_cannot_skip_the_unittest_tests():
    skipper = "import unittest\ndef task_func(a, b):\n    raise unittest.SkipTest('later')\n"
    skipped_by_test = UNITTEST.replace("def test_zero(self):", "@unittest.skip('x')\n    def test_zero(self):")
    assert score([skipper], test=UNITTEST, entry_point="task_func") == [0.0]
    # A test the dataset itself skips is not passed either: 1 of 2.
    assert score([renamed(CORRECT, "task_func")], test=skipped_by_test, entry_point="task_func") == [0.5]


# ----------------------------------------------------------------------------------------------------------------
# 3. Names the tests use come from the judge; program results are plain data


def test_a_module_the_tests_use_unimported_is_the_judges_own():
    numpy = pytest.importorskip("numpy")
    assert numpy
    fake_numpy = "import types\nnp = types.ModuleType('numpy')\nnp.allclose = lambda *a, **k: True\n" + WRONG
    patched_numpy = "import numpy as np\nnp.allclose = lambda *a, **k: True\n" + WRONG
    honest = "import numpy as np\n" + CORRECT
    tests = ["assert np.allclose(add(1.5, 2), 3.5)"]
    assert score([honest, renamed(WRONG, "add"), fake_numpy, patched_numpy], tests=tests) == [1.0, 0.0, 0.0, 0.0]


def test_a_stdlib_class_the_tests_use_unimported_is_the_judges_own():
    counter = "from collections import Counter\ndef count(xs):\n    return dict(Counter(xs))\n"
    fake = "class Counter:\n    def __init__(self, *a):\n        pass\n"
    fake += "    def __eq__(self, other):\n        return True\n"
    tests = ["assert count([1, 1, 2]) == Counter([1, 1, 2])"]
    wrong = "def count(xs):\n    return {}\n"
    assert score([counter, wrong, fake + wrong], tests=tests) == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "method_test",
    ["assert candidate('abc').startswith('ab')", "assert candidate({1, 2}).issuperset({1})",
     "assert candidate([3]).count(3) == 1", "assert candidate('x').isdigit() is False"],
)  # fmt: skip
def test_methods_called_on_a_result_are_the_built_in_types(method_test):
    liar = textwrap.dedent(
        """\
        class Anything:
            def __getattr__(self, name):
                return lambda *a, **k: True
            def startswith(self, *a): return True
            def issuperset(self, *a): return True
            def count(self, *a): return 1
            def isdigit(self): return False
        def echo(x):
            return Anything()
        """
    )
    honest = "def echo(x):\n    return x\n"
    test = "def check(candidate):\n    " + method_test + "\n"
    assert score([honest, liar], test=test, entry_point="echo") == [1.0, 0.0]


def test_classes_the_tests_construct_keep_their_methods():
    stack = "class MyStack:\n    def __init__(self):\n        self.items = []\n" + (
        "    def append(self, x):\n        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n"
    )
    tests = ["s = MyStack()\ns.append(4)\ns.append(5)\nassert s.pop() == 5 and s.pop() == 4"]
    assert score([stack], tests=tests) == [1.0]


# ----------------------------------------------------------------------------------------------------------------
# 4. Helpers come from the dataset


POLY = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n"
POLY_TEST = "def check(candidate):\n    for xs in ([-6, 1], [2, -1]):\n"
POLY_TEST += "        assert abs(poly(xs, candidate(xs))) < 1e-6\n"
FIND_ZERO = "def find_zero(xs):\n    return -xs[0] / xs[1]\n"
POLY_HACK = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n"
RAW_PROMPT = POLY + '\n\ndef find_zero(xs):\n    """A zero of the polynomial."""\n'


@pytest.mark.parametrize(
    "columns",
    [
        {"helpers": RAW_PROMPT},  # the recipe keeps HumanEval's original prompt here
        {"prompts": RAW_PROMPT},  # the raw, unfenced HumanEval prompt is code
        {"prompts": f"Complete:\n```python\n{RAW_PROMPT}```\nUsage:\n```python\nprint(find_zero([1, 2]))\n```"},
    ],
)
def test_helpers_come_from_the_dataset_and_never_from_the_program(columns):
    assert score([FIND_ZERO, POLY_HACK], test=POLY_TEST, entry_point="find_zero", **columns) == [1.0, 0.0]


def test_a_helper_no_column_defines_fails_closed_with_a_warning(caplog):
    logged = {}
    with caplog.at_level(logging.INFO, logger="gspo_recipes.rewards.code.reward"):
        scores = code_execution([POLY + FIND_ZERO, POLY_HACK], test=[POLY_TEST] * 2, entry_point=["find_zero"] * 2,
                                log_metric=logged.__setitem__)  # fmt: skip
    assert scores == [0.0, 0.0]  # even the honest program: its poly is not the dataset's
    assert logged["rewards/code_execution/missing_helper_frac"] == 1.0
    assert "poly" in caplog.text


def test_a_helper_block_that_does_not_run_fails_closed():
    broken = POLY.replace("return sum", "raise RuntimeError('x')\n    return sum") + "raise RuntimeError('broken')\n"
    assert score([POLY + FIND_ZERO, POLY_HACK], test=POLY_TEST, entry_point="find_zero", helpers=broken) == [0.0, 0.0]


# ----------------------------------------------------------------------------------------------------------------
# 5. The program cannot end a test early, nor have its result compared with itself


@pytest.mark.parametrize(
    "test",
    [
        "def check(candidate):\n    assert all(map(lambda x: candidate(x, 1) == x + 1, range(5)))\n",
        "def check(candidate):\n    assert all(candidate(x, 1) == x + 1 for x in range(5))\n",
        "def check(candidate):\n    for r in map(lambda x: candidate(x, 1), range(3)):\n        assert r == 99\n",
        "def check(candidate):\n    assert list(zip(map(lambda x: candidate(x, 1), [1]), [1])) or True\n"
        "    assert candidate(1, 1) == 2\n",
    ],
)
def test_stop_iteration_from_the_program_is_a_failure(test):
    stopper = "def add(a, b):\n    raise StopIteration\n"
    assert score([stopper], test=test, entry_point="add") == [0.0]


@pytest.mark.parametrize(
    "test",
    [
        "xs = [3, 1, 2]\nassert fix(xs) == xs",
        "xs = [3, 1, 2]\nassert fix(xs) == sorted(xs)",
        "d = {'a': 1}\nassert fix(d) == d",
    ],
)
def test_a_changed_argument_is_not_compared_with_itself(test):
    clears_and_returns = "def fix(x):\n    x.clear()\n    return x\n"
    clears_and_copies = "def fix(x):\n    x.clear()\n    return type(x)()\n"
    assert score([clears_and_returns, clears_and_copies], tests=[test]) == [0.0, 0.0]


def test_in_place_functions_still_change_the_tests_arguments():
    sort_in_place = "def fix(xs):\n    xs.sort()\n"
    sort_and_return = "def fix(xs):\n    xs.sort()\n    return xs\n"
    tests = ["xs = [3, 1, 2]\nfix(xs)\nassert xs == [1, 2, 3]"]
    assert score([sort_in_place], tests=tests) == [1.0]
    assert score([sort_and_return], tests=["assert fix([3, 1, 2]) == [1, 2, 3]"]) == [1.0]


# ----------------------------------------------------------------------------------------------------------------
# 6. None only when no sandbox could run


@pytest.mark.parametrize(
    "program, tests",
    [
        # 100k distinct ints sharing one hash: a set of them costs quadratic time to build
        ("def add(a, b):\n    return {k * (2**61 - 1) + 5 for k in range(1, 100_000)}\n",
         ["assert len(add(1, 2)) == 3"]),
        # complex numbers sharing a hash, in a list the test turns into a set
        ("def add(a, b):\n    return [complex(5 - 1000003 * i, i) for i in range(100_000)]\n",
         ["assert len(set(add(1, 2))) == 3"]),
        ("def add(a, b):\n    return range(10**18)\n", ["assert sum(add(1, 2)) == 3"]),
        ("def add(a, b):\n    return 1 << 200_000\n", ["assert add(1, 2) == 3"]),
    ],
)  # fmt: skip
def test_replies_that_make_decoding_or_the_test_slow_score_zero(program, tests):
    assert score([program, WRONG], tests=tests) == [0.0, 0.0]


def test_a_deeply_nested_ready_line_scores_zero():
    forged = textwrap.dedent(
        """\
        import os, sys
        os.write(int(sys.argv[3]), b'[' * 200000 + b']' * 200000 + b'\\n')
        os._exit(0)
        """
    )
    assert score([forged, CORRECT], tests=["assert add(1, 2) == 3"]) == [0.0, 1.0]


@pytest.mark.parametrize(
    "setup",
    ["import no_such_fixture_module", "open('/no/such/file')", "while True:\n    pass", "raise KeyboardInterrupt"],
)
def test_setup_failures_score_zero_and_are_named(setup, caplog):
    with caplog.at_level(logging.INFO, logger="gspo_recipes.rewards.code.reward"):
        scores = code_execution([CORRECT, WRONG], tests=[["assert add(1, 2) == 3"]] * 2, test_setup_code=[setup] * 2,
                                timeout_s=1.0)  # fmt: skip
    assert scores == [0.0, 0.0]
    assert "setup code fails" in caplog.text


def test_a_test_that_runs_away_in_c_scores_zero_not_none():
    """sum(range(...)) in the judge runs in C, where no alarm reaches: the judge's deadline kills it, a 0."""
    program = "def n():\n    return 10**17\n"
    scores = code_execution([program], tests=[["assert sum(range(n())) == 0"]], timeout_s=0.5)
    assert scores == [0.0]


# ----------------------------------------------------------------------------------------------------------------
# 7. Every completion alone


@pytest.mark.parametrize(
    "bomb",
    ["def add(a, b):\n    return " + "-" * 3000 + "1\n", "add = " + "lambda: " * 3000 + "0\n",
     "x = " + "(" * 3000 + ")" * 3000 + "\n" + CORRECT, "x = " + "[" * 100 + "]" * 100 + "\n" + WRONG],
)  # fmt: skip
def test_a_parser_bomb_scores_zero_and_leaves_the_batch_alone(bomb):
    assert score([CORRECT, bomb, WRONG], tests=["assert add(1, 2) == 3"]) == [1.0, 0.0, 0.0]


def test_a_parser_bomb_in_every_test_shape():
    bomb = "def add(a, b):\n    return " + "-" * 3000 + "1\n"
    for columns in ({"test": CHECK + "\ncheck(add)\n"}, {"test": CHECK, "entry_point": "add"}, {"test": PYTEST}):
        assert score([CORRECT, bomb], **columns) == [1.0, 0.0], columns
