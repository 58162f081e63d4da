"""Shared fixtures: a tiny offline model, a generated dataset, cold code workers. Helpers the tests import live
in support.py."""

from __future__ import annotations

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


@pytest.fixture
def cold_code_workers(monkeypatch):
    """Code attempts start a sandbox each (`GSPO_SANDBOX_WARM=0`) instead of forking from the warm zygotes: the
    judging pool is restarted with the setting, and again afterwards, so later tests get warm workers back."""
    from gspo_recipes.rewards import pool

    monkeypatch.setenv("GSPO_SANDBOX_WARM", "0")
    pool.close_pool("code-judge")
    yield
    monkeypatch.delenv("GSPO_SANDBOX_WARM")
    pool.close_pool("code-judge")
