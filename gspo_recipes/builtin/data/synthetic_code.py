"""Small programming tasks generated offline, in MBPP's format (`text`, `test_list`), for the offline default of
recipes/code_gspo.py and for tests. Each comes with a reference solution (`code`) that passes its tests."""

from __future__ import annotations

import random

# (name template, description template, body template); {k} is drawn per task.
TASKS = [
    ("add_{k}", "Write a function {name}(x) that returns x plus {k}.", "return x + {k}"),
    ("times_{k}", "Write a function {name}(x) that returns x multiplied by {k}.", "return x * {k}"),
    (
        "is_multiple_of_{k}",
        "Write a function {name}(x) that returns True when x is a multiple of {k}.",
        "return x % {k} == 0",
    ),
    ("repeat_{k}", "Write a function {name}(s) that returns the string s repeated {k} times.", "return s * {k}"),
    (
        "count_above_{k}",
        "Write a function {name}(xs) that returns how many numbers in the list xs exceed {k}.",
        "return sum(1 for x in xs if x > {k})",
    ),
]


def make_code_task(rng: random.Random) -> dict:
    name_t, text_t, body_t = rng.choice(TASKS)
    k = rng.randint(2, 9)
    name = name_t.format(k=k)
    code = f"def {name}({'s' if 'repeat' in name else 'xs' if 'count' in name else 'x'}):\n    {body_t.format(k=k)}\n"
    namespace: dict = {}
    exec(code, namespace)  # our own reference solution: it computes the expected values of the tests
    function = namespace[name]
    if "repeat" in name:
        inputs = [repr(w) for w in rng.sample(["a", "ab", "xyz", ""], 3)]
    elif "count" in name:
        inputs = [repr([rng.randint(0, 12) for _ in range(5)]) for _ in range(3)]
    else:
        inputs = [repr(rng.randint(-5, 30)) for _ in range(3)]
    tests = [f"assert {name}({arg}) == {function(eval(arg))!r}" for arg in inputs]
    return {"text": text_t.format(name=name, k=k), "test_list": tests, "code": code}


def make_code_tasks(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [make_code_task(rng) for _ in range(n)]
