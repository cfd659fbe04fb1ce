"""What every importer shares: the run context, counting, and list-to-array helpers.

An importer is a small object with a name, the optional columns it fills, a
``discover`` step (which files, in which order) and either ``convert`` (one
parsed JSONL record -> one sequence; the JSONL engine in ``_jsonl`` does the
reading, in parallel when it pays) or ``read`` (one whole file, for formats
that are not JSONL). Bad records raise
:class:`~mismatchscope.errors.ImportFormatError`; :meth:`ImportContext.bad`
decides whether that stops the run or is skipped and counted (``--skip-bad``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from ..errors import ImportFormatError
from ..schema import MAX_POSITION, first_refused

if TYPE_CHECKING:
    from ._writer import ShardWriter

try:  # orjson is ~3x faster on float-heavy lines; the stdlib is the fallback
    import orjson

    _fast_loads: Callable[[bytes], Any] | None = orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson
    _fast_loads = None

MAX_BAD_EXAMPLES = 20


@dataclass
class ImportResult:
    """Counts the CLI prints as the import summary."""

    format: str
    out: Path
    sequences: int = 0
    tokens_written: int = 0
    tokens_dropped_by_mask: int = 0
    """prompt, tool, observation and other non-generated tokens the source's mask excluded."""
    bad_records_skipped: int = 0
    files_read: int = 0
    steps: int = 0
    """distinct training steps in the output."""
    shards: int = 0
    warnings: list[str] = field(default_factory=list)
    routes: dict[str, Any] | None = None
    """the manifest's ``routes`` entry, when MoE routes were imported (``--routes``)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        return d


@dataclass
class SourceFile:
    """One file to read, with what its path says about it."""

    path: Path
    rel: str
    """path relative to the import root, as recorded in the metadata."""
    step: int | None = None
    rank: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Importer(Protocol):
    name: ClassVar[str]
    columns: tuple[str, ...]
    """optional schema columns this importer fills (besides the required five); known after ``discover``."""
    warnings: list[str]

    def discover(self, src: Path) -> list[SourceFile]: ...

    def semantics(self) -> dict[str, Any]: ...


class JsonlImporter(Importer, Protocol):
    def convert(
        self, f: SourceFile, line: int, rec: dict[str, Any], notes: dict[str, int]
    ) -> tuple[dict[str, Any], int]:
        """One record -> (column values of its kept tokens, tokens dropped by the mask)."""
        ...


class FileImporter(Importer, Protocol):
    def read(self, f: SourceFile, ctx: ImportContext) -> None: ...


class ImportContext:
    """Counts, bad-record policy and the writer, shared by one import run."""

    def __init__(self, writer: ShardWriter, result: ImportResult, *, skip_bad: bool, trust_pickle: bool):
        self.writer = writer
        self.result = result
        self.skip_bad = skip_bad
        self.trust_pickle = trust_pickle
        self.steps: set[int] = set()
        self.bad_examples: list[dict[str, Any]] = []
        self.file_stats: dict[str, dict[str, int]] = {}
        self.notes: dict[str, int] = {}
        """named counters an importer wants in the manifest (e.g. ``nonfinite_logprobs``)."""
        self.seen_ids: set[int] = set()

    def add(self, f: SourceFile, values: dict[str, Any], dropped: int = 0) -> int:
        """Write one sequence's kept tokens."""
        seq_id = self.writer.add_sequence(f.rel, values)
        n = len(values["token_id"])
        self._count(f, sequences=1, tokens=n, dropped=dropped, first_id=seq_id)
        step = values.get("step")
        if step is not None:
            self.steps.add(int(step))
        return seq_id

    def add_batch(self, f: SourceFile, columns: dict[str, np.ndarray], sequences: int, dropped: int = 0) -> None:
        self.writer.add_batch(f.rel, columns)
        first_id = int(columns["sequence_id"][0]) if len(columns["sequence_id"]) else None
        self._count(f, sequences=sequences, tokens=len(columns["token_id"]), dropped=dropped, first_id=first_id)
        step = columns.get("step")
        if step is not None and len(step):
            lo, hi = int(step.min()), int(step.max())  # one step per batch is the rule: skip the sort
            self.steps.update([lo] if lo == hi else np.unique(step).tolist())

    def _count(self, f: SourceFile, *, sequences: int, tokens: int, dropped: int, first_id: int | None) -> None:
        r = self.result
        r.sequences += sequences
        r.tokens_written += tokens
        r.tokens_dropped_by_mask += dropped
        st = self.file_stats.setdefault(f.rel, {"sequences": 0, "tokens": 0, "bad_records": 0})
        if first_id is not None:
            st.setdefault("first_sequence_id", first_id)
        st["sequences"] += sequences
        st["tokens"] += tokens

    def bad(self, err: ImportFormatError, f: SourceFile | None = None) -> None:
        """Stop on a bad record, or skip and count it with ``--skip-bad``."""
        if not (self.skip_bad and err.skippable):
            raise err
        self.result.bad_records_skipped += 1
        if f is not None:
            self.file_stats.setdefault(f.rel, {"sequences": 0, "tokens": 0, "bad_records": 0})["bad_records"] += 1
        if len(self.bad_examples) < MAX_BAD_EXAMPLES:
            self.bad_examples.append(
                {"file": str(err.file), "line": err.line, "record": err.record, "reason": err.reason}
            )

    def note(self, key: str, count: int = 1) -> None:
        note(self.notes, key, count)

    def unique_sequence_ids(
        self, f: SourceFile, ids: np.ndarray, lines: np.ndarray | None = None, records: np.ndarray | None = None
    ) -> np.ndarray:
        """Which of a source's own sequence ids are new; a repeat is a bad record."""
        keep = np.ones(len(ids), dtype=bool)
        for k, sid in enumerate(ids.tolist()):
            if sid in self.seen_ids:
                keep[k] = False
                self.bad(
                    ImportFormatError(
                        f"sequence_id {sid} appears twice; ids must be unique across the import",
                        file=f.rel,
                        line=None if lines is None else int(lines[k]),
                        record=None if records is None else int(records[k]),
                    ),
                    f,
                )
            else:
                self.seen_ids.add(sid)
        return keep


# -- JSONL ---------------------------------------------------------------------


def loads(raw: bytes) -> Any:
    """orjson first; the stdlib second, because Python's ``json.dumps`` (which
    NeMo-RL's logger uses) writes ``NaN`` and ``-Infinity``, which orjson
    rightly calls invalid JSON."""
    if _fast_loads is not None:
        try:
            return _fast_loads(raw)
        except ValueError:
            pass
    try:
        return json.loads(raw)
    except RecursionError:  # orjson stops at depth 1024; the stdlib would recurse until the stack ends
        raise ValueError("nested too deeply") from None


def parse_record(raw: bytes) -> dict[str, Any]:
    """One JSON Lines record: a JSON object on one line, or an ImportFormatError saying what the line is instead."""
    try:
        rec = loads(raw)
    except ValueError as e:
        raise ImportFormatError(_why_unparsable(raw, e)) from None
    if not isinstance(rec, dict):
        kind = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(rec), "null")
        raise ImportFormatError(f"expected a JSON object, got a JSON {kind} (JSON Lines hold one object per line)")
    return rec


def _why_unparsable(raw: bytes, e: ValueError) -> str:
    """The cause a user can act on: another encoding, a pretty-printed file, nesting; else the parser's words."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or raw.count(b"\x00") * 3 >= len(
        raw
    ):  # UTF-16 ASCII: every other byte 0
        return "not UTF-8 text (it looks like UTF-16); JSON Lines are UTF-8, one object per line"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        return (
            f"not UTF-8 text (byte 0x{raw[u.start]:02x} at offset {u.start}); JSON Lines are UTF-8, one object per line"
        )
    text = raw.strip()
    if text.endswith((b"{", b"[")):  # '{' alone on the first line: an indented json.dump
        return (
            "not one JSON object per line (this looks like JSON spread over several lines: "
            "write each record on one line)"
        )
    if "nested too deeply" in str(e) or "recursion" in str(e).lower():
        return "malformed JSON (nested too deeply)"
    return f"malformed JSON ({short(e)})"


def short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:160]


def note(notes: dict[str, int], key: str, count: int = 1) -> None:
    if count:
        notes[key] = notes.get(key, 0) + count


# -- lists to arrays -----------------------------------------------------------


def unwrap(value: Any) -> Any:
    """NeMo-RL logs each field of a batch of one: ``[[...]]`` -> ``[...]``.

    A per-sequence scalar arrives as ``[x]``; :func:`scalar` unwraps that.
    """
    while isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    return value


KEPT = " (its index among the sequence's kept tokens, not in the record's lists)"
"""what a refusal's position counts: a mask that drops the prompt shifts it from the record's own index."""


def check_record(
    values: dict[str, Any], *, file: object = None, line: int | None = None, record: int | None = None
) -> None:
    """Refuse one sequence's kept tokens that ``report`` or ``timeline`` would refuse later (the schema's
    limits, ``schema.first_refused``), naming the token's position, so a bad record stops (or, with
    ``--skip-bad``, is skipped) at its line instead of making the whole import unreadable."""
    n = len(values["token_id"])
    if n - 1 > MAX_POSITION:
        raise ImportFormatError(
            f"{n:,} kept tokens in one sequence: positions beyond {MAX_POSITION} are refused by every reader",
            file=file,
            line=line,
            record=record,
        )
    refused = first_refused(values)
    if refused is not None:
        per_token = np.ndim(values[refused.column]) == 1
        where = f" at position {refused.row}{KEPT}" if per_token else ""
        raise ImportFormatError(f"{refused.reason}{where}", file=file, line=line, record=record)


def refuse_sequences(
    ctx: ImportContext, f: SourceFile, columns: dict[str, np.ndarray], lengths: np.ndarray, records: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """:func:`check_record` over a batch of sequences laid end to end (``lengths`` tokens each, read from
    ``records``): each refused sequence is a bad record (stops the import, or is skipped and counted)."""
    while len(lengths):
        ends = np.cumsum(lengths)
        long = np.flatnonzero(lengths - 1 > MAX_POSITION)
        refused = first_refused(columns)
        if long.size:
            k = int(long[0])
            reason = f"{int(lengths[k]):,} kept tokens in one sequence: positions beyond {MAX_POSITION} are refused"
        elif refused is not None:
            k = int(np.searchsorted(ends, refused.row, side="right"))
            reason = f"{refused.reason} at position {refused.row - int(ends[k] - lengths[k])}{KEPT}"
        else:
            break
        ctx.bad(ImportFormatError(reason, file=f.rel, record=int(records[k])), f)
        keep = np.ones(len(lengths), dtype=bool)
        keep[k] = False
        token_keep = np.repeat(keep, lengths)
        columns = {c: v[token_keep] for c, v in columns.items()}
        lengths, records = lengths[keep], records[keep]
    return columns, lengths, records


def take_floats(values: list, lo: int, hi: int, keep: np.ndarray | None, what: str = "a per-token list") -> np.ndarray:
    """``values[lo:hi]`` (then ``[keep]``) as float64; ``None`` (JSON null) becomes NaN; booleans and text
    (``"-0.5"``, which a cast to float would read) are refused.

    numpy infers the list's type once, as a cast would: numbers give a float or
    integer array at the same cost; text or a null makes it walk the list in
    Python to name the first bad value or read the nulls.
    """
    part = values[lo:hi]
    try:
        arr = np.array(part)
    except ValueError:  # ragged: lists inside the list
        raise ImportFormatError("a per-token list holds nested lists, not one number per token") from None
    if arr.ndim != 1:
        raise ImportFormatError("a per-token list holds nested lists, not one number per token")
    if arr.dtype.kind not in "fiu":
        out = np.empty(len(part))
        for i, v in enumerate(part):
            if v is None:
                out[i] = np.nan
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ImportFormatError(f"{what} must hold numbers, got {_short_value(v)} at index {lo + i}")
            else:
                out[i] = v
        arr = out
    else:
        arr = arr.astype(np.float64, copy=False)
        if ((arr == 0) | (arr == 1)).any():  # numpy reads true/false among numbers as 1/0: only then look for them
            refuse_booleans(values, lo, hi, f"{what} must hold numbers")
    return arr if keep is None else arr[keep]


def refuse_booleans(values: list, lo: int, hi: int, what: str) -> None:
    """Raise on the first ``True``/``False`` in ``values[lo:hi]`` (a Python-level scan: call it only on suspicion)."""
    for i in range(lo, hi):
        if values[i].__class__ is bool:
            raise ImportFormatError(f"{what}, got {values[i]!r} at index {i}")


def take_floats_or_constant(
    values: list, lo: int, hi: int, keep: np.ndarray | None, what: str = "a per-token list"
) -> np.ndarray | float:
    """Like :func:`take_floats`, but a slice holding one repeated number comes back as that float.

    Comparing is ~3x cheaper than converting, and a per-sequence advantage
    repeated on every token is the common case. (0 and 1 take the converting
    path: ``list.count(1)`` would count ``True`` as 1.)
    """
    first = values[lo] if hi > lo else None
    if (
        isinstance(first, (int, float))
        and not isinstance(first, bool)
        and first != 0
        and first != 1
        and values[lo:hi].count(first) == hi - lo
    ):
        return float(first)
    return take_floats(values, lo, hi, keep, what)


def take_ints(values: list, lo: int, hi: int, keep: np.ndarray | None) -> np.ndarray:
    """``values[lo:hi]`` (then ``[keep]``) as exact int64 token ids; a refusal names the value's index in the whole
    list, as the record holds it (the slice's index once sent users to the wrong token)."""
    try:
        arr = exact_ints(values[lo:hi], "token ids")
    except ImportFormatError as e:
        if not lo:
            raise
        reason = re.sub(r"at index (\d+)$", lambda m: f"at index {int(m[1]) + lo}", e.reason)
        raise ImportFormatError(reason, hint=e.hint) from None
    return arr if keep is None else arr[keep]


_INT64_MAX = np.iinfo(np.int64).max


def exact_ints(values: Any, what: str) -> np.ndarray:
    """Integers as int64, refusing what a cast would silently change: 1.5 -> 1, NaN, text, booleans, 2^64 - 1 -> -1.

    Integral floats (``3.0``, as some loggers write ids) are accepted. The check
    is vectorised; only a list that numpy cannot read as numbers (or one with a
    0 or 1, which is how numpy reads a boolean among integers) is walked in
    Python to name its first bad value.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ImportFormatError(
            f"{what} must be a flat list of integers, got {'nested lists' if arr.ndim else 'one value'}"
        )
    if arr.dtype.kind == "f" and isinstance(values, list) and ((arr == 0) | (arr == 1)).any():
        refuse_booleans(values, 0, len(values), f"{what} must be integers")  # [5.0, true] reads as [5.0, 1.0]
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
            i = int(np.flatnonzero(arr > _INT64_MAX)[0])
            raise ImportFormatError(f"{what} must fit in a signed 64-bit integer, got {int(arr[i])} at index {i}")
        if isinstance(values, list) and ((arr == 0) | (arr == 1)).any():
            refuse_booleans(values, 0, len(values), f"{what} must be integers")
        return arr.astype(np.int64, copy=False)
    flat = arr
    if arr.dtype.kind in "bUSO":  # booleans, text, or a mix: find the first value that is not a number
        for i, v in enumerate(values if isinstance(values, list) else flat.tolist()):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ImportFormatError(f"{what} must be integers, got {_short_value(v)} at index {i}")
    try:
        flt = flat.astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ImportFormatError(f"{what} must be integers, got {arr.dtype.name} values") from None
    bad = ~np.isfinite(flt) | (flt != np.round(flt)) | (np.abs(flt) > 2.0**62)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        v = values[i] if isinstance(values, list) else flt[i]
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:  # exact, beyond int64
            raise ImportFormatError(f"{what} must fit in a signed 64-bit integer, got {v} at index {i}")
        raise ImportFormatError(f"{what} must be integers, got {float(flt[i])!r} at index {i}")
    if arr.dtype.kind == "O":  # Python ints beyond float precision: convert them exactly
        return np.array(flat.tolist(), dtype=np.int64)
    return flt.astype(np.int64)


def _short_value(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 30 else text[:27] + "..."


def check_lengths(f: SourceFile, line: int | None, record: int | None, fields: dict[str, Any], expected: int) -> None:
    """Every per-token list must be exactly ``expected`` long (the token list's length)."""
    bad = {
        k: (len(v) if isinstance(v, list) else type(v).__name__)
        for k, v in fields.items()
        if not isinstance(v, list) or len(v) != expected
    }
    if bad:
        shown = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise ImportFormatError(
            f"misaligned per-token lists: {expected} tokens but {shown}", file=f.rel, line=line, record=record
        )


def require(
    f: SourceFile, line: int | None, record: int | None, rec: dict[str, Any], *keys: str, what: str = "record"
) -> None:
    """Raise when a needed field is absent or null; the message tells the two apart, and lists only the fields
    that hold a value (a null one listed as present while called missing sent users to the wrong fix)."""
    reason = missing_fields(rec, keys, what)
    if reason:
        raise ImportFormatError(reason, file=f.rel, line=line, record=record)


def missing_fields(rec: dict[str, Any], keys: Any, what: str = "record") -> str | None:
    """One line naming the fields of ``keys`` that ``rec`` lacks and those it holds as null; None when all hold
    a value."""
    absent = [k for k in keys if k not in rec]
    null = [k for k in keys if k in rec and rec[k] is None]
    if not absent and not null:
        return None
    parts = ([f"missing field(s) {', '.join(absent)}"] if absent else []) + (
        [f"null field(s) {', '.join(null)}"] if null else []
    )
    held = sorted(k for k, v in rec.items() if v is not None)
    shown = ", ".join(held[:15]) + (", ..." if len(held) > 15 else "")
    return f"{'; '.join(parts)} (the {what}'s fields with a value: {shown or 'none'})"


def scalar(value: Any, default: Any = None) -> Any:
    """A per-sequence value that may arrive wrapped (``[r]``) or be absent."""
    value = unwrap(value)
    if isinstance(value, list):
        return value[0] if value else default
    return default if value is None else value
