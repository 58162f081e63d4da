"""Turn what TRL passes as a completion (a string or a list of chat messages) into text."""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the content of the last assistant message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)) and completion:
        assistant = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        return completion_text((assistant or list(completion))[-1])
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal-style content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def column(values: Any, n: int) -> list:
    """A dataset column as a list of length `n` (TRL passes one value per completion; `None` when absent)."""
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column has {len(values)} values for {n} completions")
    return values
