"""`<output_dir>/gspo_diagnostics.jsonl`: its name, its writer and its reader, in one place.

One JSON object per logging step, with at least "step". `LogRatioHistogramCallback` writes it; `gspo report` and
`gspo calibrate` read it. A run killed while writing leaves a truncated last line: the reader skips lines that do not
parse, and a resumed run rewrites the file with only the complete lines up to its checkpoint's step, then writes the
sections that were staged for the next line when the checkpoint was saved (`save_open_sections`) in its next line.
"""

from __future__ import annotations

import json
import os

DIAGNOSTICS_FILE = "gspo_diagnostics.jsonl"
WARNINGS = "warnings"  # the section gspo_recipes/runfiles/run_warnings.py writes


def diagnostics_path(output_dir: str) -> str:
    return os.path.join(output_dir, DIAGNOSTICS_FILE)


def read_diagnostics(path: str) -> list[dict]:
    """The complete lines sorted by step; unparsable lines are skipped. Lines of a repeated step merge (the later one's
    fields win, the warnings of both are kept): the writer adds one for sections staged after the step's line went out.

    A line may hold only sections (`{"step": N, "groups": ...}`: a step without responses): readers take its
    response fields with `.get`."""
    by_step = {}
    with open(path) as f:
        for text in f:
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                continue
            if not (isinstance(line, dict) and "step" in line):
                continue
            earlier = by_step.get(line["step"])
            if earlier is not None:
                warnings = (earlier.get(WARNINGS) or []) + (line.get(WARNINGS) or [])
                line = {**earlier, **line, **({WARNINGS: warnings} if warnings else {})}
            by_step[line["step"]] = line
    return [by_step[step] for step in sorted(by_step)]


def has_responses(line: dict) -> bool:
    """Whether a line holds a window's responses (histogram, buckets, off-policy values), not only sections."""
    return isinstance(line.get("off_policy"), dict)


def append_line(path: str, line: dict) -> None:
    # One write of a whole line: a crash leaves at most this line truncated, which the reader skips.
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def keep_lines_up_to(path: str, step: int) -> None:
    """Start a fresh file, or on resume keep the complete lines up to the checkpoint's step (later ones are redone)."""
    if step == 0 or not os.path.exists(path):
        open(path, "w").close()
        return
    kept = [line for line in read_diagnostics(path) if line["step"] <= step]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in kept)
    os.replace(tmp, path)


OPEN_SECTIONS_FILE = "gspo_open_sections.json"  # in a checkpoint folder: sections staged for the next, unwritten line


def save_open_sections(folder: str, sections: dict) -> None:
    """Save the sections staged since the last line (the groups and dynamic sampling counts of the open logging window,
    warnings) into checkpoint `folder`, so that a run resumed from it writes them in its next line."""
    if os.path.isdir(folder):
        with open(os.path.join(folder, OPEN_SECTIONS_FILE), "w") as f:
            json.dump(sections, f)


def load_open_sections(folder: str) -> dict:
    """The sections `save_open_sections` left in `folder`; none for a checkpoint from before they were saved."""
    path = os.path.join(folder, OPEN_SECTIONS_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def clip_range_of_line(line: dict, lengths):
    """The clip range a line's responses of these `lengths` were judged with: the line's (epsilon_low,
    epsilon_high), scaled per response by sqrt(L_ref / L) when the run used a length-scaled range (the line's
    "epsilon_reference_length"; absent or null: the plain range)."""
    from gspo_recipes.loss import length_scaled_epsilons

    return length_scaled_epsilons(
        line["epsilon_low"], line["epsilon_high"], lengths, line.get("epsilon_reference_length")
    )
