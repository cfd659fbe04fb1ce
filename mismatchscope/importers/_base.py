"""What every importer shares: the importer's contract, the run context and its counting.

An importer is a small object with a name, the optional columns it fills, a
``discover`` step (which files, in which order) and either ``convert`` (one
parsed JSONL record -> one sequence; the JSONL engine in ``_jsonl`` does the
reading, in parallel when it pays) or ``read`` (one whole file, for formats
that are not JSONL); which of the two it implements is the protocol its entry in
:mod:`.registry` declares (:class:`JsonlImporter`, :class:`FileImporter`, or
:class:`SamplerOnlyImporter` for a dump with the sampler's side only), and the
import dispatches on that declaration. A routes encoding declares
:class:`RouteDecoder`, and where routes are read in place from a stack's dump,
:class:`DumpRoutes`. Bad records raise
:class:`~mismatchscope.errors.ImportFormatError`; :meth:`ImportContext.bad`
decides whether that stops the run or is skipped and counted (``--skip-bad``).
A JSONL record is parsed by :mod:`._records`; its fields become checked arrays
in :mod:`._values`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError

if TYPE_CHECKING:
    from ._writer import ShardWriter


MAX_BAD_EXAMPLES = 20


@dataclass
class ImportResult:
    """Counts the CLI prints as the import summary."""

    format: str
    out: Path
    sequences: int = 0
    tokens_written: int = 0
    tokens_dropped_by_mask: int = 0
    """prompt, tool, observation and other non-generated tokens the source's mask excluded."""
    bad_records_skipped: int = 0
    rows_skipped: dict[str, int] = field(default_factory=dict)
    """rows a stack's own dump holds that train no token, skipped by what they are (never bad records):
    ``padding`` (the batch padding SkyRL adds), ``loss_mask_all_zero`` (SkyRL rows its overlong filtering
    zeroed), ``empty_response`` (verl agent-loop samples that generated nothing)."""
    files_read: int = 0
    steps: int = 0
    """distinct training steps in the output."""
    shards: int = 0
    warnings: list[str] = field(default_factory=list)
    routes: dict[str, Any] | None = None
    """the manifest's ``routes`` entry, when MoE routes were imported (``--routes``)."""
    sampler_only: bool = False
    """the dump holds the sampler's side only: its sequences' ids were kept for ``rescore``."""

    @json_edge
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        return d


@dataclass
class SourceFile:
    """One file to read, with what its path says about it."""

    path: Path
    rel: str
    """path relative to the import root, as recorded in the metadata."""
    step: int | None = None
    rank: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Importer(Protocol):
    name: ClassVar[str]
    columns: tuple[str, ...]
    """optional schema columns this importer fills (besides the required five); known after ``discover``."""
    warnings: list[str]

    def discover(self, src: Path) -> list[SourceFile]: ...

    @json_edge
    def semantics(self) -> dict[str, Any]: ...


class JsonlImporter(Importer, Protocol):
    @json_edge
    def convert(
        self, f: SourceFile, line: int, rec: dict[str, Any], notes: dict[str, int]
    ) -> tuple[dict[str, Any], int]:
        """One record -> (column values of its kept tokens, tokens dropped by the mask)."""
        ...


class FileImporter(Importer, Protocol):
    def read(self, f: SourceFile, ctx: ImportContext) -> None: ...


class SamplerOnlyImporter(FileImporter, Protocol):
    """A stack whose dumps hold the sampler's side only: each sequence's ids are kept for ``rescore``."""

    sequence_rows: SequenceRowsSink
    """each imported sequence's prompt and response ids (``dataproto.SequenceRows``)."""


class SequenceRowsSink(Protocol):
    def write(self, out: Path) -> None:
        """``out/sequences.parquet``, which ``rescore`` scores for the trainer's side."""
        ...


class ImportContext:
    """Counts, bad-record policy and the writer, shared by one import run."""

    def __init__(self, writer: ShardWriter, result: ImportResult, *, skip_bad: bool, trust_pickle: bool):
        self.writer = writer
        self.result = result
        self.skip_bad = skip_bad
        self.trust_pickle = trust_pickle
        self.steps: set[int] = set()
        self.bad_examples: list[dict[str, Any]] = []
        self.file_stats: dict[str, dict[str, int]] = {}
        self.notes: dict[str, int] = {}
        """named counters an importer wants in the manifest (e.g. ``nonfinite_logprobs``)."""
        self.seen_ids: set[int] = set()
        self.source_rows: dict[tuple[str, int], int] = {}
        """``(resolved file path, record)`` -> the ``sequence_id`` it was imported as, for the formats that read
        a batch per file (what routes read in place from the same batch are keyed by)."""
        self.trainer_tokens = 0
        """kept tokens with a trainer logprob other than exactly 0 (NaN included), and with a sampler logprob
        other than exactly 0: a dump whose trainer side is all zeros has none (:func:`check_trainer_side`)."""
        self.sampler_tokens = 0

    def add(self, f: SourceFile, values: dict[str, Any], dropped: int = 0, record: int | None = None) -> int:
        """Write one sequence's kept tokens; ``record``: its row in ``f``'s batch."""
        seq_id = self.writer.add_sequence(f.rel, values)
        n = len(values["token_id"])
        self._count(f, sequences=1, tokens=n, dropped=dropped, first_id=seq_id)
        self._sides(values)
        if record is not None:
            self.source_rows[(str(f.path.resolve()), record)] = seq_id
        step = values.get("step")
        if step is not None:
            self.steps.add(int(step))
        return seq_id

    def skip_row(self, f: SourceFile, reason: str) -> None:
        """A row the stack's dump holds that trains no token (its padding, a filtered row): counted, not bad."""
        self.result.rows_skipped[reason] = self.result.rows_skipped.get(reason, 0) + 1
        st = self.file_stats.setdefault(f.rel, {"sequences": 0, "tokens": 0, "bad_records": 0})
        st["rows_skipped"] = st.get("rows_skipped", 0) + 1

    def _sides(self, columns: Any) -> None:
        trainer, sampler = np.asarray(columns["trainer_logprob"]), np.asarray(columns["sampler_logprob"])
        self.trainer_tokens += int(np.count_nonzero(trainer != 0)) if trainer.ndim else int(trainer != 0)
        self.sampler_tokens += int(np.count_nonzero(sampler != 0)) if sampler.ndim else int(sampler != 0)

    def add_batch(self, f: SourceFile, columns: dict[str, np.ndarray], sequences: int, dropped: int = 0) -> None:
        self.writer.add_batch(f.rel, columns)
        self._sides(columns)
        first_id = int(columns["sequence_id"][0]) if len(columns["sequence_id"]) else None
        self._count(f, sequences=sequences, tokens=len(columns["token_id"]), dropped=dropped, first_id=first_id)
        step = columns.get("step")
        if step is not None and len(step):
            lo, hi = int(step.min()), int(step.max())  # one step per batch is the rule: skip the sort
            self.steps.update([lo] if lo == hi else np.unique(step).tolist())

    def _count(self, f: SourceFile, *, sequences: int, tokens: int, dropped: int, first_id: int | None) -> None:
        r = self.result
        r.sequences += sequences
        r.tokens_written += tokens
        r.tokens_dropped_by_mask += dropped
        st = self.file_stats.setdefault(f.rel, {"sequences": 0, "tokens": 0, "bad_records": 0})
        if first_id is not None:
            st.setdefault("first_sequence_id", first_id)
        st["sequences"] += sequences
        st["tokens"] += tokens

    def bad(self, err: ImportFormatError, f: SourceFile | None = None) -> None:
        """Stop on a bad record, or skip and count it with ``--skip-bad``."""
        if not (self.skip_bad and err.skippable):
            raise err
        self.result.bad_records_skipped += 1
        if f is not None:
            self.file_stats.setdefault(f.rel, {"sequences": 0, "tokens": 0, "bad_records": 0})["bad_records"] += 1
        if len(self.bad_examples) < MAX_BAD_EXAMPLES:
            self.bad_examples.append(
                {"file": str(err.file), "line": err.line, "record": err.record, "reason": err.reason}
            )

    def note(self, key: str, count: int = 1) -> None:
        note(self.notes, key, count)

    def unique_sequence_ids(
        self, f: SourceFile, ids: np.ndarray, lines: np.ndarray | None = None, records: np.ndarray | None = None
    ) -> np.ndarray:
        """Which of a source's own sequence ids are new; a repeat is a bad record."""
        keep = np.ones(len(ids), dtype=bool)
        for k, sid in enumerate(ids.tolist()):
            if sid in self.seen_ids:
                keep[k] = False
                self.bad(
                    ImportFormatError(
                        f"sequence_id {sid} appears twice; ids must be unique across the import",
                        file=f.rel,
                        line=None if lines is None else int(lines[k]),
                        record=None if records is None else int(records[k]),
                    ),
                    f,
                )
            else:
                self.seen_ids.add(sid)
        return keep


def short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:160]


def note(notes: dict[str, int], key: str, count: int = 1) -> None:
    if count:
        notes[key] = notes.get(key, 0) + count
