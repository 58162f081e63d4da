"""Turn what TRL passes as a completion (a string or a list of chat messages) into text."""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the text of the last assistant message. Whatever else a
    completion holds (None, images, tool calls, content parts without text, objects of any type) reads as no text:
    a reward never raises on what a model or a chat template produced."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)) and completion:
        # The model's own words: a message without a role is the assistant's (TRL's tests write `[{"content": ...}]`);
        # a tool's or the user's message is not, nor is anything that is no message.
        said = [
            m
            for m in completion
            if isinstance(m, str) or isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return completion_text(said[-1]) if said else ""
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):  # multimodal-style content parts: only text parts carry text
        texts = (
            part if isinstance(part, str) else part.get("text") for part in content if isinstance(part, (dict, str))
        )
        return "".join(text for text in texts if isinstance(text, str))
    return ""


def column(values: Any, n: int) -> list:
    """A dataset column as a list of length `n` (TRL passes one value per completion; `None` when absent)."""
    if values is None:
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column has {len(values)} values for {n} completions")
    return values
