"""Reward hacking: every completion in reward_hacks.py must score exactly what the honest wrong answer scores, in each
test style (MBPP asserts, HumanEval script with check(entry_point), stdin/stdout), next to honest controls.

Each style is scored in one batch (parallel through the judge pool); the per-hack tests read the batch's scores.
"""

import functools

import pytest
from reward_hacks import HACKS, WRONG

from gspo_recipes.rewards import code_execution, code_execution_binary
from gspo_recipes.rewards.code import plan, reward
from gspo_recipes.rewards.code.sandbox.launch import Limits

CORRECT = "def add(a, b):\n    return a + b\n"
PARTIAL = "def add(a, b):\n    return a + b if a > 0 else 0\n"
CONTROLS = {"correct": CORRECT, "wrong": WRONG, "partial": PARTIAL}
TIMEOUT_S = 2.0

ASSERTS = [
    "assert add(1, 2) == 3",
    "assert add(2, 5) == 7",
    "assert add(-1, 3) == 2",
    "assert math.fabs(add(0.5, 0.25) - 0.75) < 1e-9",  # `math` from the program's import, as MBPP rows assume
    "assert isinstance(add(2, 3), int) and add(2, 3) == 5",
]
SCRIPT = (
    "import math\n\ndef check(candidate):\n"
    + "".join(f"    {test.replace('add(', 'candidate(')}\n" for test in ASSERTS)
    + "    assert abs(candidate(10, 20) - 30) < 1e-6\n    assert set([candidate(1, 1)]) == {2}\n"
)
IO_MAIN = "\nprint(add(*map(int, input().split())))\n"
IO_CASES = [
    {"input": "1 2\n", "output": "3\n"},
    {"input": "2 5\n", "output": "7\n"},
    {"input": "-1 3\n", "output": "2\n"},
]
# What the honest answers score; the hacks must score exactly what WRONG scores.
EXPECTED = {"asserts": {"correct": 1.0, "wrong": 0.0, "partial": 0.8}, "script": {"correct": 1.0, "wrong": 0.0,
            "partial": 0.0}, "io": {"correct": 1.0, "wrong": 0.0, "partial": pytest.approx(2 / 3)}}  # fmt: skip

# A HumanEval-style row whose tests use a helper the prompt defines (HumanEval/32's `poly`).
POLY_PROMPT = (
    "Complete this function and return all of it:\n```python\n"
    "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\n"
    'def find_zero(xs):\n    """A zero of the polynomial with coefficients xs."""\n```'
)
POLY_TEST = (
    "def check(candidate):\n"
    "    for xs in ([-6, 1], [2, -1], [-3, 0, 1]):\n"
    "        assert abs(poly(xs, candidate(xs))) < 1e-6\n"
)
POLY_CORRECT = (
    "def find_zero(xs):\n"
    "    lo, hi = -100.0, 100.0\n"
    "    f = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n"
    "    for _ in range(200):\n"
    "        mid = (lo + hi) / 2\n"
    "        lo, hi = (mid, hi) if f(lo) * f(mid) > 0 else (lo, mid)\n"
    "    return lo\n"
)
POLY_WRONG = "def find_zero(xs):\n    return 0.0\n"
POLY_HACKS = {
    "helper_redefined": "def poly(xs, x):\n    return 0\n\n" + POLY_WRONG,
    "helper_patched_from_the_function": (
        "def find_zero(xs):\n    global poly\n    poly = lambda xs, x: 0\n    return 0.0\n"
    ),
    "helper_redefined_as_fake_builtins_abs": "import builtins\nbuiltins.abs = lambda x: 0\n" + POLY_WRONG,
}


@functools.cache
def scores(style: str) -> dict[str, float | None]:
    """Every control and hack scored in one batch for `style`."""
    programs = {**CONTROLS, **HACKS}
    names, sources = list(programs), list(programs.values())
    if style == "asserts":
        result = code_execution(sources, tests=[ASSERTS] * len(sources), timeout_s=TIMEOUT_S)
    elif style == "script":
        result = code_execution(sources, test=[SCRIPT] * len(sources), entry_point=["add"] * len(sources),
                                timeout_s=TIMEOUT_S)  # fmt: skip
    else:
        result = code_execution([s + IO_MAIN for s in sources], io_tests=[IO_CASES] * len(sources), timeout_s=TIMEOUT_S)
    return dict(zip(names, result))


@pytest.mark.parametrize("style", ["asserts", "script", "io"])
@pytest.mark.parametrize("control", list(CONTROLS))
def test_honest_controls_score_as_expected(style, control):
    assert scores(style)[control] == EXPECTED[style][control]


@pytest.mark.parametrize("style", ["asserts", "script", "io"])
@pytest.mark.parametrize("hack", list(HACKS))
def test_hack_scores_like_the_honest_wrong_answer(style, hack):
    assert scores(style)[hack] == scores(style)["wrong"] == 0.0


def test_binary_reward_gives_hacks_nothing():
    sources = [CORRECT, *HACKS.values()]
    result = code_execution_binary(sources, tests=[ASSERTS] * len(sources), timeout_s=TIMEOUT_S)
    assert result == [1.0] + [0.0] * len(HACKS)


def test_helpers_the_prompt_defines_come_from_the_prompt():
    sources = [POLY_CORRECT, POLY_WRONG, *POLY_HACKS.values()]
    result = code_execution(sources, test=[POLY_TEST] * len(sources), entry_point=["find_zero"] * len(sources),
                            prompts=[POLY_PROMPT] * len(sources), timeout_s=TIMEOUT_S)  # fmt: skip
    assert result == [1.0, 0.0] + [0.0] * len(POLY_HACKS)
    chat = [[{"role": "system", "content": "Be careful."}, {"role": "user", "content": POLY_PROMPT}]]
    assert code_execution([POLY_HACKS["helper_redefined"]], test=[POLY_TEST], entry_point=["find_zero"],
                          prompts=chat) == [0.0]  # fmt: skip


def test_the_hacks_do_beat_the_in_process_harness():
    """The suite has teeth: against the old design (tests beside the model's code, verdict = exit status) the
    forging hacks pass everything. The fallback still runs that way, for rows that inspect program classes."""
    forging = [
        "frame_walk",
        "gc_heap_scan",
        "builtins_exec_replaced",
        "always_equal_object",
        "int_subclass_equal_to_everything",
    ]
    backend = reward.resolve_backend(None)
    for name in forging:
        [job] = plan._fallback_jobs(HACKS[name], "asserts", None, ASSERTS[:3] + ASSERTS[4:], "", TIMEOUT_S, Limits())
        passed, total = reward._run_job(job, backend)
        assert passed >= total - 1, name  # every test, or all but the isinstance guard


def test_results_cross_as_plain_data_and_mutated_arguments_come_back():
    program = (
        "import collections\n"
        "def stats(xs):\n    xs.sort()\n"
        "    return {'min': xs[0], 'count': collections.Counter(xs)[xs[0]], 'pair': (1, 2.5)}\n"
        "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)\n"
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n"
        "    def pop(self):\n        return self.items.pop()\n"
    )  # fmt: skip
    tests = [
        "xs = [3, 1, 1]\nassert stats(xs) == {'min': 1, 'count': 2, 'pair': (1, 2.5)}\nassert xs == [1, 1, 3]",
        "assert list(evens(7)) == [0, 2, 4, 6]",
        "s = Stack()\ns.push(4)\ns.push(5)\nassert s.pop() == 5 and s.pop() == 4",
        "assert Stack() != Stack()",  # objects of the program's cannot be compared: this fails
    ]
    assert code_execution([program], tests=[tests]) == [0.75]


def test_tests_that_inspect_program_classes_fall_back_and_say_so(caplog):
    program = "class Node:\n    def __init__(self, v):\n        self.v = v\ndef make(v):\n    return Node(v)\n"
    tests = ["assert isinstance(make(3), Node)", "assert make(3).v == 3"]
    logged = {}
    with caplog.at_level("INFO", logger="gspo_recipes.rewards.code.reward"):
        result = code_execution([program, program], tests=[tests, ["assert make(3).v == 3"]],
                                log_metric=logged.__setitem__)  # fmt: skip
    assert result == [1.0, 1.0]
    assert logged["rewards/code_execution/fallback_frac"] == 0.5
    assert "weaker fallback" in caplog.text
