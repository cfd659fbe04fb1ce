"""The rows the detectors look at: every token of a sample of whole sequences, gathered during report's pass.

The detectors need sequences in position order (a shift, a misjoined
sequence, padding at the ends) and per-position top-k fits; none needs
every token of a 10-million-token file to decide. So ``report``'s one
streaming pass hands each batch to :class:`SampleCollector`, which keeps the
rows of the sequences a hash of ``sequence_id`` picks (the same sequences
whatever the batch or shard layout, all of them in a file up to
:data:`SAMPLE_ROWS` rows) and, for each kept row, the few numbers the top-k
fits need. The lists themselves are kept for a smaller sample of the same
kind (:data:`LIST_ROWS` rows): the rival fits that tell a temperature from a
log base need each position's listed values, not only their sums. In a run
whose summaries carry the sums, the lists are decoded only in a few row
groups spread evenly over the files (:func:`list_groups`), enough for that
sub-sample, and the hash keeps it inside them.

A sample is immutable: a cause's correction (``causes/``) returns a new one
(rows dropped, one side's values moved), so each cause can be read again on
the pairs with the causes before it corrected.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from ..analysis.summaries import row_sums_of
from ..arrow import list_offsets, to_numpy
from ..divergence import k3_per_token
from ..schema import ROW_SUMS

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..analysis.batch import BatchTokens

T = TypeVar("T")

SAMPLE_ROWS = 1 << 19
"""rows kept at most (about: whole sequences are kept): about 60 MB of columns and a second of detectors at
most; half a million tokens decide every detector's statistic far beyond its threshold's noise."""
LIST_ROWS = 1 << 16
"""rows whose top-k lists are kept too (a sub-sample of the sample, by the same hash)."""
REPORT_SAMPLE_ROWS = 1 << 18
"""the smaller sample ``report`` uses for its one line, so the line costs it a fraction of a second."""

SENTINEL_FLOOR = -700.0
"""a logprob below this is no logprob: float64's log of its smallest normal is -708, float32's -87, so such a
value is a stand-in (vLLM's -9999 for -inf, a -1e300 fill). Rows holding one are left out of every fit and
counted (``Sample.sentinel_rows``)."""

_HASH = np.uint64(0x9E3779B97F4A7C15)
"""Fibonacci hashing of the sequence id: consecutive ids spread evenly over the 32-bit range."""

SCALARS = ("sequence_id", "position", "token_id", "trainer_logprob", "sampler_logprob")
OPTIONAL_SCALARS = (
    "advantage",
    "reward",
    "trainer_entropy",
    "step",
    "sampler_step",
    "trainer_step",
    "minibatch",
    "turn",
    "turn_position",
    "trainer_token_id",
)
TOPK = ("sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
TOPK_FIELDS = ("k_n", "k_sx", "k_sy", "k_sxx", "k_sxy", "k_syy", "k_cut")
"""per kept row, over the listed ids where both sides are finite: their count, the sums of the trainer's (x)
and the sampler's (y) logprobs, of x^2, x*y and y^2; and ``k_cut``, the listed ids the sampler gives -inf
and the trainer a finite logprob (a truncated set)."""


def keep_threshold(total_rows: int, cap: int = SAMPLE_ROWS) -> int:
    """Sequences whose 32-bit hash is below this are kept: all of them up to ``cap`` rows."""
    if total_rows <= cap:
        return 1 << 32
    return max(1, int((1 << 32) * cap / total_rows))


def list_groups(
    groups: list[tuple[Path, int, int]], cap: int = SAMPLE_ROWS, list_cap: int = LIST_ROWS
) -> tuple[frozenset[tuple[Path, int]], int] | None:
    """The row groups whose top-k lists the list sub-sample is drawn from, and their rows; None: every group.

    ``groups``: (file, index, rows) of every row group in read order. The sample keeps a share
    ``cap / rows`` of the rows (all of them in a small file), so about ``list_cap`` of them fall in any
    ``list_cap * rows / cap`` rows: the fewest groups, evenly spaced over the read order (so over the files and
    within them), that hold that many. Decoding the lists of those groups alone is most of what the lists
    cost a pass saved. A file small enough to need every group (every bundled run) reads them all, as before.
    """
    total = sum(g[2] for g in groups)
    needed = list_cap * max(total, cap) / cap
    if needed >= total or len(groups) < 2:
        return None
    for m in range(1, len(groups)):
        at = sorted({int((j + 0.5) * len(groups) / m) for j in range(m)})
        rows = sum(groups[i][2] for i in at)
        if rows >= needed:
            return frozenset((groups[i][0], groups[i][1]) for i in at), rows
    return None


def sequence_hash(sequence_id: np.ndarray) -> np.ndarray:
    """Each row's 32-bit hash of its sequence id (uint64)."""
    with np.errstate(over="ignore"):
        return (sequence_id.astype(np.uint64) * _HASH) >> np.uint64(32)


def kept(sequence_id: np.ndarray, threshold: int) -> np.ndarray:
    """Whether each row's sequence is in the sample."""
    if threshold >= 1 << 32:
        return np.ones(sequence_id.shape, dtype=bool)
    return sequence_hash(sequence_id) < np.uint64(threshold)


def _lists(arr: pa.Array, idx: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The float values of list column ``arr`` at rows ``idx`` (all rows for None), flattened, and each list's
    length. Gathered with numpy from the offsets: ``Array.take`` would import ``pyarrow.compute``, about a
    second of a command's start-up."""
    flat, offsets = list_offsets(arr)
    values = to_numpy(flat)
    if idx is None:
        return values.astype(np.float64, copy=False), np.diff(offsets)
    starts, lengths = offsets[idx], offsets[idx + 1] - offsets[idx]
    at = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(int(lengths.sum()))
    return values[at].astype(np.float64, copy=False), lengths  # gathered before widening: a float32 list stays small


def sums_of(x: np.ndarray, y: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """The :data:`TOPK_FIELDS` of flattened aligned lists ``x`` (trainer) and ``y`` (sampler): the summaries'
    own row sums, under the sample's names."""
    sums = row_sums_of(x, y, lengths)
    return {field: sums[name] for field, name in zip(TOPK_FIELDS, ROW_SUMS, strict=True)}


def _rows(v: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """The rows ``idx`` (None: all) of a summary column, widened to float64 (only the rows kept)."""
    return np.array(v if idx is None else v[idx], dtype=np.float64)


def topk_sums(sampler: pa.Array, trainer: pa.Array, idx: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The :data:`TOPK_FIELDS` of the rows ``idx`` (None: every row) of two aligned top-k logprob lists."""
    y, lengths = _lists(sampler, idx)
    x, x_lengths = _lists(trainer, idx)
    if x.size != y.size or not np.array_equal(lengths, x_lengths):
        return {k: np.zeros(lengths.size) for k in TOPK_FIELDS}  # misaligned lists: the report refuses them itself
    return sums_of(x, y, lengths)


@dataclass(frozen=True)
class TopkLists:
    """The listed values of the rows that kept their lists: row ``list_row`` of the sample is
    ``x[offsets[r]:offsets[r + 1]]`` (trainer) and the same slice of ``y`` (sampler)."""

    x: np.ndarray
    y: np.ndarray
    offsets: np.ndarray


@dataclass(frozen=True)
class Sample:
    """The kept rows, sorted by (sequence_id, position): column name -> array."""

    columns: dict[str, np.ndarray]
    rows_seen: int
    sampled: bool
    """True when only some sequences were kept (a large file)."""
    lists: TopkLists | None = None
    """the top-k lists of a sub-sample of rows (``columns["list_row"]`` >= 0), None without top-k columns."""
    sentinel_rows: int = 0
    """rows left out for a stand-in logprob (below :data:`SENTINEL_FLOOR`)."""
    sentinel_sampler: int = 0
    """of those, rows where the sampler's value is the stand-in (a sampled token it gives -inf)."""
    notes: tuple[str, ...] = field(default=())

    def has(self, name: str) -> bool:
        return name in self.columns

    def __len__(self) -> int:
        return int(self.columns["sequence_id"].size)

    @property
    def lp(self) -> np.ndarray:
        return self.columns["trainer_logprob"]

    @property
    def lq(self) -> np.ndarray:
        return self.columns["sampler_logprob"]

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, computed the first time a reader asks this sample for ``key`` and kept with it.

        Every detector, screen and share reads the same few per-row values (the gap, its magnitude, k3, the
        sequences' rows) of one sample: computed once, the examination pays for them once, not once per
        reader. A sample never changes (a correction makes a new one, with nothing kept), so a kept value is
        never stale; arrays are kept read-only, so a reader that would change one in place fails at once.
        Threads may race to make the same value: both make it alike and one is kept.
        """
        memo: dict[str, Any] = self.__dict__.setdefault("_once", {})
        if key not in memo:
            memo.setdefault(key, _read_only(make()))
        return memo[key]

    def gap(self) -> np.ndarray:
        """l = log p - log q of every row (read-only)."""
        return self.once("gap", lambda: self.lp - self.lq)

    def abs_gap(self) -> np.ndarray:
        """|l| of every row (read-only)."""
        return self.once("abs_gap", lambda: np.abs(self.gap()))

    def k3(self) -> np.ndarray:
        """k3 of every row's log ratio (read-only)."""
        return self.once("k3", lambda: k3_per_token(self.gap()))

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Each sequence's first row and the row after its last (read-only)."""

        def make() -> tuple[np.ndarray, np.ndarray]:
            seq = self.columns["sequence_id"]
            if not seq.size:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
            starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
            return starts, np.r_[starts[1:], seq.size]

        return self.once("segments", make)

    def row_sequence(self) -> np.ndarray:
        """Each row's sequence, counted 0.. in row order (read-only): the index per-sequence sums group by."""

        def make() -> np.ndarray:
            starts, ends = self.segments()
            return np.repeat(np.arange(starts.size), ends - starts)

        return self.once("row_sequence", make)

    def take(self, rows: np.ndarray) -> Sample:
        """The rows ``rows`` (a boolean mask or sorted indices), in order."""
        return replace(self, columns={k: v[rows] for k, v in self.columns.items()})

    def with_columns(self, **columns: np.ndarray) -> Sample:
        return replace(self, columns={**self.columns, **columns})

    def affine(self, side: str, alpha: np.ndarray | float, beta: np.ndarray | float) -> Sample:
        """One side's values (its logprob, its listed values, their sums) mapped to ``alpha v + beta`` per row:
        the form every value correction takes (a log base, a temperature, a kept-set renormalisation)."""
        alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (len(self),))
        beta = np.broadcast_to(np.asarray(beta, dtype=np.float64), (len(self),))
        name = "sampler_logprob" if side == "sampler" else "trainer_logprob"
        cols = {**self.columns, name: alpha * self.columns[name] + beta}
        if self.has("k_n"):
            n = cols["k_n"]
            s, ss, other = ("k_sy", "k_syy", "k_sx") if side == "sampler" else ("k_sx", "k_sxx", "k_sy")
            v, vv = cols[s], cols[ss]
            cols[ss] = alpha * alpha * vv + 2 * alpha * beta * v + beta * beta * n
            cols[s] = alpha * v + beta * n
            cols["k_sxy"] = alpha * cols["k_sxy"] + beta * cols[other]
        lists = self.lists
        if lists is not None and self.has("list_row"):
            has = self.columns["list_row"] >= 0
            r = self.columns["list_row"][has]
            lengths = lists.offsets[r + 1] - lists.offsets[r]
            at = np.repeat(lists.offsets[r], lengths) + _ranges(lengths)
            vals = (lists.y if side == "sampler" else lists.x).copy()
            vals[at] = np.repeat(alpha[has], lengths) * vals[at] + np.repeat(beta[has], lengths)
            lists = replace(lists, **{"y" if side == "sampler" else "x": vals})
        return replace(self, columns=cols, lists=lists)

    def row_lists(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, y, row index per value) of the listed values of sample rows ``rows`` that kept their lists."""
        assert self.lists is not None
        lr = self.columns["list_row"][rows]
        keep = lr >= 0
        r, owner = lr[keep], np.asarray(rows)[keep]
        lengths = self.lists.offsets[r + 1] - self.lists.offsets[r]
        at = np.repeat(self.lists.offsets[r], lengths) + _ranges(lengths)
        return self.lists.x[at], self.lists.y[at], np.repeat(owner, lengths)


def _read_only(v: T) -> T:
    """``v`` with its arrays (itself, or those in a tuple or dict, however nested) made read-only."""
    if isinstance(v, np.ndarray):
        v.flags.writeable = False
    elif isinstance(v, (tuple, dict)):
        for item in v.values() if isinstance(v, dict) else v:
            _read_only(item)
    return v


def _in_order(seq: np.ndarray, pos: np.ndarray) -> bool:
    """Whether rows are sorted by (sequence, position) already (as a run's writers write them): the stable sort
    would leave them as they are, so it and the copy of every column are skipped."""
    ds = np.diff(seq)
    return bool((ds >= 0).all() and (np.diff(pos)[ds == 0] >= 0).all())


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """0..n-1 for each n of ``lengths``, concatenated."""
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    return np.arange(total) - np.repeat(starts, lengths)


def gap_means(s: Sample) -> tuple[float | None, float | None]:
    """(k3 mean, mean |l|) of a sample; None for an empty one."""
    if not len(s):
        return None, None
    return float(np.mean(s.k3())), float(np.mean(s.abs_gap()))


@dataclass(frozen=True)
class _Part:
    """One batch's kept rows (column name -> array) and the lists of those that keep them (x, y, lengths);
    ``list_row`` counts from 0 within the batch until :meth:`SampleCollector.take` places it."""

    rows_seen: int
    columns: dict[str, np.ndarray] | None
    lists: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


class SampleCollector:
    """Keeps the sample's rows during report's pass, in any batch order, sorted at the end.

    Each batch's rows are picked by :meth:`pick`, a pure function of the batch, and kept in file order by
    :meth:`take`. As the pass's sink (:meth:`sink`) the picking runs on the worker thread that analysed the
    batch, so it costs the pass's serial fold nothing.

    ``list_group_rows``: the lists are decoded in some row groups alone (:func:`list_groups`), holding these
    rows: the list sub-sample's hash threshold is scaled to them, and a batch without lists keeps none."""

    def __init__(
        self, total_rows: int, cap: int = SAMPLE_ROWS, list_cap: int = LIST_ROWS, list_group_rows: int | None = None
    ) -> None:
        self.threshold = keep_threshold(total_rows, cap)
        listed = total_rows if list_group_rows is None else list_group_rows
        self.list_threshold = min(self.threshold, keep_threshold(listed, list_cap))
        self.some_groups = list_group_rows is not None
        self.parts: list[dict[str, np.ndarray]] = []
        self.list_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.list_rows = 0
        self.rows_seen = 0

    def sink(self) -> PickingSink:
        """The pass's sink that feeds this collector (``analysis.engine.run_plan(..., sink=)``)."""
        return PickingSink(self)

    def take(self, part: _Part) -> None:
        """One batch's picked rows, kept in the order the batches come."""
        self.rows_seen += part.rows_seen
        if part.columns is None:
            return
        if part.lists is not None:
            list_row = part.columns["list_row"]
            list_row[list_row >= 0] += self.list_rows
            self.list_rows += int(part.lists[2].size)
            self.list_parts.append(part.lists)
        self.parts.append(part.columns)

    def pick(self, batch: dict) -> _Part:
        """The rows of ``batch`` the sample keeps (a pure function of the batch: safe on any thread)."""
        seq = batch["sequence_id"]
        if self.threshold >= 1 << 32:
            idx, h = None, None
        else:
            h_all = sequence_hash(seq)
            idx = np.flatnonzero(h_all < np.uint64(self.threshold))
            if not idx.size:
                return _Part(int(seq.size), None)
            h = h_all[idx]
        part: dict[str, np.ndarray] = {}
        for name in SCALARS + OPTIONAL_SCALARS:
            if name in batch:
                v = np.asarray(batch[name])
                part[name] = v.copy() if idx is None else v[idx]
        summaries = all(name in batch for name in ROW_SUMS)
        if summaries:  # the run's summaries: the sums were kept when it was written
            part.update({k: _rows(batch[c], idx) for k, c in zip(TOPK_FIELDS, ROW_SUMS, strict=True)})
        lists = None
        if all(name in batch for name in TOPK):
            lists = self._pick_topk(batch, idx, h, part, sums=not summaries)
        elif self.some_groups:  # a row group whose lists were not decoded
            part["list_row"] = np.full(part["sequence_id"].size, -1, np.int64)
        return _Part(int(seq.size), part, lists)

    def _pick_topk(
        self, batch: dict, idx: np.ndarray | None, h: np.ndarray | None, part: dict, sums: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The lists of the rows the list sub-sample keeps; ``sums``: the per-row sums from the lists too, over
        every kept row (a run without summaries). A run with summaries has its lists gathered on the list
        sub-sample's rows alone."""
        n = int(batch["sequence_id"].size if idx is None else idx.size)
        if self.list_threshold >= 1 << 32:
            rows = np.arange(n)
        else:
            hh = sequence_hash(batch["sequence_id"]) if h is None else h
            rows = np.flatnonzero(hh < np.uint64(self.list_threshold))
        read = idx if sums else (None if idx is None and rows.size == n else rows if idx is None else idx[rows])
        y, lengths = _lists(batch[TOPK[0]], read)
        x, x_lengths = _lists(batch[TOPK[1]], read)
        list_row = np.full(n, -1, np.int64)
        part["list_row"] = list_row
        if x.size != y.size or not np.array_equal(lengths, x_lengths):
            if sums:  # misaligned lists: the report refuses them itself
                part.update({k: np.zeros(n) for k in TOPK_FIELDS})
            return None
        if sums:
            part.update(sums_of(x, y, lengths))
            starts = np.r_[0, np.cumsum(lengths)[:-1]]
            at = np.repeat(starts[rows], lengths[rows]) + _ranges(lengths[rows])
            x, y, lengths = x[at], y[at], lengths[rows]
        list_row[rows] = np.arange(rows.size)
        return x, y, lengths

    def finish(self) -> Sample:
        names = set.intersection(*(set(p) for p in self.parts)) if self.parts else set(SCALARS)
        cols = {n: np.concatenate([p[n] for p in self.parts]) if self.parts else np.zeros(0) for n in names}
        lists = None
        if self.parts and "list_row" in cols:
            lengths = np.concatenate([p[2] for p in self.list_parts]) if self.list_parts else np.zeros(0, np.int64)
            lists = TopkLists(
                np.concatenate([p[0] for p in self.list_parts]) if self.list_parts else np.zeros(0),
                np.concatenate([p[1] for p in self.list_parts]) if self.list_parts else np.zeros(0),
                np.r_[0, np.cumsum(lengths)].astype(np.int64),
            )
        if self.parts and not _in_order(cols["sequence_id"], cols["position"]):
            order = np.lexsort((cols["position"], cols["sequence_id"]))
            cols = {n: v[order] for n, v in cols.items()}
        for name in ("trainer_logprob", "sampler_logprob"):
            cols[name] = np.asarray(cols.get(name, np.zeros(0)), dtype=np.float64)
        bad_q = cols["sampler_logprob"] < SENTINEL_FLOOR
        bad = bad_q | (cols["trainer_logprob"] < SENTINEL_FLOOR)
        sample = Sample(cols, self.rows_seen, self.threshold < 1 << 32, lists)
        if bad.any():
            sample = replace(sample.take(~bad), sentinel_rows=int(bad.sum()), sentinel_sampler=int(bad_q.sum()))
        return sample


class PickingSink:
    """:class:`SampleCollector` as a pass's ``BatchSink``: rows picked on the worker threads, kept in order."""

    reads: tuple[str, ...] = ()

    def __init__(self, collector: SampleCollector) -> None:
        self.collector = collector

    def start(self, plan: object) -> None:
        """Nothing to decide: the collector was sized by the plan's rows when made."""

    def per_batch(self, tokens: BatchTokens) -> _Part:
        return self.collector.pick(tokens.batch)

    def take(self, part: object) -> None:
        assert isinstance(part, _Part)  # what per_batch made
        self.collector.take(part)

    def finish(self, result: object) -> None:
        """Nothing to do: ``SampleCollector.finish`` makes the sample when the caller asks."""
