"""Two top-k expert sets compared without a per-row sort: each row's k ids sorted by a sorting network.

A token flips at an MoE layer when the sampler's top-k *set* differs from
the trainer's. Sorting each row's k ids makes equal sets equal column by
column; with contiguous columns a sorting network does that in a few dozen
vectorised min/max calls per batch. A side's entry that is all zeros is a
missing capture (engines zero-fill what they failed to write), never expert 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

_NETWORK_MAX_K = 32
"""up to this top-k the columns are sorted by a network; beyond it by ``np.sort``."""


@cache
def sorting_network(k: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort comparators for ``k`` inputs (the power of two above, cut to ``k``).

    A comparator that touches a padding input never swaps (the padding is
    larger than every id), so it is simply left out.
    """
    n = 1
    while n < k:
        n *= 2
    pairs: list[tuple[int, int]] = []

    def merge(lo: int, hi: int, r: int) -> None:
        step = r * 2
        if step < hi - lo:
            merge(lo, hi, step)
            merge(lo + r, hi, step)
            pairs.extend((i, i + r) for i in range(lo + r, hi - r, step))
        else:
            pairs.append((lo, lo + r))

    def sort(lo: int, hi: int) -> None:
        if hi - lo >= 1:
            mid = lo + (hi - lo) // 2
            sort(lo, mid)
            sort(mid + 1, hi)
            merge(lo, hi, 1)

    sort(0, n - 1)
    return tuple((i, j) for i, j in pairs if j < k)


def sorted_columns(ids: np.ndarray) -> list[np.ndarray]:
    """``ids`` ``[M, k]`` -> its k columns, each row's values sorted ascending across them."""
    k = ids.shape[1]
    if k > _NETWORK_MAX_K:
        s = np.sort(ids, axis=1)
        return [s[:, j] for j in range(k)]
    cols = list(np.ascontiguousarray(ids.T))  # one transposing copy: each column contiguous for the min/max calls
    for i, j in sorting_network(k):
        lo = np.minimum(cols[i], cols[j])
        np.maximum(cols[i], cols[j], out=cols[j])
        cols[i] = lo
    return cols


@dataclass
class SideIds:
    """One side's ids of a batch at the MoE layers: sorted columns ``k x [rows * moe]`` and what is missing."""

    cols: list[np.ndarray]
    missing: np.ndarray
    """``[rows, moe]``: null row, null entry or all-zero entry."""


def sort_side(ids: np.ndarray) -> tuple[SideIds, tuple[int, int] | None]:
    """``ids`` ``[rows, moe, k]`` (>= 0; all zeros where nothing was captured) -> sorted columns and missing entries,
    and the first ``(row, MoE-layer ordinal)`` that names an expert twice (None when none does)."""
    rows, n_moe, k = ids.shape
    cols = sorted_columns(ids.reshape(-1, k))
    missing = cols[-1] == 0  # ids are >= 0: the largest is 0 only when all are (or nothing was written)
    dup = np.zeros_like(missing)
    for a, b in zip(cols[:-1], cols[1:], strict=False):
        dup |= a == b
    dup &= ~missing
    first = None
    if dup.any():
        first = divmod(int(np.flatnonzero(dup)[0]), n_moe)
    return SideIds(cols, missing.reshape(rows, n_moe)), first


def compare_sides(a: SideIds, b: SideIds) -> tuple[np.ndarray, np.ndarray]:
    """``[rows, moe]`` (compared: both sides captured; flipped: compared and the two top-k sets differ)."""
    compared = ~(a.missing | b.missing)
    differ = np.zeros(compared.size, bool)
    for x, y in zip(a.cols, b.cols, strict=True):
        differ |= x != y
    return compared, differ.reshape(compared.shape) & compared
