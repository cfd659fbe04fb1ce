"""What ``mismatchscope provenance`` prints: one run's two sides, or two runs, field by field; its JSON's types.

One run: the sampler (left) against the trainer (right), the contract
between them and each side's fallbacks. Two runs: the baseline (left)
against the candidate (right), each side against its own, then each run's
contract. Rows come changed first (:mod:`.compare`); ``value`` cells hold the
recorded JSON values, null where a side did not record the field.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal

from .compare import FieldRow, Status, runs, sides
from .contract import Difference, Fallback, contract, fallbacks
from .read import RunRecord, read_run


@dataclass(frozen=True)
class Row:
    field: str = dataclasses.field(
        metadata={"doc": "the record's field, dotted (sampler.used.attention_backend for two runs)"}
    )
    label: str = dataclasses.field(metadata={"doc": "the field in words"})
    left: Any = dataclasses.field(
        metadata={"doc": "the sampler's value (one run) or the baseline's (two runs); null: not recorded"}
    )
    right: Any = dataclasses.field(metadata={"doc": "the trainer's value (one run) or the candidate's (two runs)"})
    status: Status

    @classmethod
    def of(cls, r: FieldRow) -> Row:
        return cls(r.field, r.label, r.left, r.right, r.status)


@dataclass(frozen=True)
class RunSummary:
    """One run as read, and whether its two sides are one program."""

    run: str
    recorded: bool = dataclasses.field(
        metadata={"doc": "the manifest holds a provenance record (false: recorded before it)"}
    )
    note: str | None = dataclasses.field(metadata={"doc": "why the record is partial or absent; null when it is whole"})
    sampler_source: str
    trainer_source: str
    contract: bool | None = dataclasses.field(
        metadata={"doc": "true: the sides share every identity both recorded; false: one differs; null: none compared"}
    )
    contract_sentence: str
    differences: list[Difference]
    fallbacks: list[Fallback] = dataclasses.field(
        metadata={"doc": "numerics run otherwise than asked, and logged fallbacks"}
    )

    @classmethod
    def of(cls, rec: RunRecord) -> RunSummary:
        c = contract(rec.provenance)
        return cls(
            rec.run,
            rec.recorded,
            rec.note,
            rec.provenance.sampler.source,
            rec.provenance.trainer.source,
            c.same,
            c.sentence(),
            c.differences,
            fallbacks(rec.provenance),
        )


@dataclass(frozen=True)
class ProvenanceDocument:
    """What ``provenance --format json`` prints, after ``schema_version``."""

    compared: Literal["sides", "runs"] = dataclasses.field(
        metadata={"doc": "sides: one run's sampler against its trainer; runs: a baseline against a candidate"}
    )
    left: str = dataclasses.field(metadata={"doc": "the left column: sampler, or the baseline run"})
    right: str = dataclasses.field(metadata={"doc": "the right column: trainer, or the candidate run"})
    changed: int = dataclasses.field(metadata={"doc": "rows whose two values differ"})
    rows: list[Row] = dataclasses.field(
        metadata={"doc": "changed first, then recorded on one side, the same, not recorded"}
    )
    runs: list[RunSummary]


def provenance_document(run: str | os.PathLike, other: str | os.PathLike | None = None) -> ProvenanceDocument:
    """The comparison ``mismatchscope provenance RUN [RUN_B]`` prints."""
    first = read_run(run)
    if other is None:
        rows = sides(first.provenance)
        return ProvenanceDocument(
            "sides", "sampler", "trainer", _changed(rows), [Row.of(r) for r in rows], [RunSummary.of(first)]
        )
    second = read_run(other)
    rows = runs(first.provenance, second.provenance)
    summaries = [RunSummary.of(first), RunSummary.of(second)]
    return ProvenanceDocument("runs", str(run), str(other), _changed(rows), [Row.of(r) for r in rows], summaries)


def _changed(rows: list[FieldRow]) -> int:
    return sum(r.status == "changed" for r in rows)
