"""The one check every importer runs on a source's loss mask: each value is 0 or 1.

A mask says which tokens the trainer's loss saw. Anything else cannot be read
as keep-or-drop without guessing: 2 or 0.5 is a loss weight (kept? halved?),
-1 a padding marker in some stacks, a null a hole in the dump. Read with
``!= 0`` they would be kept, read with ``== 1`` dropped, and either way the
import would count tokens the stack did not count, without a word. So every
importer refuses them with the same message (:func:`mask_error`): a JSON
list through :func:`mask_span` (NeMo-RL, prime-rl, the generic JSONL), an
array through :func:`refuse_mask_values` (slime), a Parquet batch through
:func:`bad_mask_rows` (each row refused alone, so ``--skip-bad`` skips it).

A mask with several runs of 1s is a multi-turn trajectory: :func:`add_turns`
(one sequence) and :func:`batch_turns` (rows laid end to end) give its kept
tokens their turn columns, through the one derivation in ``mismatchscope.turns``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ImportFormatError, InputError
from ..turns import explicit_turns, mask_turns

MASK_HINT = (
    "a loss mask must be 0 (not trained on) or 1 (trained on); a weighted, signed or null entry has no "
    "keep/drop reading: write the mask as 0/1 (or true/false) before importing"
)


def mask_error(what: str, value: Any, index: int) -> ImportFormatError:
    """The one message for a mask value that is not 0/1: the field, the value, its index, and the fix."""
    shown = "null" if value is None or (isinstance(value, float) and value != value) else repr(value)
    if isinstance(value, float) and value == value and value.is_integer():
        shown = f"{value:g}"
    return ImportFormatError(f"{what} must hold 0/1 or true/false, got {shown[:30]} at index {index}", hint=MASK_HINT)


def first_bad_mask_value(mask: list, what: str) -> None:
    """Raise on the first entry of a JSON mask list that is not 0, 1, true or false (text, null, 2, 0.5, -1)."""
    for i, v in enumerate(mask):
        if not (isinstance(v, (int, float)) and (v == 0 or v == 1)):  # bool is an int; NaN fails both
            raise mask_error(what, v, i)


def refuse_mask_values(values: np.ndarray, what: str, offset: int = 0) -> None:
    """Raise on the first value of a numeric mask that is not exactly 0 or 1 (NaN, a read null, included)."""
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        i = int(bad[0])
        raise mask_error(what, float(values[i]), i + offset)


def bad_mask_rows(values: np.ndarray, lengths: np.ndarray) -> dict[int, tuple[float, int]]:
    """Masks laid end to end (``lengths`` values per row): row -> (its first value other than 0/1, that value's
    index within the row), for the rows holding one; empty when every value is 0 or 1."""
    bad = np.flatnonzero((values != 0) & (values != 1))
    if not bad.size:
        return {}
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = np.searchsorted(starts, bad, side="right") - 1
    first_rows, at = np.unique(rows, return_index=True)  # bad is sorted: the first hit of each row
    return {int(r): (float(values[bad[k]]), int(bad[k] - starts[r])) for r, k in zip(first_rows, at, strict=True)}


def mask_span(mask: list, length: int, what: str = "the mask") -> tuple[int, int, np.ndarray | None]:
    """``(lo, hi, keep)``: the kept tokens are ``lo..hi-1`` filtered by ``keep``.

    ``keep`` is None when every token in ``lo..hi-1`` is kept, which is the
    common case (prompt, then one contiguous response, then padding) and lets
    callers convert only the response slice of each list, not the padding.
    ``lo == hi`` means the mask selects nothing. A mask holds 0/1 or
    booleans: anything else (text, a null, 2, 0.5, -1) is refused
    (:mod:`._mask`), never read as keep or drop. ``what`` names the field.
    """
    if mask.count(1) + mask.count(0) != len(mask):  # C-speed: 0/1/true/false/1.0 all compare equal
        first_bad_mask_value(mask, what)
    try:
        lo = mask.index(1, 0, length)  # 1 == True == 1.0
    except ValueError:
        return 0, 0, None
    tail = mask[length - 1 : lo : -1] if length - 1 > lo else []
    try:
        hi = length - tail.index(1)
    except ValueError:
        hi = lo + 1
    span = mask[lo:hi]
    if span.count(1) == hi - lo:
        return lo, hi, None
    return lo, hi, np.asarray(span, dtype=np.float64) != 0


def add_turns(values: dict[str, Any], keep: np.ndarray | None) -> None:
    """Adds ``turn`` and ``turn_position`` to one sequence's values where its mask has several runs of 1s.

    ``keep``: the sequence's mask (over its span, as ``mask_span`` gives it, or all of it: leading and trailing
    0s open no turn), None when every token of its span is kept (one turn: nothing added, the writer gives it
    turn 0).
    """
    if keep is not None:
        turns = mask_turns(keep)
        if turns is not None:
            values["turn"], values["turn_position"] = turns


def batch_turns(kept: np.ndarray, lengths: np.ndarray, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``columns`` (the kept tokens of rows laid end to end, ``lengths`` mask values each) with the turn columns
    added where some row's mask has several runs of 1s."""
    turns = mask_turns(kept, lengths)
    if turns is not None:
        columns["turn"], columns["turn_position"] = turns
    return columns


def explicit(values: dict[str, Any], turn: np.ndarray, what: str) -> None:
    """Adds one sequence's explicit turns (one per kept token, the field ``what``) and the positions within them
    to its values; a turn that decreases, or is not a whole number from 0, makes the record bad."""
    try:
        turns = explicit_turns(turn)
    except InputError as e:
        raise ImportFormatError(f"{what}: {e}") from None
    if turns is not None:
        values["turn"], values["turn_position"] = turns


def batch_explicit(turn: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Rows laid end to end (``lengths`` kept tokens each) with an explicit turn per token: ``(turn,
    turn_position, refused)``, ``refused`` the rows whose turn decreases (row -> why), to skip or stop on."""
    t = np.asarray(turn, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    first = np.zeros(t.size, dtype=bool)
    first[starts[lengths > 0]] = True
    down = np.flatnonzero((np.diff(t) < 0) & ~first[1:]) + 1
    refused: dict[int, str] = {}
    for i in down.tolist():
        row = int(np.searchsorted(starts, i, side="right") - 1)
        if row not in refused:
            at = i - int(starts[row])
            refused[row] = f"turn decreases within a sequence: {int(t[i - 1])} then {int(t[i])} at kept token {at}"
    opened = first | np.concatenate(([True], t[1:] != t[:-1]))
    idx = np.arange(t.size, dtype=np.int64)
    return t.astype(np.int32), (idx - np.maximum.accumulate(np.where(opened, idx, 0))).astype(np.int32), refused
