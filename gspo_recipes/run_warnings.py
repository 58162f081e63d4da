"""Every warning a run gives, written into its diagnostics file, so that `gspo report` lists them all.

A warner calls `record_warning(trainer, kind, message)` when it fires (on every process alike: only the main process
writes the file). The warning joins the `warnings` section of the next line of `gspo_diagnostics.jsonl`, written at
the next logging step; `recorded_warnings(lines)` reads them back with their steps. Needs nothing but the standard
library.
"""

from __future__ import annotations

SECTION = "warnings"


def record_warning(trainer, kind: str, message: str) -> None:
    """Stage a warning for the trainer's next diagnostics line (see `LogRatioHistogramCallback.on_log`)."""
    sections = trainer.__dict__.setdefault("gspo_diagnostics_sections", {})
    sections.setdefault(SECTION, []).append({"kind": kind, "message": message})


def recorded_warnings(lines: list[dict]) -> list[dict]:
    """The warnings a run recorded, in order: {"step", "kind", "message"}."""
    return [{"step": line["step"], **warning} for line in lines for warning in line.get(SECTION, [])]
