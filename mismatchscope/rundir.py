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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from .errors import UsageError

MANIFEST = "manifest.json"
TOKENS = "tokens"
RANKS = "ranks"
LOCK = ".lock"
COMPLETE = "complete"
RUNNING = "running"


class RunLockedError(UsageError):
    """Another process is writing this run directory."""


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
    open_ranks = [name.removeprefix("rank-").lstrip("0") or "0" for name, rec in records.items()
                  if rec.get("status") != COMPLETE]
    if open_ranks:
        return Completion(False, f"rank(s) {', '.join(open_ranks)} did not close")
    world = manifest.get("world_size")
    if isinstance(world, int) and records and len(records) < world:
        return Completion(False, f"{len(records)} of {world} ranks wrote a record")
    return Completion(True, "")


def contents_summary(files: list[Path]) -> str:
    """"N shard(s), R rows, steps A-B" from the Parquet footers only (no data read)."""
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
        if seen[d] is not None:
            roots[seen[d]] = None
    return list(roots)


def incomplete_message(run: str | os.PathLike, files: list[Path]) -> str | None:
    """The one-line warning when a run among the input's is without its completion record; None otherwise.

    ``run`` is what the user gave: a run directory, its ``tokens/`` folder, a
    folder of runs, or shards. Every run the shards belong to is checked, and a
    given run directory is checked even before it holds any shard.
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
    open_runs = [(r, c) for r in roots if (c := completion(r)) is not None and not c.complete]
    if not open_runs:
        return None
    first, c = open_runs[0]
    others = f" (and {len(open_runs) - 1} more of the {len(roots)} runs in {run})" if len(open_runs) > 1 else ""
    return (f"{first} is an incomplete run ({c.reason}: killed, or still being written){others}; "
            f"read what is there: {contents_summary(files)}")


# -- one writer ---------------------------------------------------------------------

class WriterLock:
    """An exclusive, non-blocking ``flock`` on ``path``, held until :meth:`release`.

    The lock file holds the pid of its holder, for the error message only:
    the lock itself is the kernel's and ends with the process.
    """

    def __init__(self, path: str | os.PathLike, what: str):
        import fcntl

        self.path = Path(path)
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
            raise RunLockedError(f"{what} is being written by another process (pid {holder} holds {self.path})",
                                 hint="wait for it to finish, or write to another directory") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.release()
        if exc_type is not None:
            self._take_back_created()

    def _take_back_created(self) -> None:
        """A writer that failed before writing anything leaves no run directory
        behind (a bad option must not leave an empty run to trip a later --resume),
        and no lock file in a folder that was there before; anything it did write stays."""
        with contextlib.suppress(OSError):
            if self._made_lock_file and [p.name for p in self.path.parent.iterdir()] == [self.path.name]:
                self.path.unlink()
            for d in self._created:
                d.rmdir()  # refuses a folder that is not empty: then everything above stays too


def lock_run(run: str | os.PathLike) -> WriterLock:
    """Take the writer lock of a whole run directory (``DIR/.lock``), creating the directory.

    ``probe``, ``rescore``, ``diagnose`` and ``import`` take it before they look at
    what the directory holds, so two of them can never both decide to write the
    same round. (The in-loop Recorder locks per rank instead, under ``ranks/``.)
    """
    return WriterLock(Path(run) / LOCK, str(run))


def is_empty_dir(path: str | os.PathLike) -> bool:
    """True for a directory holding nothing but (at most) its lock file."""
    return all(child.name == LOCK for child in Path(path).iterdir())
