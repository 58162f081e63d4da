"""Code rewards checked before the trainer loads a model: each reward that runs model code carries a `sandbox_check`
(gspo_recipes/rewards/code/reward.py) that raises, with the fix, where no full-strength sandbox can be had, and
returns what the run must say when a weaker one was asked for by name. That note goes into the start banner and
every run's gspo_diagnostics.jsonl (docs/code-sandbox.md, "Fail closed, early")."""

from __future__ import annotations

import os

from gspo_recipes.runfiles.run_warnings import record_warning

WEAK_SANDBOX = "weak_sandbox"  # the kind of the warning in gspo_diagnostics.jsonl


def check_reward_sandboxes(reward_funcs) -> list[str]:
    """Run each reward's `sandbox_check` with its configured options (a ConfiguredReward's); raises where one
    refuses. Returns the weak-sandbox notes, printed here in a banner."""
    funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    notes = []
    for func in funcs:
        check = getattr(func, "sandbox_check", None)
        if check is not None:
            note = check(**getattr(func, "options", {}))
            if note and note not in notes:
                notes.append(note)
    if notes and int(os.environ.get("RANK", "0")) == 0:
        print("\n".join(["=" * 100, *notes, "=" * 100]), flush=True)
    return notes


def record_sandbox_notes(trainer, notes: list[str]) -> None:
    for note in notes:
        record_warning(trainer, WEAK_SANDBOX, note)
