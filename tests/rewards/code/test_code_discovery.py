"""Tests are found by the runners' own rules (issue 26, items 2 and 3): what pytest collects from a test script
(unittest's loader for `TestCase` classes) is what counts, every collected test once; a script whose tests cannot be
collected is refused for the row, with a warning naming it; a `check` is called on the entry point the row names.

Each row pairs an attack, a program that passes only the test a prompt would show (`add(1, 2)`), with the honest
program (1.0) and a wrong one (0.0)."""

import logging
import textwrap

import pytest

from gspo_recipes.rewards import code_execution

TIMEOUT_S = 2.0
CORRECT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
SHOWN_ONLY = "def add(a, b):\n    return 3 if (a, b) == (1, 2) else 0\n"


def script(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


# (script, what SHOWN_ONLY earns there: the share of the runner's tests it passes)
HIDDEN_TESTS = {
    "parametrize": (
        script("""
        import pytest
        def test_shown():
            assert add(1, 2) == 3
        @pytest.mark.parametrize("a, b, c", [(2, 2, 4), (5, 5, 10), (0, 7, 7)])
        def test_more(a, b, c):
            assert add(a, b) == c
        """),
        1 / 4,
    ),
    "pytest_class": (
        script("""
        def test_shown():
            assert add(1, 2) == 3
        class TestMore:
            def test_a(self):
                assert add(2, 2) == 4
            def test_b(self):
                assert add(0, 5) == 5
        """),
        1 / 3,
    ),
    "async_test": (
        script("""
        def test_shown():
            assert add(1, 2) == 3
        async def test_later():
            assert add(4, 4) == 8
        """),
        1 / 2,
    ),
    "fixture": (
        script("""
        import pytest
        @pytest.fixture
        def pair():
            return (6, 7)
        def test_shown():
            assert add(1, 2) == 3
        def test_fixture(pair):
            assert add(*pair) == 13
        """),
        1 / 2,
    ),
    "under_if": (
        script("""
        import sys
        def test_shown():
            assert add(1, 2) == 3
        if sys.version_info >= (3,):
            def test_a():
                assert add(2, 3) == 5
            def test_b():
                assert add(3, 3) == 6
        """),
        1 / 3,
    ),
    "mixin_and_subclass": (
        script("""
        import unittest
        class Mixin:
            def test_mixed(self):
                self.assertEqual(add(2, 9), 11)
        class Base(unittest.TestCase):
            def test_shown(self):
                self.assertEqual(add(1, 2), 3)
        class Derived(Mixin, Base):
            def test_more(self):
                self.assertEqual(add(4, 1), 5)
        """),
        2 / 4,
    ),  # Base.test_shown and Derived.test_shown pass; Derived.test_mixed, test_more fail
    "setattr_and_alias": (
        script("""
        from unittest import TestCase as BaseCase
        class T(BaseCase):
            def test_shown(self):
                self.assertEqual(add(1, 2), 3)
            test_again = test_shown
        def _made(a, b):
            def test(self):
                self.assertEqual(add(a, b), a + b)
            return test
        for _a in (5, 6):
            setattr(T, f"test_made_{_a}", _made(_a, 2))
        """),
        2 / 4,
    ),
    "subtest": (
        script("""
        import unittest
        class T(unittest.TestCase):
            def test_shown(self):
                self.assertEqual(add(1, 2), 3)
            def test_many(self):
                for a in (1, 2, 3):
                    with self.subTest(a=a):
                        self.assertEqual(add(a, 2), a + 2)
        """),
        1 / 2,
    ),  # a failing subtest fails its test
}

HONEST_ONLY = {  # shapes that scored honest code 0 or 0.5
    "expected_failure": script("""
        import unittest
        class T(unittest.TestCase):
            def test_add(self):
                self.assertEqual(add(1, 2), 3)
            @unittest.expectedFailure
            def test_known_bug(self):
                self.assertEqual(add(1, 2), 4)
        """),
    "unguarded_main": script("""
        import unittest
        class T(unittest.TestCase):
            def test_add(self):
                self.assertEqual(add(1, 2), 3)
        unittest.main()
        """),
    "all_parametrized": script("""
        import pytest
        @pytest.mark.parametrize("a, b", [(1, 2), (3, 4)])
        def test_add(a, b):
            assert add(a, b) == a + b
        """),
    "xfail_mark": script("""
        import pytest
        def test_add():
            assert add(1, 2) == 3
        @pytest.mark.xfail(strict=True)
        def test_known_bug():
            assert add(1, 2) == 4
        """),
}


def score_rows(rows: list[str], programs: list[str], **columns) -> list[list[float | None]]:
    """Every program on every row, in one reward call (one batch, as the trainer makes them)."""
    completions = [program for _ in rows for program in programs]
    tests = [row for row in rows for _ in programs]
    extra = {key: [value for _ in rows for _ in programs] for key, value in columns.items()}
    scores = code_execution(completions, test=tests, timeout_s=TIMEOUT_S, **extra)
    return [scores[i : i + len(programs)] for i in range(0, len(scores), len(programs))]


def test_tests_the_runners_find_all_count():
    rows = [text for text, _ in HIDDEN_TESTS.values()] + list(HONEST_ONLY.values())
    got = dict(zip([*HIDDEN_TESTS, *HONEST_ONLY], score_rows(rows, [CORRECT, WRONG, SHOWN_ONLY])))
    for name, (_, shown_share) in HIDDEN_TESTS.items():
        assert got[name] == [1.0, 0.0, pytest.approx(shown_share)], name
    for name in HONEST_ONLY:
        assert got[name][0] == 1.0, name
        assert got[name][1] < 1.0, name


def test_a_script_whose_tests_cannot_be_collected_is_refused_with_a_warning_naming_it(caplog):
    broken = script("""
        import pytest
        @pytest.mark.parametrize("a", [1, 2], ids=["only-one"])
        def test_add(a):
            assert add(a, 1) == a + 1
        """)
    failing_top = "import no_such_module_anywhere\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    with caplog.at_level(logging.INFO, logger="gspo_recipes.rewards.code.reward"):
        got = score_rows([broken, failing_top], [CORRECT, WRONG])
    assert got == [[None, None], [None, None]]
    assert "test_row.py" in caplog.text and "cannot be judged" in caplog.text
    assert "no_such_module_anywhere" in caplog.text


def test_a_program_that_breaks_the_scripts_top_level_scores_zero_not_none():
    top = "EXPECTED = add(1, 2)\n\ndef test_add():\n    assert EXPECTED == 3 and add(2, 2) == 4\n"
    raiser = "def add(a, b):\n    raise ValueError('no')\n"
    assert score_rows([top], [CORRECT, raiser, "x = 1\n"]) == [[1.0, 0.0, 0.0]]


# ----------------------------------------------------------------------------------------------------------------
# Item 3: the entry point comes from the row, never from the program's last function

HUMANEVAL_32 = script("""
    def check(candidate):
        for xs in ([-6, 1], [2, -1]):
            assert abs(poly(xs, candidate(xs))) < 1e-6
    """)
POLY_PROMPT = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\ndef find_zero(xs):\n    pass\n"
# The program's last function is the helper `check` calls: a check of poly against itself would pass.
HELPER_LAST = "def find_zero(xs):\n    return 0.0\n\ndef poly(xs, x):\n    return 0\n"
HONEST_32 = "def find_zero(xs):\n    return -xs[0] / xs[1]\n"


def test_a_check_is_called_on_the_rows_entry_point_and_refused_without_one(caplog):
    assert score_rows([HUMANEVAL_32], [HONEST_32, HELPER_LAST], entry_point="find_zero", helpers=POLY_PROMPT) == [
        [1.0, 0.0]
    ]
    # Without the column, the one function the prompt asks for (its stub) is the row's entry point (it was None).
    assert score_rows([HUMANEVAL_32], [HONEST_32, HELPER_LAST], helpers=POLY_PROMPT) == [[1.0, 0.0]]
    # A prompt that asks for no function, or for two, names none: refused, never guessed from the program.
    for helpers in (POLY_PROMPT.replace("    pass\n", "    return 0\n"), POLY_PROMPT + "\ndef other(x):\n    pass\n"):
        with caplog.at_level(logging.INFO, logger="gspo_recipes.rewards.code.reward"):
            assert score_rows([HUMANEVAL_32], [HONEST_32, HELPER_LAST], helpers=helpers) == [[None, None]]
        assert "entry_point" in caplog.text
    # The script's own `check(find_zero)` names it as well as a column would.
    own_call = HUMANEVAL_32 + "\ncheck(find_zero)\n"
    assert score_rows([own_call], [HONEST_32, HELPER_LAST], helpers=POLY_PROMPT) == [[1.0, 0.0]]


def test_the_weaker_fallback_runs_a_scripts_tests_by_unittests_loader_or_refuses_the_row():
    """Rows whose tests inspect the program's classes run beside the program: there, a script's unittest tests are
    loaded by unittest's loader (all of them one test), and a script needing pytest's fixtures is refused."""
    honest = "class Node:\n    def __init__(self, v):\n        self.v = v\ndef make(v):\n    return Node(v)\n"
    wrong = honest.replace("self.v = v", "self.v = 0")
    unittest_script = script("""
        import unittest
        class T(unittest.TestCase):
            def test_a(self):
                self.assertTrue(isinstance(make(1), Node))
        class U(T):
            def test_b(self):
                self.assertEqual(make(2).v, 2)
        unittest.main()
        """)
    parametrized = script("""
        import pytest
        @pytest.mark.parametrize("v", [1, 2])
        def test_a(v):
            assert isinstance(make(v), Node) and make(v).v == v
        """)
    assert score_rows([unittest_script, parametrized], [honest, wrong]) == [[1.0, 0.0], [None, None]]


def test_a_plain_script_is_one_test_and_keeps_its_own_main():
    own_main = "def main():\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n\nmain()\n"
    asserts = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
    assert score_rows([own_main, asserts], [CORRECT, WRONG, SHOWN_ONLY]) == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


def test_a_collected_test_that_runs_away_fails_alone_under_its_own_alarm():
    runaway = script("""
        import pytest
        def test_runs_away():
            add(1, 2)
            while True:
                pass
        @pytest.fixture
        def slow():
            while True:
                pass
        def test_slow_fixture(slow):
            assert add(1, 2) == 3
        def test_fine():
            assert add(1, 2) == 3
        """)
    assert score_rows([runaway], [CORRECT, WRONG]) == [[pytest.approx(1 / 3), 0.0]]
