"""Round five: what the program raises and returns keeps its identity across the sandbox's wall, as in one process.
Each attack scores 0 and its honest twin what a fresh `python` gives it (`test_code_verdicts.fresh_python`), on the
warm path and on the per-attempt one.
"""

import pytest
from test_code_verdicts import dedent, fresh_python, score

from gspo_recipes.rewards import code_execution

# ----------------------------------------------------------------------------------------------------------------
# Exceptions by identity

# A program's own class named like the test script's: in one process it is another class, which the test's
# `assertRaises`/`pytest.raises`/`except` do not catch.
NAMESAKE = "class TheTestsError(Exception):\n    pass\ndef withdraw(n):\n    raise TheTestsError(n)\n"
NAMESAKE_SCRIPTS = {
    "assertRaises": dedent(
        """
        import unittest
        class TheTestsError(Exception):
            pass
        class TestWithdraw(unittest.TestCase):
            def test_negative(self):
                with self.assertRaises(TheTestsError):
                    withdraw(-1)
        """
    ),
    "pytest.raises": dedent(
        """
        import pytest
        class TheTestsError(Exception):
            pass
        def test_negative():
            with pytest.raises(TheTestsError):
                withdraw(-1)
        """
    ),
    "except": dedent(
        """
        class TheTestsError(Exception):
            pass
        def test_negative():
            try:
                withdraw(-1)
            except TheTestsError:
                return
            assert False
        """
    ),
}


@pytest.mark.parametrize("style", sorted(NAMESAKE_SCRIPTS))
def test_a_class_named_like_the_tests_is_not_the_tests(style, path, tmp_path):
    script = NAMESAKE_SCRIPTS[style]
    assert fresh_python(NAMESAKE, script, tmp_path) == 0.0
    assert score(NAMESAKE, script) == 0.0
    # Its honest twin: the program's own class, caught by its built-in base, as in one process.
    honest = NAMESAKE.replace("(Exception)", "(ArithmeticError)", 1)
    twin = script.replace("TheTestsError)", "ArithmeticError)").replace("TheTestsError:", "ArithmeticError:")
    assert fresh_python(honest, twin, tmp_path) == 1.0
    assert score(honest, twin) == 1.0


CATCH_ALL = {
    "assertRaises(Exception)": dedent(
        """
        import unittest
        class TestStop(unittest.TestCase):
            def test_stop(self):
                with self.assertRaises(Exception):
                    stop(1)
        """
    ),
    "pytest.raises(Exception)": (
        "import pytest\ndef test_stop():\n    with pytest.raises(Exception):\n        stop(1)\n"
    ),
    "except Exception": "def test_stop():\n    try:\n        stop(1)\n    except Exception:\n        pass\n",
}
NOT_EXCEPTIONS = ("SystemExit", "KeyboardInterrupt", "GeneratorExit")


@pytest.mark.parametrize("raised", NOT_EXCEPTIONS)
@pytest.mark.parametrize("style", sorted(CATCH_ALL))
def test_base_exceptions_are_never_caught_as_exceptions(raised, style, path, tmp_path):
    program = f"def stop(n):\n    raise {raised}(n)\n"
    script = CATCH_ALL[style]
    assert fresh_python(program, script, tmp_path) == 0.0
    assert score(program, script) == 0.0


def test_the_runners_look_ups_never_reach_the_program(path):
    """pytest looks up marks and fixture markers on every name of the test module while it collects: a program
    object that answers them (here, by raising SystemExit, which `except Exception` no longer hides) is never
    asked, so the row is judged as usual (the honest object 1.0, the wrong one 0.0), never refused."""
    program = (
        "class Add:\n    def __call__(self, a, b):\n        return a + b\n"
        "    def __getattr__(self, name):\n        raise SystemExit(name)\nadd = Add()\n"
    )
    script = "def test_add():\n    assert add(1, 2) == 3\ndef test_more():\n    assert add(2, 2) == 4\n"
    assert score(program, script) == 1.0
    assert score(program.replace("a + b", "a - b"), script) == 0.0


@pytest.mark.parametrize("raised", NOT_EXCEPTIONS)
def test_base_exceptions_are_themselves(raised, path, tmp_path):
    program = f"def stop(n):\n    raise {raised}(n)\n"
    script = f"import pytest\ndef test_stop():\n    with pytest.raises({raised}):\n        stop(1)\n"
    assert fresh_python(program, script, tmp_path) == 1.0
    assert score(program, script) == 1.0


# ----------------------------------------------------------------------------------------------------------------
# Honest values whole

# (program, test script): each passes in a fresh process, and was refused or altered on the wire.
WHOLE = {
    "a fluent chain of the program's own .add()": (
        dedent(
            """
            class Bag:
                def __init__(self):
                    self.items = []
                def add(self, x):
                    self.items.append(x)
                    return self
                def total(self):
                    return sum(self.items)
            """
        ),
        "def test_chain():\n    assert Bag().add(1).add(2).add(4).total() == 7\n",
    ),
    "clone().pop()": (
        dedent(
            """
            class Stack:
                def __init__(self, items=()):
                    self.items = list(items)
                def push(self, x):
                    self.items.append(x)
                def clone(self):
                    return Stack(self.items)
                def pop(self):
                    return self.items.pop()
            """
        ),
        "def test_clone():\n    s = Stack()\n    s.push(1)\n    s.push(2)\n    c = s.clone()\n"
        "    assert c.pop() == 2 and c.pop() == 1 and s.pop() == 2\n",
    ),
    "a factory's object with list-like methods": (
        dedent(
            """
            class Queue:
                def __init__(self):
                    self.items = []
                def append(self, x):
                    self.items.append(x)
                def pop(self):
                    return self.items.pop(0)
                def count(self, x):
                    return self.items.count(x)
            def make_queue():
                return Queue()
            """
        ),
        "def test_queue():\n    q = make_queue()\n    q.append(1)\n    q.append(2)\n    q.append(1)\n"
        "    assert q.count(1) == 2 and q.pop() == 1 and q.pop() == 2\n",
    ),
    "a test's function keeps its name and signature": (
        dedent(
            """
            import inspect
            def describe(function):
                return [function.__name__, str(inspect.signature(function)), function(3)]
            """
        ),
        "def test_describe():\n    def triple(x, scale=3, *, label='n'):\n        return x * scale\n"
        "    assert describe(triple) == ['triple', \"(x, scale=3, *, label='n')\", 9]\n",
    ),
    "an in-place sort that also returns its list": (
        "def sort_in_place(xs):\n    xs.sort()\n    return xs\n",
        dedent(
            """
            def test_the_same_list():
                xs = [3, 1, 2]
                assert sort_in_place(xs) == [1, 2, 3]
                assert sort_in_place(xs) is xs
                ys = [9, 8]
                assert sort_in_place(ys) == ys
                zs = sort_in_place([5, 4])
                zs.append(6)
                assert zs == [4, 5, 6]
            """
        ),
    ),
    "a set of ints in the order one process has": (
        "def squares(n):\n    return {k * k for k in range(n)}\n",
        "def test_order():\n    assert list(squares(12)) == list({k * k for k in range(12)})\n",
    ),
}


@pytest.mark.parametrize("case", sorted(WHOLE))
def test_honest_values_cross_whole(case, path, tmp_path):
    program, script = WHOLE[case]
    assert fresh_python(program, script, tmp_path) == 1.0
    assert score(program, script) == 1.0


def test_a_factorys_object_with_list_like_methods_in_a_row_of_asserts(path):
    """The same object in an MBPP row (no runner looks the program's names up first): changed through `.append`, it
    is the test's object, and its `.count` and `.pop` are its own (they were refused as a built-in list's: 0)."""
    program = WHOLE["a factory's object with list-like methods"][0]
    tests = ["q = make_queue()\nq.append(1)\nq.append(2)\nq.append(1)\nassert q.count(1) == 2 and q.pop() == 1"]
    assert code_execution([program], tests=[tests], timeout_s=2.0) == [1.0]
    wrong = program.replace("self.items.count(x)", "len(self.items)")
    assert code_execution([wrong], tests=[tests], timeout_s=2.0) == [0.0]
    liar = "def make_queue():\n    class Q:\n        def count(self, x):\n            return 2\n    return Q()\n"
    assert code_execution([liar], tests=[["assert make_queue().count(1) == 2"]], timeout_s=2.0) == [0.0]


# An object that holds nothing but answers iteration with the expected items: a fresh process believes it, as it
# believes a length, members or truth it claims (`test_code_verdicts.LIES`); the judge iterates only iterators and
# objects the test uses as objects.
ITERATION_LIAR = dedent(
    """
    def evens(n):
        class Liar:
            def __iter__(self):
                return iter(range(0, n, 2))
        return Liar()
    """
)
ITERATION_LIES = {
    "list": "def test_list():\n    assert list(evens(6)) == [0, 2, 4]\n",
    "sorted": "def test_sorted():\n    assert sorted(evens(6)) == [0, 2, 4]\n",
    "for": "def test_for():\n    seen = []\n    for x in evens(6):\n        seen.append(x)\n"
    "    assert seen == [0, 2, 4]\n",
}


@pytest.mark.parametrize("lie", sorted(ITERATION_LIES))
def test_an_object_that_lies_about_its_items_scores_0(lie, path, tmp_path):
    assert fresh_python(ITERATION_LIAR, ITERATION_LIES[lie], tmp_path) == 1.0  # the lie fools a fresh process
    assert score(ITERATION_LIAR, ITERATION_LIES[lie]) == 0.0
    generator = "def evens(n):\n    return (x for x in range(0, n, 2))\n"  # an iterator: its items are data
    assert score(generator, ITERATION_LIES[lie]) == 1.0


# ----------------------------------------------------------------------------------------------------------------
# The test's process state: its working directory and environment reach the program with each call

STATE = (
    "import os\ndef where(name):\n"
    "    return [os.path.basename(os.getcwd()), os.environ.get(name), os.path.exists('in.txt')]\n",
    dedent(
        """
        import os
        def test_state(tmp_path, monkeypatch):
            (tmp_path / "in.txt").write_text("x")
            monkeypatch.chdir(tmp_path)
            monkeypatch.setenv("GSPO_MODE", "fast")
            assert where("GSPO_MODE") == [tmp_path.name, "fast", True]
            monkeypatch.delenv("GSPO_MODE")
            assert where("GSPO_MODE") == [tmp_path.name, None, True]
        """
    ),
)


def test_the_tests_process_state_reaches_the_program(path, tmp_path):
    program, script = STATE
    assert fresh_python(program, script, tmp_path) == 1.0
    assert score(program, script) == 1.0
    wrong = program.replace("os.environ.get(name)", "'fast'")
    assert score(wrong, script) == 0.0
