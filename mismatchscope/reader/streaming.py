"""The batches of a pass: record batches of only the columns asked for, in file order, decoded ahead on
threads. Memory is bounded by the batch size, never by the file; a damaged page is a one-line error
naming the file and its row group.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import FileFormatError, UsageError
from ..schema import REQUIRED_NAMES
from .columns import check_type
from .hygiene import CleanBatch, Hygiene, _clean
from .sources import Source, short_reason

BATCH_ROWS = 1 << 18


def iter_batches(
    source: Source,
    columns: list[str],
    hygiene: Hygiene,
    batch_rows: int = BATCH_ROWS,
    extra: list[str] | tuple[str, ...] = (),
) -> Iterator[dict[str, np.ndarray | pa.Array]]:
    """Yield cleaned batches: dict of canonical name -> numpy array (lists stay Arrow).

    Required columns are always included. Optional columns not in the source
    are simply absent from the dict. ``extra`` names raw columns of the files
    (not schema columns, e.g. ``env`` for ``timeline --by env``): they come
    back as Arrow arrays under their own names, unconverted, with the rows
    hygiene drops dropped from them too.
    """
    for raw in read_batches(source, columns, batch_rows, extra):
        yield raw.clean(hygiene)


@dataclass(frozen=True)
class RawBatch:
    """One decoded record batch, not yet cleaned: what a parallel pass hands to its workers.

    Cleaning (sentinels, non-finite rows, range checks) is per-batch work like
    any other, so a pass that analyses batches on threads cleans them there
    too, each with its own :class:`Hygiene`, merged in file order.
    """

    path: Path
    record_batch: pa.RecordBatch
    wanted: list[str]
    extra: tuple[str, ...] = ()
    filled: tuple[str, ...] = ()
    """wanted turn columns the file does not hold: one turn per sequence, filled in when cleaned."""

    def clean(self, hygiene: Hygiene) -> CleanBatch:
        return _clean(self.path, self.record_batch, self.wanted, hygiene, self.extra, self.filled)

    def full_batch(self) -> pa.RecordBatch:
        """The record batch with the turn columns its file lacks filled in (turn 0, turn_position = position),
        for a caller that keeps rows as Arrow (a rescore carrying imported columns over)."""
        if not self.filled:
            return self.record_batch
        rb = self.record_batch
        position = rb.column(self.wanted.index("position")).cast(pa.int32())
        rb = rb.append_column("turn", pa.array(np.zeros(rb.num_rows, np.int32)))
        return rb.append_column("turn_position", position)


def read_batches(
    source: Source,
    columns: list[str],
    batch_rows: int = BATCH_ROWS,
    extra: list[str] | tuple[str, ...] = (),
    required: tuple[str, ...] = REQUIRED_NAMES,
    check: GroupCheck | None = None,
    only: SomeGroups | None = None,
) -> Iterator[RawBatch]:
    """:func:`iter_batches` without the cleaning: the same checks of names and types, the same order.

    ``required``: the required columns decoded (all of them unless a pass has shown it needs fewer: the
    analysis leaves out ``token_id`` where nothing reads it); ``check``: run on each row group, on its reader
    thread, before the group is decoded (the top-k summaries' check); ``only``: columns decoded in some row
    groups alone (a batch of any other group lacks them, and its ``wanted`` does not name them).
    """
    wanted = list(dict.fromkeys(list(required) + [c for c in columns if source.has(c)]))
    file_cols = [source.mapping.get(c, c) for c in wanted]
    clash = [e for e in extra if e in file_cols or e in wanted]
    if clash:
        raise UsageError(
            f"the column(s) {', '.join(clash)} are already read as mismatchscope columns",
            hint="group by another column, or map the mismatchscope column elsewhere with --column",
        )
    filled = {f: tuple(c for c in wanted if c in cols) for f, cols in source.filled.items()}
    for f in source.files:  # only what this pass reads: a foreign extra column may be anything
        schema = _guard(f, lambda: _open(f).schema_arrow)
        for c, raw in zip(wanted, file_cols, strict=True):
            if c not in filled.get(f, ()):
                check_type(f, c, raw, schema.field(raw).type)
    layouts: dict[tuple[Path, bool], tuple[list[str], list[str]]] = {}

    def layout(f: Path, i: int) -> tuple[list[str], list[str]]:
        """(the schema columns, the file's columns) decoded in row group ``i`` of ``f``."""
        full = only is None or (f, i) in only.groups
        if (f, full) not in layouts:
            gone = filled.get(f, ())  # a file of one turn among multi-turn ones: read without the columns it lacks
            left = () if only is None or full else only.columns
            own = [c for c in wanted if c not in gone and c not in left]
            layouts[f, full] = (own, [source.mapping.get(c, c) for c in own] + list(extra))
        return layouts[f, full]

    groups = [(f, i, *layout(f, i)) for f, i in row_groups(source.files)]
    for f, own, rb in _group_batches(groups, batch_rows, check):
        if rb.num_rows:
            yield RawBatch(f, rb, own, tuple(extra), filled.get(f, ()))


READ_AHEAD = max(2, min(4, os.cpu_count() or 1))
"""Row groups decoded at once, each on its own thread."""
QUEUED_BATCHES = 2
"""Decoded batches a reader thread may hold before the consumer takes them."""
_DONE = object()


def _open(f: Path) -> pq.ParquetFile:
    # pre_buffer off + a read buffer: pyarrow otherwise pre-reads whole row
    # groups of list columns (1.3 GB held for a 10M-token file in our benchmark).
    # Page checksums are verified where the writer stored them (a damaged page is
    # an error, not silently different numbers); pages without one cost nothing.
    return pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20, page_checksum_verification=True)


GroupCheck = Callable[[Path, pq.ParquetFile, int], None]
"""a check of one row group of a file (the file, open; the group's index), raising the error it finds."""


@dataclass(frozen=True)
class SomeGroups:
    """Columns a pass decodes in some row groups alone: a sample drawn from those groups needs them, the rest
    of the pass does not (``doctor``'s listed top-k values, read for the rival fits of a small sample)."""

    columns: tuple[str, ...]
    """schema names."""
    groups: frozenset[tuple[Path, int]]
    """(file, row group index) of the groups where they are decoded."""


def row_groups(files: list[Path]) -> list[tuple[Path, int]]:
    """(file, index) of every row group of ``files``, in read order."""
    return [(f, i) for f, i, _ in group_rows(files)]


def group_rows(files: list[Path]) -> list[tuple[Path, int, int]]:
    """(file, index, rows) of every row group of ``files``, in read order, from the footers."""
    out = []
    for f in files:
        meta = _guard(f, lambda: _open(f).metadata)
        out += [(f, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    return out


def _record_batches(
    files: list[Path], file_cols: list[str], batch_rows: int, check: GroupCheck | None = None
) -> Iterator[tuple[Path, pa.RecordBatch]]:
    """Every batch of every row group of every file, the same columns in each: :func:`_group_batches`."""
    groups = [(f, i, file_cols, file_cols) for f, i in row_groups(files)]
    for f, _, rb in _group_batches(groups, batch_rows, check):
        yield f, rb


def _group_batches(
    groups: list[tuple[Path, int, list[str], list[str]]], batch_rows: int, check: GroupCheck | None = None
) -> Iterator[tuple[Path, list[str], pa.RecordBatch]]:
    """Every batch of every row group of ``groups`` (file, index, schema columns, the file's columns), in order,
    decoded ahead on threads; each with its file and the schema columns of its group.

    Decoding Parquet (zstd, list offsets) is most of a pass's time, and
    pyarrow releases the GIL while it decodes: ``READ_AHEAD`` row groups are
    decoded at once, each by its own thread into a small queue, while the
    caller analyses the batches of the oldest one. The batches still arrive in
    file order (results stay bit-for-bit reproducible), and memory is bounded
    by ``READ_AHEAD * QUEUED_BATCHES`` batches, whatever the row-group size.
    """
    stop = threading.Event()
    pending: deque = deque()
    todo = iter(groups)
    with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="mismatchscope-read") as pool:
        try:
            while True:
                while len(pending) < READ_AHEAD and (g := next(todo, None)) is not None:
                    q: queue.Queue = queue.Queue(QUEUED_BATCHES)
                    pool.submit(_decode_group, g[0], g[1], g[3], batch_rows, q, stop, check)
                    pending.append((g[0], g[1], g[2], q))
                if not pending:
                    return
                f, group, own, q = pending[0]
                item = q.get()
                if item is _DONE:
                    pending.popleft()
                elif isinstance(item, BaseException):
                    _guard(f, lambda: _reraise(item), group)
                else:
                    yield f, own, item
        finally:
            stop.set()  # a caller that stops early (an error, a break) releases the threads


def _decode_group(
    f: Path,
    i: int,
    file_cols: list[str],
    batch_rows: int,
    out: queue.Queue,
    stop: threading.Event,
    check: GroupCheck | None = None,
) -> None:
    """One row group's batches into ``out`` (a reader thread's work), then ``_DONE`` or the error it met;
    gives up as soon as the consumer has stopped."""
    try:
        pf, decoded = _open(f), 0
        if check is not None:
            check(f, pf, i)
        for rb in pf.iter_batches(batch_size=batch_rows, columns=file_cols, row_groups=[i]):
            decoded += rb.num_rows
            while not stop.is_set():
                try:
                    out.put(rb, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        listed = pf.metadata.row_group(i).num_rows
        if decoded != listed:  # a damaged page header (its value count) that no page CRC covers
            raise pa.ArrowInvalid(f"{decoded:,} rows decode where the footer lists {listed:,}")
        out.put(_DONE)
    except BaseException as e:  # handed to the consumer, which raises it in order
        out.put(e)


def _reraise(e: BaseException):
    raise e


def _guard(f: Path, fn, group: int | None = None):
    """Run ``fn``; a Parquet decoding failure becomes a one-line FileFormatError naming the file (and the row
    group being read: the first damaged one, as row groups are reported in file order)."""
    try:
        return fn()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, UnicodeDecodeError) as e:
        raise damaged_error(f, e, group) from None


def damaged_error(f: Path, e: BaseException, group: int | None = None) -> FileFormatError:
    """The one-line error for a shard whose pages fail to decode, or fail their CRC (``damaged``)."""
    damaged = "CRC" in str(e)
    where = f" in row group {group}" if group is not None else ""
    if damaged:
        return FileFormatError(
            f"{f}: damaged{where}: a page's checksum does not match its bytes ({short_reason(e)})",
            hint="the file changed after it was written; restore it from a copy or write it again",
        )
    return FileFormatError(f"{f}: unreadable Parquet data{where} ({short_reason(e)})")
