"""code_audit_cases: the package's adversarial suite, built from a row; the code rewards pay exactly its should_pay."""

import pytest

from gspo_recipes.rewards import code_execution, code_execution_binary
from gspo_recipes.rewards.code.audit_cases import code_audit_cases

MBPP_ROW = {
    "text": "Write a function to add two numbers.",
    "code": "def add_numbers(a, b):\n    return a + b\n",
    "test_list": ["assert add_numbers(1, 2) == 3", "assert add_numbers(2, 5) == 7", "assert add_numbers(-1, 1) == 0"],
}
HUMANEVAL_ROW = {
    "prompt": 'def below_zero(operations: list) -> bool:\n    """Whether the running balance ever goes below 0."""\n',
    "canonical_solution": "    balance = 0\n    for op in operations:\n        balance += op\n"
    "        if balance < 0:\n            return True\n    return False\n",
    "test": "def check(candidate):\n    assert candidate([]) == False\n    assert candidate([1, 2, -4, 5]) == True\n"
    "    assert candidate([1, 2, -3]) is False\n",
    "entry_point": "below_zero",
}
NO_REFERENCE_ROW = {"test": "def check(candidate):\n    assert candidate(2) == 4\n\ncheck(square)\n"}


@pytest.mark.parametrize("row", [MBPP_ROW, HUMANEVAL_ROW], ids=["mbpp", "humaneval"])
@pytest.mark.parametrize("reward", [code_execution, code_execution_binary])
def test_the_code_rewards_pay_exactly_the_cases_that_should_be_paid(row, reward):
    cases = code_audit_cases(row)
    families = [family for family, _, _ in cases]
    assert {"exit_trick", "patched_builtins", "patched_eq", "test_skipping", "keyring_persistence",
            "stop_iteration", "argument_mutation", "honest_wrong", "reference_solution"} <= set(families)  # fmt: skip
    columns = {key: [value] * len(cases) for key, value in row.items() if key in ("test_list", "test", "entry_point")}
    scores = reward([text for _, text, _ in cases], prompts=[row.get("prompt", row.get("text"))] * len(cases),
                    timeout_s=2.0, **columns)  # fmt: skip
    assert dict(zip(families, scores)) == {family: float(pay) for family, _, pay in cases}


def test_cases_name_the_rows_entry_point_and_need_no_reference():
    cases = code_audit_cases(NO_REFERENCE_ROW)
    assert all(not pay for _, _, pay in cases)  # nothing to pay without a reference
    assert all("def square(" in text for _, text, _ in cases)
    assert all("def add_numbers(" in text for _, text, _ in code_audit_cases(MBPP_ROW))
    assert code_audit_cases(HUMANEVAL_ROW)[-1] == (
        "reference_solution", "```python\n" + (HUMANEVAL_ROW["prompt"] + HUMANEVAL_ROW["canonical_solution"]).strip()
        + "\n```", True)  # fmt: skip


def test_a_case_whose_answer_is_right_on_the_row_is_left_out_not_counted(tmp_path, capsys):
    """The keyring move answers -1 (the refused syscall's result): on a row whose test expects -1 it earns that test
    honestly. The audit checks each case's trick-free twin against the row's tests and leaves such a case out."""
    import json

    from gspo_recipes.commands.cli import main

    row = {"text": "Return the index of x in xs, or -1.",
           "code": "def find(xs, x):\n    return xs.index(x) if x in xs else -1\n",
           "test_list": ["assert find([1, 2], 3) == -1", "assert find([1, 2], 2) == 1"]}  # fmt: skip
    keyring = dict((family, text) for family, text, _ in code_audit_cases(row))["keyring_persistence"]
    assert code_execution([keyring], test_list=[row["test_list"]], timeout_s=2.0) == [0.5]  # credited, honestly
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(MBPP_ROW) + "\n")
    code = main(["audit-reward", "code_execution", "--data", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "left out" in out and "keyring_persistence" in out


def test_the_audit_names_rows_whose_tests_check_nothing(tmp_path, capsys):
    import json

    from gspo_recipes.commands.cli import main

    weak = dict(MBPP_ROW, test_list=["add_numbers(1, 2)", "assert add_numbers(2, 5) == 7"])
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(MBPP_ROW) + "\n" + json.dumps(weak) + "\n")
    main(["audit-reward", "code_execution", "--data", str(path)])
    out = capsys.readouterr().out
    assert "1 row(s) have a test that checks nothing" in out and "rows 1" in out, out
