"""Every warning a run gives, written into its diagnostics file, so that `gspo report` lists them all.

A warner calls `record_warning(trainer, kind, message)` when it fires (on every process alike: only the main process
writes the file). The warning joins the `warnings` section of the next line of `gspo_diagnostics.jsonl`, written at
the next logging step, with the optimizer step it was given at (a warner that fires in `on_log` after the file's
writer has written that step's line still gets its own step); `recorded_warnings(lines)` reads them back. Needs
nothing but the standard library.
"""

from __future__ import annotations

from gspo_recipes.runfiles.diagnostics import WARNINGS

SECTION = WARNINGS  # the section of a diagnostics line that holds them


def record_warning(trainer, kind: str, message: str) -> None:
    """Stage a warning for the trainer's next diagnostics line (see `LogRatioHistogramCallback.on_log`)."""
    sections = trainer.__dict__.setdefault("gspo_diagnostics_sections", {})
    warning = {"kind": kind, "message": message}
    step = getattr(getattr(trainer, "state", None), "global_step", None)
    if step is not None:
        warning["step"] = step
    sections.setdefault(SECTION, []).append(warning)


def recorded_warnings(lines: list[dict]) -> list[dict]:
    """The warnings a run recorded, in order: {"step", "kind", "message"} (the step it was given at, else the
    line's)."""
    return [{"step": line.get("step"), **warning} for line in lines for warning in line.get(SECTION) or []]
