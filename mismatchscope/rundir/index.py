"""The shard index: one line per shard a writer renamed into place (name, rows, size, footer hash), and
the checks every reader holds a run's shards to against it."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ShardIndexError
from .layout import INDEX, INDEX_VERSION, ROUTES
from .manifest import completion, read_manifest


@dataclass(frozen=True)
class ShardEntry:
    rows: int
    size: int
    """bytes on disk when the shard was committed."""
    footer: str | None = None
    """:func:`footer_hash` of the shard when it was committed; None in an index written before entries had one."""


FOOTER_HASH = "blake2b-128"
"""how :func:`footer_hash` digests a footer (named in each index entry, so a later change is told apart)."""


def footer_hash(path: str | os.PathLike) -> str:
    """The hash of a Parquet file's footer: its last ``8 + length`` bytes (metadata, length, ``PAR1``).

    Why the footer and not the whole file: a reader would pay for hashing
    every byte again on every read (1.2 GB for 10 million tokens, about half
    of ``report``'s time). The pages already carry a CRC each, which the
    reader verifies as it decodes them; what no page CRC covers is the footer
    (schema, metadata, row-group offsets, statistics), and that is a few
    kilobytes. Size, footer hash and page CRCs together cover every byte that
    decides a value. A file too short to hold a footer hashes its whole self.
    """
    import hashlib

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        length = 0
        if size >= 12:
            f.seek(size - 8)
            tail = f.read(8)
            length = int.from_bytes(tail[:4], "little") if tail[4:] == b"PAR1" else 0
        start = size - 8 - length if 0 < length <= size - 12 else 0
        f.seek(start)
        return hashlib.blake2b(f.read(size - start), digest_size=16).hexdigest()


def index_files(run: str | os.PathLike, folder: str) -> list[Path]:
    """Every writer's index of ``DIR/folder``: ``index/folder.jsonl`` and ``index/folder.*.jsonl``."""
    d = Path(run) / INDEX
    return sorted({*d.glob(f"{folder}.jsonl"), *d.glob(f"{folder}.*.jsonl")})


class ShardIndex:
    """One writer's append-only record of the shards it committed to one folder of a run.

    ``DIR/index/FOLDER.jsonl`` for a run with one writer, ``FOLDER.WRITER.jsonl``
    for each of several (the Recorder's ranks): no two processes ever append
    to one file. A line ``{"shard": NAME, "rows": N, "bytes": B}`` is appended
    after a shard is renamed into place, ``{"shard": NAME, "removed": true}``
    before one is deleted; ``NAME`` is relative to ``DIR/FOLDER``. A line is
    one ``write`` to a file opened for appending, so a killed writer leaves at
    most a torn last line: readers skip it, and the next writer cuts it off.
    """

    def __init__(self, run: str | os.PathLike, folder: str, writer: str = ""):
        self.run = Path(run)
        self.folder = folder
        self.path = self.run / INDEX / (f"{folder}.{writer}.jsonl" if writer else f"{folder}.jsonl")
        self._repaired = False

    def commit(self, shard: str | os.PathLike, rows: int) -> None:
        """Record a shard just renamed into ``DIR/FOLDER`` with its ``rows``; its size is read from disk."""
        entry = {"shard": self._name(shard), "rows": int(rows), "bytes": os.stat(shard).st_size}
        self._append({**entry, "footer": footer_hash(shard), "hash": FOOTER_HASH})

    def forget(self, shard: str | os.PathLike) -> None:
        """Record that a shard is about to be deleted (call before the unlink: a crash between leaves
        an unlisted shard, which an incomplete run's warning names, never a listed one that is gone)."""
        self._append({"shard": self._name(shard), "removed": True})

    def adopt(self, pattern: str) -> int:
        """List the shards matching ``pattern`` that are on disk but in no index; returns how many.

        A writer resuming its own run calls this under its lock: a shard renamed
        into place just before the writer was killed (or written before runs kept
        an index) becomes part of the run, as the writer's resume already treats it.
        """
        import pyarrow.parquet as pq

        listed = read_index(self.run, self.folder) or {}
        adopted = 0
        for f in sorted((self.run / self.folder).glob(pattern)):
            if f.name.startswith(".") or self._name(f) in listed or not f.is_file():
                continue
            try:
                rows = pq.read_metadata(f).num_rows
            except Exception:  # a damaged shard stays unlisted: the readers name it
                continue
            self.commit(f, rows)
            adopted += 1
        return adopted

    def _name(self, shard: str | os.PathLike) -> str:
        return Path(shard).relative_to(self.run / self.folder).as_posix()

    def _append(self, entry: Mapping[str, Any]) -> None:
        line = (json.dumps(dict(entry), sort_keys=True) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if not self._repaired:
                _cut_torn_tail(fd)
                self._repaired = True
            os.write(fd, line)
        finally:
            os.close(fd)


def _cut_torn_tail(fd: int) -> None:
    """Drop a last line without its newline (a writer killed mid-append) before appending after it."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return
    data = os.pread(fd, size, 0)
    os.ftruncate(fd, data.rfind(b"\n") + 1)


def read_index(run: str | os.PathLike, folder: str) -> dict[str, ShardEntry] | None:
    """The shards every writer of ``DIR/folder`` committed and did not remove; None when no index exists."""
    files = index_files(run, folder)
    if not files:
        return None
    entries: dict[str, ShardEntry] = {}
    for f in files:
        if not f.is_file():
            raise ShardIndexError(
                f"{f}: the shard index is not a regular file",
                hint="remove it; the run's writer keeps its index as a plain file",
            )
        data = f.read_bytes()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:
            lines.pop()  # a torn last line: its shard was never committed
        for number, raw in enumerate(lines, 1):
            name, entry = _index_line(f, number, raw)
            if entry is None:
                entries.pop(name, None)
            else:
                entries[name] = entry
    return entries


def _index_line(path: Path, number: int, raw: bytes) -> tuple[str, ShardEntry | None]:
    try:
        rec = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        rec = None
    if isinstance(rec, dict) and isinstance(rec.get("shard"), str) and rec["shard"]:
        name: str = rec["shard"]
        if rec.get("removed") is True:
            return name, None
        rows, size = rec.get("rows"), rec.get("bytes")
        if (
            isinstance(rows, int)
            and isinstance(size, int)
            and not isinstance(rows, bool)
            and not isinstance(size, bool)
            and rows >= 0
            and size >= 0
            and (rec.get("footer") is None or (isinstance(rec["footer"], str) and rec.get("hash") == FOOTER_HASH))
        ):
            return name, ShardEntry(rows, size, rec.get("footer"))
    raise ShardIndexError(
        f"{path}:{number}: the shard index is damaged (not a shard record)",
        hint="the run's index was edited or damaged; restore the run from a copy",
    )


def hashed(run: str | os.PathLike, folder: str) -> bool:
    """Every shard the run's index of ``folder`` lists carries its footer hash (true of a run without an index
    too: it gets its own note)."""
    return all(e.footer is not None for e in (read_index(run, folder) or {}).values())


def not_regular(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file (a FIFO would block the reader forever); None for a file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing (a broken link?)"
    if stat.S_ISREG(mode):
        return None
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def located(path: str | os.PathLike) -> Path:
    """Where a shard sits: its folder resolved (a run reached through a link), its own name kept.

    A link planted among a run's shards is a file of that folder under its own
    name, wherever it points: resolved, a link to a foreign file would fall
    outside the run and never be checked, and a link to one of the run's
    shards would pass as that shard and be read twice.
    """
    p = Path(path)
    return Path(os.path.realpath(p.parent)) / p.name


def shard_problems(
    run: Path,
    folder: str,
    files: list[Path],
    rows: Mapping[Path, int],
    whole: bool,
    resolved: Mapping[Path, Path] | None = None,
) -> list[str] | None:
    """How the shards of ``run/folder`` read here disagree with the run's index; None when it keeps none.

    ``files`` are the shards a command is about to read (with their footer's
    row counts in ``rows``, when known): each must be listed, at its size and
    row count. With ``whole`` (the command was given the run or its folder),
    each listed shard must also be among them. Only sizes and footers are read.
    """
    index = read_index(run, folder)
    if index is None:
        return None
    base = os.path.realpath(run / folder)
    problems = []
    seen = set()
    for f in files:
        try:
            real = resolved[f] if resolved is not None and f in resolved else located(f)
            name = real.relative_to(base).as_posix()
        except ValueError:
            continue
        seen.add(name)
        problem = _shard_problem(f, folder, name, index.get(name), rows)
        if problem is not None:
            problems.append(problem)
    if whole:
        lost = sorted(n for n in index if n not in seen)
        if lost:
            lost_rows = sum(index[n].rows for n in lost)
            problems.append(
                f"{len(lost)} shard(s) listed in the run's index are missing ({lost_rows:,} rows), "
                f"e.g. {folder}/{lost[0]}"
            )
    return problems


def _shard_problem(f: Path, folder: str, name: str, entry: ShardEntry | None, rows: Mapping[Path, int]) -> str | None:
    """How one shard disagrees with its index entry (None when it agrees); a changed footer is refused outright."""
    shown = f"{folder}/{name}"
    if entry is None:
        return f"{shown} is not one of the run's shards (no writer of the run listed it)"
    size = os.stat(f).st_size
    if size != entry.size:
        return (
            f"{shown} is {size:,} bytes, the run's index says {entry.size:,} "
            "(truncated or replaced after it was written)"
        )
    if f in rows and rows[f] != entry.rows:
        return f"{shown} holds {rows[f]:,} rows, the run's index says {entry.rows:,} (replaced)"
    if entry.footer is not None and footer_hash(f) != entry.footer:
        raise ShardIndexError(
            f"{f}: damaged: its Parquet footer (schema, row groups, statistics) is not the one its writer "
            f"recorded in {INDEX}/{folder}",
            hint="the shard changed after it was written; restore the run from a copy",
        )
    return None


def check_folder(run: str | os.PathLike, folder: str, files: list[Path]) -> list[str]:
    """Hold every shard of ``DIR/folder`` (all of them, ``files``) against the run's index before a reader uses them.

    A complete run that disagrees is refused (:class:`ShardIndexError`); an
    incomplete one returns the disagreements for its warning (a writer killed
    between a rename and its index line leaves an unlisted shard). A run that
    keeps no index of the folder (written before it did) is read as before.
    Only sizes and Parquet footers are read.
    """
    import pyarrow.parquet as pq

    run = Path(run)
    manifest = read_manifest(run)
    version = (manifest or {}).get("shard_index")
    since = INDEX_VERSION if folder == ROUTES else 1
    if not index_files(run, folder):
        if files and isinstance(version, int) and not isinstance(version, bool) and version >= since:
            problems = [f"its shard index ({INDEX}/{folder}.jsonl) is missing"]
        else:
            return []
    else:
        rows: dict[Path, int] = {}
        for f in files:
            with contextlib.suppress(Exception):  # an unreadable shard: its size disagrees, or its reader names it
                rows[f] = pq.read_metadata(f).num_rows
        problems = shard_problems(run, folder, files, rows, whole=True) or []
    c = completion(run)
    if problems and (c is None or c.complete):
        more = f" (and {len(problems) - 1} more disagreement(s))" if len(problems) > 1 else ""
        raise ShardIndexError(
            f"{run}: {problems[0]}{more}; the run no longer holds what it recorded",
            hint=f"restore the run from a copy, or move foreign files out of its {folder}/ folder",
        )
    return problems


def indexed(manifest: Mapping[str, Any] | None, run: str | os.PathLike, folder: str) -> bool:
    """Does the run keep a shard index (its manifest says so, or a writer has started one)?"""
    return bool(manifest and manifest.get("shard_index")) or bool(index_files(run, folder))
