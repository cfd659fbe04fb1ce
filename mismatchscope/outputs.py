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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError, OutputError, UsageError


def _resolve(path: str | os.PathLike) -> Path:
    """The path with every link resolved in order: ``lnk/../x`` is ``x`` beside the link's target, not
    beside the link (``os.path.abspath`` would drop ``lnk/..`` as text first)."""
    return Path(os.path.realpath(os.path.join(os.getcwd(), os.path.expanduser(os.fspath(path)))))


def _inode(path: str | os.PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


@dataclass
class Inputs:
    """What a command's outputs may not touch: its inputs, however they are spelt.

    An output is refused when it resolves to an input file (symlinks, ``..``),
    when it is the same file under another name (a hard link), or when it lies
    in a run directory the inputs belong to and would replace one of its files
    (the manifest, the lock, a rank record) or add a file among its shards.
    Writing a new picture beside a run's files is allowed.
    """

    paths: dict[Path, str] = field(default_factory=dict)
    """resolved path -> the input (as given) it belongs to."""
    inodes: dict[tuple[int, int], str] = field(default_factory=dict)
    runs: dict[Path, str] = field(default_factory=dict)
    """resolved run directory -> the input it holds."""

    def refuse(self, path: str | os.PathLike, option: str, directory: bool = False) -> None:
        """``directory``: ``path`` is a folder to write new files into, which may be an input folder."""
        from .rundir import TOKENS

        r = _resolve(path)
        hit = None if directory and r.is_dir() else self.paths.get(r)
        hit = hit or self.inodes.get(_inode(path) or (-1, -1))
        for run, given in self.runs.items():  # inside a run, the message can say which of its files
            if r == run or run not in r.parents:
                continue
            if hit is None and (r == run / TOKENS or run / TOKENS in r.parents):
                raise OutputError(
                    f"{option} {path} is among the shards of the input run {given}",
                    hint="write outputs outside the run's tokens/ folder",
                )
            if r.exists() and not r.is_dir() and run / TOKENS not in r.parents:
                raise OutputError(
                    f"{option} {path} would replace {r.relative_to(run)} of the input run {given}",
                    hint="choose another output path",
                )
        if hit is not None:
            raise OutputError(
                f"{option} {path} is an input of this command ({hit}); writing it would destroy the data",
                hint="choose another output path",
            )


def input_files(*inputs: str | os.PathLike | None) -> Inputs:
    """The inputs' files, their inodes, and the run directories they belong to.

    An input that cannot be resolved is skipped: the command reports it with its own, better, message.
    """
    from .reader import resolve_files
    from .rundir import is_run_dir, run_roots

    out = Inputs()
    for given in inputs:
        if given is None or not str(given).strip():
            continue
        name = str(given)
        out.paths[_resolve(given)] = name
        try:
            files = resolve_files(given)
        except InputError:
            files = [Path(given)] if Path(given).is_file() else []
        for f in files:
            out.paths[_resolve(f)] = name
            if (ino := _inode(f)) is not None:
                out.inodes[ino] = name
        if Path(given).is_file() and (ino := _inode(given)) is not None:
            out.inodes[ino] = name
        for run in run_roots(files) + ([Path(given)] if is_run_dir(given) else []):
            out.runs[_resolve(run)] = name
            for f in _run_files(Path(run)):  # a hard link to the manifest or the lock, placed elsewhere
                if (ino := _inode(f)) is not None:
                    out.inodes[ino] = name
    return out


def _run_files(run: Path) -> list[Path]:
    """A run directory's own files: the manifest, the lock, the rank records."""
    from .rundir import RANKS

    try:
        return [f for f in run.iterdir() if f.is_file()] + [f for f in (run / RANKS).glob("*") if f.is_file()]
    except OSError:
        return []


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


def _not_empty(path: str | os.PathLike, option: str) -> None:
    """An empty or blank name would be the current directory (``Path("")`` is ``.``) or a file called " "."""
    if not os.fspath(path).strip():
        raise OutputError(f"{option} is an empty path", hint=f"give {option} a name")
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:  # bytes the shell passed through that are not UTF-8: no file format can record them
        shown = os.fspath(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise OutputError(
            f"{option} {shown}: the path is not valid UTF-8",
            hint="choose a name in UTF-8 (the run records its path, and Parquet metadata is UTF-8)",
        ) from None


@contextlib.contextmanager
def _checking(path: Path, option: str) -> Iterator[None]:
    """An OSError while judging a path (a name too long, a loop of links) is one :class:`OutputError`."""
    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        raise OutputError(f"{option} {path}: {e.strerror or e}", hint="choose another output path") from None


def check_output_file(path: str | os.PathLike | None, option: str, inputs: Inputs | None = None) -> Path | None:
    """A file to be written: not a directory, not an input, in a writable folder."""
    if path is None:
        return None
    _not_empty(path, option)
    path = Path(path)
    with _checking(path, option):
        if path.is_dir():
            raise OutputError(f"{option} {path} is a directory", hint=f"give {option} a file name, e.g. {path / 'out'}")
        (inputs or Inputs()).refuse(path, option)
        if path.exists() and not os.access(path, os.W_OK):
            raise OutputError(f"{option} {path}: no permission to write this file", hint="choose a writable location")
        _check_parent(path, option)
    return path


def check_output_dir(path: str | os.PathLike | None, option: str, inputs: Inputs | None = None) -> Path | None:
    """A folder to be written into: not a file, not an input file, writable (or creatable)."""
    if path is None:
        return None
    _not_empty(path, option)
    path = Path(path)
    with _checking(path, option):
        if path.is_symlink() and not path.exists():
            raise OutputError(
                f"{option} {path} is a link to a missing folder", hint=f"give {option} an existing or a new folder"
            )
        if path.exists() and not path.is_dir():
            (inputs or Inputs()).refuse(path, option)
            raise OutputError(f"{option} {path} exists and is not a directory", hint=f"give {option} a folder")
        (inputs or Inputs()).refuse(path, option, directory=True)
        if path.is_dir():
            if not os.access(path, os.W_OK | os.X_OK):
                raise OutputError(
                    f"{option} {path}: no permission to write in this directory", hint="choose a writable location"
                )
            return path
        _check_parent(path, option)
    return path


def check_run_out(path: str | os.PathLike, option: str, inputs: Inputs | None = None) -> Path:
    """A run directory to be written (``probe``, ``rescore``, ``import`` ``--out``): a folder as
    :func:`check_output_dir` wants it, given by a non-empty name, neither inside another run
    (``--out RUN/tokens`` would put a second run's shards among the first one's) nor holding one."""
    if not os.fspath(path).strip():
        raise OutputError(f"{option} is an empty path", hint=f"give {option} a new folder, e.g. {option} runs/new")
    out = check_output_dir(path, option, inputs)
    assert out is not None  # None only for a None path
    from .rundir import is_run_dir

    for parent in _resolve(path).parents:
        if is_run_dir(parent):
            raise OutputError(
                f"{option} {path} is inside the run directory {parent}",
                hint="give each run its own folder, outside other runs",
            )
    inner = _first_run_inside(out)  # the other way round: X/sub is a run, and X would become a run holding it
    if inner is not None:
        raise OutputError(
            f"{option} {path} holds the run directory {Path(path) / inner}",
            hint="give each run its own folder, outside other runs",
        )
    return out


def _first_run_inside(folder: Path) -> str | None:
    """The first (by name) subfolder of ``folder`` that is a run directory; None when there is none or it
    cannot be listed (the write then fails with its own one-line error)."""
    from .rundir import STAGING, is_run_dir

    try:  # an import's staging folder (a killed import's, which the next one removes) is no run of its own
        with os.scandir(folder) as entries:
            runs = (e.name for e in entries if e.name != STAGING and e.is_dir() and is_run_dir(Path(e.path)))
            return min(runs, default=None)
    except OSError:  # not a folder yet, or unreadable
        return None


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


@contextlib.contextmanager
def taken_back_on_failure(directory: str | os.PathLike) -> Iterator[list[Path]]:
    """Collect the new files a command writes into ``directory``; if it fails before the last one, remove
    them, and the folders it created for them: a failed ``--plots`` leaves no half set of pictures.

    Append each path that did not exist before it was written to the yielded list (a picture that
    replaced one of an earlier run stays: its old bytes are gone either way).
    """
    directory = Path(directory)
    made = [d for d in (directory, *directory.parents) if not d.exists()]
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        for f in written:
            with contextlib.suppress(OSError):
                f.unlink()
        for d in made:  # deepest first; a folder that holds something else stays, and so do those above it
            try:
                d.rmdir()
            except OSError:
                break
        raise


def write_bytes(
    path: str | os.PathLike, data: bytes, option: str, append: bool = False, inputs: Inputs | None = None
) -> Path:
    """Write (or append) ``data``. A regular file is replaced atomically (temp file, then rename), so a
    full device leaves the old file or none, never half of one, and a link in the way is replaced, never
    followed; a device or pipe is written in place. ``inputs``: refuse a path that is one of them (for
    files whose names are known only now, such as the pictures in a ``--plots`` folder)."""
    path = Path(path)
    with writing(path, option):
        if inputs is not None:
            inputs.refuse(path, option)
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


def write_text(
    path: str | os.PathLike, text: str, option: str, append: bool = False, inputs: Inputs | None = None
) -> Path:
    return write_bytes(path, text.encode("utf-8"), option, append=append, inputs=inputs)


def check_all(
    files: Iterable[tuple[str | os.PathLike | None, str]] = (),
    dirs: Iterable[tuple[str | os.PathLike | None, str]] = (),
    inputs: Iterable[str | os.PathLike | None] = (),
) -> Inputs:
    """Check every output of a command at once, before it starts working; two outputs may not share a path.

    Returns the inputs, for the writes whose file names are known only later (:func:`write_bytes`).
    """
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
    return known


def require_matplotlib() -> None:
    """--plots and --html need the ``plot`` extra: checked with the output paths, before any work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plots and --html need matplotlib", hint="install the plot extra: pip install 'mismatchscope[plot]'"
        ) from None
