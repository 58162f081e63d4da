"""Round four's causes, each judged against a fresh `python` process running the same program and tests: an attack
that the old judge paid scores 0, and an honest twin scores what the fresh process gives it, on the warm path and on
the per-attempt one (`GSPO_SANDBOX_WARM=0`).

Each case is (program, test script); the reference runs the program as `solution.py` and the script, with the
program's names imported, under pytest, in a fresh interpreter.
"""

import subprocess
import sys
import textwrap

import pytest

from gspo_recipes.rewards import code_execution

_FRESH_PYTHON: dict[tuple[str, str], float] = {}


def fresh_python(program: str, script: str, tmp_path) -> float:
    """1.0 when every test of `script` passes against `program` run as a module from a file, else 0.0. Installed
    pytest plugins are not loaded, as in the judge (hypothesis's alone is most of a second of start-up). A pair runs
    once a session: its warm and cold cases share the answer."""
    if (program, script) not in _FRESH_PYTHON:
        (tmp_path / "solution.py").write_text(program)
        (tmp_path / "test_row.py").write_text("from solution import *\n" + script)
        command = [sys.executable, "-m", "pytest", "-q", "--disable-plugin-autoload", "-p", "no:cacheprovider"]
        run = subprocess.run([*command, "test_row.py"], cwd=tmp_path, capture_output=True, timeout=120)
        _FRESH_PYTHON[program, script] = 1.0 if run.returncode == 0 else 0.0
    return _FRESH_PYTHON[program, script]


def score(program: str, script: str, **columns) -> float:
    return code_execution([program], tests=[script], timeout_s=2.0, **columns)[0]


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()


# ----------------------------------------------------------------------------------------------------------------
# 2. The judge's failures are never the test's exceptions

# (attack, honest, script): the attack makes the judge fail in the way the test expects an exception of the program.
JUDGE_FAILURES = {
    "time-out caught as OSError": (
        "def read_config(n):\n    while True:\n        pass\n",
        "def read_config(n):\n    raise FileNotFoundError(n)\n",
        dedent(
            """
            import unittest
            class TestConfig(unittest.TestCase):
                def test_missing(self):
                    with self.assertRaises(OSError):
                        read_config(-1)
            """
        ),
    ),
    "lost worker caught as RuntimeError": (
        "def step(x):\n    import os\n    os._exit(1)\n",
        "def step(x):\n    raise RuntimeError('no step from here')\n",
        "import pytest\ndef test_step():\n    with pytest.raises(RuntimeError):\n        step(1)\n",
    ),
    "refused comparison caught as TypeError": (
        "class Box:\n    pass\ndef pair(a, b):\n    return Box()\n",
        "def pair(a, b):\n    return [a, b]\n",
        "import pytest\ndef test_unhashable():\n    with pytest.raises(TypeError):\n        hash(pair(1, 'a'))\n",
    ),
    "lost worker caught by a bare except": (
        "def parse(text):\n    import os\n    os._exit(0)\n",
        "def parse(text):\n    raise ValueError(text)\n",
        "def test_bad_input_raises_at_most():\n    try:\n        parse('bad')\n    except:\n        pass\n",
    ),
}


@pytest.mark.parametrize("case", sorted(JUDGE_FAILURES))
def test_the_judges_failures_are_not_the_tests_exceptions(case, path, tmp_path):
    attack, honest, script = JUDGE_FAILURES[case]
    assert fresh_python(honest, script, tmp_path) == 1.0
    assert score(honest, script) == 1.0
    assert score(attack, script) == 0.0


# ----------------------------------------------------------------------------------------------------------------
# 3. Exceptions keep their identity

EXCEPTIONS = {
    "a subclass of ValueError": (
        "class InvalidAge(ValueError):\n    pass\ndef check_age(n):\n    if n < 0:\n        raise InvalidAge(n)\n"
        "    return n\n",
        "import pytest\ndef test_negative():\n    with pytest.raises(ValueError):\n        check_age(-1)\n",
    ),
    "a standard library class": (
        "import json\ndef parse(text):\n    return json.loads(text)\n",
        "import json, pytest\ndef test_broken():\n    with pytest.raises(json.JSONDecodeError):\n        parse('{')\n",
    ),
    "a callback's exception reaches the program as itself": (
        "def lookup(get, key):\n    try:\n        return get(key)\n    except KeyError:\n        return 'missing'\n",
        "def test_missing():\n    assert lookup(lambda key: {}[key], 1) == 'missing'\n",
    ),
}


@pytest.mark.parametrize("case", sorted(EXCEPTIONS))
def test_an_honest_programs_exception_keeps_its_class(case, path, tmp_path):
    program, script = EXCEPTIONS[case]
    assert fresh_python(program, script, tmp_path) == 1.0
    assert score(program, script) == 1.0


def test_the_datasets_own_class_is_the_one_the_program_raises(path, tmp_path):
    prompt = "class BankError(Exception):\n    pass\n"
    program = prompt + "def withdraw(amount):\n    if amount < 0:\n        raise BankError(amount)\n    return amount\n"
    script = "import pytest\ndef test_negative():\n    with pytest.raises(BankError):\n        withdraw(-1)\n"
    assert fresh_python(program, script, tmp_path) == 1.0
    assert code_execution([program], tests=[script], helpers=[[prompt]], timeout_s=2.0) == [1.0]


def test_a_look_alike_matches_nothing_the_test_names(path):
    """A class of the program's own named as a built-in one is not the built-in one (never by name)."""
    script = "import pytest\ndef test_negative():\n    with pytest.raises(ValueError):\n        check(-1)\n"
    look_alike = "class ValueError(Exception):\n    pass\ndef check(n):\n    raise ValueError(n)\n"
    runtime = "def check(n):\n    raise StopIteration\n"  # a control-flow exception is neither itself nor a ValueError
    assert score(look_alike, script) == 0.0
    assert score(runtime, script) == 0.0
    assert score("def check(n):\n    raise ValueError(n)\n", script) == 1.0


# ----------------------------------------------------------------------------------------------------------------
# 4. A program is a module run from a file

MODULE = {
    "pickle by module": (
        "import pickle\nclass Point:\n    def __init__(self, x):\n        self.x = x\n"
        "def roundtrip(x):\n    return pickle.loads(pickle.dumps(Point(x))).x\n",
        "def test_roundtrip():\n    assert roundtrip(3) == 3\n",
    ),
    "a partial of its function": (
        "import functools, pickle\ndef add(a, b):\n    return a + b\n"
        "def add_one(x):\n    return pickle.loads(pickle.dumps(functools.partial(add, 1)))(x)\n",
        "def test_add_one():\n    assert add_one(2) == 3\n",
    ),
    "an Enum member": (
        "import enum, pickle\nclass Color(enum.Enum):\n    RED = 1\n"
        "def same_red():\n    return pickle.loads(pickle.dumps(Color.RED)) is Color.RED\n",
        "def test_red():\n    assert same_red() is True\n",
    ),
    "inspect.getsource and __file__": (
        "import inspect, os\ndef me():\n"
        "    return [inspect.getsource(me).splitlines()[0], os.path.basename(__file__)]\n",
        "def test_me():\n    assert me() == ['def me():', 'solution.py']\n",
    ),
    "multiprocessing, fork and spawn": (
        "import multiprocessing as mp\ndef square(x):\n    return x * x\n"
        "def squares(xs, how):\n    with mp.get_context(how).Pool(2) as pool:\n        return pool.map(square, xs)\n",
        "def test_squares():\n    assert squares([1, 2, 3], 'fork') == [1, 4, 9]\n"
        "    assert squares([1, 2, 3], 'spawn') == [1, 4, 9]\n",
    ),
}


@pytest.mark.parametrize("case", sorted(MODULE))
def test_a_program_behaves_as_a_module_run_from_a_file(case, path, tmp_path):
    program, script = MODULE[case]
    assert fresh_python(program, script, tmp_path) == 1.0
    assert code_execution([program], tests=[script], timeout_s=5.0) == [1.0]


# ----------------------------------------------------------------------------------------------------------------
# 6. Failure is 0, never None

CAPPED_ASSERTS = [f"assert f({x}) == {x}" for x in range(70)]


def test_a_program_that_crashes_past_the_worker_cap_scores_0_and_the_run_is_told(path):
    """Each crash costs a worker start; past `MAX_WORKER_STARTS` the rest of the attempt's tests fail (0, the
    program's doing), never None (which reads as "no sandbox here"), and the metric says it happened."""
    metrics = {}
    crashing = "def f(x):\n    import os\n    os._exit(1)\n"
    assert code_execution([crashing], tests=[CAPPED_ASSERTS], timeout_s=2.0, log_metric=metrics.__setitem__) == [0.0]
    assert metrics["rewards/code_execution/worker_cap_frac"] == 1.0
    assert code_execution(["def f(x):\n    return x\n"], tests=[CAPPED_ASSERTS], timeout_s=2.0) == [1.0]


# ----------------------------------------------------------------------------------------------------------------
# 5. Values cross as the test consumes them

LAZY = {
    "a generator the test stops early": (
        "def count_up():\n    yield 1\n    yield 2\n    while True:\n        pass\n",
        "def test_first_two():\n    items = count_up()\n    assert next(items) == 1\n    assert next(items) == 2\n",
    ),
    "an endless generator taken through islice": (
        "def squares():\n    n = 0\n    while True:\n        yield n * n\n        n += 1\n",
        "import itertools\ndef test_squares():\n    assert list(itertools.islice(squares(), 5)) == [0, 1, 4, 9, 16]\n",
    ),
    "a map the test reads one item of": (
        "def halves(xs):\n    return map(lambda x: 10 // x, xs)\n",
        "def test_first():\n    assert next(iter(halves([5, 0]))) == 2\n",
    ),
}


@pytest.mark.parametrize("case", sorted(LAZY))
def test_what_a_test_does_not_consume_never_runs(case, path, tmp_path):
    program, script = LAZY[case]
    assert fresh_python(program, script, tmp_path) == 1.0
    assert score(program, script) == 1.0


# ----------------------------------------------------------------------------------------------------------------
# 7. Round three's residue

STUB_PROMPT = "Write a function that adds two numbers.\n```python\ndef add(a, b):\n    pass\n```\n"


def test_a_stub_the_prompt_fences_is_the_programs_to_fill_in(path):
    """An MBPP prompt that shows the function's signature as a fenced stub: the stub is not a helper of the
    dataset's (it returned None for every call, and honest code scored 0)."""
    honest, wrong = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
    for program, expected in ((honest, 1.0), (wrong, 0.0)):
        assert subprocess.run([sys.executable, "-c", program + "\n".join(tests)]).returncode == (expected == 0.0)
        assert code_execution([program], tests=[tests], prompts=[STUB_PROMPT], timeout_s=2.0) == [expected]


YIELD_SCRIPT = dedent(
    """
    def test_generator():
        assert f(1) == 1
        yield
    def test_plain():
        assert f(2) == 2
    class TestMore:
        def test_generator_method(self):
            assert f(3) == 3
            yield
    """
)


def test_a_yield_test_fails_itself_and_the_rows_other_tests_count(path):
    """pytest does not run yield tests (it errors on them): each is one failed test, never a refused row (None)."""
    assert code_execution(["def f(x):\n    return x\n"], tests=[YIELD_SCRIPT], timeout_s=2.0) == [pytest.approx(1 / 3)]
    assert code_execution(["def f(x):\n    return -x\n"], tests=[YIELD_SCRIPT], timeout_s=2.0) == [0.0]


CHAT_PROMPT = dedent(
    '''
    Complete the function below.

    def poly(xs, x):
        return sum(c * x ** i for i, c in enumerate(xs))

    def find_zero(xs):
        """A zero of the polynomial with coefficients xs (two of them)."""

    Return only the code.
    '''
)
CHECK_32 = "def check(candidate):\n    assert abs(poly([1, 2], candidate([1, 2]))) < 1e-6\n"


def test_a_chat_prompts_unfenced_code_is_the_datasets_helper(path):
    """A chat prompt whose code is inline, between prose, gives its helpers as a fenced one does: the program that
    relies on the prompt's `poly` (as HumanEval's canonical solutions do) scored 0 without it."""
    honest = "def find_zero(xs):\n    return -xs[0] / xs[1]\n"
    forged = "def find_zero(xs):\n    return 0.0\n\ndef poly(xs, x):\n    return 0\n"  # its own `poly`: never used
    helpers = CHAT_PROMPT[CHAT_PROMPT.index("def poly") : CHAT_PROMPT.index("Return only")]
    reference = subprocess.run([sys.executable, "-c", helpers + honest + CHECK_32 + "check(find_zero)\n"])
    assert reference.returncode == 0
    prompts = [[{"role": "user", "content": CHAT_PROMPT}]] * 2
    scores = code_execution([honest, forged], tests=[CHECK_32] * 2, entry_point=["find_zero"] * 2, prompts=prompts,
                            timeout_s=2.0)  # fmt: skip
    assert scores == [1.0, 0.0]


# Round three's residue (item 7), against the same reference. An object of the program's that holds nothing but
# claims a length, members and truth crosses as a handle, and the test's `len`, `in` and `bool` on it fail: 0, where
# a fresh process believes it.
LIAR = dedent(
    """
    def evens(n):
        class Liar:
            def __len__(self):
                return n // 2
            def __contains__(self, x):
                return True
            def __bool__(self):
                return True
        return Liar()
    """
)
LIES = {
    "len": "def test_len():\n    assert len(evens(6)) == 3\n",
    "contains": "def test_in():\n    assert 4 in evens(6) and 2 in evens(6)\n",
    "bool": "def test_bool():\n    assert evens(6)\n",
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_an_object_that_lies_about_what_it_holds_scores_0(lie, path, tmp_path):
    assert fresh_python(LIAR, LIES[lie], tmp_path) == 1.0  # the lie fools a fresh process
    assert score(LIAR, LIES[lie]) == 0.0


CHECK_ADD = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n"


def test_a_program_that_defines_check_is_judged_by_the_rows_check(path):
    """A program whose last function is a `check` of its own (HumanEval's test function's name) neither replaces the
    row's check nor makes the row unjudgeable (it scored None): the honest one 1.0, the one whose `check` passes
    anything 0.0, as in a fresh process where the row's `check` is defined after the program."""
    honest = "def add(a, b):\n    return a + b\n\ndef check(candidate):\n    pass\n"
    forged = "def add(a, b):\n    return 0\n\ndef check(candidate):\n    pass\n"
    for program, expected in ((honest, 1.0), (forged, 0.0)):
        reference = subprocess.run([sys.executable, "-c", program + CHECK_ADD + "check(add)\n"], capture_output=True)
        assert (reference.returncode == 0) == (expected == 1.0)
        assert score(program, CHECK_ADD, entry_point=["add"]) == expected


# ----------------------------------------------------------------------------------------------------------------
# 7. Round three's residue: files the test and the program share (BigCodeBench's file tasks)

# (program, test script): each passes in a fresh process, where the test and the program share one filesystem.
FILE_TASKS = {
    "fixture in, file out": (
        dedent(
            """
            import csv, os
            def task_func(path, out="summary.csv"):
                with open(path) as f:
                    total = sum(int(row[1]) for row in csv.reader(f))
                with open(out, "w") as f:
                    f.write(f"total,{total}\\n")
                return os.path.abspath(out)
            """
        ),
        dedent(
            """
            import os, tempfile, unittest
            class TestSummary(unittest.TestCase):
                def setUp(self):
                    self.path = os.path.join(tempfile.mkdtemp(), "in.csv")
                    with open(self.path, "w") as f:
                        f.write("a,1\\nb,2\\n")
                def test_output_file(self):
                    result = task_func(self.path)
                    self.assertTrue(os.path.isfile("summary.csv"))
                    with open(result) as f:
                        self.assertEqual(f.read(), "total,3\\n")
            """
        ),
    ),
    "files into the test's folder, one removed": (
        dedent(
            """
            import os
            def task_func(folder):
                for name in ("a.bin", "b.bin"):
                    with open(os.path.join(folder, name), "wb") as f:
                        f.write(bytes(range(256)) * 4)
                os.remove(os.path.join(folder, "old.txt"))
                os.mkdir(os.path.join(folder, "empty"))
                return len(os.listdir(folder))
            """
        ),
        dedent(
            """
            import os, tempfile
            def test_folder():
                folder = tempfile.mkdtemp()
                open(os.path.join(folder, "old.txt"), "w").close()
                assert task_func(folder) == 3
                assert sorted(os.listdir(folder)) == ["a.bin", "b.bin", "empty"]
                with open(os.path.join(folder, "b.bin"), "rb") as f:
                    assert f.read() == bytes(range(256)) * 4
            """
        ),
    ),
    "a file rewritten between calls": (
        "def bump(path):\n    n = int(open(path).read())\n    open(path, 'w').write(str(n + 1))\n    return n\n",
        dedent(
            """
            def test_counter():
                open("count.txt", "w").write("7")
                assert bump("count.txt") == 7
                assert open("count.txt").read() == "8"
                open("count.txt", "w").write("40")
                assert bump("count.txt") == 40 and bump("count.txt") == 41
                assert open("count.txt").read() == "42"
            """
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(FILE_TASKS))
def test_the_test_and_the_program_share_files_as_in_one_process(case, path, tmp_path):
    """Each sandbox has its own /tmp; what one side changes there crosses with each call and its reply (it scored 0:
    the program never saw the test's files, nor the test the program's)."""
    program, script = FILE_TASKS[case]
    assert fresh_python(program, script, tmp_path) == 1.0
    assert score(program, script) == 1.0
    assert score(program.replace("return", "return None and"), script) == 0.0  # the files alone pass nothing


def test_a_module_the_program_plants_where_the_judge_imports_never_runs(path, tmp_path):
    """A program that writes a module into the working directory (on the judge's import path as '', the pool's
    processes being `python -c`) does not run in the judge: the judge drops every import path the program could
    write to. A fresh process, whose test file sits in that directory, imports it."""
    forged = dedent(
        """
        def double(x):
            with open("colorsys.py", "w") as f:
                f.write("import unittest\\nunittest.TestCase.assertEqual = lambda *a, **k: None\\n")
            return 0
        """
    )
    script = dedent(
        """
        import unittest
        class TestDouble(unittest.TestCase):
            def test_double(self):
                got = double(2)
                import colorsys
                self.assertEqual(got, 4)
        """
    )
    assert fresh_python(forged, script, tmp_path) == 1.0
    assert score(forged, script) == 0.0
    assert score("def double(x):\n    return 2 * x\n", script) == 1.0
