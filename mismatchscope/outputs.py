"""Output paths: checked before any work, written without tracebacks.

Every file or folder a command writes (``--html``, ``--plots``,
``--junit-xml``, ``--markdown``, ``--out``, ``$GITHUB_STEP_SUMMARY``) goes
through here, so each of them fails the same way: one line naming the option
and the path, exit code 2 -- never a traceback, and never ``gate``'s exit 1,
which means a limit failed. The checks run before the analysis, so a typo in
an output path costs nothing; the writes themselves turn any ``OSError`` (a
full device, a permission lost meanwhile) into :class:`OutputError`.

An output may never replace an input: ``report DATA.parquet --html
DATA.parquet`` would swap the data for a web page. Paths are compared
resolved (symlinks, ``..``), against every file of every input, including the
shards inside an input directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterable, Iterator

from .errors import InputError, OutputError

RUN_FILES = ("manifest.json",)
"""files of an input run directory that an output may not replace, besides its shards."""


def _resolve(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(Path(path).expanduser())).resolve()


def input_files(*inputs: str | os.PathLike | None) -> dict[Path, str]:
    """resolved path -> the input it belongs to: each input itself, its Parquet files, and a run's manifest.

    An input that cannot be resolved is skipped: the command reports it with its own, better, message.
    """
    from .reader import resolve_files

    out: dict[Path, str] = {}
    for given in inputs:
        if given is None:
            continue
        out[_resolve(given)] = str(given)
        try:
            files = resolve_files(given)
        except InputError:
            continue
        for f in files:
            out[_resolve(f)] = str(given)
        p = Path(given)
        if p.is_dir():
            for name in RUN_FILES:
                out[_resolve(p / name)] = str(given)
    return out


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent(path: Path, option: str) -> None:
    parent = _nearest_existing(path.parent)
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: {parent} is not a directory", hint="choose a path inside a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: no permission to write in {parent}", hint="choose a writable location")


def _check_not_input(path: Path, option: str, inputs: dict[Path, str]) -> None:
    hit = inputs.get(_resolve(path))
    if hit is not None:
        raise OutputError(f"{option} {path} is an input of this command ({hit}); writing it would destroy the data",
                          hint="choose another output path")


def check_output_file(path: str | os.PathLike | None, option: str, inputs: dict[Path, str] | None = None) -> Path | None:
    """A file to be written: not a directory, not an input, in a writable folder."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{option} {path} is a directory", hint=f"give {option} a file name, e.g. {path / 'out'}")
    _check_not_input(path, option, inputs or {})
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{option} {path}: no permission to write this file", hint="choose a writable location")
    _check_parent(path, option)
    return path


def check_output_dir(path: str | os.PathLike | None, option: str, inputs: dict[Path, str] | None = None) -> Path | None:
    """A folder to be written into: not a file, not an input file, writable (or creatable)."""
    if path is None:
        return None
    path = Path(path)
    _check_not_input(path, option, {k: v for k, v in (inputs or {}).items() if not k.is_dir()})
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path} exists and is not a directory", hint=f"give {option} a folder")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {path}: no permission to write in this directory", hint="choose a writable location")
        return path
    _check_parent(path, option)
    return path


@contextlib.contextmanager
def writing(path: str | os.PathLike, option: str) -> Iterator[None]:
    """Turn any OSError raised inside into one :class:`OutputError` naming the option and the path."""
    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        raise OutputError(f"{option} {path}: cannot write ({reason})") from None


def write_bytes(path: str | os.PathLike, data: bytes, option: str, append: bool = False) -> Path:
    """Write (or append) ``data``. A regular file is replaced atomically (temp file, then rename), so a
    full device leaves the old file or none, never half of one; a device or pipe is written in place."""
    path = Path(path)
    with writing(path, option):
        path.parent.mkdir(parents=True, exist_ok=True)
        if append or (path.exists() and not path.is_file()):
            with open(path, "ab" if append else "wb") as fh:
                fh.write(data)
                fh.flush()
            return path
        from .rundir import atomic_path

        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
    return path


def write_text(path: str | os.PathLike, text: str, option: str, append: bool = False) -> Path:
    return write_bytes(path, text.encode("utf-8"), option, append=append)


def check_all(files: Iterable[tuple[str | os.PathLike | None, str]] = (), dirs: Iterable[tuple[str | os.PathLike | None, str]] = (),
              inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Check every output of a command at once, before it starts working; two outputs may not share a path."""
    known = input_files(*inputs)
    seen: dict[Path, str] = {}
    for path, option in files:
        check_output_file(path, option, known)
    for path, option in dirs:
        check_output_dir(path, option, known)
    for path, option in [*files, *dirs]:
        if path is None:
            continue
        r = _resolve(path)
        if r in seen:
            raise OutputError(f"{option} {path} is also {seen[r]}", hint="give each output its own path")
        seen[r] = option
