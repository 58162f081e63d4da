"""What crosses the wall between the face and the judge: one attempt's job, and the judge's verdict on it.

Both cross processes: by pickle to the judging pool, as JSON to the confined judge (`to_wire`, `from_wire`; a
`Verdict` is a JSON list), so the wire format is plain data (see docs/code-sandbox.md, "The four parts").
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from ..sandbox.launch import Limits


@dataclasses.dataclass(frozen=True)
class JudgeJob:
    """One completion of one row, for the judge. `kind`: "asserts" (a list of statements, each one test) or "script"
    (one test script, `estimated_tests` of them); `helpers`: code blocks from the dataset; `limits`: the row's, its
    wall budget covering every test; `backend`: the sandbox the program runs in, chosen by the face."""

    program: str
    kind: str
    tests: list[str]
    entry_point: str | None
    setup: str
    helpers: list[str]
    per_test_s: float
    estimated_tests: int
    limits: Limits
    backend: str | None = None
    # [the names the tests and setup read, in order of first use; the names they bind], as `judge.referenced_names`
    # and `judge.bound_names` read them: by the planner, once per row (a group's completions share it), from the same
    # text the judge gets. None: the judge reads them itself.
    test_names: list[list[str]] | None = None

    def to_wire(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # `limits` becomes its dict

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> JudgeJob:
        return cls(**dict(data, limits=Limits(**data["limits"])))


class Verdict(NamedTuple):
    """(tests passed, tests run, report): the report names what the row's data got wrong (see `judge.judge_tests`)."""

    passed: int
    run: int
    report: dict[str, Any]
