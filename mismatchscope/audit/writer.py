"""Writing an audit while the pass runs: batches go to a Parquet writer on its own thread, in file order.

The pass hands each batch's audit rows over as it folds them
(:class:`AuditWriter` is its ``BatchSink``); a writer thread encodes and
writes them while the workers analyse the next ones, so the audit costs the
pass little wall time where a core is free. The queue between them holds a few
batches: memory stays bounded whatever the run's size. The files are written
under temporary names and renamed into place only once both are whole, so a
failed command leaves the folder as it found it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..analysis.batch import BatchTokens
from ..analysis.plan import AnalysisPlan
from ..documents import json_edge
from ..errors import OutputError
from ..outputs import writing
from .columns import CARRIED, SEQUENCES_FILE, TOKENS_FILE, AuditLayout

QUEUED = 4
"""audit batches waiting for the writer thread at most (each a batch of the pass: a few MB)."""
_DONE = object()


class AuditWriter:
    """``compare-masks --write DIR``: the pass's sink that writes ``DIR/tokens.parquet`` and ``DIR/sequences.parquet``."""

    reads = CARRIED
    """the run's own keys besides (sequence_id, position), carried into the audit where the run has them."""

    def __init__(self, out: str | os.PathLike, option: str = "--write"):
        self.out = Path(out)
        self.option = option
        self.layout: AuditLayout | None = None
        self.made = [d for d in (self.out, *self.out.parents) if not d.exists()]
        """the folders this writer creates (deepest first), taken back if it fails."""
        self._queue: queue.Queue = queue.Queue(QUEUED)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._writer: pq.ParquetWriter | None = None
        self._tmp = {name: self.out / f".{name}.{os.getpid()}.tmp" for name in (TOKENS_FILE, SEQUENCES_FILE)}
        self.written: list[Path] = []

    # ------------------------------------------------------------------ BatchSink

    def start(self, plan: AnalysisPlan) -> None:
        carried = tuple(c for c in CARRIED if plan.source.has(c))
        self.layout = AuditLayout.of(plan.units, carried, plan.path)
        with writing(self.out, self.option):
            self.out.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp[TOKENS_FILE], self.layout.token_schema, **_options(self.layout))
        self._thread = threading.Thread(target=self._drain, name="mismatchscope-audit", daemon=True)
        self._thread.start()

    def per_batch(self, tokens: BatchTokens) -> pa.RecordBatch:
        assert self.layout is not None  # start() ran before the first batch
        return self.layout.token_batch(tokens)

    def take(self, part: Any) -> None:
        while True:
            self._raise_if_failed()
            try:
                self._queue.put(part, timeout=0.2)
                return
            except queue.Full:
                continue

    def finish(self, result: Any) -> None:
        """The last batch was taken: close ``tokens.parquet``, write ``sequences.parquet``, put both in place."""
        assert self.layout is not None and self._thread is not None
        self.take(_DONE)
        self._thread.join()
        self._raise_if_failed()
        table = self.layout.sequence_table(result.per_sequence.sequence_id_S, result.sequence_inputs, result.tokens)
        with writing(self.out / SEQUENCES_FILE, self.option):
            pq.write_table(table, self._tmp[SEQUENCES_FILE], **_options(self.layout, sequences=True))
            for name, tmp in self._tmp.items():
                os.replace(tmp, self.out / name)
                self.written.append(self.out / name)

    # ------------------------------------------------------------------ the writer thread, and failure

    def _drain(self) -> None:
        assert self._writer is not None
        try:
            while (rb := self._queue.get()) is not _DONE:
                self._writer.write_batch(rb)
            self._writer.close()
        except BaseException as e:  # handed to the pass's thread, which raises it at its next take()
            self._error = e
            with contextlib.suppress(queue.Empty):  # unblock a put waiting on a full queue
                while True:
                    self._queue.get_nowait()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            with writing(self.out / TOKENS_FILE, self.option):
                raise self._error

    def abort(self) -> None:
        """Take back everything written: the temporary files, and the folders this writer made."""
        if self._thread is not None and self._thread.is_alive():
            self._error = self._error or RuntimeError("aborted")
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_DONE)
            self._thread.join(timeout=30)
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        for tmp in self._tmp.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        for d in self.made:  # deepest first; a folder that holds something else stays, and so do those above it
            try:
                d.rmdir()
            except OSError:
                break


def refuse_among_shards(out: str | os.PathLike, source: str | os.PathLike) -> None:
    """An audit written into a folder of shards the command reads would be read as token pairs the next time
    (its files are Parquet): refused, before any work. A run directory reads only its ``tokens/`` (whose own
    refusal is ``outputs``'), so a folder beside them is fine."""
    from ..rundir import is_run_dir

    folder = Path(source)
    if not folder.is_dir() or is_run_dir(folder):
        return
    where, shards = Path(os.path.realpath(out)), Path(os.path.realpath(folder))
    if where == shards or shards in where.parents:
        raise OutputError(
            f"--write {out} is inside the input folder {source}: its Parquet files would be read as token pairs",
            hint="write the audit outside the folder of shards",
        )


@contextlib.contextmanager
def audit_writer(out: str | os.PathLike, option: str = "--write") -> Iterator[AuditWriter]:
    """An :class:`AuditWriter` whose files are taken back when the block fails (an error, an interrupt)."""
    writer = AuditWriter(out, option)
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise


@json_edge
def _options(layout: AuditLayout, sequences: bool = False) -> dict[str, Any]:
    """How the audit is written, for the least work per token: the statistics, which compress little, plain and
    uncompressed; the decisions dictionary-encoded, which already stores their long runs of one value as runs
    (compressing those again saved a few hundred KB for a third of their writing time); the keys plain and LZ4
    (at 10 million tokens 1.5 MB in 0.05 s, where delta encoding and zstd took 0.09 s for 0.3 MB); version 2
    data pages; min/max statistics on the keys alone (a reader filtering
    by sequence skips row groups by them; on a decision column they would cost more than the rest of its writing).

    No page checksums, unlike a run's files (``schema.WRITE_OPTIONS``): no command reads an audit back, and
    the readers people join it with (DuckDB, pandas) do not check them; they cost a tenth of its writing.
    """
    stats = layout.sequence_statistics if sequences else layout.token_statistics
    rules = layout.sequence_rules if sequences else layout.token_rules
    plain = [*stats, *(r.weight for r in rules if r.weight is not None)]
    keys = ["sequence_id", "tokens"] if sequences else ["sequence_id", "position", *layout.carried]
    return {
        "compression": {**dict.fromkeys(keys, "lz4"), **dict.fromkeys([*(r.column for r in rules), *plain], "none")},
        "use_dictionary": [r.column for r in rules],
        "write_statistics": keys,
        "data_page_version": "2.0",
    }
