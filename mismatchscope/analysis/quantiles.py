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

Memory is what keeping the column costs anyway (8 bytes a float64 token, 4 a
float32 one) plus 512 KB of counts per column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

BINS = 1 << 16


def _bins(values: np.ndarray) -> np.ndarray:
    """Each value's bin: the top 16 bits of a signed integer key that orders like the floats do.

    Flipping the magnitude bits of negative floats makes their two's-complement
    order match their numeric order; +0.0 and -0.0 land in neighbouring bins,
    which is harmless (their order statistics are equal numbers).
    """
    if values.dtype == np.float64:
        bits = values.view(np.int64)
        key = bits ^ ((bits >> 63) & np.int64(0x7FFF_FFFF_FFFF_FFFF))
        return (key >> 48).astype(np.intp) + (BINS >> 1)
    if values.dtype == np.float32:
        bits = values.view(np.int32)
        key = bits ^ ((bits >> 31) & np.int32(0x7FFF_FFFF))
        return (key >> 16).astype(np.intp) + (BINS >> 1)
    raise TypeError(f"exact quantiles take float32 or float64 values, not {values.dtype}")


@dataclass
class ExactQuantiles:
    """A column's values, kept batch by batch with their bin counts; quantiles on demand.

    Only finite values may be added (the caller drops or counts the others).
    """

    parts: list[np.ndarray] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))

    @property
    def n(self) -> int:
        return int(sum(p.size for p in self.parts))

    def add(self, values: np.ndarray) -> None:
        if values.size:
            self.parts.append(values)
            self.counts += np.bincount(_bins(values), minlength=BINS)

    def merge(self, other: "ExactQuantiles") -> None:
        """Take another accumulator's values (a batch analysed on another thread)."""
        self.parts.extend(other.parts)
        self.counts += other.counts

    def order_statistics(self, ranks: np.ndarray) -> np.ndarray:
        """The values at 0-based ``ranks`` of the sorted column (float64)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        cum = np.cumsum(self.counts)
        bin_of = np.searchsorted(cum, ranks, side="right")  # the first bin whose cumulative count passes the rank
        targets = np.unique(bin_of)
        wanted = np.zeros(BINS, bool)
        wanted[targets] = True
        chosen = np.concatenate([p[wanted[_bins(p)]] for p in self.parts])
        # ``chosen`` holds the target bins' values; a bin's values follow those of every lower target bin
        start_in_chosen = np.cumsum(self.counts[targets]) - self.counts[targets]
        start_in_all = cum[targets] - self.counts[targets]
        t = np.searchsorted(targets, bin_of)
        local = ranks - start_in_all[t] + start_in_chosen[t]
        chosen.partition(np.unique(local))
        return chosen[local].astype(np.float64)

    def quantiles(self, qs, transform: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """``np.quantile(transform(column), qs)`` (linear interpolation) for an increasing ``transform``."""
        n = self.n
        if n == 0:
            raise ValueError("no values")
        qs = np.asarray(qs, dtype=np.float64)
        virtual = (n - 1) * qs  # numpy's "linear" method, step by step, so the result is its result to the bit
        prev_f = np.floor(virtual)
        gamma = virtual - prev_f
        prev = prev_f.astype(np.int64)
        nxt = prev + 1
        top = virtual >= n - 1
        prev[top] = nxt[top] = n - 1
        stats = self.order_statistics(np.concatenate([prev, nxt]))
        if transform is not None:
            stats = transform(stats)
        a, b = stats[: qs.size], stats[qs.size:]
        diff = b - a
        out = a + diff * gamma
        high = gamma >= 0.5
        out[high] = (b - diff * (1 - gamma))[high]
        return out
