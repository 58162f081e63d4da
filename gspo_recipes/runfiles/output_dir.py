"""What a recipe's output_dir already holds when a run starts: nothing of a run, a run cut short, or a finished run.

A recipe ends with `trainer.save_state()`, which writes `trainer_state.json` into the output_dir itself (the Trainer
writes its own copies only inside `checkpoint-N/`): that file marks a finished run. A folder with checkpoints but no
such file holds a run that stopped before its end, to be resumed from its last checkpoint. Standard library only:
this runs before torch is imported, so that a refusal takes a fraction of a second.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from dataclasses import dataclass

from gspo_recipes.runfiles.diagnostics import DIAGNOSTICS_FILE

FINISHED_MARK = "trainer_state.json"
CHECKPOINT = re.compile(r"checkpoint-(\d+)$")
# What `gspo report` writes next to the logs: figures named gspo_*.png and the summary.
REPORT_FILES = ("gspo_*.png", "gspo_report.txt")


@dataclass
class PreviousRun:
    """A run found in an output_dir. `finished`: it reached its end; else `checkpoint` is the folder to resume from
    (None: it stopped before its first checkpoint)."""

    finished: bool
    checkpoint: str | None
    step: int | None  # the last step the run finished (finished) or saved (unfinished); None when unknown


def last_checkpoint(output_dir: str) -> str | None:
    """The `checkpoint-N` folder with the highest N that holds a trainer state (a save cut short holds none)."""
    found = []
    for path in glob.glob(os.path.join(output_dir, "checkpoint-*")):
        match = CHECKPOINT.search(path)
        if match and os.path.isfile(os.path.join(path, FINISHED_MARK)):
            found.append((int(match.group(1)), path))
    return max(found)[1] if found else None


def previous_run(output_dir: str) -> PreviousRun | None:
    """The run `output_dir` holds, or None when it holds none (missing, empty, or only files no run writes)."""
    if not os.path.isdir(output_dir):
        return None
    mark = os.path.join(output_dir, FINISHED_MARK)
    if os.path.isfile(mark):
        return PreviousRun(finished=True, checkpoint=None, step=_global_step(mark))
    checkpoint = last_checkpoint(output_dir)
    if checkpoint is not None:
        return PreviousRun(finished=False, checkpoint=checkpoint, step=int(CHECKPOINT.search(checkpoint).group(1)))
    if os.path.exists(os.path.join(output_dir, DIAGNOSTICS_FILE)) or glob.glob(
        os.path.join(output_dir, "checkpoint-*")
    ):
        return PreviousRun(finished=False, checkpoint=None, step=None)
    return None


def _global_step(state_path: str) -> int | None:
    try:
        with open(state_path) as f:
            return int(json.load(f)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_report(output_dir: str) -> list[str]:
    """Delete what `gspo report` wrote in `output_dir` (it described an earlier state of the run); the paths."""
    paths = [path for pattern in REPORT_FILES for path in glob.glob(os.path.join(output_dir, pattern))]
    for path in paths:
        os.remove(path)
    return paths


def remove_run(output_dir: str) -> None:
    """Delete what would be read as part of a new run in `output_dir`: the checkpoints (a resume would take them),
    the finished mark, the diagnostics file and the report. Weights and tokenizer files are left for the new run's
    save to replace; nothing else in the folder is touched."""
    for path in glob.glob(os.path.join(output_dir, "checkpoint-*")):
        if CHECKPOINT.search(path) and os.path.isdir(path):
            shutil.rmtree(path)
    for name in (FINISHED_MARK, DIAGNOSTICS_FILE):
        if os.path.exists(os.path.join(output_dir, name)):
            os.remove(os.path.join(output_dir, name))
    remove_report(output_dir)
