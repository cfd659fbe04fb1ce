"""The generic Parquet importer: a user's own dump, one row per sequence with list columns, read a
batch of rows at a time, column by column (the layout and the names: :mod:`.generic`). pyarrow is
imported inside the functions that read: the registry names this module without loading it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ImportFormatError
from ._base import ImportContext, SourceFile
from ._mask import MASK_HINT, bad_mask_rows, batch_explicit, batch_turns, mask_error
from ._values import exact_ints, refuse_sequences
from .generic import EITHER, FLOAT_COLUMNS, PER_SEQUENCE, PER_TOKEN, GenericImporter, check_int_range, mask_name

if TYPE_CHECKING:
    import pyarrow as pa


class GenericParquetImporter(GenericImporter):
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
            kind = "integers" if c in ("token_id", "trainer_token_id", "turn") else "numbers"
            if c in PER_TOKEN or c == "token_id":  # trainer_token_id and turn are per-token lists too
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
        lengths, ok, reasons, lists = _aligned_rows(col, src)
        keep_rows, keep_flat, reasons = _masked_rows(col, src, lists, lengths, ok, reasons)
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
        try:
            out = _token_columns(col, src, lists, sel, keep_flat, kept_lens)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError) as e:
            raise ImportFormatError(
                f"bad values in rows {row0}..{row0 + rb.num_rows - 1} ({str(e)[:160]})", file=f.rel
            ) from None
        dropped = int(lens.sum() - kept_lens.sum())
        rows = np.flatnonzero(keep_rows) + row0
        if "turn" in out:
            out, kept_lens, rows = _explicit_turns(ctx, f, out, kept_lens, rows, src["turn"])
        elif keep_flat is not None:
            batch_turns(keep_flat, lens, out)
        out, kept_lens, rows = refuse_sequences(ctx, f, out, kept_lens, rows)
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


def _explicit_turns(
    ctx: ImportContext, f: SourceFile, out: dict[str, np.ndarray], lengths: np.ndarray, rows: np.ndarray, name: str
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The explicit ``turn`` of each kept token checked row by row (a row whose turn decreases is a bad record),
    with the positions within each turn added."""
    turn, turn_position, refused = batch_explicit(out["turn"], lengths)
    out["turn"], out["turn_position"] = turn, turn_position
    if not refused:
        return out, lengths, rows
    for k, why in refused.items():
        ctx.bad(ImportFormatError(f"{name}: {why}", file=f.rel, record=int(rows[k])), f)
    keep = np.ones(len(lengths), dtype=bool)
    keep[list(refused)] = False
    token_keep = np.repeat(keep, lengths)
    out = {c: v[token_keep] for c, v in out.items()}
    kept_turn, kept_position, _ = batch_explicit(out["turn"], lengths[keep])
    out["turn"], out["turn_position"] = kept_turn, kept_position
    return out, lengths[keep], rows[keep]


def _aligned_rows(col: dict[str, Any], src: dict[str, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Each row's token count, whether it is usable so far (a non-empty token list, per-token lists of its
    length), the reason where not, and the columns that hold lists."""
    lengths = _list_lengths(col["token_id"])
    ok = lengths > 0
    reasons = np.where(lengths < 0, "token list is null", np.where(lengths == 0, "empty sequence", ""))
    lists = [c for c in PER_TOKEN + EITHER if c in col and _is_list(col[c])]
    for c in lists:
        own = _list_lengths(col[c])
        bad = own != lengths
        why = np.where(
            own < 0,
            f"{src[c]} is null, not a list" + (" (a mask must give 0/1 for every token)" if c == "mask" else ""),
            f"misaligned per-token lists: {src[c]} length differs from {src['token_id']}",
        )
        reasons = np.where(ok & bad, why, reasons)
        ok &= ~bad
    return lengths, ok, reasons, lists


def _masked_rows(
    col: dict[str, Any], src: dict[str, str], lists: list[str], lengths: np.ndarray, ok: np.ndarray, reasons: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The rows kept (usable, and the mask selects a token of them), the kept tokens of those rows (None
    without a mask) and the reasons, with the mask's own."""
    import pyarrow as pa

    if "mask" not in lists:
        return ok, None, reasons
    values = _flatten(col["mask"].filter(pa.array(ok)), np.float64)
    values, reasons = _refuse_masks(values, lengths, ok, reasons, mask_name(src["mask"]))
    mask = values != 0
    kept_len = (
        np.add.reduceat(mask.astype(np.int64), _offsets(lengths[ok])[:-1]) if mask.size else np.zeros(0, np.int64)
    )
    selects = np.zeros(len(lengths), dtype=bool)
    selects[np.flatnonzero(ok)] = kept_len > 0
    reasons = np.where(ok & ~selects, "the mask selects no token", reasons)
    return ok & selects, mask[np.repeat(selects[ok], lengths[ok])], reasons


def _token_columns(
    col: dict[str, Any],
    src: dict[str, str],
    lists: list[str],
    sel: pa.Array,
    keep_flat: np.ndarray | None,
    kept_lens: np.ndarray,
) -> dict[str, np.ndarray]:
    """The kept rows' kept tokens as flat columns; a per-sequence value is repeated on each of its tokens."""
    out: dict[str, np.ndarray] = {}
    out["token_id"] = _take(_flatten(col["token_id"].filter(sel), np.int64), keep_flat)
    for c in FLOAT_COLUMNS:
        if c not in col:
            continue
        if c in lists:
            out[c] = _take(_flatten(col[c].filter(sel), np.float64, src[c]), keep_flat)
        else:
            out[c] = np.repeat(_numpy(col[c].filter(sel), np.float64, src[c]), kept_lens)
    if "turn" in col:
        out["turn"] = _take(_flatten(col["turn"].filter(sel), np.int64, src["turn"]), keep_flat)
    if "trainer_token_id" in col:
        ids = _flatten(col["trainer_token_id"].filter(sel), np.int64, src["trainer_token_id"])
        out["trainer_token_id"] = _take(ids, keep_flat)
    for c in PER_SEQUENCE:
        if c in col:
            per_seq = _numpy(col[c].filter(sel), np.int64, src[c])
            if per_seq.size:
                check_int_range(src[c], c, int(per_seq.min()), int(per_seq.max()))
            out[c] = np.repeat(per_seq, kept_lens)
    return out


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
