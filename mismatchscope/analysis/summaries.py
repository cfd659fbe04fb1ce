"""The top-k lists summarised once, when a run is written: per-token float32 columns the analysis reads instead.

A run's top-k lists (``sampler_topk_ids`` and the two logprob lists) are most
of its bytes, and decoding them was most of ``report``'s time, for a few
numbers per token that never change once the run is written. So every
writer (probe, rescore, import, the Recorder) computes those numbers when it
writes a shard (:func:`write_token_shard`) and stores them beside the lists
(``schema.TOPK_SUMMARY``): the top-k TV and KL lower bounds, the two rest
buckets (one minus each side's mass on the listed ids), the overlap with the
trainer's own top-k, and the per-row sums of ``doctor``'s temperature and
truncation fits. ``report``, ``compare-masks`` and ``doctor`` read the
summaries and decode the lists only when they need the lists themselves.

**The numbers are the summaries'.** A run that has them gives the same numbers
whichever of the two a command decodes: from the lists, the per-token values
are rounded to float32 first (:func:`from_lists`), then everything after is
the same function of the float32 values (:func:`topk_from_summaries`), so the
bits agree. A run written before the summaries is read from its lists in
float64, exactly as before.

**Held against the lists.** Page checksums and the shard index's footer hash
cover the summary columns as they cover every other. What no checksum can
see is a shard whose summaries were made by hand, or by a writer with a bug,
and disagree with its lists. Decoding every list on every read to rule that
out would undo the point, so each row group's first :data:`CHECK_ROWS` rows
are checked every time it is read (:func:`check_row_group`: the lists
decoded, the summaries computed again and compared within
:data:`CHECK_RTOL`; one page of each list column, a small share of a row
group), and every summary value read is held to the range its definition
allows (:func:`check_ranges`: a TV outside [0, 1], a negative KL, a NaN). A
disagreement is a one-line error naming the shard.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..arrow import list_offsets, to_numpy
from ..divergence import TokenTerms, token_terms
from ..errors import InputError
from ..reader import Hygiene
from ..reader.hygiene import CleanBatch, _clean
from ..schema import (
    BOUND_SUMMARIES,
    COLUMNS,
    LOGPROB_SENTINEL,
    OVERLAP,
    REQUIRED_NAMES,
    ROW_SUMS,
    SUMMARY_NAMES,
    TOPK_COLUMNS,
    write_table,
)
from .topk import TAIL_EMPTY, ScoreCentering, TopkBounds, batch_bounds, score_centering

TRAINER_IDS = "trainer_topk_ids"
ROW_SUM_LISTS = ("sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
"""the two lists the per-row sums run over: the sampler's (y) and the trainer's (x) logprobs of the listed ids."""

CHECK_ROWS = 1024
"""rows of each row group whose lists are decoded and summarised again on every read: a page or so of each list
column (about 0.1% of a 1M-row group)."""
CHECK_RTOL = 1e-5
CHECK_ATOL = 1e-7
"""how close a stored summary must be to the one computed again from the lists. float32 keeps 6e-8 of a value;
the rest allows another machine's ``exp`` and ``log`` (a last bit of a float64 may round the float32 the other
way, and the rest buckets' logarithms amplify it); a summary made from other lists is off by far more."""


# -- writing -----------------------------------------------------------------------------------------------


def write_token_shard(path: str | os.PathLike, columns: Mapping[str, Any], metadata: Mapping[str, Any] | None) -> Path:
    """``schema.write_table`` with the top-k summaries computed from the shard's lists and written beside them.

    Every writer of a run's token shards writes through here. Summary columns a
    caller hands in are dropped and computed again: a summary is only ever the
    one its lists give.
    """
    given = {k: v for k, v in columns.items() if k not in SUMMARY_NAMES}
    return write_table(path, given, metadata, derive=add_summaries)


def add_summaries(table: pa.Table) -> pa.Table:
    """``table`` with its top-k summary columns appended (unchanged without the sampler's three lists, or with
    lists the readers refuse: those are read, and refused, as before)."""
    summaries = summarise_table(table)
    if summaries is None:
        return table
    for name, values in summaries.items():
        table = table.append_column(pa.field(name, COLUMNS[name].type), pa.array(values, COLUMNS[name].type))
    return table


def summarise_table(table: pa.Table) -> dict[str, np.ndarray] | None:
    """Every row's summaries (rows the readers drop for a non-finite logprob get NaN and 0), or None."""
    names = [*REQUIRED_NAMES, *TOPK_COLUMNS] + ([TRAINER_IDS] if TRAINER_IDS in table.column_names else [])
    if not all(c in table.column_names for c in names):
        return None
    rb = pa.RecordBatch.from_arrays([table.column(c).combine_chunks() for c in names], names=names)
    try:
        batch = _clean(Path("shard"), rb, names, Hygiene())
        values = from_lists(batch, token_terms(batch["trainer_logprob"], batch["sampler_logprob"]))
    except InputError:
        return None
    n = rb.num_rows
    kept = _kept_rows(rb)
    out: dict[str, np.ndarray] = {}
    for name, v in values.items():
        full = np.zeros(n, v.dtype) if v.dtype.kind == "i" else np.full(n, np.nan, v.dtype)
        full[kept] = v
        out[name] = full
    return out


def _kept_rows(rb: pa.RecordBatch) -> np.ndarray:
    """The rows the reader keeps: both logprobs finite once -9999 reads as -inf (``reader.hygiene``)."""
    keep = np.ones(rb.num_rows, bool)
    for name in ("sampler_logprob", "trainer_logprob"):
        v = to_numpy(rb.column(rb.schema.get_field_index(name))).astype(np.float64, copy=False)
        keep &= np.isfinite(v) & (v != LOGPROB_SENTINEL)
    return keep


# -- the values --------------------------------------------------------------------------------------------


def from_lists(batch: Mapping[str, Any], t: TokenTerms) -> dict[str, np.ndarray]:
    """A cleaned batch's summaries computed from its lists, float32 (the counts int32), as a writer stores them.

    ``t``: the batch's token terms (the bounds reuse their probabilities).
    """
    b = batch_bounds(batch, (t.q_T, t.p_T))
    f32 = np.float32
    out: dict[str, np.ndarray] = {
        "topk_tv_lower": b.tv_lower_T.astype(f32),
        "topk_kl_lower": b.kl_lower_T.astype(f32),
        "topk_sampler_rest": (1.0 - b.sampler_mass_T).astype(f32),
        "topk_trainer_rest": (1.0 - b.trainer_mass_T).astype(f32),
    }
    if TRAINER_IDS in batch:
        overlap = score_centering(b, batch["sampler_topk_ids"], batch[TRAINER_IDS]).overlap_T
        assert overlap is not None  # the trainer's ids were given
        out[OVERLAP] = overlap.astype(f32)
    sums = row_sums(batch[ROW_SUM_LISTS[1]], batch[ROW_SUM_LISTS[0]])
    for name, v in sums.items():
        out[name] = v.astype(np.int32 if name in ("topk_pairs", "topk_cut") else f32)
    return out


def row_sums(trainer: pa.Array, sampler: pa.Array) -> dict[str, np.ndarray]:
    """Per row, over the listed ids where both sides' logprobs are finite: their count, the sums of the
    trainer's (x) and the sampler's (y) logprobs, of x^2, x*y and y^2; and the listed ids the sampler gives
    -inf and the trainer a finite logprob (a truncated set). Keyed by ``schema.ROW_SUMS``; float64 counts.

    What ``doctor``'s temperature and truncation fits keep of each row: with them, the fits never need the
    lists. The two lists are aligned (the bounds refuse them otherwise, before this runs).
    """
    xf, offsets = list_offsets(trainer)
    yf = list_offsets(sampler)[0]
    x, y = to_numpy(xf).astype(np.float64, copy=False), to_numpy(yf).astype(np.float64, copy=False)
    return row_sums_of(x, y, np.diff(offsets))


def row_sums_of(x: np.ndarray, y: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`row_sums` of lists already flattened: ``x`` (trainer) and ``y`` (sampler) aligned, ``lengths``
    each row's list length (doctor's sample gathers its rows' lists before it sums them)."""
    n_rows = lengths.size
    both = np.isfinite(x) & np.isfinite(y)
    cut = np.isneginf(y) & np.isfinite(x)
    xb, yb = np.where(both, x, 0.0), np.where(both, y, 0.0)
    width = int(lengths[0]) if n_rows else 0
    if n_rows and width and bool((lengths == width).all()):  # every list of one length (a fixed k): row sums

        def per_row(v: np.ndarray) -> np.ndarray:
            return v.reshape(n_rows, width).sum(axis=1)

    else:
        row = np.repeat(np.arange(n_rows), lengths)

        def per_row(v: np.ndarray) -> np.ndarray:
            return np.bincount(row, weights=v, minlength=n_rows)

    n, sx, sy, sxx, sxy, syy, k_cut = ROW_SUMS
    return {
        n: per_row(both.astype(np.float64)),
        sx: per_row(xb),
        sy: per_row(yb),
        sxx: per_row(xb * xb),
        sxy: per_row(xb * yb),
        syy: per_row(yb * yb),
        k_cut: per_row(cut.astype(np.float64)),
    }


def topk_from_summaries(summaries: Mapping[str, np.ndarray]) -> tuple[TopkBounds, ScoreCentering]:
    """The top-k bounds and score-centering statistics the report folds, from the float32 summaries.

    The masses are one minus the rest buckets; the tail ratio and the empty-tail flags come from the rest
    buckets themselves (where a float32 mass near 1 would have lost them).
    """
    f64 = np.float64
    tv = np.asarray(summaries["topk_tv_lower"], dtype=f64)
    kl = np.asarray(summaries["topk_kl_lower"], dtype=f64)
    q_tail = np.asarray(summaries["topk_sampler_rest"], dtype=f64)
    p_tail = np.asarray(summaries["topk_trainer_rest"], dtype=f64)
    empty_q, empty_p = q_tail < TAIL_EMPTY, p_tail < TAIL_EMPTY
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(empty_q | empty_p, np.nan, q_tail / p_tail)
    b = TopkBounds(tv, kl, 1.0 - q_tail, 1.0 - p_tail, rho, empty_q, empty_p)
    overlap = summaries.get(OVERLAP)
    c = ScoreCentering(
        b.sampler_mass_T,
        b.trainer_mass_T,
        rho,
        empty_q,
        empty_p,
        None if overlap is None else np.asarray(overlap, dtype=f64),
    )
    return b, c


# -- checking ----------------------------------------------------------------------------------------------


_RANGES: dict[str, tuple[float, float]] = {
    "topk_tv_lower": (0.0, 1.0),
    "topk_kl_lower": (0.0, np.inf),
    "topk_sampler_rest": (-np.inf, 1.0),
    "topk_trainer_rest": (-np.inf, 1.0),
}
"""what each summary's definition allows on a kept row: a TV in [0, 1], a KL >= 0 (+inf where the trainer
gives a listed id -inf), a rest bucket <= 1 (below 0 where a side's listed probabilities add up past 1, which
the analysis reads as it is); none is NaN. The overlap is in [0, 1], or NaN where both lists are empty."""


def check_ranges(path: Path, batch: Mapping[str, Any]) -> None:
    """Every summary value of a cleaned batch is one its definition allows, or the shard is refused."""
    for name, (lo, hi) in _RANGES.items():
        v = batch[name]
        if v.size and not (v.min() >= lo and v.max() <= hi):  # a NaN fails both comparisons
            bad = np.flatnonzero(~((v >= lo) & (v <= hi)))
            _refuse(path, batch, int(bad[0]), name, float(v[bad[0]]), "out of its range")
    if OVERLAP in batch:
        v = batch[OVERLAP]
        bad = np.flatnonzero((v < 0) | (v > 1))
        if bad.size:
            _refuse(path, batch, int(bad[0]), OVERLAP, float(v[bad[0]]), "out of its range")


def check_row_group(mapping: Mapping[str, str], overlap: bool) -> Callable[[Path, pq.ParquetFile, int], None]:
    """The reader's check of each row group before it is decoded: its first :data:`CHECK_ROWS` rows'
    summaries computed again from their lists (``mapping``: the input's ``--column`` mapping)."""
    names = [*REQUIRED_NAMES, *TOPK_COLUMNS] + ([TRAINER_IDS] if overlap else [])
    stored = [*BOUND_SUMMARIES, *ROW_SUMS] + ([OVERLAP] if overlap else [])
    file_cols = [mapping.get(c, c) for c in [*names, *stored]]

    def check(path: Path, pf: pq.ParquetFile, group: int) -> None:
        rb = next(pf.iter_batches(batch_size=CHECK_ROWS, row_groups=[group], columns=file_cols), None)
        if rb is None or not rb.num_rows:
            return
        batch = _clean(path, rb, [*names, *stored], Hygiene())
        if not batch["sequence_id"].size:
            return
        again = from_lists(batch, token_terms(batch["trainer_logprob"], batch["sampler_logprob"]))
        for name in stored:
            compare(path, batch, name, np.asarray(batch[name]), again[name])

    return check


def compare(path: Path, batch: Mapping[str, Any], name: str, stored: np.ndarray, again: np.ndarray) -> None:
    """A stored summary against the one its lists give, within :data:`CHECK_RTOL` (NaN matches NaN, +inf +inf)."""
    a, b = stored.astype(np.float64), again.astype(np.float64)
    with np.errstate(invalid="ignore"):
        close = (a == b) | (np.abs(a - b) <= CHECK_ATOL + CHECK_RTOL * np.maximum(np.abs(a), np.abs(b)))
    close |= np.isnan(a) & np.isnan(b)
    if not close.all():
        i = int(np.flatnonzero(~close)[0])
        _refuse(path, batch, i, name, float(a[i]), f"where its lists give {float(b[i]):.9g}")


def _refuse(path: Path, batch: Mapping[str, Any], row: int, name: str, value: float, why: str) -> None:
    raise InputError(
        f"{path}: its top-k summaries disagree with its top-k lists: {name} {value:.9g} at sequence "
        f"{int(batch['sequence_id'][row])} position {int(batch['position'][row])} is {why}",
        hint="the shard was changed or made by hand after its writer summarised it; write it again "
        "(mismatchscope rescore, or import it again)",
    )


def batch_summaries(batch: CleanBatch | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The stored bound summaries of a cleaned batch (what :func:`topk_from_summaries` reads)."""
    return {name: batch[name] for name in (*BOUND_SUMMARIES, OVERLAP) if name in batch}
