"""Format rewards: is the completion shaped as reasoning in `<think>...</think>` followed by an answer?"""

from __future__ import annotations

from typing import Any

from .text import completion_text

_OPEN, _CLOSE = "<think>", "</think>"


def format_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 for `<think>reasoning</think>answer`, else 0.0; the leading `<think>` may be missing.

    Not `trl.rewards.think_format_reward`: that one pays 1.0 for an empty `<think></think>` with no answer after it,
    which a policy under RL pressure finds at once. Lenient because many chat templates (Qwen3, DeepSeek-R1) put
    `<think>` in the prompt, so the completion starts inside the reasoning. Still required: non-empty reasoning,
    exactly one `</think>`, no other think tags, and a non-empty answer after it.
    """
    return [float(_well_formed(completion_text(c), require_open_tag=False)) for c in completions]


def format_strict_reward(completions: list, **kwargs: Any) -> list[float]:
    """Like `format_reward`, but the completion itself must open with `<think>` (leading whitespace aside)."""
    return [float(_well_formed(completion_text(c), require_open_tag=True)) for c in completions]


def _well_formed(text: str, require_open_tag: bool) -> bool:
    if text.count(_CLOSE) != 1 or text.count(_OPEN) > 1:
        return False
    reasoning, answer = text.split(_CLOSE)
    reasoning = reasoning.lstrip()
    if reasoning.startswith(_OPEN):
        reasoning = reasoning[len(_OPEN) :]
    elif _OPEN in reasoning or require_open_tag:
        return False
    return bool(reasoning.strip()) and bool(answer.strip()) and _OPEN not in answer
