"""One writer: an exclusive ``flock`` in the run directory, and a failed writer taking back what it made."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import RunLockedError
from .layout import INDEX, LOCK, ROUTES, TOKENS


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
