"""Streaming reader for token-pair files.

Accepts one Parquet file, a directory of shards (a probe run directory reads
its ``tokens/`` folder), or a glob, and yields record batches of only the
columns asked for, renamed to the canonical names. Memory is bounded by the
batch size, never by the file.

Input hygiene lives here so every command sees the same cleaned tokens:
``-9999`` sentinels become ``-inf``; rows with a non-finite logprob are counted
and dropped (with a warning); clearly positive logprobs are an error.
"""

from __future__ import annotations

import glob as globmod
import os
import queue
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .arrow import list_offsets, list_parts, to_numpy
from .errors import FileFormatError, InputError, MissingColumnsError, UsageError
from .redact import redact_obj
from .schema import (
    COLUMNS,
    LOGPROB_SENTINEL,
    MAX_POSITION,
    METADATA_KEY,
    POSITIVE_LOGPROB_TOLERANCE,
    REQUIRED_NAMES,
    SCHEMA_VERSION,
    decode_metadata,
)

BATCH_ROWS = 1 << 18


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

    @property
    def warnings(self) -> list[str]:
        """What every command says about the input before its own warnings."""
        return ([self.incomplete] if self.incomplete else []) + self.notes

    def has(self, name: str) -> bool:
        return name in self.available

    @property
    def run_config(self) -> dict[str, Any] | None:
        """The first file's ``mismatchscope`` metadata (None for foreign files)."""
        return self.metadata[0] if self.metadata else None


@dataclass
class Hygiene:
    """What the reader dropped or noticed, for warnings in every command."""

    rows_read: int = 0
    nonfinite_dropped: int = 0
    sentinels: int = 0

    def merge(self, other: Hygiene) -> None:
        self.rows_read += other.rows_read
        self.nonfinite_dropped += other.nonfinite_dropped
        self.sentinels += other.sentinels

    def warnings(self) -> list[str]:
        out = []
        if self.nonfinite_dropped:
            extra = f", {self.sentinels} of them -9999 sentinels read as -inf" if self.sentinels else ""
            out.append(
                f"{self.nonfinite_dropped} of {self.rows_read} tokens have a non-finite logprob "
                f"(NaN or inf{extra}) and were excluded from every number below"
            )
        return out


def parse_column_mapping(items: list[str] | None) -> dict[str, str]:
    """``["sampler_logprob=rollout_log_probs", ...]`` -> ``{canonical: source}``."""
    mapping: dict[str, str] = {}
    for item in items or []:
        canon, eq, src = item.partition("=")
        canon, src = canon.strip(), src.strip()
        if not eq or not canon or not src:
            raise UsageError(
                f"cannot parse --column {item!r}",
                hint="write --column CANONICAL=NAME_IN_FILE, e.g. sampler_logprob=rollout_log_probs",
            )
        if canon not in COLUMNS:
            raise UsageError(
                f"--column {item!r}: {canon!r} is not a mismatchscope column",
                hint=f"known columns: {', '.join(COLUMNS)}",
            )
        check_mapped_once(item, canon, src, mapping)
        twin = next((c for c, s in mapping.items() if s == src and c != canon), None)
        if twin is not None:
            raise UsageError(
                f"--column {item!r}: {src!r} is already read as {twin}",
                hint="map each column of the file to one mismatchscope column",
            )
        mapping[canon] = src
    return mapping


def check_mapped_once(item: str, canon: str, src: str, mapping: Mapping[str, str]) -> None:
    """A target mapped twice to two sources is refused, not settled by the last one (``import`` shares this rule)."""
    if canon in mapping and mapping[canon] != src:
        raise UsageError(
            f"--column {item!r}: {canon} is already mapped to {mapping[canon]!r}", hint="map each column once"
        )


def check_mapping(path: Path, mapping: Mapping[str, str], names: set[str]) -> None:
    """Every mapped source exists, and no two mismatchscope columns read one column of the file.

    ``--column sampler_logprob=trainer_logprob`` on a file that has its own
    ``trainer_logprob`` would read one column as both sides (a mismatch of
    exactly zero); that is refused rather than guessed at.
    """
    for canon, src in mapping.items():
        if src not in names:
            shown = ", ".join(sorted(names)[:20])
            raise MissingColumnsError(
                f"{path}: --column {canon}={src}: the file has no column {src!r}; it has: {shown}",
                hint="check the spelling of the name in the file",
            )
    readers: dict[str, str] = {}
    for canon in COLUMNS:
        src = mapping.get(canon, canon)
        if src not in names:
            continue
        if src in readers:
            first = readers[src]
            mapped = canon if mapping.get(canon) == src else first
            raise UsageError(
                f"{path}: --column {mapped}={src} makes {first} and {canon} both read the file's column {src!r}",
                hint=f"also map the file's own {src} to another name, or map {mapped} to another column",
            )
        readers[src] = canon


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
    from .rundir import is_run_dir

    return f.parent.name == "routes" and is_run_dir(f.parent.parent)


def _regular(files: list[Path]) -> list[Path]:
    from .rundir import not_regular

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
    for f in files:
        if printable(str(f)) != str(
            f
        ):  # a name with bytes that are not UTF-8: pyarrow cannot open it, nor outputs print it
            raise InputError(f"{printable(str(f))}: the file name is not valid UTF-8", hint="rename the file")
        try:
            footer = pq.read_metadata(f)
            schema = footer.schema.to_arrow_schema()
        except (pa.ArrowException, OSError) as e:  # a damaged footer also raises ArrowNotImplementedError
            raise FileFormatError(f"{f}: not a Parquet file, or truncated ({_short(e)})") from None
        rows[f] = footer.num_rows
        names = set(schema.names)
        check_mapping(f, mapping, names)
        present = {c for c in COLUMNS if mapping.get(c, c) in names}
        missing = [c for c in REQUIRED_NAMES if c not in present]
        if missing:
            shown = ", ".join(sorted(names)[:20])
            raise MissingColumnsError(
                f"{f}: missing required column(s) {', '.join(missing)}; the file has: {shown}",
                hint=f"map yours with --column, e.g. --column {missing[0]}=YOUR_NAME",
            )
        meta = read_metadata(f, schema.metadata)
        if meta is not None:
            metas.append(meta)
        available = present if available is None else available & present
        common = names if common is None else common & names
    from .rundir import check_contents

    contents = check_contents(path, files, rows)
    return Source(
        files=files,
        mapping=mapping,
        available=available or set(),
        metadata=metas,
        file_columns=common or set(),
        incomplete=contents.warning,
        notes=contents.notes,
    )


def require_complete(path: str | os.PathLike) -> None:
    """Refuse a run directory without its completion record (``gate`` judges only whole runs), or whose
    shards disagree with its index."""
    from .rundir import incomplete_message

    message = incomplete_message(path, resolve_files(path))
    if message:
        raise InputError(message, hint="wait for the run to finish, or point at complete shards")


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _check_type(path: Path, canon: str, raw: str, t: pa.DataType) -> None:
    """A column's Arrow type must fit its schema column: lists of numbers where lists belong, numbers elsewhere."""
    want = COLUMNS[canon].type
    name = canon if raw == canon else f"{raw} (read as {canon})"
    if _is_list(want):
        inner_ok = _is_list(t) and (
            pa.types.is_integer(t.value_type) if pa.types.is_integer(want.value_type) else _numeric(t.value_type)
        )
        if not inner_ok:
            kind = "integers" if pa.types.is_integer(want.value_type) else "numbers"
            raise InputError(
                f"{path}: column {name!r} must hold lists of {kind}, found {t}",
                hint="top-k columns hold one list per token",
            )
    elif _is_list(t) or not (_numeric(t) or pa.types.is_null(t)):
        kind = "integers" if pa.types.is_integer(want) else "numbers"
        raise InputError(f"{path}: column {name!r} must hold {kind}, found {t}")


METADATA_SECTIONS = (
    "checkpoint",
    "trainer_checkpoint",
    "prompts",
    "sampling",
    "sampler",
    "trainer",
    "semantics",
    "source",
    "timings",
)
"""sections of the ``mismatchscope`` metadata that readers index into: each must be a table when present."""


def read_metadata(path: Path, schema_metadata: Mapping[bytes, bytes] | None) -> dict[str, Any] | None:
    """The file's ``mismatchscope`` metadata, checked: JSON, an object, a known schema_version, tables where tables belong.

    Its text is made safe to print on the way in: JSON may spell an unpaired
    surrogate (``"\\ud800"``), which no UTF-8 output (a terminal, ``--html``,
    ``--format json``) can encode; each is kept as its escape text instead.
    Nesting too deep to walk (or to quote in a message) is reported like
    nesting too deep to parse, with the file's name.
    """
    if not schema_metadata or METADATA_KEY not in schema_metadata:
        return None
    try:
        meta = decode_metadata(schema_metadata)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else "not valid JSON"
        raise FileFormatError(f"{path}: the 'mismatchscope' file metadata is {reason}", hint=_DAMAGED) from None
    try:
        meta = printable(meta)
        _check_metadata(path, meta)
        return redact_obj(meta)  # a file from elsewhere may carry a URL with credentials: never print it
    except RecursionError:
        raise FileFormatError(
            f"{path}: the 'mismatchscope' file metadata is nested too deeply", hint=_DAMAGED
        ) from None


_DAMAGED = "the file was not written by mismatchscope, or was damaged; rewrite it without that metadata key"
_FOREIGN = "the file was not written by mismatchscope; rewrite it without that metadata key"


def _check_metadata(path: Path, meta: Any) -> None:
    if not isinstance(meta, dict):  # JSON null too: the key is there, so it must hold the object
        kind = "null" if meta is None else type(meta).__name__
        raise FileFormatError(
            f"{path}: the 'mismatchscope' file metadata is a JSON {kind}, not an object", hint=_FOREIGN
        )
    version = meta.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FileFormatError(
            f"{path}: the 'mismatchscope' file metadata has schema_version {_short_repr(version)}, "
            "not a version number",
            hint=_FOREIGN,
        )
    if version > SCHEMA_VERSION:
        raise FileFormatError(
            f"{path}: schema_version {version} is newer than this mismatchscope understands ({SCHEMA_VERSION})",
            hint="upgrade mismatchscope",
        )
    nested = [(key, meta.get(key)) for key in METADATA_SECTIONS]
    source = meta.get("source")
    if isinstance(source, dict):
        nested.append(("source.semantics", source.get("semantics")))
    for key, value in nested:
        if value is not None and not isinstance(value, dict):
            raise FileFormatError(
                f"{path}: the 'mismatchscope' file metadata has {key!r} = {_short_repr(value)}, not a table",
                hint="the file's metadata was damaged; rewrite it without that metadata key",
            )


def printable(obj: Any) -> Any:
    """``obj`` with every unpaired surrogate in its strings (keys included) replaced by its escape text.

    ``json.loads`` turns ``"\\ud800"`` into a lone surrogate, a ``str`` that
    UTF-8 cannot encode: printed, or written to ``--html``, it would crash the
    command long after the file was read, so the text is fixed where it is read.
    """
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, dict):
        return {printable(k): printable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [printable(v) for v in obj]
    return obj


def _short_repr(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def iter_batches(
    source: Source,
    columns: list[str],
    hygiene: Hygiene,
    batch_rows: int = BATCH_ROWS,
    extra: list[str] | tuple[str, ...] = (),
) -> Iterator[dict[str, Any]]:
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

    def clean(self, hygiene: Hygiene) -> CleanBatch:
        return _clean(self.path, self.record_batch, self.wanted, hygiene, self.extra)


def read_batches(
    source: Source, columns: list[str], batch_rows: int = BATCH_ROWS, extra: list[str] | tuple[str, ...] = ()
) -> Iterator[RawBatch]:
    """:func:`iter_batches` without the cleaning: the same checks of names and types, the same order."""
    wanted = list(dict.fromkeys(list(REQUIRED_NAMES) + [c for c in columns if source.has(c)]))
    file_cols = [source.mapping.get(c, c) for c in wanted]
    clash = [e for e in extra if e in file_cols or e in wanted]
    if clash:
        raise UsageError(
            f"the column(s) {', '.join(clash)} are already read as mismatchscope columns",
            hint="group by another column, or map the mismatchscope column elsewhere with --column",
        )
    file_cols += list(extra)
    for f in source.files:  # only what this pass reads: a foreign extra column may be anything
        schema = _guard(f, lambda: _open(f).schema_arrow)
        for c, raw in zip(wanted, file_cols):
            _check_type(f, c, raw, schema.field(raw).type)
    for f, rb in _record_batches(source.files, file_cols, batch_rows):
        if rb.num_rows:
            yield RawBatch(f, rb, wanted, tuple(extra))


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


def _record_batches(files: list[Path], file_cols: list[str], batch_rows: int) -> Iterator[tuple[Path, pa.RecordBatch]]:
    """Every batch of every row group of every file, in order, decoded ahead on threads.

    Decoding Parquet (zstd, list offsets) is most of a pass's time, and
    pyarrow releases the GIL while it decodes: ``READ_AHEAD`` row groups are
    decoded at once, each by its own thread into a small queue, while the
    caller analyses the batches of the oldest one. The batches still arrive in
    file order (results stay bit-for-bit reproducible), and memory is bounded
    by ``READ_AHEAD * QUEUED_BATCHES`` batches, whatever the row-group size.
    """
    groups = [(f, i) for f in files for i in range(_guard(f, lambda: _open(f).metadata).num_row_groups)]
    stop = threading.Event()

    def produce(f: Path, i: int, out: queue.Queue) -> None:
        try:
            pf, decoded = _open(f), 0
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

    pending: deque = deque()
    todo = iter(groups)
    with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="mismatchscope-read") as pool:
        try:
            while True:
                while len(pending) < READ_AHEAD and (g := next(todo, None)) is not None:
                    q: queue.Queue = queue.Queue(QUEUED_BATCHES)
                    pool.submit(produce, g[0], g[1], q)
                    pending.append((g[0], g[1], q))
                if not pending:
                    return
                f, group, q = pending[0]
                item = q.get()
                if item is _DONE:
                    pending.popleft()
                elif isinstance(item, BaseException):
                    _guard(f, lambda: _reraise(item), group)
                else:
                    yield f, item
        finally:
            stop.set()  # a caller that stops early (an error, a break) releases the threads


def _reraise(e: BaseException):
    raise e


def _guard(f: Path, fn, group: int | None = None):
    """Run ``fn``; a Parquet decoding failure becomes a one-line FileFormatError naming the file (and the row
    group being read: the first damaged one, as row groups are reported in file order)."""
    try:
        return fn()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        raise damaged_error(f, e, group) from None


def damaged_error(f: Path, e: BaseException, group: int | None = None) -> FileFormatError:
    """The one-line error for a shard whose pages fail to decode, or fail their CRC (``damaged``)."""
    damaged = "CRC" in str(e)
    where = f" in row group {group}" if group is not None else ""
    if damaged:
        return FileFormatError(
            f"{f}: damaged{where}: a page's checksum does not match its bytes ({_short(e)})",
            hint="the file changed after it was written; restore it from a copy or write it again",
        )
    return FileFormatError(f"{f}: unreadable Parquet data{where} ({_short(e)})")


class CleanBatch(dict):
    """A cleaned batch: canonical name -> column, as :func:`iter_batches` yields it.

    ``dropped`` holds the ``(sequence_id, position)`` of the rows cleaning
    dropped (a non-finite logprob). They are excluded from every number, but
    they still name a token: the duplicate check must see them too, or a token
    written twice, once with a NaN, would pass (:func:`token_keys`).
    """

    dropped: tuple[np.ndarray, np.ndarray] | None = None


def token_keys(batch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(sequence_id, position)`` of every row of the batch as read, kept or dropped (for duplicate checks)."""
    seq, pos = batch["sequence_id"], batch["position"]
    dropped = getattr(batch, "dropped", None)
    if dropped is None or not dropped[0].size:
        return seq, pos
    return np.concatenate([seq, dropped[0]]), np.concatenate([pos, dropped[1]])


def _clean(
    path: Path, rb: pa.RecordBatch, wanted: list[str], hygiene: Hygiene, extra: list[str] | tuple[str, ...] = ()
) -> CleanBatch:
    cols: dict[str, Any] = {}
    for i, name in enumerate(wanted):
        arr = rb.column(i)
        cols[name] = _topk_list(path, name, arr) if _is_list(arr.type) else _to_numpy(path, name, arr)
    for j, name in enumerate(extra):
        cols[name] = rb.column(len(wanted) + j)
    n = rb.num_rows
    hygiene.rows_read += n
    pos = cols["position"]
    if n and (pos.min() < 0 or pos.max() > MAX_POSITION):  # two reductions; the mask only to name the row
        i = int(np.flatnonzero((pos < 0) | (pos > MAX_POSITION))[0])
        raise InputError(
            f"{path}: position {int(pos[i])} of sequence {int(cols['sequence_id'][i])} is outside 0..{MAX_POSITION}",
            hint="position is the 0-based index of the token within its completion",
        )
    lp, lq = cols["trainer_logprob"], cols["sampler_logprob"]
    dropped = None
    if not _plain_logprobs(lp, lq):
        sentinel = (lq == LOGPROB_SENTINEL) | (lp == LOGPROB_SENTINEL)
        if sentinel.any():
            hygiene.sentinels += int(sentinel.sum())
            lp = np.where(lp == LOGPROB_SENTINEL, -np.inf, lp)
            lq = np.where(lq == LOGPROB_SENTINEL, -np.inf, lq)
        finite = np.isfinite(lp) & np.isfinite(lq)
        too_high = finite & ((lp > POSITIVE_LOGPROB_TOLERANCE) | (lq > POSITIVE_LOGPROB_TOLERANCE))
        if too_high.any():
            i = int(np.flatnonzero(too_high)[0])
            raise InputError(
                f"{path}: {int(too_high.sum())} positive logprob(s), e.g. sampler {lq[i]:.4g} / trainer {lp[i]:.4g} "
                f"at sequence {int(cols['sequence_id'][i])} position {int(cols['position'][i])}",
                hint="logprobs are natural logs <= 0; is a column holding logits or probabilities?",
            )
        cols["trainer_logprob"], cols["sampler_logprob"] = lp, lq
        if not finite.all():
            hygiene.nonfinite_dropped += int((~finite).sum())
            gone = np.flatnonzero(~finite)
            dropped = (cols["sequence_id"][gone], cols["position"][gone])
            keep = np.flatnonzero(finite)
            cols = {k: (v.take(pa.array(keep)) if isinstance(v, pa.Array) else v[keep]) for k, v in cols.items()}
    for name in TOPK_LOGPROB_LISTS:
        if name in cols:
            _check_logprob_list(path, name, cols[name], cols)
    for ids, values in TOPK_PAIRS:
        if ids in cols and values in cols:
            _check_aligned(path, ids, values, cols)
    out = CleanBatch(cols)
    out.dropped = dropped
    return out


def _plain_logprobs(lp: np.ndarray, lq: np.ndarray) -> bool:
    """Every logprob above the sentinel and at most the tolerance (so finite): the sentinel, non-finite and
    positive-value checks would find nothing. Four reductions instead of a dozen passes with temporaries;
    a NaN fails every comparison, so it takes the checks."""
    s, tol = LOGPROB_SENTINEL, POSITIVE_LOGPROB_TOLERANCE
    return bool(lp.size) and lp.min() > s and lq.min() > s and lp.max() <= tol and lq.max() <= tol


TOPK_ID_LISTS = ("sampler_topk_ids", "trainer_topk_ids")
TOPK_PAIRS = (("trainer_topk_ids", "trainer_topk_logprobs"),)
"""an id list and the logprob list that must match it element for element (the sampler's three lists are
checked where the top-k bounds are computed, ``analysis.topk``)."""
_INT64_MAX = np.iinfo(np.int64).max


def _topk_list(path: Path, name: str, arr: pa.Array) -> pa.Array:
    """A top-k list column, checked and in one shape: ``list<int64>`` ids or lists of floats.

    A fixed-size list (what ``pa.array(..., pa.list_(t, k))`` writes) is read
    as a plain list. A null list, or a null inside a list, has no meaning (a
    null id would be read as some id; a null logprob as NaN): both are refused.
    Unsigned ids beyond the int64 range would wrap to negative ids: refused.
    """
    if pa.types.is_fixed_size_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))
    if arr.null_count:
        raise InputError(
            f"{path}: column {name!r} has {arr.null_count} null list(s)",
            hint="write an empty list for a position without a top-k",
        )
    flat = list_offsets(arr)[0]
    if flat.null_count:
        what = "id" if name in TOPK_ID_LISTS else "logprob"
        raise InputError(
            f"{path}: column {name!r} has {flat.null_count} null {what}(s) inside its lists",
            hint=f"a top-k list holds one {what} per listed token; write each list whole",
        )
    if pa.types.is_unsigned_integer(arr.type.value_type):
        _check_int64_range(path, name, flat)
        arr = arr.cast(pa.list_(pa.int64()) if pa.types.is_list(arr.type) else pa.large_list(pa.int64()))
    return arr


def _check_int64_range(path: Path, name: str, arr: pa.Array) -> None:
    """Unsigned integers above 2^63 - 1 would wrap to negative int64 values (-1 for 2^64 - 1): refuse them."""
    if pa.types.is_uint64(arr.type) and len(arr):
        import pyarrow.compute as pc

        top = pc.max(arr).as_py()  # pyright: ignore[reportAttributeAccessIssue] - generated kernel, not in the stubs
        if top is not None and top > _INT64_MAX:
            raise InputError(
                f"{path}: column {name!r} holds {top}, above the largest int64 (2^63 - 1) the format stores",
                hint="ids are signed 64-bit integers; renumber them, or write the column as int64",
            )


def _check_aligned(path: Path, ids: str, values: str, cols: dict[str, Any]) -> None:
    """An id list and its logprob list have the same length on every row."""
    n_ids, n_values = list_parts(cols[ids])[1], list_parts(cols[values])[1]
    if not np.array_equal(n_ids, n_values):
        row = int(np.flatnonzero(n_ids != n_values)[0])
        raise InputError(
            f"{path}: top-k lists are misaligned at sequence {int(cols['sequence_id'][row])} position "
            f"{int(cols['position'][row])}: {int(n_ids[row])} {ids}, {int(n_values[row])} {values}",
            hint=f"{values} holds the logprob of each id in {ids}, in the same order",
        )


TOPK_LOGPROB_LISTS = ("sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk", "trainer_topk_logprobs")


def _check_logprob_list(path: Path, name: str, arr: pa.Array, cols: dict[str, Any]) -> None:
    """Values in a top-k logprob list are logprobs too: no NaN, nothing above the rounding tolerance (-inf is fine)."""
    flat, offsets = list_offsets(arr)
    values = to_numpy(flat).astype(np.float64, copy=False)
    if not values.size or values.max() <= POSITIVE_LOGPROB_TOLERANCE:  # one reduction: a NaN max compares False
        return
    bad = np.isnan(values) | (values > POSITIVE_LOGPROB_TOLERANCE)
    flat = int(np.flatnonzero(bad)[0])
    row = int(np.searchsorted(offsets[1:], flat, side="right"))
    what = "NaN" if np.isnan(values[flat]) else f"positive value {values[flat]:.4g}"
    raise InputError(
        f"{path}: column {name!r} holds {int(bad.sum())} NaN or positive value(s), e.g. a {what} "
        f"at sequence {int(cols['sequence_id'][row])} position {int(cols['position'][row])}",
        hint="top-k lists hold natural-log probabilities <= 0; is the column holding logits or probabilities?",
    )


_INT_COLUMNS = frozenset(name for name, col in COLUMNS.items() if pa.types.is_integer(col.type))
"""the schema's integer columns: read as int64, and a file holding floats there is refused."""
_FLOAT16_SENTINEL = float(np.float16(LOGPROB_SENTINEL))
"""-9999 written to a float16 column: float16 cannot hold it and stores -10000 (its nearest value)."""


def _to_numpy(path: Path, name: str, arr: pa.Array) -> np.ndarray:
    half = pa.types.is_float16(arr.type) and name in ("sampler_logprob", "trainer_logprob")
    if arr.null_count:
        if name in (
            "sampler_logprob",
            "trainer_logprob",
            "advantage",
            "trainer_entropy",
            "reward",
            "sampler_kept_logmass",
        ):
            import pyarrow.compute as pc

            arr = pc.fill_null(arr.cast(pa.float64()), float("nan"))
        else:
            raise InputError(f"{path}: column {name!r} has {arr.null_count} null value(s)")
    if name in _INT_COLUMNS:
        if not pa.types.is_integer(arr.type):
            raise InputError(f"{path}: column {name!r} must hold integers, found {arr.type}")
        _check_int64_range(path, name, arr)
        return to_numpy(arr).astype(np.int64, copy=False)
    if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type)):
        raise InputError(f"{path}: column {name!r} must be numeric, found {arr.type}")
    values = to_numpy(arr).astype(np.float64, copy=False)
    if half:  # the -9999 sentinel, as float16 stores it, is the sentinel too (and no logprob a float16 could mean)
        values = np.where(values == _FLOAT16_SENTINEL, LOGPROB_SENTINEL, values)
    return values


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]


def read_routes(run_dir: Path, columns: list[str] | None = None) -> pa.Table:
    """All of a run's route shards as one table (empty with the layout's columns when there are none).

    Read the way every command reads them: held against the run's index
    (``routing.io.route_shards``), each page's checksum verified, a damaged page an
    error naming the shard and its row group, and a route row written twice
    refused (``routing.io.check_unique_rows``), never counted twice or settled by the last copy.
    """
    from .routing import layout
    from .routing.io import KEY_COLUMNS, check_unique_rows, read_meta, route_shards

    paths = route_shards(run_dir)
    if not paths:
        meta = read_meta(run_dir)
        schema = layout.routes_schema(meta.num_experts if meta else 2)
        return schema.empty_table() if columns is None else schema.empty_table().select(columns)
    names = columns if columns is not None else _shard_columns(paths[0])
    read = list(dict.fromkeys([*KEY_COLUMNS, *names]))
    batches = [rb for _, rb in _record_batches(paths, read, 1 << 16)]
    if not batches:  # shards without a row: their own (empty) columns
        return _empty(paths[0], read).select(names)
    table = pa.Table.from_batches(batches)
    check_unique_rows(
        Path(run_dir) / layout.ROUTES,
        [table.column("sequence_id").to_numpy()],
        [table.column("input_position").to_numpy()],
    )
    return table.select(names)


def _empty(path: Path, columns: list[str]) -> pa.Table:
    return _guard(path, lambda: pq.read_schema(path)).empty_table().select(columns)


def _shard_columns(path: Path) -> list[str]:
    return _guard(path, lambda: pq.read_schema(path)).names
