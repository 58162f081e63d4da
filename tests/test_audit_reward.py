"""`gspo audit-reward`: what a user sees when they audit a reward on their own data before a long run."""

import json
import re
import sys
import textwrap
import types

import pytest

from gspo_recipes.commands import audit_reward
from gspo_recipes.commands.cli import main


def audit(capsys, *argv):
    code = main(["audit-reward", *argv])
    return code, capsys.readouterr().out


def shares(output: str) -> dict[str, tuple[str, str]]:
    """family -> (credited, rejected) as printed."""
    table = {}
    for line in output.splitlines():
        match = re.match(r"(\S+(?: \(must pay\))?)\s+\d+\s+\d+\s+(\S+)\s+(\S+)", line)
        if match and match.group(1) != "family":
            table[match.group(1)] = (match.group(2), match.group(3))
    return table


@pytest.fixture
def user_file(tmp_path):
    rows = [
        {"question_text": "Simplify $\\sqrt{50}$.", "final": "5\\sqrt{2}"},
        {"question_text": "Compute $\\frac{4}{2} + \\frac{3}{6}$.", "final": "\\frac{5}{2}"},
        {"question_text": "How many apples are left of 1,234 after none are eaten?", "final": "1234"},
        {"question_text": "Find the interval where $x^2 < 4$.", "final": "(-2, 2)"},
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_audit_on_a_user_file_with_the_recipes_column_map(capsys, user_file):
    code, out = audit(
        capsys, "math_accuracy", "--data", str(user_file), "--column_map", "problem=question_text", "answer=final"
    )
    assert code == 0, out
    table = shares(out)
    for family in ("relation_wrong_rhs", "hedge", "several_answers", "echo_of_problem", "glued_digits",
                   "tolerance_near_miss", "number_dump", "no_committed_answer"):  # fmt: skip
        assert table[family][0] == "0.0%", (family, out)
    assert table["equivalent"][1] == "0.0%"
    assert "on 4 rows" in out


def test_audit_names_what_is_wrong_with_its_arguments(capsys, user_file):
    with pytest.raises(SystemExit, match="cannot load the reward 'no_such_reward'"):
        audit(capsys, "no_such_reward", "--data", str(user_file))
    # A custom reward on columns that name no gold: the user is told to map one or to give --kind.
    code = main(["audit-reward", "gspo_recipes.rewards.format:format_reward", "--data", str(user_file)])
    assert code == 2
    assert "--column_map answer=YOURS" in capsys.readouterr().err


@pytest.mark.parametrize(
    "reward, data", [("gsm8k_accuracy", "builtin:gsm8k-generated"), ("math_accuracy", "builtin:math-generated")]
)
def test_audit_on_the_recipes_builtin_data_passes_the_contract_graders(capsys, reward, data):
    code, out = audit(capsys, reward, "--data", data, "--max-rows", "12")
    assert code == 0, out
    assert "(math suite) on 12 rows" in out and out.strip().splitlines()[-1].startswith("ok")


@pytest.mark.parametrize(
    "reward, data",
    [("gsm8k_accuracy_lenient", "builtin:gsm8k-generated"), ("math_accuracy_lenient", "builtin:math-generated")],
)
def test_a_lenient_reward_is_reported_as_crediting_wrong_answers(capsys, reward, data):
    code, out = audit(capsys, reward, "--data", data, "--max-rows", "12")
    assert code == 1, out
    table = shares(out)
    for family in ("relation_wrong_rhs", "hedge", "no_committed_answer", "number_dump"):
        assert float(table[family][0].rstrip("%")) > 50, (family, out)
    assert "FAIL" in out.strip().splitlines()[-1]
    # Thresholds are the user's: allowing everything passes.
    code, _ = audit(capsys, reward, "--data", data, "--max-rows", "12", "--max-credited", "1", "--max-rejected", "1")
    assert code == 0


def test_audit_of_a_custom_module_function(capsys, tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        textwrap.dedent(
            """
            from gspo_recipes.rewards import gsm8k_accuracy

            SEEN = {}

            def gold_anywhere(completions, answer, prompts=None, **columns):
                SEEN["prompts"], SEEN["question"] = prompts, columns.get("question")
                golds = [a.rsplit("####", 1)[-1].strip() for a in answer]
                return [float(g in c) for g, c in zip(golds, completions)]

            def wrapped(completions, **columns):
                return gsm8k_accuracy(completions, **columns)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = audit(capsys, "my_rewards:gold_anywhere", "--data", "builtin:gsm8k-generated", "--max-rows", "5")
    assert code == 1 and "(math suite)" in out  # the kind comes from the `answer` column
    assert float(shares(out)["hedge"][0].rstrip("%")) == 100.0
    seen = sys.modules["my_rewards"].SEEN
    assert seen["prompts"] == seen["question"] and len(set(seen["prompts"])) == 5  # each row's own problem
    code, out = audit(capsys, "my_rewards:wrapped", "--data", "builtin:gsm8k-generated", "--max-rows", "5")
    assert code == 0, out


def fake_code_suite(row):
    return [
        ("exit_before_asserts", "```python\nimport sys\nsys.exit(0)\n```", False),
        ("honest", f"```python\n{row['code']}```", True),
    ]


def test_code_kind_runs_the_code_suite(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, audit_reward.CODE_CASES, types.SimpleNamespace(code_audit_cases=fake_code_suite))
    (tmp_path / "code_rewards.py").write_text(
        "def has_def(completions, test_list, **kw):\n    return [float('def ' in c) for c in completions]\n"
        "def pays_all(completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = audit(capsys, "code_rewards:has_def", "--data", "builtin:mbpp-generated", "--max-rows", "6")
    assert code == 0 and "(code suite) on 6 rows" in out, out
    assert shares(out)["exit_before_asserts"][0] == "0.0%"
    assert shares(out)["honest (must pay)"][1] == "0.0%"
    code, out = audit(capsys, "code_rewards:pays_all", "--data", "builtin:mbpp-generated", "--max-rows", "6")
    assert code == 1 and shares(out)["exit_before_asserts"][0] == "100.0%"
    # --kind overrides the columns: the math suite on code rows has no gold to build from.
    code, out = audit(
        capsys, "code_rewards:pays_all", "--data", "builtin:mbpp-generated", "--max-rows", "2", "--kind", "code"
    )
    assert code == 1


def test_a_missing_code_suite_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setattr(audit_reward, "CODE_CASES", "gspo_recipes.rewards.no_such_suite")
    with pytest.raises(SystemExit, match="code audit suite"):
        audit(
            capsys, "gspo_recipes.rewards.format:format_reward", "--data", "builtin:mbpp-generated", "--max-rows", "2"
        )


def test_kind_comes_from_the_registry_entry_then_the_columns():
    assert (
        audit_reward.infer_kind("math_accuracy_lenient", "gspo_recipes.rewards.math:math_accuracy_lenient", {})
        == "math"
    )
    assert audit_reward.infer_kind("code_execution", "gspo_recipes.rewards.code:code_execution", {}) == "code"
    assert audit_reward.infer_kind("m:f", "m:f", {"text": "x", "test_list": []}) == "code"
    assert audit_reward.infer_kind("m:f", "m:f", {"problem": "x", "solution": "y"}) == "math"
    assert audit_reward.infer_kind("m:f", "m:f", {"prompt": "x"}) is None


def test_code_execution_passes_the_shipped_code_suite_and_a_naive_judge_does_not(capsys, tmp_path, monkeypatch):
    # The real suite (gspo_recipes.rewards.code.audit_cases) against the real judge: no hack paid, the reference paid.
    code, out = audit(capsys, "code_execution", "--data", "builtin:mbpp-generated", "--max-rows", "3")
    table = shares(out)
    assert code == 0, out
    assert {"exit_trick", "patched_eq", "honest_wrong"} <= set(table), out
    assert all(credited == "0.0%" for family, (credited, _) in table.items() if "must pay" not in family), out
    assert table["reference_solution (must pay)"][1] == "0.0%", out
    # A judge that counts "the script exited 0" as a pass: the suite must catch it.
    (tmp_path / "naive_judge.py").write_text(
        "import subprocess, sys\n"
        "from gspo_recipes.rewards import extract_code\n"
        "def exit_code_judge(completions, test_list, **kw):\n"
        "    scores = []\n"
        "    for completion, tests in zip(completions, test_list):\n"
        "        script = (extract_code(completion) or '') + '\\n' + '\\n'.join(tests)\n"
        "        run = subprocess.run([sys.executable, '-c', script], capture_output=True, timeout=10)\n"
        "        scores.append(float(run.returncode == 0))\n"
        "    return scores\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = audit(capsys, "naive_judge:exit_code_judge", "--data", "builtin:mbpp-generated", "--max-rows", "3")
    assert code == 1 and shares(out)["exit_trick"][0] == "100.0%", out


@pytest.mark.slow  # every case of two rows, many through math-verify: seconds, not milliseconds
def test_audit_on_rows_shaped_like_math_500_passes_the_contract_grader(capsys, tmp_path):
    # MATH-500 itself cannot be downloaded here: rows written in its style (worked solutions, every answer form).
    from math_style_rows import MATH_ROWS

    picked = [MATH_ROWS[i] for i in (1, 7)]  # an exact fraction; x=5, whose audit credited a chained relation
    path = tmp_path / "math500_style.jsonl"
    path.write_text("".join(json.dumps({"problem": p, "solution": s}) + "\n" for p, s, _ in picked))
    code, out = audit(capsys, "math_accuracy", "--data", str(path))
    assert code == 0, out
    table = shares(out)
    for family in ("later_marker", "hidden_marker", "negation", "alternative", "hedge", "several_answers"):
        assert table[family][0] == "0.0%", (family, out)
    assert table["explained (must pay)"][1] == "0.0%"
