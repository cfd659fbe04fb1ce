"""Per-sequence sums, for the screens that find the sequences a cause may be confined to (``Cause.screen``)."""

from __future__ import annotations

import numpy as np

from ..sample import Sample


class Sequences:
    """Each row's sequence index in the sample, and per-sequence sums of any row values."""

    def __init__(self, s: Sample) -> None:
        starts, ends = s.segments()
        self.ids = s.columns["sequence_id"][starts] if starts.size else np.zeros(0, np.int64)
        self.n = starts.size
        self.of_row = np.repeat(np.arange(self.n), ends - starts)

    def sum(self, values: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per sequence, the sum of ``values`` (given for ``rows``, or for every row)."""
        seg = self.of_row if rows is None else self.of_row[rows]
        return np.bincount(seg, weights=values, minlength=self.n)

    def count(self, rows: np.ndarray | None = None) -> np.ndarray:
        seg = self.of_row if rows is None else self.of_row[rows]
        return np.bincount(seg, minlength=self.n).astype(np.float64)
