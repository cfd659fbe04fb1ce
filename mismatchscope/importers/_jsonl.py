"""The JSONL engine shared by the nemo-rl, prime-rl and generic jsonl importers.

An importer supplies ``convert(f, line, record, notes) -> (values, dropped)``
for one parsed line; this module does the rest. Files are cut into units of
~16 MiB on line boundaries. A unit is parsed (orjson) and converted to numpy
arrays by :func:`run_unit`, in this process or, for big imports, in a pool of
worker processes (parsing is CPU-bound and holds the GIL, so threads would not
help). Results are consumed strictly in file and unit order, so sequence ids,
line numbers and the first error reported are the same either way; at most
two units per worker are in flight, so memory stays flat in the length of the
run.

Workers are forked (Linux) before the shard writer starts its thread; by
default they are used on Linux only, for inputs over 64 MiB. Each asks the
kernel to kill it when its parent dies (``PR_SET_PDEATHSIG``), so an import
killed by SIGKILL, or by the SIGTERM a CI timeout sends, leaves no worker
parsing on for minutes, re-parented, holding the caller's pipes open.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import errors
from ..errors import ImportFormatError, MismatchscopeError
from ._base import SourceFile, short
from ._records import parse_record
from ._values import check_record

if TYPE_CHECKING:
    from ..progress import FileProgress as Progress
    from ._base import ImportContext

UNIT_BYTES = 16 << 20
PARALLEL_MIN_BYTES = 64 << 20
"""below this much JSONL, worker start-up costs more than it saves."""
MAX_WORKERS = 8


@dataclass
class BadRecord:
    line: int | None
    """1-based line within the unit (the consumer adds the unit's offset); None: the whole file."""
    message: str
    hint: str | None
    kind: str
    """name of the ImportFormatError subclass, rebuilt by the consumer."""


@dataclass
class UnitResult:
    columns: dict[str, np.ndarray]
    """every token-level column except sequence_id and position."""
    lengths: np.ndarray
    """kept tokens per sequence, in reading order."""
    seq_lines: np.ndarray
    """line (within the unit) of each sequence."""
    seq_ids: np.ndarray | None
    """the source's own sequence ids, when the importer gives them."""
    dropped: int
    lines: int
    bad: list[BadRecord] = field(default_factory=list)
    notes: dict[str, int] = field(default_factory=dict)


def split_units(f: SourceFile, unit_bytes: int = UNIT_BYTES) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)``; a unit owns the lines that start inside its range."""
    size = f.path.stat().st_size
    n = max(1, math.ceil(size / unit_bytes))
    bounds = [size * k // n for k in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _lines(path: os.PathLike, start: int, end: int) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        if start > 0:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                fh.readline()  # the rest of a line owned by the previous unit
        pos = fh.tell()
        while pos < end:
            raw = fh.readline()
            if not raw:
                return
            pos += len(raw)
            yield raw


def run_unit(importer: Any, f: SourceFile, start: int, end: int, strict: bool) -> UnitResult:
    """Parse and convert the lines of one unit. Bad records are returned, not raised;
    with ``strict`` (no ``--skip-bad``) the unit stops at the first one."""
    names = list(dict.fromkeys(("token_id", "sampler_logprob", "trainer_logprob") + tuple(importer.columns)))
    parts: dict[str, list[np.ndarray]] = {c: [] for c in names}
    lengths: list[int] = []
    seq_lines: list[int] = []
    seq_ids: list[int] = []
    bad: list[BadRecord] = []
    notes: dict[str, int] = {}
    dropped = 0
    lineno = 0
    turns: tuple[list[np.ndarray], list[np.ndarray]] | None = None
    """the turn columns of each record so far, from the first record with several turns on."""
    try:
        for raw in _lines(f.path, start, end):
            lineno += 1
            if raw.isspace():  # stops at the first non-space byte; strip() would copy the line
                continue
            try:
                values, drop = _convert_line(importer, f, lineno, raw, notes)
            except ImportFormatError as e:
                bad.append(BadRecord(lineno, e.reason, e.hint, type(e).__name__))
                if strict or not e.skippable:
                    break
                continue
            n = len(values["token_id"])
            for c in names:
                v = values[c]
                parts[c].append(v if isinstance(v, np.ndarray) else np.full(n, v))
            if "turn" in values or turns is not None:  # a multi-turn record: every record of the unit gets turns
                turns = turns or ([np.zeros(k, np.int32) for k in lengths], [np.arange(k) for k in lengths])
                turns[0].append(values.get("turn", np.zeros(n, np.int32)))
                turns[1].append(values.get("turn_position", np.arange(n)))
            if "sequence_id" in values:
                seq_ids.append(values["sequence_id"])
            lengths.append(n)
            seq_lines.append(lineno)
            dropped += drop
    except OSError as e:
        bad.append(BadRecord(None, f"cannot read the file ({short(e)})", None, "ImportFormatError"))
    columns = {c: (np.concatenate(p) if p else np.zeros(0)) for c, p in parts.items()}
    if turns is not None:
        columns["turn"], columns["turn_position"] = (np.concatenate(t).astype(np.int32) for t in turns)
    return UnitResult(
        columns=columns,
        lengths=np.asarray(lengths, dtype=np.int64),
        seq_lines=np.asarray(seq_lines, dtype=np.int64),
        seq_ids=np.asarray(seq_ids, dtype=np.int64) if seq_ids else None,
        dropped=dropped,
        lines=lineno,
        bad=bad,
        notes=notes,
    )


def _convert_line(importer: Any, f: SourceFile, lineno: int, raw: bytes, notes: dict[str, int]) -> tuple[dict, int]:
    """One line's record, converted and checked; anything wrong with it is an ImportFormatError."""
    rec = parse_record(raw)
    try:
        values, drop = importer.convert(f, lineno, rec, notes)
        check_record(values)
    except MismatchscopeError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as e:
        # a field of a shape the converter did not expect: the record is bad, not the program
        raise ImportFormatError(f"unexpected value ({short(e)})") from None
    return values, drop


def import_files(
    importer: Any,
    files: list[SourceFile],
    ctx: ImportContext,
    *,
    workers: int | None,
    progress: Progress | None,
    unit_bytes: int | None = None,
) -> None:
    """Read ``files`` in order into ``ctx``, with worker processes when it pays."""
    units = [(i, f, s, e) for i, f in enumerate(files) for s, e in split_units(f, unit_bytes or UNIT_BYTES)]
    last_unit = {i: k for k, (i, *_rest) in enumerate(units)}
    if workers is None:
        total = sum(f.path.stat().st_size for f in files)
        big = total >= PARALLEL_MIN_BYTES and sys.platform.startswith("linux")
        workers = min(os.cpu_count() or 1, MAX_WORKERS) if big else 0
    strict = not ctx.skip_bad
    results = (
        _parallel(importer, units, strict, workers)
        if workers > 1 and len(units) > 1
        else ((u, run_unit(importer, u[1], u[2], u[3], strict)) for u in units)
    )
    line_offset: dict[int, int] = {}
    try:
        for k, ((i, f, _s, _e), res) in enumerate(results):
            offset = line_offset.get(i, 0)
            _consume(importer, f, offset, res, ctx)
            line_offset[i] = offset + res.lines
            if last_unit[i] == k:
                ctx.result.files_read += 1
                if progress is not None:
                    progress(i + 1, len(files), f.path)
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()


def _consume(importer: Any, f: SourceFile, offset: int, res: UnitResult, ctx: ImportContext) -> None:
    for b in res.bad:
        cls = getattr(errors, b.kind, ImportFormatError)
        ctx.bad(cls(b.message, file=f.rel, line=None if b.line is None else offset + b.line, hint=b.hint), f)
    for key, count in res.notes.items():
        ctx.note(key, count)
    lengths = res.lengths
    if not len(lengths):
        return
    columns = dict(res.columns)
    if res.seq_ids is not None:
        keep = ctx.unique_sequence_ids(f, res.seq_ids, offset + res.seq_lines)
        if not keep.all():
            token_keep = np.repeat(keep, lengths)
            columns = {c: v[token_keep] for c, v in columns.items()}
            lengths = lengths[keep]
            if not len(lengths):
                return
        seq_ids = res.seq_ids[keep]
    else:
        seq_ids = ctx.writer.allocate_sequence_ids(len(lengths))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    total = int(lengths.sum())
    columns["sequence_id"] = np.repeat(seq_ids, lengths)
    columns["position"] = (np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)).astype(np.int32)
    ctx.add_batch(f, columns, sequences=len(lengths), dropped=res.dropped)


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """A worker's first step (Linux): SIGKILL when the process that started it dies, however it dies; a parent
    already gone before this ran (the race the kernel cannot see) ends the worker here."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the workers end with the pool's shutdown only
        return
    if os.getppid() != parent:
        os._exit(1)


def _parallel(importer: Any, units: list, strict: bool, workers: int) -> Iterator[tuple[Any, UnitResult]]:
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=_mp_context(), initializer=die_with_parent, initargs=(os.getpid(),)
    )
    pending: deque[tuple[Any, Future]] = deque()
    todo = iter(units)
    try:
        for u in todo:
            pending.append((u, pool.submit(run_unit, importer, u[1], u[2], u[3], strict)))
            if len(pending) >= 2 * workers:
                break
        while pending:
            u, fut = pending.popleft()
            try:
                res = fut.result()
            except BrokenProcessPool:  # a worker died (killed, out of memory): finish here
                for v in [u, *(p[0] for p in pending), *todo]:
                    yield v, run_unit(importer, v[1], v[2], v[3], strict)
                return
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(run_unit, importer, nxt[1], nxt[2], nxt[3], strict)))
            yield u, res
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _mp_context() -> Any:
    """fork on Linux: workers start in milliseconds and never re-run the caller's
    ``__main__``. They only parse JSON and fill numpy arrays, so a thread the
    parent happens to run (a progress bar) holds nothing they need. Elsewhere spawn."""
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
