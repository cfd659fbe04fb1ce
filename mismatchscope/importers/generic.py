"""A user's own dump: one row per sequence with list columns, in JSONL or Parquet.

For frameworks without a dump of their own (verl, TRL, OpenRLHF: see
``docs/import.md`` for the few lines to add). Columns are found by name,
renamed with ``--column CANONICAL=NAME``:

* per token (lists, index i = token i): ``token_id`` (default name
  ``token_ids``), ``sampler_logprob`` (``sampler_logprobs``),
  ``trainer_logprob`` (``trainer_logprobs``), ``mask`` (``mask``: 1 keeps a
  generated token, 0 drops it), ``trainer_entropy`` (``trainer_entropy``);
* per token or per sequence: ``advantage`` (``advantages``), ``reward`` (``reward``);
* per sequence: ``sequence_id``, ``step``, ``rank``, ``prompt_id``, ``sample_index``
  (same names).

The first three are required. A renamed column must exist; a column left at
its default name is used when the first record (JSONL) or the file schema
(Parquet) has it. A ``sequence_id`` column keeps the user's ids (they must be
unique across the import); without one, ids are numbered from 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ImportFormatError, InputError, UsageError
from ._base import (
    ImportContext,
    SourceFile,
    check_lengths,
    exact_ints,
    missing_fields,
    parse_record,
    refuse_sequences,
    take_floats,
    take_ints,
)
from ._mask import MASK_HINT, bad_mask_rows, mask_error, mask_span

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported inside the Parquet reader only: the JSONL engine's worker
# processes import this package and need nothing beyond numpy and orjson.

DEFAULT_COLUMNS = {
    "token_id": "token_ids",
    "sampler_logprob": "sampler_logprobs",
    "trainer_logprob": "trainer_logprobs",
    "mask": "mask",
    "trainer_entropy": "trainer_entropy",
    "advantage": "advantages",
    "reward": "reward",
    "sequence_id": "sequence_id",
    "step": "step",
    "rank": "rank",
    "prompt_id": "prompt_id",
    "sample_index": "sample_index",
}
REQUIRED = ("token_id", "sampler_logprob", "trainer_logprob")
PER_TOKEN = ("sampler_logprob", "trainer_logprob", "mask", "trainer_entropy")
EITHER = ("advantage", "reward")
PER_SEQUENCE = ("sequence_id", "step", "rank", "prompt_id", "sample_index")
_FLOAT_COLUMNS = ("sampler_logprob", "trainer_logprob", "trainer_entropy", "advantage", "reward")

SEMANTICS = {
    "layout": "one row per sequence, list columns; index i of every list refers to token i",
    "mask": "the mapped mask column when given (1 = generated token, kept), else every token is kept",
    "note": "semantics (temperature, policy lag) are those of the trainer that wrote the dump",
}


_INT_BITS = {"sequence_id": 64, "step": 64, "prompt_id": 64, "rank": 32, "sample_index": 32}
"""width of each per-sequence integer in the token-pair format (``schema.COLUMNS``, which imports pyarrow)."""


def check_int_range(name: str, canonical: str, lo: int, hi: int) -> None:
    """Refuse per-sequence integers the format cannot store: the writer's int32/int64 buffers would wrap them."""
    bits = _INT_BITS[canonical]
    if lo < -(1 << (bits - 1)) or hi >= 1 << (bits - 1):
        bad = lo if lo < -(1 << (bits - 1)) else hi
        raise ValueError(f"{name} {bad} does not fit in a signed {bits}-bit integer")


class _Generic:
    suffixes: tuple[str, ...] = ()
    if TYPE_CHECKING:  # each format's subclass defines these
        name: str

        def _first_names(self, f: SourceFile) -> set[str] | None: ...

    def __init__(self, columns: dict[str, str] | None = None):
        unknown = sorted(set(columns or {}) - set(DEFAULT_COLUMNS))
        if unknown:
            raise UsageError(
                f"--column {unknown[0]}=...: not a column the {self.name} importer maps",
                hint=f"map any of: {', '.join(DEFAULT_COLUMNS)}",
            )
        self.explicit = dict(columns or {})
        self.mapping = {**DEFAULT_COLUMNS, **self.explicit}
        self.present: dict[str, str] = {}
        self.columns: tuple[str, ...] = ()
        self.warnings: list[str] = []

    def discover(self, src: Path) -> list[SourceFile]:
        if src.is_file():
            paths, root = [src], src.parent
        else:
            paths = sorted(
                p
                for p in src.rglob("*")
                if p.is_file() and p.name.endswith(self.suffixes) and not p.name.startswith(".")
            )
            root = src
        files = [SourceFile(path=p, rel=p.relative_to(root).as_posix()) for p in paths]
        first_bad: ImportFormatError | None = None
        for f in files:  # the first file with a record decides the columns (an empty shard says nothing)
            try:
                names = self._first_names(f)
            except ImportFormatError as e:  # the read reports (or, with --skip-bad, skips) it in its turn
                first_bad = first_bad or e
                continue
            if names is not None:
                self._resolve(names, f)
                return files
        if first_bad is not None:  # not one record anywhere: say why the first bad line is not one
            raise first_bad
        return files

    def _resolve(self, names: set[str], f: SourceFile) -> None:
        """Decide, from the first file, which canonical columns this import carries."""
        self.present = {c: src for c, src in self.mapping.items() if src in names}
        readers: dict[str, str] = {}
        for c, src in self.present.items():
            if src in readers:  # two sides read from one column: a mismatch of exactly zero, or worse
                mapped = c if c in self.explicit else readers[src]
                raise UsageError(
                    f"--column {mapped}={src} makes {readers[src]} and {c} both read the column {src!r}",
                    hint=f"map {'the other one' if mapped == c else c} to another column too",
                )
            readers[src] = c
        missing = [c for c in self.explicit if c not in self.present]
        missing += [c for c in REQUIRED if c not in self.present and c not in missing]
        if missing:
            c = missing[0]
            shown = ", ".join(sorted(names)[:20])
            raise InputError(
                f"{f.rel}: no column {self.mapping[c]!r} for {c} (it has: {shown})",
                hint=f"map yours with --column {c}=NAME",
            )
        self.columns = tuple(
            c for c in self.present if c not in ("token_id", "mask", "sequence_id") and c not in REQUIRED
        )

    def semantics(self) -> dict[str, Any]:
        return {**SEMANTICS, "columns": dict(self.present)}


FIRST_RECORD_WITHIN = 1000
"""lines searched for a first record: a file with none in its first thousand lines (binary, pretty-printed
JSON) is not JSON Lines, and is not read to its end to prove it."""


class GenericJsonlImporter(_Generic):
    name = "jsonl"
    suffixes = (".jsonl", ".json", ".ndjson")

    def _first_names(self, f: SourceFile) -> set[str] | None:
        """The keys of the file's first record; None for a file without lines.

        A file whose lines are all unreadable raises the reason of the first one
        (not UTF-8, pretty-printed JSON, a list per line...), so a file of the
        wrong kind is not reported as one that lacks a column.
        """
        first_bad: ImportFormatError | None = None
        with open(f.path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if raw.isspace():
                    continue
                try:
                    return set(parse_record(raw))
                except ImportFormatError as e:
                    if first_bad is None:
                        first_bad = ImportFormatError(e.reason, file=f.rel, line=lineno, hint=e.hint)
                    if lineno >= FIRST_RECORD_WITHIN:
                        break
        if first_bad is not None:
            raise first_bad
        return None

    def convert(self, f: SourceFile, line: int, rec: dict[str, Any], notes: dict[str, int]) -> tuple[dict, int]:
        src = self.present
        needed = [src[c] for c in src if c not in _FLOAT_COLUMNS]
        needed += [src[c] for c in REQUIRED if src[c] not in needed]
        missing = missing_fields(rec, needed)
        if missing:
            raise ImportFormatError(missing, file=f.rel, line=line)
        ids = rec[src["token_id"]]
        n = len(ids) if isinstance(ids, list) else -1
        lists = {c: rec[src[c]] for c in PER_TOKEN if c in src and rec.get(src[c]) is not None}
        lists.update({c: rec[src[c]] for c in EITHER if c in src and isinstance(rec.get(src[c]), list)})
        check_lengths(f, line, None, {src["token_id"]: ids, **{src[c]: v for c, v in lists.items()}}, n)
        if "mask" in lists:
            lo, hi, keep = mask_span(lists["mask"], n, _mask_name(src["mask"]))
        else:
            lo, hi, keep = 0, n, None
        if lo == hi:
            raise ImportFormatError("the mask selects no token" if n else "empty sequence", file=f.rel, line=line)
        values: dict[str, Any] = {}
        try:
            values["token_id"] = take_ints(ids, lo, hi, keep)
            for c in _FLOAT_COLUMNS:
                if c not in src:
                    continue
                if c in lists:
                    values[c] = take_floats(lists[c], lo, hi, keep, src[c])
                else:
                    v = rec.get(src[c])
                    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                        raise ValueError(f"{src[c]} is not a number: {v!r}")
                    values[c] = np.nan if v is None else float(v)
            for c in PER_SEQUENCE:
                if c in src:
                    v = rec[src[c]]
                    if isinstance(v, float) and v.is_integer() and abs(v) <= 2**53:
                        v = int(v)  # "step": 2.0, as some loggers write counters; token ids accept it too
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise ValueError(f"{src[c]} is not an integer: {v!r}")
                    check_int_range(src[c], c, v, v)
                    values[c] = v
        except (TypeError, ValueError) as e:
            raise ImportFormatError(f"bad value ({e})", file=f.rel, line=line) from None
        return values, n - len(values["token_id"])


class GenericParquetImporter(_Generic):
    name = "parquet"
    suffixes = (".parquet",)
    batch_rows = 8192

    def _first_names(self, f: SourceFile) -> set[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return set(pq.read_schema(f.path).names)
        except (pa.ArrowInvalid, OSError) as e:
            raise ImportFormatError(f"not a Parquet file, or truncated ({e})", file=f.rel) from None

    def read(self, f: SourceFile, ctx: ImportContext) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(f.path, page_checksum_verification=True)  # a damaged page is an error, not numbers
            names = set(pf.schema_arrow.names)
            lost = [self.present[c] for c in self.present if self.present[c] not in names]
            if lost:
                raise ImportFormatError(f"lacks column(s) {', '.join(lost)} that the first file has", file=f.rel)
            tok_type = pf.schema_arrow.field(self.present["token_id"]).type
            if not _list_type(tok_type):
                raise ImportFormatError(
                    f"{self.present['token_id']} is not a list column: this looks like one row per token "
                    "(mismatchscope's own format), not one row per sequence",
                    file=f.rel,
                    hint="analyse such a file directly, without import",
                )
            self._check_types(f, pf.schema_arrow)
            row = 0
            for rb in pf.iter_batches(batch_size=self.batch_rows, columns=list(dict.fromkeys(self.present.values()))):
                self._batch(f, ctx, rb, row)
                row += rb.num_rows
        except ImportFormatError as e:
            ctx.bad(e, f)
        except (pa.ArrowInvalid, OSError) as e:
            ctx.bad(ImportFormatError(f"unreadable Parquet data ({str(e)[:160]})", file=f.rel), f)

    def _check_types(self, f: SourceFile, schema: pa.Schema) -> None:
        """Each mapped column must have the shape its role needs, checked once per file, before any row is read.

        Per-token columns are lists of numbers (the mask may hold booleans);
        ``advantage`` and ``reward`` are lists or one number per sequence; the
        per-sequence columns hold one integer. Anything else (a list of lists,
        text, a boolean read as 0/1, a number where a list belongs, which would
        be repeated on every token) is refused with the column and its type, as
        the JSONL importer refuses the same record.
        """
        for c, name in self.present.items():
            t = schema.field(name).type
            listed = _list_type(t)
            inner = t.value_type if listed else t
            kind = "integers" if c == "token_id" else "numbers"
            if c in PER_TOKEN or c == "token_id":
                shape_ok = listed
                want = f"a list of {kind}, one per token"
            elif c in EITHER:
                shape_ok = True
                want = "a list of numbers, one per token, or one number per sequence"
            else:
                shape_ok = not listed
                want = "one integer per sequence"
            numbers_ok = _number_type(inner) or (c == "mask" and _bool_type(inner))
            if not (shape_ok and numbers_ok):
                raise ImportFormatError(
                    f"column {name!r} ({c}) holds {t}; it must hold {want}"
                    + (" (booleans are not read as 0/1)" if _bool_type(inner) else ""),
                    file=f.rel,
                )

    def _batch(self, f: SourceFile, ctx: ImportContext, rb: pa.RecordBatch, row0: int) -> None:
        import pyarrow as pa

        src = self.present
        col = {c: _plain_list(rb.column(rb.schema.get_field_index(src[c]))) for c in src}
        n_rows = rb.num_rows
        lengths = _list_lengths(col["token_id"])
        ok = lengths > 0
        reasons = np.where(lengths < 0, "token list is null", np.where(lengths == 0, "empty sequence", ""))
        lists = [c for c in PER_TOKEN + EITHER if c in col and _is_list(col[c])]
        for c in lists:
            bad = _list_lengths(col[c]) != lengths
            reasons = np.where(
                ok & bad, f"misaligned per-token lists: {src[c]} length differs from {src['token_id']}", reasons
            )
            ok &= ~bad
        keep_flat = None
        if "mask" in lists:
            values = _flatten(col["mask"].filter(pa.array(ok)), np.float64)
            values, reasons = _refuse_masks(values, lengths, ok, reasons, _mask_name(src["mask"]))
            mask = values != 0
            kept_len = (
                np.add.reduceat(mask.astype(np.int64), _offsets(lengths[ok])[:-1])
                if mask.size
                else np.zeros(0, np.int64)
            )
            selects = np.zeros(n_rows, dtype=bool)
            selects[np.flatnonzero(ok)] = kept_len > 0
            reasons = np.where(ok & ~selects, "the mask selects no token", reasons)
            keep_rows = ok & selects
            keep_flat = mask[np.repeat(selects[ok], lengths[ok])]
        else:
            keep_rows = ok
        for i in np.flatnonzero(~keep_rows):
            hint = MASK_HINT if str(reasons[i]).startswith("the mask") and "0/1" in str(reasons[i]) else None
            ctx.bad(ImportFormatError(str(reasons[i]), file=f.rel, record=row0 + int(i), hint=hint), f)
        if not keep_rows.any():
            return
        sel = pa.array(keep_rows)
        lens = lengths[keep_rows]
        seq_index = np.repeat(np.arange(len(lens)), lens)
        if keep_flat is not None:
            seq_index = seq_index[keep_flat]
        kept_lens = np.bincount(seq_index, minlength=len(lens))
        out: dict[str, np.ndarray] = {}
        try:
            out["token_id"] = _take(_flatten(col["token_id"].filter(sel), np.int64), keep_flat)
            for c in _FLOAT_COLUMNS:
                if c not in col:
                    continue
                if c in lists:
                    out[c] = _take(_flatten(col[c].filter(sel), np.float64, src[c]), keep_flat)
                else:
                    out[c] = np.repeat(_numpy(col[c].filter(sel), np.float64, src[c]), kept_lens)
            for c in PER_SEQUENCE:
                if c in col:
                    per_seq = _numpy(col[c].filter(sel), np.int64, src[c])
                    if per_seq.size:
                        check_int_range(src[c], c, int(per_seq.min()), int(per_seq.max()))
                    out[c] = np.repeat(per_seq, kept_lens)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError) as e:
            raise ImportFormatError(
                f"bad values in rows {row0}..{row0 + n_rows - 1} ({str(e)[:160]})", file=f.rel
            ) from None
        dropped = int(lens.sum() - kept_lens.sum())
        out, kept_lens, rows = refuse_sequences(ctx, f, out, kept_lens, np.flatnonzero(keep_rows) + row0)
        if not len(kept_lens):
            return
        if "sequence_id" in out:  # the user's ids: a repeat is a bad record
            unique = ctx.unique_sequence_ids(f, out["sequence_id"][_offsets(kept_lens)[:-1]], records=rows)
            if not unique.all():
                token_keep = np.repeat(unique, kept_lens)
                out = {c: v[token_keep] for c, v in out.items()}
                kept_lens = kept_lens[unique]
                if not len(kept_lens):
                    return
        else:
            out["sequence_id"] = np.repeat(ctx.writer.allocate_sequence_ids(len(kept_lens)), kept_lens)
        total = int(kept_lens.sum())
        out["position"] = (np.arange(total) - np.repeat(_offsets(kept_lens)[:-1], kept_lens)).astype(np.int32)
        ctx.add_batch(f, out, sequences=len(kept_lens), dropped=dropped)


def _refuse_masks(
    values: np.ndarray, lengths: np.ndarray, ok: np.ndarray, reasons: np.ndarray, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The rows (of those ``ok``) whose mask holds a value other than 0/1 leave ``ok`` (in place) with the reason;
    their values leave the flat mask. Returns the mask values left and the reasons."""
    bad_rows = bad_mask_rows(values, lengths[ok])
    if not bad_rows:
        return values, reasons
    reasons = reasons.astype(object)
    rows_ok = np.flatnonzero(ok)
    still = np.ones(rows_ok.size, bool)
    for k, (value, at) in bad_rows.items():
        reasons[rows_ok[k]] = mask_error(name, value, at).reason
        still[k] = False
    values = values[np.repeat(still, lengths[ok])]
    ok[rows_ok[~still]] = False
    return values, reasons


def _mask_name(column: str) -> str:
    """How a refusal names the mask: ``the mask``, or ``the mask (response_mask)`` for a mapped column."""
    return "the mask" if column == "mask" else f"the mask ({column})"


def _list_type(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _number_type(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)


def _bool_type(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_boolean(t)


def _plain_list(arr: pa.Array) -> pa.Array:
    """A fixed-size list column as a plain list (same values, same nulls): the rest reads one kind of list."""
    import pyarrow as pa

    return arr.cast(pa.list_(arr.type.value_type)) if pa.types.is_fixed_size_list(arr.type) else arr


def _is_list(arr: pa.Array) -> bool:
    import pyarrow as pa

    return pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)


def _list_lengths(arr: pa.Array) -> np.ndarray:
    """Per-row list length; -1 for a null list or a non-list column."""
    import pyarrow.compute as pc

    if not _is_list(arr):
        return np.full(len(arr), -1, dtype=np.int64)
    lengths = pc.list_value_length(arr)  # pyright: ignore[reportAttributeAccessIssue]  (pyarrow stubs lack it)
    return pc.fill_null(lengths, -1).to_numpy().astype(np.int64)


def _flatten(arr: pa.Array, dtype: type, what: str = "integer columns") -> np.ndarray:
    import pyarrow.compute as pc

    flat = pc.list_flatten(arr)  # pyright: ignore[reportAttributeAccessIssue]  (pyarrow stubs lack it)
    return _numpy(flat, dtype, what)


def _numpy(arr: pa.Array, dtype: type, what: str = "integer columns") -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if np.dtype(dtype).kind == "f":
        arr = pc.fill_null(arr.cast(pa.float64()), float("nan"))
    elif arr.null_count:
        raise ValueError(f"{arr.null_count} null integer value(s)")
    values = arr.to_numpy(zero_copy_only=False)
    if np.dtype(dtype).kind in "iu":
        return exact_ints(values, what)
    return values.astype(dtype, copy=False)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _take(values: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    return values if keep is None else values[keep]
