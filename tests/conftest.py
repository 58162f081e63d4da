"""Shared fixtures: a tiny offline model, a generated dataset, cold code workers. Helpers the tests import live
in support.py."""

from __future__ import annotations

import contextlib
import itertools
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")


@pytest.fixture
def tiny():
    from gspo_recipes.builtin.tiny import build_tiny_model_and_tokenizer

    return build_tiny_model_and_tokenizer()


@pytest.fixture
def prompt_dataset():
    from datasets import Dataset

    return Dataset.from_list([{"prompt": f"{a}+{b}="} for a in range(4) for b in range(4)])


@contextlib.contextmanager
def _cold_code_workers(monkeypatch: pytest.MonkeyPatch):
    """Set `GSPO_SANDBOX_WARM=0` through `monkeypatch` and restart the judging pool with it; on the way out, unset it
    and restart the pool again (the patch's own undo then puts back whatever the variable was before)."""
    from gspo_recipes.rewards import pool

    monkeypatch.setenv("GSPO_SANDBOX_WARM", "0")
    pool.close_pool("code-judge")
    try:
        yield
    finally:
        monkeypatch.delenv("GSPO_SANDBOX_WARM")
        pool.close_pool("code-judge")


@pytest.fixture
def cold_code_workers(monkeypatch):
    """Code attempts start a sandbox each (`GSPO_SANDBOX_WARM=0`) instead of forking from the warm zygotes: the
    judging pool is restarted with the setting, and again afterwards, so later tests get warm workers back."""
    with _cold_code_workers(monkeypatch):
        yield


@pytest.fixture(scope="module", params=["warm", "cold"])
def warm_or_cold(request):
    """A module's tests that ask for it run on both paths: with the warm workers, and with cold ones (set up as by
    `cold_code_workers`). Module-scoped, so pytest runs the module's warm tests, then its cold ones: the pool is
    restarted twice a module rather than twice a cold test."""
    if request.param == "warm":
        yield "warm"
        return
    with pytest.MonkeyPatch.context() as monkeypatch, _cold_code_workers(monkeypatch):
        yield "cold"


@pytest.fixture(scope="module")
def path(warm_or_cold):
    """`warm_or_cold` under the name the code-verdict modules' tests take: each test on the warm path and on the
    per-attempt one, all of a module's warm tests, then all its cold ones."""
    return warm_or_cold


@pytest.fixture
def one_judging_process(monkeypatch):
    """The judging pool restarted with one process (`GSPO_REWARD_WORKERS=1`), so that one pool process hands out
    every uid and one judge zygote forks every attempt; restarted again afterwards with the default."""
    from gspo_recipes.rewards import pool

    monkeypatch.setenv("GSPO_REWARD_WORKERS", "1")
    pool.close_pool("code-judge")
    try:
        yield
    finally:
        monkeypatch.delenv("GSPO_REWARD_WORKERS")
        pool.close_pool("code-judge")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """In a module whose tests ask for `warm_or_cold`, the tests that do not ask for it run first: pytest leaves such a
    test where it comes in the module, after the cold group even, where it would run with the cold workers' setting."""
    ordered = []
    for _, module in itertools.groupby(items, key=lambda item: item.path):
        ordered += sorted(module, key=lambda item: "warm_or_cold" in getattr(item, "fixturenames", ()))
    items[:] = ordered
