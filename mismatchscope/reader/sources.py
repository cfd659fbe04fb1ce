"""Which files an input names and what they hold: a file, a folder of shards, a run directory or a glob,
resolved to Parquet files whose required columns are present (after ``--column``), with their metadata
read and the run's shard index checked. Nothing here reads a row: that is :mod:`.streaming`.
"""

from __future__ import annotations

import glob as globmod
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..documents import json_edge
from ..errors import FileFormatError, InputError, MissingColumnsError, UsageError
from ..schema import COLUMNS, REQUIRED_NAMES, TURN_COLUMNS
from .columns import check_mapping
from .metadata import printable, read_metadata


@dataclass
class Source:
    """Resolved input: the Parquet files, the column mapping and what they say about themselves."""

    files: list[Path]
    mapping: dict[str, str]
    """canonical name -> name in the file."""
    available: set[str]
    """canonical names present in every file."""
    metadata: list[dict[str, Any]] = field(default_factory=list)
    file_columns: set[str] = field(default_factory=set)
    """raw column names (as written in the files) present in every file."""
    incomplete: str | None = None
    """for a run directory without its completion record (``rundir``): the warning that says so
    and how much is there; None for a complete run or a plain file."""
    notes: list[str] = field(default_factory=list)
    """runs read without a shard index to check them against (``rundir.check_contents``)."""
    filled: dict[Path, tuple[str, ...]] = field(default_factory=dict)
    """files without the turn columns in an input where other files have them: their sequences are one
    turn each, and the reader fills the columns in (``schema.TURN_COLUMNS``)."""
    present: list[frozenset[str]] = field(default_factory=list)
    """the canonical names each file holds, in the order of ``files``: a column some shards hold and others do
    not is read where it is by a reader that asks (``certify``), never taken for absent."""
    rows: int = 0
    """the rows of every file together, from their footers."""
    token_id_min: int | None = None
    """at most the smallest ``token_id`` of every file, from the footers' statistics (the least of their row
    groups' minima); None where one has none. A pass that does not read the ids checks them by this, without
    decoding them."""

    @property
    def warnings(self) -> list[str]:
        """What every command says about the input before its own warnings."""
        return ([self.incomplete] if self.incomplete else []) + self.notes

    def has(self, name: str) -> bool:
        return name in self.available

    def in_any(self, name: str) -> bool:
        """Whether some file holds the column (:meth:`has`: every file does)."""
        return any(name in held for held in self.present) or self.has(name)

    def holding(self, names: list[str] | tuple[str, ...]) -> list[Source]:
        """The source cut into runs of consecutive files that hold the same ones of ``names``, in file order:
        each part reads those columns as a whole source does (the rest of its columns as before)."""
        from dataclasses import replace

        parts: list[tuple[frozenset[str], list[Path], list[frozenset[str]]]] = []
        for f, held in zip(self.files, self.present, strict=True):
            key = frozenset(n for n in names if n in held)
            if parts and parts[-1][0] == key:
                parts[-1][1].append(f)
                parts[-1][2].append(held)
            else:
                parts.append((key, [f], [held]))
        return [
            replace(self, files=files, available=set(frozenset.intersection(*held)), present=held)
            for _, files, held in parts
        ]

    @property
    @json_edge
    def run_config(self) -> dict[str, Any] | None:
        """The first file's ``mismatchscope`` metadata (None for foreign files)."""
        return self.metadata[0] if self.metadata else None


def resolve_files(path: str | os.PathLike) -> list[Path]:
    """A file, a directory of shards (recursively; ``DIR/tokens`` for a run), or a glob.

    A FIFO, socket or device among the shards is refused before anything
    opens it (opening a FIFO would wait forever for a writer).
    """
    text = str(path)
    if not text.strip():
        raise UsageError(
            "an empty path was given as input",
            hint="give a Parquet file, a folder of shards, a run directory or a glob",
        )
    p = Path(text)
    if p.is_dir():
        root = p / "tokens" if (p / "tokens").is_dir() else p
        files = sorted(
            f for f in root.rglob("*.parquet") if not f.name.startswith(".") and not _route_shard(f) and not f.is_dir()
        )
        if not files:
            raise InputError(f"{text}: no .parquet files in this directory")
        return _regular(files)
    if p.is_file():
        return [p]
    if any(ch in text for ch in "*?["):
        files = sorted(Path(f) for f in globmod.glob(text, recursive=True) if not Path(f).is_dir())
        if not files:
            raise InputError(f"{text}: the pattern matches no file")
        return _regular(files)
    if p.exists():
        raise InputError(
            f"{text}: not a regular file or a directory",
            hint="give a Parquet file, a folder of shards, a run directory or a glob",
        )
    raise InputError(f"{text}: no such file or directory")


def _route_shard(f: Path) -> bool:
    """A shard of a run's ``routes/`` folder (MoE expert ids), not token pairs: a folder of runs skips them."""
    from ..rundir import is_run_dir

    return f.parent.name == "routes" and is_run_dir(f.parent.parent)


def _regular(files: list[Path]) -> list[Path]:
    from ..rundir import not_regular

    for f in files:
        kind = not_regular(f)
        if kind is not None:
            raise InputError(
                f"{f}: {kind}, not a Parquet file", hint="remove it from the folder; shards are regular files"
            )
    return files


def open_source(path: str | os.PathLike, mapping: Mapping[str, str] | None = None) -> Source:
    """Resolve files, check every file is Parquet with the required columns."""
    files = resolve_files(path)
    mapping = dict(mapping or {})
    available: set[str] | None = None
    common: set[str] | None = None
    metas = []
    rows: dict[Path, int] = {}
    turned: dict[Path, bool] = {}
    held: list[frozenset[str]] = []
    id_min: int | None = 1 << 62  # lowered by each file's statistics; None once one has none
    for f in files:
        rows[f], names, meta, footer = _open_footer(f)
        check_mapping(f, mapping, names)
        present = _present_columns(f, mapping, names)
        id_min = _smallest(footer, mapping.get("token_id", "token_id"), id_min)
        turned[f] = _has_turns(f, mapping, present)
        held.append(frozenset(present))
        if meta is not None:
            metas.append(meta)
        available = present if available is None else available & present
        common = names if common is None else common & names
    filled: dict[Path, tuple[str, ...]] = {}
    if any(turned.values()):
        available = (available or set()) | set(TURN_COLUMNS)
        filled = {f: TURN_COLUMNS for f, has in turned.items() if not has}
    from ..rundir import check_contents

    contents = check_contents(path, files, rows)
    return Source(
        files=files,
        mapping=mapping,
        available=available or set(),
        metadata=metas,
        file_columns=common or set(),
        incomplete=contents.warning,
        notes=contents.notes,
        filled=filled,
        present=held,
        rows=sum(rows.values()),
        token_id_min=id_min if files else None,
    )


def _smallest(footer: pq.FileMetaData, name: str, so_far: int | None) -> int | None:
    """The smaller of ``so_far`` and the least value the footer's statistics give column ``name`` (an integer
    column), over its row groups; None where a row group has no such statistics."""
    if so_far is None:
        return None
    schema = footer.schema
    j = next((i for i in range(len(schema)) if schema.column(i).path == name), None)
    if j is None or schema.column(j).physical_type not in ("INT32", "INT64"):
        return None
    for g in range(footer.num_row_groups):
        chunk = footer.row_group(g).column(j)
        stats = chunk.statistics
        if chunk.num_values == 0:
            continue
        if stats is None or not stats.has_min_max or not isinstance(stats.min, int):
            return None
        so_far = min(so_far, stats.min)
    return so_far


def _has_turns(f: Path, mapping: Mapping[str, str], present: set[str]) -> bool:
    """Whether the file holds the turn columns; one without the other is refused (a turn's positions cannot be
    told from the turn alone once a sequence's rows are spread over files)."""
    have = [c for c in TURN_COLUMNS if c in present]
    if len(have) == 1:
        (has,) = have
        lacks = next(c for c in TURN_COLUMNS if c != has)
        raise InputError(
            f"{f}: has a {mapping.get(has, has)!r} column but no {lacks!r}: a multi-turn file holds both",
            hint="write turn_position (the token's index within its turn) beside turn; "
            "`mismatchscope import parquet` derives it",
        )
    return bool(have)


@json_edge
def _open_footer(f: Path) -> tuple[int, set[str], dict[str, Any] | None, pq.FileMetaData]:
    """One file's row count, column names, checked metadata and footer, from its footer alone."""
    if printable(str(f)) != str(
        f
    ):  # a name with bytes that are not UTF-8: pyarrow cannot open it, nor outputs print it
        raise InputError(f"{printable(str(f))}: the file name is not valid UTF-8", hint="rename the file")
    try:
        footer = pq.read_metadata(f)
        schema = footer.schema.to_arrow_schema()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # a damaged footer: ArrowNotImplementedError too
        raise FileFormatError(f"{f}: not a Parquet file, or truncated ({short_reason(e)})") from None
    return footer.num_rows, set(schema.names), read_metadata(f, schema.metadata), footer


def _present_columns(f: Path, mapping: Mapping[str, str], names: set[str]) -> set[str]:
    """The canonical columns the file holds (after ``--column``); every required one must be there."""
    present = {c for c in COLUMNS if mapping.get(c, c) in names}
    missing = [c for c in REQUIRED_NAMES if c not in present]
    if missing:
        shown = ", ".join(sorted(names)[:20])
        raise MissingColumnsError(
            f"{f}: missing required column(s) {', '.join(missing)}; the file has: {shown}",
            hint=f"map yours with --column, e.g. --column {missing[0]}=YOUR_NAME",
        )
    return present


def require_complete(path: str | os.PathLike) -> None:
    """Refuse a run directory without its completion record (``gate`` judges only whole runs), or whose
    shards disagree with its index."""
    from ..rundir import incomplete_message

    message = incomplete_message(path, resolve_files(path))
    if message:
        raise InputError(message, hint="wait for the run to finish, or point at complete shards")


def short_reason(e: BaseException) -> str:
    """The first line of an error from pyarrow, at most 200 characters; a name pyarrow could not decode is said
    as such (its bytes are not text to quote)."""
    if isinstance(e, UnicodeDecodeError):
        return "a column name in its footer is not valid UTF-8"
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]
