"""Gold answers as TRL's datasets carry them, and the rows whose gold cannot be judged.

A row's gold is its `answer` column when there is one, else its `solution` column (TRL's math datasets): a bare
answer (`\\frac{1}{2}`, `72`), a GSM8K worked answer (`... #### 72`) or a worked solution, whose answer is its
committed place under the same contract the completions are read by (the last box, else the last commitment).

A gold is judgeable when it says some math: a number, a LaTeX command, or letters that are no prose (`p - q`,
`Evelyn`). Prose (`Answer is forty three.`, `forty two`) and bare punctuation (`???`) are not: TRL skips such rows
(None), and so do we, each time with a warning that the trainer records in `gspo_diagnostics.jsonl`
(`take_unreadable_golds`): a broken dataset column should not pass in silence.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from .tally import Tally

logger = logging.getLogger(__name__)

WARNING_KIND = "unreadable_gold"
_unreadable = Tally()  # gold text -> rows seen since the last take_unreadable_golds()
_PROSE = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}")


def gold_column(solution: Any, answer: Any) -> Any:
    """The column a row's gold comes from: `answer`, else `solution` (TRL's name for it)."""
    return answer if answer is not None else solution


def says_math(text: str) -> bool:
    """Whether a gold answer says some math (the module docstring): a digit or a LaTeX command, else letters that
    are not two words of prose in a row (`p - q`, `Evelyn`, but not `forty two`); punctuation alone does not."""
    if re.search(r"\d|\\[A-Za-z]", text):
        return True
    return bool(re.search(r"[A-Za-z]", text)) and not _PROSE.search(text)


def note_unreadable_gold(gold: Any) -> None:
    """Count a row whose gold cannot be judged; the first time a gold is seen, say so in the log."""
    if _unreadable.note(gold):
        message = "gold answer %r cannot be judged: these rows score None (fix the dataset column)"
        logger.warning(message, str(gold)[:200])


def take_unreadable_golds() -> tuple[int, list[str]]:
    """(rows, up to three example golds) noted since the last call, and forget them: for the trainer's warnings."""
    return _unreadable.take()


def unreadable_gold_message(rows: int, examples: list[str]) -> str:
    return (
        f"{rows} reward rows had a gold answer that cannot be judged (scored None, left out of the advantage), "
        f"e.g. {', '.join(repr(example) for example in examples)}: check the dataset's answer/solution column"
    )
