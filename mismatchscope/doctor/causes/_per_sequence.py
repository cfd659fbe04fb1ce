"""Per-sequence sums, for the screens that find the sequences a cause may be confined to (``Cause.screen``)."""

from __future__ import annotations

import numpy as np

from ..sample import Sample


class Sequences:
    """Each row's sequence index in the sample, and per-sequence sums of any row values.

    Sums over a subset of rows take the subset's sequence index (:meth:`of`) once for all the sums over it: the
    gather costs as much as a sum.
    """

    def __init__(self, s: Sample) -> None:
        starts, ends = s.segments()
        self.ids = s.columns["sequence_id"][starts] if starts.size else np.zeros(0, np.int64)
        self.n = starts.size
        self.of_row = s.row_sequence()
        self.lengths = ends - starts

    def of(self, rows: np.ndarray | None) -> np.ndarray:
        """The sequence index of ``rows`` (None: every row), to pass as ``seg`` to :meth:`sum` and :meth:`count`."""
        return self.of_row if rows is None else self.of_row[rows]

    def sum(self, values: np.ndarray, rows: np.ndarray | None = None, seg: np.ndarray | None = None) -> np.ndarray:
        """Per sequence, the sum of ``values`` (given for ``rows``, or for every row; ``seg``: their index)."""
        return np.bincount(self.of(rows) if seg is None else seg, weights=values, minlength=self.n)

    def count(self, rows: np.ndarray | None = None, seg: np.ndarray | None = None) -> np.ndarray:
        if rows is None and seg is None:
            return self.lengths.astype(np.float64)
        return np.bincount(self.of(rows) if seg is None else seg, minlength=self.n).astype(np.float64)


def sequences(s: Sample) -> Sequences:
    """The sample's :class:`Sequences`, made once per sample (every screen groups by them)."""
    return s.once("sequences", lambda: Sequences(s))
