"""What changed in the stack between a baseline run and a candidate: the list ``gate`` prints beside its verdict.

"vLLM 0.32.0 -> 0.33.0; attention FLASH_ATTN -> FLASHINFER": every field
both runs recorded and that differs, on either side (:func:`.compare.stack_changes`:
not who recorded it, nor the requests' seeds and lengths, which the gate's
comparability judges). A run recorded before provenance still lists what its
manifest held; the note says what could not be compared.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from .compare import side_of, stack_changes
from .read import read_run


@dataclass(frozen=True)
class StackChange:
    side: str = dataclasses.field(metadata={"doc": "sampler or trainer"})
    field: str = dataclasses.field(metadata={"doc": "the provenance record's field, dotted (used.weights_dtype)"})
    label: str
    baseline: Any
    candidate: Any
    text: str = dataclasses.field(metadata={"doc": "the change in words: 'sampler vLLM: 0.32.0 -> 0.33.0'"})


@dataclass(frozen=True)
class StackReport:
    """The stack changes between two runs, and how much of each run's provenance was recorded."""

    changes: list[StackChange]
    baseline_recorded: bool = dataclasses.field(metadata={"doc": "the baseline's manifest holds a provenance record"})
    candidate_recorded: bool
    notes: list[str] = dataclasses.field(
        metadata={"doc": "what limits the comparison (a run recorded before provenance)"}
    )

    def line(self) -> str:
        """The changes in one line, for a verdict's heading."""
        if self.changes:
            return "; ".join(c.text for c in self.changes)
        return "nothing recorded changed" if self.notes else "nothing"


def stack_report(baseline: str | os.PathLike, candidate: str | os.PathLike) -> StackReport:
    b, c = read_run(baseline), read_run(candidate)
    changes = []
    for row in stack_changes(b.provenance, c.provenance):
        side, own = side_of(row)
        changes.append(StackChange(side, own.field, own.label, own.left, own.right, own.change(side)))
    notes = [f"{role} {r.run}: {r.note}" for role, r in (("baseline", b), ("candidate", c)) if r.note]
    return StackReport(changes, b.recorded, c.recorded, notes)
