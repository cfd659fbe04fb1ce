"""A record's fields turned into checked arrays: per-token lists to numpy (numbers only, no nested lists,
integers exact), per-sequence scalars unwrapped, lengths held together, and the readers' limits applied
before a row is written (:func:`check_record`, :func:`refuse_sequences`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import ImportFormatError
from ..schema import MAX_POSITION, first_refused
from ._base import ImportContext, SourceFile


def host_array(value: Any) -> Any:
    """A torch tensor as a numpy array on the host, floats as float64 (numpy has no bfloat16); any other
    value as it is. Duck-typed, so reading a dump never imports torch for this."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        return (value.double() if value.is_floating_point() else value).numpy()
    return value


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
