"""Small programming tasks generated offline, in MBPP's format (`text`, `test_list`), for the offline default of
recipes/code_gspo.py, its cold-start model and tests. Each comes with a reference solution (`code`, also the
completion the cold-start model learns to write) and the function's name (`entry_point`).

A task asks for a one-line arithmetic function of one or two steps (two thirds take two):

    Write a function times_3_plus_7(x) that returns x times 3, plus 7.
    Your code must pass this test:
    assert times_3_plus_7(2) == 13
    Solution:
    ```python
    def times_3_plus_7(x):
        return x * 3 + 7
    ```

The first three lines are the recipe's user message (`task_message`, the mbpp format of recipes/code_gspo.py); the
cold-start model sees them with PROMPT_SUFFIX. Tests are checked before they are trusted: the reference solution
passes each, and the solution stopped after its first step (`stop_after_first_step`) fails each.
"""

from __future__ import annotations

import random

PROMPT_SUFFIX = "\nSolution:\n"

# kind: (name template, description template, body template, the body stopped after its first step or None)
KINDS = {
    "add": ("add_{a}", "returns x plus {a}", "x + {a}", None),
    "times": ("times_{a}", "returns x times {a}", "x * {a}", None),
    "minus": ("minus_{a}", "returns x minus {a}", "x - {a}", None),
    "times_plus": ("times_{a}_plus_{b}", "returns x times {a}, plus {b}", "x * {a} + {b}", "x * {a}"),
    "times_minus": ("times_{a}_minus_{b}", "returns x times {a}, minus {b}", "x * {a} - {b}", "x * {a}"),
    "plus_times": ("plus_{a}_times_{b}", "returns x plus {a}, times {b}", "(x + {a}) * {b}", "x + {a}"),
}
ONE_STEP = tuple(kind for kind, (*_, shortcut) in KINDS.items() if shortcut is None)
TWO_STEP = tuple(kind for kind in KINDS if kind not in ONE_STEP)


def _function(name: str, body: str) -> str:
    return f"def {name}(x):\n    return {body}\n"


def completion(code: str) -> str:
    """The answer the recipe asks for (its system prompt: one ```python block) around `code`."""
    return f"```python\n{code}```"


def _passes(code: str, name: str, test: str) -> bool:
    namespace: dict = {}
    exec(code, namespace)  # our own generated one-line function, never a model's
    try:
        exec(test, namespace)
    except AssertionError:
        return False
    return True


def make_code_task(rng: random.Random) -> dict:
    kind = rng.choice(ONE_STEP + TWO_STEP * 2)  # two-step tasks twice as often: where a model can stop early
    name_t, text_t, body_t, shortcut_t = KINDS[kind]
    numbers = {"a": rng.randint(2, 9), "b": rng.randint(2, 9)}
    name = name_t.format(**numbers)
    code = _function(name, body_t.format(**numbers))
    namespace: dict = {}
    exec(code, namespace)
    inputs = rng.sample(range(0, 21), 3)  # x >= 0: (x + a) * b never equals x + a, so every test tells them apart
    tests = [f"assert {name}({x}) == {namespace[name](x)!r}" for x in inputs]
    shortcut = shortcut_t and _function(name, shortcut_t.format(**numbers))
    # Checked before trusted: the reference passes every test, and the early stop fails every one.
    assert all(_passes(code, name, test) for test in tests), code
    assert shortcut is None or not any(_passes(shortcut, name, test) for test in tests), shortcut
    text = f"Write a function {name}(x) that {text_t.format(**numbers)}."
    return {"text": text, "test_list": tests, "code": code, "entry_point": name, "shortcut": shortcut}


def make_code_tasks(n: int, seed: int = 0) -> list[dict]:
    """`n` tasks, the same ones for the same seed."""
    rng = random.Random(seed)
    return [make_code_task(rng) for _ in range(n)]


def task_message(task: dict) -> str:
    """The user message of recipes/code_gspo.py's mbpp format (a test pins the two equal)."""
    return f"{task['text']}\nYour code must pass this test:\n{task['test_list'][0]}"


def format_prompt(task: dict) -> str:
    """The prompt text the cold-start model is trained on and the offline recipe samples from."""
    return task_message(task) + PROMPT_SUFFIX


def stop_after_first_step(task: dict) -> dict | None:
    """The task with its reference solution stopped after its first step (it fails the tests); None for a one-step
    task."""
    if task["shortcut"] is None:
        return None
    return {**task, "code": task["shortcut"]}
