"""Honest results are carried whole (issue 26, item 8), and decoding stays bounded (item 6): each honest program here
scores 1.0 in the judge, beside a wrong answer or an attack that scores 0."""

import sys
import textwrap
import time

import pytest

from gspo_recipes.rewards import code_execution
from gspo_recipes.rewards.code.judge import remote
from gspo_recipes.rewards.code.sandbox.inside import wire

TIMEOUT_S = 2.0


def code(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


# (honest program, wrong program, tests): the wrong one gets the types right and the values wrong.
CARRIED = {
    "counter_mbpp_88": (
        "import collections\ndef freq_count(list1):\n    return collections.Counter(list1)\n",
        "import collections\ndef freq_count(list1):\n    return collections.Counter(list1[1:])\n",
        ["assert freq_count([10, 10, 20, 40]) == {10: 2, 20: 1, 40: 1}",
         "from collections import Counter\nassert freq_count('aab') == Counter('aab')",
         "assert freq_count('aab').most_common(1) == [('a', 2)]"],
    ),
    "defaultdict": (
        "from collections import defaultdict\ndef group(xs):\n    d = defaultdict(list)\n"
        "    for x in xs:\n        d[x % 2].append(x)\n    return d\n",
        "from collections import defaultdict\ndef group(xs):\n    return defaultdict(list)\n",
        ["assert group([1, 2, 3]) == {1: [1, 3], 0: [2]}", "assert group([1])[5] == []\nassert group([1])[1] == [1]"],
    ),
    "ordereddict_namedtuple_deque": (
        code("""
            from collections import OrderedDict, namedtuple, deque
            Point = namedtuple("Point", "x y")
            def od():
                return OrderedDict([("b", 1), ("a", 2)])
            def pt(x, y):
                return Point(x, y)
            def last(xs, n):
                return deque(xs, maxlen=n)
            """),
        "def od():\n    return {'a': 2, 'b': 1}\ndef pt(x, y):\n    return (y, x)\ndef last(xs, n):\n    return xs\n",
        ["from collections import OrderedDict\nassert od() == OrderedDict([('b', 1), ('a', 2)])\n"
         "assert list(od()) == ['b', 'a']",
         "p = pt(1, 2)\nassert p.x == 1 and p.y == 2 and p == (1, 2)",
         "from collections import deque\nassert last([1, 2, 3], 2) == deque([2, 3])"],
    ),
    "numbers_and_views": (
        code("""
            from fractions import Fraction
            from decimal import Decimal
            def third():
                return Fraction(1, 3)
            def price():
                return Decimal("1.10")
            def keys(d):
                return d.keys()
            def uniq(xs):
                return set(xs), bytes(xs)
            """),
        "def third():\n    return 0.333\ndef price():\n    return 1.1\ndef keys(d):\n    return list(d)[:1]\n"
        "def uniq(xs):\n    return set(), b''\n",
        ["from fractions import Fraction\nassert third() == Fraction(1, 3) and type(third()) is Fraction",
         "from decimal import Decimal\nassert str(price()) == '1.10'",
         "assert sorted(keys({'b': 1, 'a': 2})) == ['a', 'b']",
         "assert uniq([1, 1, 2]) == ({1, 2}, bytes([1, 1, 2]))"],
    ),
    "numpy": (
        "import numpy\ndef total(n):\n    return numpy.arange(n).sum()\ndef ramp(n):\n    return numpy.arange(n) * 2\n",
        "import numpy\ndef total(n):\n    return numpy.int64(0)\ndef ramp(n):\n    return numpy.zeros(n)\n",
        ["assert total(4) == 6",
         "assert np.array_equal(ramp(3), [0, 2, 4])",  # `np` unimported: the judge's own numpy
         "import numpy as np\nassert ramp(2).dtype == np.arange(2).dtype and (ramp(2) == np.array([0, 2])).all()"],
    ),
    "in_place": (
        "def fill(xs=None, value=0):\n    xs.append(value)\ndef tidy(xs):\n    xs.sort()\n    return xs\n",
        "def fill(xs=None, value=0):\n    return xs + [value]\ndef tidy(xs):\n    return sorted(xs)\n",
        ["xs = []\nfill(xs=xs, value=3)\nassert xs == [3]",  # changed in place through a keyword
         "xs = [3, 1, 2]\ntidy(xs)\nassert xs == [1, 2, 3]"],  # sorted in place and returned
    ),
    "generators_and_objects": (
        code("""
            def naturals():
                n = 0
                while True:
                    yield n
                    n += 1
            class Stack:
                def __init__(self):
                    self.items = []
                def push(self, x):
                    self.items.append(x)
                def pop(self):
                    return self.items.pop()
            def make_stack():
                return Stack()
            """),
        "def naturals():\n    while True:\n        yield 0\nclass Stack:\n    def push(self, x):\n        pass\n"
        "    def pop(self):\n        return 0\ndef make_stack():\n    return Stack()\n",
        ["import itertools\nassert list(itertools.islice(naturals(), 4)) == [0, 1, 2, 3]",
         "s = Stack()\ns.push(4)\ns.push(5)\nassert s.pop() == 5 and s.pop() == 4",
         "s = make_stack()\ns.push(7)\nassert s.pop() == 7"],  # a factory's object, used as an object
    ),
}  # fmt: skip


def test_honest_results_are_carried_whole_and_wrong_ones_are_not():
    pytest.importorskip("numpy")
    names = list(CARRIED)
    completions, tests = [], []
    for name in names:
        honest, wrong, row_tests = CARRIED[name]
        completions += [honest, wrong]
        tests += [row_tests, row_tests]
    # The reward's default budget: 14 programs start at once here, some importing numpy, on a shared machine.
    scores = code_execution(completions, tests=tests)
    for i, name in enumerate(names):
        assert scores[2 * i : 2 * i + 2] == [1.0, 0.0], name


def test_a_changed_argument_still_keeps_its_value_within_the_comparing_statement():
    clears_and_returns = "def fix(x):\n    x.clear()\n    return x\n"
    tests = [["xs = [3, 1, 2]\nassert fix(xs) == sorted(xs)"], ["xs = [3, 1, 2]\nfix(xs)\nassert xs == []"]]
    assert code_execution([clears_and_returns] * 2, tests=tests, timeout_s=TIMEOUT_S) == [0.0, 1.0]


def test_a_capitalised_function_is_a_function_whatever_its_case():
    honest = "def Find_Max(words):\n    return max(words, key=len)\n"
    liar = code("""
        class _Yes:
            def __getattr__(self, name):
                return lambda *a, **k: True
        def Find_Max(words):
            return _Yes()
        """)
    tests = ["assert Find_Max(['a', 'abc']).startswith('abc')", "assert Find_Max(['ab', 'a']).endswith('b')"]
    assert code_execution([honest, liar], tests=[tests] * 2, timeout_s=TIMEOUT_S) == [1.0, 0.0]


def test_a_programs_own_np_is_never_the_tests_np():
    pytest.importorskip("numpy")
    fake = code("""
        class np:
            @staticmethod
            def array_equal(a, b):
                return True
        def ramp(n):
            return [0] * n
        """)
    honest = "def ramp(n):\n    return [2 * i for i in range(n)]\n"  # imports nothing: the tests' np is the judge's
    tests = ["assert np.array_equal(ramp(3), [0, 2, 4])"]
    assert code_execution([honest, fake], tests=[tests] * 2, timeout_s=TIMEOUT_S) == [1.0, 0.0]


def test_colliding_tuples_are_refused_before_a_set_is_built():
    flood = "def pairs():\n    return [(k * (2**61 - 1) + 5, 1) for k in range(1, 40_000)]\n"
    honest = "def pairs():\n    return [(k, 1) for k in range(1, 40_000)]\n"
    tests = ["assert len(set(pairs())) == 39_999"]
    start = time.monotonic()
    assert code_execution([honest, flood], tests=[tests] * 2, timeout_s=TIMEOUT_S) == [1.0, 0.0]
    assert time.monotonic() - start < 30  # the flood alone takes minutes in a set


@pytest.mark.parametrize(
    "value",
    [
        [(k * (2**61 - 1) + 5, 1) for k in range(1, 1000)],
        {frozenset({k * (2**61 - 1) + 5}) for k in range(1, 1000)},
        [complex(5 - 1000003 * i, i) for i in range(1000)],
    ],
)
def test_the_decoder_caps_equal_hash_groups_of_every_hashable_type(value):
    with pytest.raises(wire.NotPlainData):
        wire.decode(wire.encode(value))
    assert len(wire.decode(wire.encode(list(range(100_000))))) == 100_000  # distinct hashes: no cap


def test_the_judge_imports_nothing_a_program_names():
    assert "wsgiref.simple_server" not in sys.modules
    assert remote.judges_copy("simple_server", ["wsgiref.simple_server", ""]) is remote.ABSENT
    assert "wsgiref.simple_server" not in sys.modules


def test_functions_the_test_passes_are_called_back_across_the_boundary():
    honest = "def apply(f, xs):\n    return [f(x) for x in xs]\ndef best(xs, key=None):\n    return max(xs, key=key)\n"
    wrong = "def apply(f, xs):\n    return xs\ndef best(xs, key=None):\n    return xs[0]\n"
    raising = code("""
        def boom(x):
            raise ValueError("no")
        try:
            apply(boom, [1])
        except Exception:
            pass
        else:
            raise AssertionError("the test's function raised, and the program did not see it")
        """)
    tests = ["assert apply(lambda x: x * 2, [1, 2]) == [2, 4]", "assert best(['a', 'ccc', 'bb'], key=len) == 'ccc'",
             raising + "assert apply(abs, [-1]) == [1]"]  # fmt: skip
    assert code_execution([honest, wrong], tests=[tests] * 2, timeout_s=TIMEOUT_S) == [1.0, 0.0]


def test_setup_objects_are_made_again_after_the_program_crashes():
    stack = code("""
        import os
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                if x == 99:
                    os._exit(1)  # a crash on one input: that test fails, the others still count
                self.items.append(x)
            def pop(self):
                return self.items.pop()
        """)
    tests = [f"s.push({x})\nassert s.pop() == {x}" for x in (1, 99, 2, 3)]
    assert code_execution([stack], tests=[tests], test_setup_code=["s = Stack()"], timeout_s=TIMEOUT_S) == [0.75]
