"""Statistics over a run's responses and groups (the older statistics modules still live one level up)."""
