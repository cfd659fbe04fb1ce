"""Exact quantiles of a streamed column, without sorting or partitioning all of it at the end.

``report`` prints exact ratio quantiles and score-centering quantiles, which
need every value: an estimate would not settle an argument about a 0.999
quantile. The straightforward way (concatenate, ``np.quantile``) partitions
10 million values per column after the pass, on one core, and that tail was
a quarter of a report's wall time.

Here each batch's values are also counted into 65,536 bins by the top 16 bits
of an order-preserving integer key (sign, exponent and the leading mantissa
bits, so a bin spans at most 1/16 of an octave of float64 or 1/128 of float32).
The counting happens where the batch is analysed, on a worker thread. At the
end the cumulative counts say which bin holds each wanted order statistic;
only the values of those few bins are gathered and partitioned. The result is
the same number ``np.quantile`` (linear interpolation, its default) computes
on the whole column, to the bit: the same order statistics, the same
interpolation formula (tested against ``np.quantile``).

Memory stays flat in the number of tokens: a column keeps its values up to
``KEEP_VALUES`` (96 MB of float64), plus 512 KB of counts. Past that, a
column that knows which quantiles will be asked (``expect``) narrows to a
window: the bins whose share of the values seen so far lies within
``WINDOW`` of a wanted quantile. It keeps those bins' values, and from then on
only values that fall in them. At the end, when every wanted order statistic
lies in a window bin, the window holds every value of those bins and the
selection above is exact in one pass. Otherwise (the distribution drifted
after the first ``KEEP_VALUES`` values, or the window outgrew
``KEEP_VALUES``) the column keeps only counts, and the caller makes a
second pass over the file that hands back only the values of the bins the
wanted order statistics fall in (:meth:`ExactQuantiles.covers`,
:meth:`ExactQuantiles.wanted`, :func:`select_bins`): still exact, at the cost
of reading the columns again.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .compiled import loops
from .parallel import ordered_map

BINS = 1 << 16
KEEP_VALUES = 12_000_000
"""values a column keeps before it narrows to its window: a 10-million-token report keeps its four columns in
about 200 MB."""
WINDOW = 0.004
"""half-width, in quantile terms, of the window kept around each expected quantile: 7 quantiles keep about
5-10% of a column (their bins' edges add some), so 100 million tokens keep 5-10 million values a column
(``KEEP_VALUES`` bounds it, as it bounds the values kept before)."""


_TOP_WORD = sys.byteorder == "little"
"""the top 16 bits of a float (sign, exponent, leading mantissa) are its last 16-bit word in memory on a
little-endian machine, its first on a big-endian one."""


def _bins(values: np.ndarray) -> np.ndarray:
    """Each value's bin (uint16): the top 16 bits of a signed integer key that orders like the floats do.

    Flipping the magnitude bits of negative floats makes their two's-complement
    order match their numeric order; +0.0 and -0.0 land in neighbouring bins,
    which is harmless (their order statistics are equal numbers). The top 16
    bits of that key, offset by 2^15, come from the float's own top 16 bits h
    alone: h xor 0xFFFF for a negative float, h xor 0x8000 otherwise. So the
    key is formed on one 16-bit word a value, not on the whole float.
    """
    if values.dtype == np.float64:
        words = 4
    elif values.dtype == np.float32:
        words = 2
    else:
        raise TypeError(f"exact quantiles take float32 or float64 values, not {values.dtype}")
    flat = np.ascontiguousarray(values).reshape(-1).view(np.int16)
    top = (flat[words - 1 :: words] if _TOP_WORD else flat[::words]).copy()  # contiguous: vectorised below
    key = top >> 15  # -1 for a negative float, 0 otherwise
    key |= np.int16(-0x8000)
    key ^= top
    return key.view(np.uint16).reshape(values.shape)


def _in_bins(values: np.ndarray, bins: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """The values whose bin is ``chosen`` (a boolean over the bins), in their order, as one flat array.

    ``np.take`` reads the small table about twice as fast as indexing it with the bins does, and
    ``np.compress`` keeps the few values of a window or of the wanted bins (a tenth or less) twice as fast
    as a boolean index.
    """
    return np.compress(np.take(chosen, bins).ravel(), values.ravel())


def select_bins(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The values that fall in the ``wanted`` bins (a boolean over the bins, :meth:`ExactQuantiles.wanted`)."""
    return _in_bins(values, _bins(values), wanted) if values.size else values


@dataclass
class ExactQuantiles:
    """A column's bin counts, and its values while they fit; quantiles on demand.

    Only finite values may be added (the caller drops or counts the others).
    """

    parts: list[np.ndarray] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))
    limit: int | None = None
    """values kept at most (None: ``KEEP_VALUES``); beyond, only a window's (or only the counts)."""
    complete: bool = True
    """every value is in ``parts`` (else only the window's, or those :meth:`refill` handed back, or none yet)."""
    expect: tuple[float, ...] = ()
    """the quantiles that will be asked: past ``limit`` the column keeps a window around them (none: counts only)."""
    window: np.ndarray | None = None
    """boolean over the bins whose values are all kept, once the column narrowed (None before, or never)."""
    workers: int | None = None
    """threads for the gather of :meth:`order_statistics` (None: ``parallel.default_workers``); the pass that
    filled the column sets its own."""
    _kept: int = 0
    _part_bins: list[np.ndarray] = field(default_factory=list)
    """the bins of ``parts`` (2 bytes a value), while the column keeps every value: a batch's go with it to the
    fold, and the column's serve :meth:`order_statistics` at the end; dropped where the column narrows."""

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def spawn(self) -> ExactQuantiles:
        """An empty accumulator for one batch, on another thread: it keeps only this column's window, if any.

        Filtering there instead of where batches are folded keeps that work on the threads; the folded
        values are the same either way (:meth:`merge` filters a batch that was read before the window).
        """
        return ExactQuantiles(limit=self.limit, complete=self.window is None, expect=self.expect, window=self.window)

    def add(self, values: np.ndarray) -> None:
        if values.size:
            bins = _bins(values)
            if (compiled := loops()) is not None:
                compiled.count_codes(bins, self.counts)  # no 64-bit copy of the bins, no fresh counts
            else:
                self.counts += np.bincount(bins, minlength=BINS)
            if self.window is not None:
                inside = np.take(self.window, bins).ravel()
                values, bins = np.compress(inside, values.ravel()), np.compress(inside, bins.ravel())
            self._keep([values], [bins])

    def merge(self, other: ExactQuantiles) -> None:
        """Take another accumulator's values (a batch analysed on another thread)."""
        self.counts += other.counts
        if other.complete:
            bins = other._part_bins if len(other._part_bins) == len(other.parts) else [_bins(p) for p in other.parts]
            if self.window is not None:
                window = self.window
                self._keep([_in_bins(p, b, window) for p, b in zip(other.parts, bins, strict=True)], None)
            else:
                self._keep(other.parts, bins)
        elif other.window is not None and other.window is self.window:
            self._keep(other.parts, None)  # already this column's window
        else:
            self._drop()

    def _keep(self, parts: list[np.ndarray], bins: list[np.ndarray] | None) -> None:
        """Append values (of the window's bins, once there is a window); narrow or drop past the limits."""
        if not self.complete and self.window is None:
            return
        if self.window is None and bins is not None and len(self._part_bins) == len(self.parts):
            self._part_bins.extend(bins)  # one batch's accumulator: its bins go with it to the fold
        self.parts.extend(parts)
        self._kept += sum(p.size for p in parts)
        limit = KEEP_VALUES if self.limit is None else self.limit
        if self.window is None and self._kept > limit:
            self._narrow()
        elif self.window is not None and self._kept > limit:
            self._drop()

    def _narrow(self) -> None:
        """Keep only the values of the bins near the expected quantiles (or none, when none are expected)."""
        if not self.expect:
            self._drop()
            return
        cum = np.cumsum(self.counts) / self.counts.sum()
        below = np.concatenate([[0.0], cum[:-1]])  # the share of values in lower bins
        window = np.zeros(BINS, bool)
        for q in self.expect:
            window |= (cum >= q - WINDOW) & (below <= q + WINDOW)  # empty bins too: later values may land there
        self.parts = [_in_bins(p, _bins(p), window) for p in self.parts]
        self.window, self.complete, self._part_bins = window, False, []
        self._kept = sum(p.size for p in self.parts)
        if self._kept > (KEEP_VALUES if self.limit is None else self.limit):
            self._drop()

    def _drop(self) -> None:
        self.parts, self._part_bins, self._kept, self.complete, self.window = [], [], 0, False, None

    def covers(self, qs) -> bool:
        """Whether the values kept answer the quantiles ``qs`` exactly, without a second pass."""
        if self.complete:
            return True
        return self.window is not None and not (self.wanted(qs) & ~self.window).any()

    def start_refill(self) -> None:
        """Before a second pass: forget what was kept (:meth:`refill` hands back every value needed)."""
        self._drop()

    def _ranks(self, qs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """numpy's "linear" method, step by step: the ranks of both neighbours and the weight, per quantile."""
        n = self.n
        qs = np.asarray(qs, dtype=np.float64)
        virtual = (n - 1) * qs
        prev_f = np.floor(virtual)
        gamma = virtual - prev_f
        prev = prev_f.astype(np.int64)
        nxt = prev + 1
        top = virtual >= n - 1
        prev[top] = nxt[top] = n - 1
        return prev, nxt, gamma

    def wanted(self, qs) -> np.ndarray:
        """Boolean over the bins: those holding an order statistic the quantiles ``qs`` need."""
        prev, nxt, _ = self._ranks(qs)
        out = np.zeros(BINS, bool)
        out[np.searchsorted(np.cumsum(self.counts), np.concatenate([prev, nxt]), side="right")] = True
        return out

    def refill(self, selected: np.ndarray) -> None:
        """Second pass: take back one batch's values of the wanted bins (:func:`select_bins`), in file order."""
        if selected.size:
            self.parts.append(selected)

    def order_statistics(self, ranks: np.ndarray) -> np.ndarray:
        """The values at 0-based ``ranks`` of the sorted column (float64).

        Needs every value, or (after a second pass) every value of the bins holding these ranks.
        """
        ranks = np.asarray(ranks, dtype=np.int64)
        cum = np.cumsum(self.counts)
        bin_of = np.searchsorted(cum, ranks, side="right")  # the first bin whose cumulative count passes the rank
        targets = np.unique(bin_of)
        wanted = np.zeros(BINS, bool)
        wanted[targets] = True
        bins = self._part_bins if len(self._part_bins) == len(self.parts) else [None] * len(self.parts)

        def gather(part: tuple[np.ndarray, np.ndarray | None]) -> np.ndarray:
            values, b = part
            return _in_bins(values, _bins(values) if b is None else b, wanted)

        # the gather reads every value kept (tens of millions) after the pass, when a core is otherwise idle
        parts = zip(self.parts, bins, strict=True)
        chosen = np.concatenate(list(ordered_map(gather, parts, self.workers))) if self.parts else np.zeros(0)
        if chosen.size != int(self.counts[targets].sum()):
            raise RuntimeError(
                "exact quantiles: the values of the wanted bins are not all here (a second pass is missing)"
            )
        # ``chosen`` holds the target bins' values; a bin's values follow those of every lower target bin
        start_in_chosen = np.cumsum(self.counts[targets]) - self.counts[targets]
        start_in_all = cum[targets] - self.counts[targets]
        t = np.searchsorted(targets, bin_of)
        local = ranks - start_in_all[t] + start_in_chosen[t]
        chosen.partition(np.unique(local))
        return chosen[local].astype(np.float64)

    def quantiles(self, qs, transform: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """``np.quantile(transform(column), qs)`` (linear interpolation) for an increasing ``transform``."""
        if self.n == 0:
            raise ValueError("no values")
        prev, nxt, gamma = self._ranks(qs)
        stats = self.order_statistics(np.concatenate([prev, nxt]))
        with np.errstate(over="ignore", invalid="ignore"):  # exp of a log-ratio of ~710 or more is inf: say so
            if transform is not None:
                stats = transform(stats)
            k = prev.size
            a, b = stats[:k], stats[k:]
            diff = b - a
            out = a + diff * gamma
            high = gamma >= 0.5
            out[high] = (b - diff * (1 - gamma))[high]
            out[np.isposinf(b) & (gamma > 0)] = np.inf  # a step of any length towards +inf: +inf
            out[np.isneginf(a) & (gamma < 1)] = -np.inf
        # a quantile at a rank (gamma 0), or between two equal neighbours, is that value; with an infinite
        # neighbour the arithmetic would make it NaN (inf * 0, inf - inf). Finite values are unchanged to the bit.
        return np.where((gamma == 0) | (a == b), a, out)
