"""The run-directory contract: atomic files, the manifest, the completion record, one writer.

Every writer of a run directory (``probe``, ``rescore``, ``import``, the
training-loop :class:`~mismatchscope.Recorder`) follows the same rules, so
every reader can trust what it finds:

* **Atomic files.** A file is written to a hidden temporary name beside it
  and renamed over its final name (:func:`atomic_path`): a killed writer
  leaves whole files or nothing, never half a shard.
* **One completion record.** ``DIR/manifest.json`` carries ``"status"``;
  the run is complete only when it reads ``"complete"``, written after the
  last shard. A run written by several processes (one per trainer rank) also
  keeps one record per rank, ``DIR/ranks/rank-NNNN.json``, with the same
  ``status`` key; it is complete when the manifest and every rank record say
  ``complete`` (and, when the manifest names a ``world_size``, that many rank
  records exist). :func:`completion` is the one reader of this record.
* **A record of every shard.** A writer appends one line to its shard index,
  ``DIR/index/FOLDER[.WRITER].jsonl``, after each shard of ``DIR/FOLDER/``
  (``tokens/``, ``routes/``) is renamed into place: its name, row count,
  size and footer hash (:class:`ShardIndex`; every page of the shard carries
  its own CRC, :data:`mismatchscope.schema.WRITE_OPTIONS`). Every reader holds what it finds against it
  (:func:`check_shards`): a listed shard that is missing or of another size,
  a shard no writer listed, or a file that is not a regular file is an error
  in a complete run and part of the incomplete-run warning otherwise. The
  manifest's ``shard_index`` key says the run keeps one; a run written before
  it did is read as before, with a note.
* **One writer.** A writer takes an exclusive ``flock`` on a lock file in the
  run directory (:class:`WriterLock`); a second process asking for the same
  lock is refused with a one-line error instead of writing the same rows
  twice. The lock goes away with the process, so a killed writer never
  leaves a stale lock behind.

Only the standard library and pyarrow's footer reader are used here: the
readers of the light core import this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RunLockedError, ShardIndexError

MANIFEST = "manifest.json"
TOKENS = "tokens"
RANKS = "ranks"
LOCK = ".lock"
INDEX = "index"
INDEX_VERSION = 3
"""the manifest's ``shard_index`` value: the run keeps ``DIR/index/*.jsonl``. 1: ``tokens/`` only; 2: ``routes/``
too, so a reader of a version-2 run with route shards and no route index knows the index was lost; 3: each
entry carries its shard's footer hash, and every page of the shard its CRC (:func:`footer_hash`)."""
ROUTES = "routes"
"""the folder of MoE route shards (its layout: :mod:`mismatchscope.routing.layout`)."""
COMPLETE = "complete"
RUNNING = "running"


# -- atomic files -----------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On an exception the temporary file is removed and ``path`` is untouched.
    The rename is atomic on POSIX filesystems, so a reader sees the old file,
    the new file, or no file, never a part of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_json(path: str | os.PathLike, payload: Mapping[str, Any]) -> Path:
    """JSON, indented and key-sorted (diffable), written atomically."""
    text = json.dumps(dict(payload), indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write_bytes(path, text.encode())


# -- manifest and completion -------------------------------------------------------


def read_json(path: str | os.PathLike) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when the file is absent or not a JSON object."""
    try:
        value = json.loads(Path(path).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_manifest(run: str | os.PathLike) -> dict[str, Any] | None:
    return read_json(Path(run) / MANIFEST)


def write_manifest(run: str | os.PathLike, manifest: Mapping[str, Any]) -> Path:
    return atomic_write_json(Path(run) / MANIFEST, manifest)


def is_run_dir(path: str | os.PathLike) -> bool:
    """A directory a mismatchscope writer made: it has a manifest or a ``tokens/`` folder."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).is_file() or (p / TOKENS).is_dir())


@dataclass(frozen=True)
class Completion:
    complete: bool
    reason: str
    """why the run is incomplete ("" when complete)."""


def completion(run: str | os.PathLike) -> Completion | None:
    """The run's completion record read once; None when ``run`` is not a run directory."""
    p = Path(run)
    if not is_run_dir(p):
        return None
    manifest = read_manifest(p)
    if manifest is None:
        return Completion(False, f"no readable {MANIFEST}")
    if manifest.get("status") != COMPLETE:
        return Completion(False, f"{MANIFEST} status is {manifest.get('status')!r}, not {COMPLETE!r}")
    records = {f.stem: read_json(f) or {} for f in sorted((p / RANKS).glob("rank-*.json"))}
    open_ranks = [
        name.removeprefix("rank-").lstrip("0") or "0" for name, rec in records.items() if rec.get("status") != COMPLETE
    ]
    if open_ranks:
        return Completion(False, f"rank(s) {', '.join(open_ranks)} did not close")
    world = manifest.get("world_size")
    if isinstance(world, int) and records and len(records) < world:
        return Completion(False, f"{len(records)} of {world} ranks wrote a record")
    return Completion(True, "")


def contents_summary(files: list[Path]) -> str:
    """ "N shard(s), R rows, steps A-B" from the Parquet footers only (no data read)."""
    import pyarrow.parquet as pq

    rows, lo, hi = 0, None, None
    for f in files:
        try:
            md = pq.ParquetFile(f).metadata
        except Exception:  # an unreadable shard is reported by the reader itself
            continue
        rows += md.num_rows
        names = [md.schema.column(i).name for i in range(md.num_columns)]
        if "step" not in names:
            continue
        j = names.index("step")
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(j).statistics
            if st is not None and st.has_min_max:
                lo = st.min if lo is None else min(lo, st.min)
                hi = st.max if hi is None else max(hi, st.max)
    steps = "" if lo is None else f", steps {lo}-{hi}" if lo != hi else f", step {lo}"
    return f"{len(files)} shard(s), {rows:,} rows{steps}"


def run_roots(files: list[Path]) -> list[Path]:
    """The run directories these shards belong to, in first-seen order.

    A shard belongs to run ``R`` when it lies under ``R/tokens/`` and ``R`` is a
    run directory. A folder given to a command may hold several runs, or a
    run may be reached through its ``tokens/`` folder or a single shard: each
    of these readings finds the same runs.
    """
    roots: dict[Path, None] = {}
    seen: dict[Path, Path | None] = {}
    for f in files:
        d = Path(f).parent
        if d not in seen:
            seen[d] = None
            # the path as given first (messages name the run as the user spelt it), then resolved:
            # a shard given from inside its tokens/ folder has no spelt-out parents
            real = Path(os.path.realpath(d))  # a link to a run's tokens/ folder, or a shard given from inside it
            for a in (d, *d.parents, real, *real.parents):
                if a.name == TOKENS and is_run_dir(a.parent):
                    seen[d] = a.parent
                    break
        root = seen[d]
        if root is not None:
            roots[root] = None
    return list(roots)


def input_runs(run: str | os.PathLike, files: list[Path]) -> list[Path]:
    """The run directories an input touches: those its shards belong to, and a given run (or folder of runs)
    even before it holds any shard.

    ``run`` is what the user gave: a run directory, its ``tokens/`` folder, a
    folder of runs, or shards.
    """
    p = Path(run)
    real = Path(os.path.realpath(p))
    given = p.parent if p.name == TOKENS and not is_run_dir(p) and is_run_dir(p.parent) else p
    if real.name == TOKENS and not is_run_dir(real) and is_run_dir(real.parent):  # a link to a run's tokens/
        given = real.parent
    roots = run_roots(files)
    resolved = {r.resolve() for r in roots}
    candidates = [given] if is_run_dir(given) else []
    if given.is_dir() and not is_run_dir(given):  # a folder of runs: also those without a shard yet
        found = {m.parent for m in given.rglob(MANIFEST)} | {t.parent for t in given.rglob(TOKENS) if t.is_dir()}
        candidates += sorted(d for d in found if is_run_dir(d) and TOKENS not in d.relative_to(given).parts)
    for c in candidates:
        rc = c.resolve()
        if rc not in resolved and not any(r in rc.parents for r in resolved):
            roots.append(c)
            resolved.add(rc)
    return roots


@dataclass(frozen=True)
class Contents:
    """What a reader must say about the runs of its input before it reads them."""

    warning: str | None
    """the incomplete-run warning (None when every run is complete)."""
    notes: list[str]
    """runs written without a shard index: read as they are, said once."""


def check_contents(run: str | os.PathLike, files: list[Path], rows: Mapping[Path, int] | None = None) -> Contents:
    """Hold the shards about to be read against each run's completion record and shard index.

    A complete run whose shards disagree with its index is refused
    (:class:`ShardIndexError`); an incomplete one says how in its warning. A
    run without an index (written before runs kept one) is read as before,
    with a note. Only the index, sizes and (given) footer row counts are read.
    """
    roots = input_runs(run, files)
    given = Path(os.path.realpath(run)) if Path(run).is_dir() else None
    resolved = {f: Path(os.path.realpath(f)) for f in files} if roots else {}
    open_runs: list[tuple[Path, Completion, list[str]]] = []
    legacy: list[Path] = []
    unhashed: list[Path] = []
    for r in roots:
        c = completion(r)
        problems = _run_problems(r, files, rows or {}, given, resolved)
        if problems is None:
            legacy.append(r)
            problems = []
        elif not hashed(r, TOKENS):
            unhashed.append(r)
        if c is not None and not c.complete:
            open_runs.append((r, c, problems))
        elif problems:
            more = f" (and {len(problems) - 1} more disagreement(s))" if len(problems) > 1 else ""
            raise ShardIndexError(
                f"{r}: {problems[0]}{more}; the run no longer holds what it recorded",
                hint=f"restore the run from a copy, or move foreign files out of its {TOKENS}/ folder",
            )
    notes = []
    if legacy:
        others = f" (and {len(legacy) - 1} more run(s))" if len(legacy) > 1 else ""
        notes.append(
            f"{legacy[0]}{others} has no shard index (written by an older mismatchscope, or by hand): "
            "its shards are read as they are, unchecked for missing or foreign ones"
        )
    if unhashed:
        others = f" (and {len(unhashed) - 1} more run(s))" if len(unhashed) > 1 else ""
        notes.append(
            f"{unhashed[0]}{others} was written before runs recorded their shards' checksums: "
            "a shard damaged in place is not detected"
        )
    if not open_runs:
        return Contents(None, notes)
    first, c, problems = open_runs[0]
    others = f" (and {len(open_runs) - 1} more of the {len(roots)} runs in {run})" if len(open_runs) > 1 else ""
    disagree = f"; its shards disagree with its index: {'; '.join(problems[:2])}" if problems else ""
    return Contents(
        f"{first} is an incomplete run ({c.reason}: killed, or still being written){others}; "
        f"read what is there: {contents_summary(files)}{disagree}",
        notes,
    )


def _run_problems(
    run: Path, files: list[Path], rows: Mapping[Path, int], given: Path | None, resolved: Mapping[Path, Path]
) -> list[str] | None:
    """The disagreements of one run's ``tokens/`` with its index; None for a run that keeps no index."""
    base = Path(os.path.realpath(run / TOKENS))
    mine = [f for f in files if base in resolved[f].parents]
    real = Path(os.path.realpath(run))
    whole = given is not None and (given in (real, base) or given in real.parents)
    problems = shard_problems(run, TOKENS, mine, rows, whole, resolved)
    if problems is not None:
        return problems
    if (read_manifest(run) or {}).get("shard_index") and mine:
        return [f"its shard index ({INDEX}/{TOKENS}.jsonl) is missing"]
    return None if mine else []


def incomplete_message(run: str | os.PathLike, files: list[Path]) -> str | None:
    """The one-line warning when a run among the input's is without its completion record; None otherwise
    (a complete run whose shards disagree with its index is refused: :func:`check_contents`)."""
    return check_contents(run, files).warning


# -- the shard index ----------------------------------------------------------------


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
            real = resolved[f] if resolved is not None and f in resolved else Path(os.path.realpath(f))
            name = real.relative_to(base).as_posix()
        except ValueError:
            continue
        seen.add(name)
        entry = index.get(name)
        shown = f"{folder}/{name}"
        if entry is None:
            problems.append(f"{shown} is not one of the run's shards (no writer of the run listed it)")
            continue
        size = os.stat(f).st_size
        if size != entry.size:
            problems.append(
                f"{shown} is {size:,} bytes, the run's index says {entry.size:,} "
                "(truncated or replaced after it was written)"
            )
        elif f in rows and rows[f] != entry.rows:
            problems.append(f"{shown} holds {rows[f]:,} rows, the run's index says {entry.rows:,} (replaced)")
        elif entry.footer is not None and footer_hash(f) != entry.footer:
            raise ShardIndexError(
                f"{f}: damaged: its Parquet footer (schema, row groups, statistics) is not the one its writer "
                f"recorded in {INDEX}/{folder}",
                hint="the shard changed after it was written; restore the run from a copy",
            )
    if whole:
        lost = sorted(n for n in index if n not in seen)
        if lost:
            lost_rows = sum(index[n].rows for n in lost)
            problems.append(
                f"{len(lost)} shard(s) listed in the run's index are missing ({lost_rows:,} rows), "
                f"e.g. {folder}/{lost[0]}"
            )
    return problems


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


# -- one writer ---------------------------------------------------------------------


class WriterLock:
    """An exclusive, non-blocking ``flock`` on ``path``, held until :meth:`release`.

    The lock file holds the pid of its holder, for the error message only:
    the lock itself is the kernel's and ends with the process.
    """

    def __init__(self, path: str | os.PathLike, what: str, discard: bool = False):
        import fcntl

        self.path = Path(path)
        # what the folder held before: a writer that cannot resume (``discard``) takes back all the rest on failure
        self._before = _listing(self.path.parent) if discard and self.path.parent.is_dir() else {}
        self._discard = discard
        # folders this lock creates, deepest first: a writer that fails before writing takes them back
        self._created = [d for d in (self.path.parent, *self.path.parent.parents) if not d.exists()]
        self._made_lock_file = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            self._fd = None
            raise RunLockedError(
                f"{what} is being written by another process (pid {holder} holds {self.path})",
                hint="wait for it to finish, or write to another directory",
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None and self._discard and self._fd is not None:
            _remove_new(self.path.parent, self._before, keep=self.path.name)  # still under the lock
        self.release()
        if exc_type is not None:
            self._take_back_created()

    def _take_back_created(self) -> None:
        """A writer that failed before writing anything leaves no run directory
        behind (a bad option must not leave an empty run to trip a later --resume),
        and no lock file in a folder that was there before; anything it did write stays."""
        with contextlib.suppress(OSError):
            alone = [p.name for p in self.path.parent.iterdir()] == [self.path.name]
            if self._made_lock_file and (alone or self._discard):
                self.path.unlink()
            for d in self._created:
                d.rmdir()  # refuses a folder that is not empty: then everything above stays too


def lock_run(run: str | os.PathLike, discard: bool = False) -> WriterLock:
    """Take the writer lock of a whole run directory (``DIR/.lock``), creating the directory.

    ``probe``, ``rescore``, ``diagnose`` and ``import`` take it before they look at
    what the directory holds, so two of them can never both decide to write the
    same round. (The in-loop Recorder locks per rank instead, under ``ranks/``.)

    ``discard``: the writer cannot resume what it leaves (``import``), so a
    failure of any kind (an input error, a full disk, refused routes, an
    interrupt) removes everything it created in the directory, and the
    directory itself when it created that: nothing half-written is left for a
    later command to mistake for a run. A writer that can resume (``probe``,
    ``rescore``) keeps its run instead, marked ``running`` in its manifest,
    which every reader reports as incomplete and ``--resume`` continues.
    """
    return WriterLock(Path(run) / LOCK, str(run), discard=discard)


_RUN_FOLDERS = (TOKENS, INDEX, ROUTES)
"""the run's own folders: a writer adds files inside them even when they were there before."""


def _listing(folder: Path) -> dict[str, set[str]]:
    """The names in ``folder`` (key ``""``) and in each of its run folders, before a writer starts."""
    out = {"": {p.name for p in folder.iterdir()}}
    for sub in _RUN_FOLDERS:
        if (folder / sub).is_dir():
            out[sub] = {p.name for p in (folder / sub).iterdir()}
    return out


def _remove_new(folder: Path, before: Mapping[str, set[str]], keep: str) -> None:
    """Remove what is in ``folder`` now and was not in ``before`` (:func:`_listing`), except ``keep``."""
    import shutil

    for sub, names in [("", before.get("", set())), *((s, before[s]) for s in _RUN_FOLDERS if s in before)]:
        d = folder / sub if sub else folder
        with contextlib.suppress(FileNotFoundError):
            for p in list(d.iterdir()):
                if p.name in names or (not sub and p.name == keep):
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()


def is_empty_dir(path: str | os.PathLike) -> bool:
    """True for a directory holding nothing but (at most) its lock file."""
    return all(child.name == LOCK for child in Path(path).iterdir())
