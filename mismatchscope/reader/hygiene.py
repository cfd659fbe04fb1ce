"""Input hygiene, so every command sees the same cleaned tokens: ``-9999`` sentinels become ``-inf``;
rows with a non-finite logprob are counted and dropped (with a warning, :class:`Hygiene`); clearly
positive logprobs, positions out of range, null or misaligned top-k lists are errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..arrow import list_offsets, list_parts, to_numpy
from ..errors import InputError
from ..schema import (
    COLUMNS,
    LOGPROB_SENTINEL,
    MAX_POSITION,
    NOT_RECORDED_ID,
    POSITIVE_LOGPROB_TOLERANCE,
    SUMMARY_NAMES,
    TOKEN_ID_RULE,
    TURN_COLUMNS,
    positive_logprobs,
)
from .columns import is_list_type


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
    path: Path,
    rb: pa.RecordBatch,
    wanted: list[str],
    hygiene: Hygiene,
    extra: list[str] | tuple[str, ...] = (),
    filled: tuple[str, ...] = (),
) -> CleanBatch:
    cols: dict[str, Any] = {}
    for i, name in enumerate(wanted):
        arr = rb.column(i)
        cols[name] = _topk_list(path, name, arr) if is_list_type(arr.type) else _to_numpy(path, name, arr)
    for j, name in enumerate(extra):
        cols[name] = rb.column(len(wanted) + j)
    n = rb.num_rows
    if filled:  # a file of single-turn sequences among multi-turn ones: turn 0, its position within it
        cols["turn"] = np.zeros(n, np.int64)
        cols["turn_position"] = cols["position"].copy()
    hygiene.rows_read += n
    pos = cols["position"]
    if n and (pos.min() < 0 or pos.max() > MAX_POSITION):  # two reductions; the mask only to name the row
        i = int(np.flatnonzero((pos < 0) | (pos > MAX_POSITION))[0])
        raise InputError(
            f"{path}: position {int(pos[i])} of sequence {int(cols['sequence_id'][i])} is outside 0..{MAX_POSITION}",
            hint="position is the 0-based index of the token within its completion",
        )
    for name in TURN_COLUMNS:
        v = cols.get(name)
        if v is not None and n and (v.min() < 0 or v.max() > MAX_POSITION):
            i = int(np.flatnonzero((v < 0) | (v > MAX_POSITION))[0])
            raise InputError(
                f"{path}: {name} {int(v[i])} of sequence {int(cols['sequence_id'][i])} is outside 0..{MAX_POSITION}",
                hint="turns and positions within them count from 0",
            )
    tok = cols.get("token_id")  # a pass that reads no ids checked them from the footers' statistics
    if n and tok is not None and tok.min() < NOT_RECORDED_ID:  # one reduction; the mask only to name the row
        i = int(np.flatnonzero(tok < NOT_RECORDED_ID)[0])
        raise InputError(
            f"{path}: token_id {int(tok[i])} of sequence {int(cols['sequence_id'][i])} position "
            f"{int(pos[i])} is negative ({TOKEN_ID_RULE})"
        )
    for name in TOPK_ID_LISTS:
        if name in cols:
            _check_listed_ids(path, name, cols[name], cols)
    cols, dropped = _clean_logprobs(path, cols, hygiene)
    for name in TOPK_LOGPROB_LISTS:
        if name in cols:
            _check_logprob_list(path, name, cols[name], cols)
    for ids, values in TOPK_PAIRS:
        if ids in cols and values in cols:
            _check_aligned(path, ids, values, cols)
    out = CleanBatch(cols)
    out.dropped = dropped
    return out


def _clean_logprobs(
    path: Path, cols: dict[str, Any], hygiene: Hygiene
) -> tuple[dict[str, np.ndarray | pa.Array], tuple[np.ndarray, np.ndarray] | None]:
    """Sentinels read as -inf, positive logprobs refused, rows with a non-finite logprob dropped (and named)."""
    lp, lq = cols["trainer_logprob"], cols["sampler_logprob"]
    dropped = None
    if not _plain_logprobs(lp, lq):
        sentinel = (lq == LOGPROB_SENTINEL) | (lp == LOGPROB_SENTINEL)
        if sentinel.any():
            hygiene.sentinels += int(sentinel.sum())
            lp = np.where(lp == LOGPROB_SENTINEL, -np.inf, lp)
            lq = np.where(lq == LOGPROB_SENTINEL, -np.inf, lq)
        finite = np.isfinite(lp) & np.isfinite(lq)
        too_high = positive_logprobs(lp, lq)
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
    return cols, dropped


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


def _check_listed_ids(path: Path, name: str, arr: pa.Array, cols: dict[str, Any]) -> None:
    """A top-k list holds ids of real tokens: a negative one (even -1, which only the sampled token's column
    uses, for an id not recorded) is refused, naming its row from the list offsets."""
    flat, offsets = list_offsets(arr)
    ids = to_numpy(flat)
    if not ids.size or ids.min() >= 0:  # one reduction
        return
    first = int(np.flatnonzero(ids < 0)[0])
    row = int(np.searchsorted(offsets[1:], first, side="right"))
    raise InputError(
        f"{path}: column {name!r} holds the negative id {int(ids[first])} at sequence "
        f"{int(cols['sequence_id'][row])} position {int(cols['position'][row])}",
        hint="a top-k list holds the ids of real tokens, >= 0",
    )


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
    values = to_numpy(flat)  # at the width written: the max of float32 values is one of them, compared exactly
    if not values.size or float(values.max()) <= POSITIVE_LOGPROB_TOLERANCE:  # a NaN max compares False
        return
    values = values.astype(np.float64, copy=False)
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
_SUMMARY_DTYPES = {name: np.dtype(COLUMNS[name].type.to_pandas_dtype()) for name in SUMMARY_NAMES}
"""the top-k summaries are read at the width they are defined in (float32, the counts int32): what reads them
widens only what it uses (the report its four bounds; doctor the sums of its sample's rows)."""
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
    if name in _SUMMARY_DTYPES and not arr.null_count:
        want = _SUMMARY_DTYPES[name]
        if (want.kind == "i") != pa.types.is_integer(arr.type):
            kind = "integers" if want.kind == "i" else "numbers"
            raise InputError(f"{path}: column {name!r} must hold {kind}, found {arr.type}")
        return to_numpy(arr).astype(want, copy=False)
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
