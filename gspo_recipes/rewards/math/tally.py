"""What the math rewards noted for the trainer's warnings: counts of items since the last `take`, by example.

The rewards run in whichever process TRL calls them from and return only scores, so the few things a run should
hear about (golds that cannot be judged, answers past the cost bound) are noted here and taken by the trainer once
per batch (`GSPOTrainer`, into `gspo_diagnostics.jsonl`).
"""

from __future__ import annotations

from typing import Any

MAX_KEPT = 1000  # distinct examples kept between two takes: a run's warnings need three, memory stays bounded
_KEY_CHARS = 200


class Tally:
    """Items noted since the last `take`, counted by their text (cut to 200 characters)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def note(self, item: Any) -> bool:
        """Count `item`; True the first time its text is seen since the last take (and while fewer than MAX_KEPT
        distinct ones are kept: past that, further new ones are not counted)."""
        key = str(item)[:_KEY_CHARS]
        new = key not in self._counts
        if new and len(self._counts) >= MAX_KEPT:
            return False
        self._counts[key] = self._counts.get(key, 0) + 1
        return new

    def take(self) -> tuple[int, list[str]]:
        """(items, up to three examples) noted since the last call, and forget them."""
        items, examples = sum(self._counts.values()), list(self._counts)[:3]
        self._counts.clear()
        return items, examples
