"""Planning reads a row's tests once per group (the completions of one prompt share them): what each completion's
job holds is still its own, and a broken row is refused for every completion."""

import pytest

from gspo_recipes.rewards.code import plan
from gspo_recipes.rewards.code.sandbox.launch import Limits

HUMANEVAL_TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
HELPER = "def add(a, b):\n    '''Add.'''\n"


def test_each_completion_of_a_row_gets_its_own_program_and_the_rows_reading():
    jobs = [
        plan.plan_row(program, HUMANEVAL_TEST, None, None, None, [HELPER], 3.0, Limits())
        for program in ("def add(a, b):\n    return a + b\n", "def add(a, b):\n    return 0\n")
    ]
    (right,), (wrong,) = jobs
    assert right.payload.program.endswith("return a + b\n") and wrong.payload.program.endswith("return 0\n")
    # The entry point comes from the prompt's one stub (no column, no `check(add)` call): read once, given to both.
    assert right.payload.entry_point == wrong.payload.entry_point == "add"
    assert right.payload.tests == wrong.payload.tests == [HUMANEVAL_TEST]
    assert right.payload.tests is not wrong.payload.tests  # a job's lists are its own


def test_a_broken_row_is_refused_for_every_completion():
    for program in ("def f():\n    return 1\n", "def f():\n    return 2\n"):
        with pytest.raises(plan.Unjudgeable, match="not valid Python"):
            plan.plan_row(program, ["assert f( == 1"], None, None, None, [], 3.0, Limits())
    with pytest.raises(plan.Unjudgeable, match="not a Python name"):
        plan.plan_row("def f(): pass\n", ["assert f() == 1"], None, ["f"], None, [], 3.0, Limits())


def test_asserts_rows_count_their_statements_and_classes_the_tests_inspect_take_the_fallback():
    (job,) = plan.plan_row("def f():\n    return 1\n", ["assert f() == 1", "assert f() != 2"], None, None, None, [],
                           3.0, Limits())  # fmt: skip
    assert (job.kind, job.total) == ("judge", 2)
    inspecting = ["assert isinstance(make(), Box)"]
    jobs = [plan.plan_row(p, inspecting, None, None, None, [], 3.0, Limits()) for p in ("class Box: pass\n",) * 2]
    assert [job.kind for (job,) in jobs] == ["tests", "tests"]


@pytest.mark.parametrize(
    "program, tests, entry_point, helpers",
    [
        # A module the tests use unimported, a name bound later in the tests, and a constant read from the program.
        ("def f(x):\n    return x ** 0.5\n", ["assert f(16) == math.sqrt(16)"], None, []),
        ("def f():\n    return 3\nLIMIT = 3\n", ["n = f()", "assert n == LIMIT"], None, []),
        # HumanEval's shape: a helper of the prompt's the tests call, the entry point from its one stub.
        (
            "def find(xs):\n    return xs[0]\n",
            "def check(candidate):\n    assert candidate([1, 2]) == poly([1], 5)\n",
            None,
            ["def poly(xs, x):\n    return sum(c * x**i for i, c in enumerate(xs))\n\ndef find(xs):\n    '''Doc.'''\n"],
        ),
    ],
)
def test_the_judge_reads_the_same_names_from_the_planner_as_by_itself(program, tests, entry_point, helpers):
    """The planner reads the names the tests use once per row and sends them with the job; the judge's verdict and
    report are what it gives reading them itself."""
    import dataclasses

    from gspo_recipes.rewards.code.judge import confined

    (job,) = plan.plan_row(program, tests, None, entry_point, None, helpers, 3.0, Limits())
    planned = dataclasses.replace(job.payload, backend="bwrap")
    assert planned.test_names is not None
    by_itself = confined.judge_isolated(dataclasses.replace(planned, test_names=None))
    assert confined.judge_isolated(planned) == by_itself
    assert by_itself.run >= 1
