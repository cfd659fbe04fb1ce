"""Exact detection of duplicate (sequence_id, position) rows, in flat memory.

A token read twice (a shard copied into the folder twice, two runs that share
sequence ids) silently doubles its weight in every number. Counts and sums
cannot catch every case: positions 0..8 with 1, 5, 6 replaced by 2, 3, 7 keep
the count, the span, the sum (36) and the sum of squares (204) of a clean
sequence. So the check here is exact: each batch is reduced to runs of
consecutive positions per sequence ``[start, end)``, and the runs of all
batches are sorted and merged now and then; two runs of one sequence that
overlap hold a duplicate, and the first overlapping position is named.

Memory grows with the number of runs, not tokens: a sequence written in
order is one run (one per batch it spans), 24 bytes each. Only positions with
gaps at every other token would cost per token, and merging keeps even that
to the distinct runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DuplicatePositionError

COMPACT_RUNS = 1 << 20
"""merge the collected runs once this many are pending (bounds memory between merges)."""


def position_runs(sequence_id: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One batch as runs of consecutive positions per sequence: (sequence, start, end) arrays; None when empty.

    A duplicate inside the batch raises here; duplicates across batches are found when runs merge.
    """
    n = sequence_id.size
    if n == 0:
        return None
    seq, pos = sequence_id.astype(np.int64, copy=False), position.astype(np.int64, copy=False)
    ds, dp = np.diff(seq), np.diff(pos)
    if not ((ds > 0) | ((ds == 0) & (dp > 0))).all():  # not already in (sequence, position) order
        order = np.lexsort((pos, seq))
        seq, pos = seq[order], pos[order]
        ds, dp = np.diff(seq), np.diff(pos)
    dup = (ds == 0) & (dp == 0)
    if dup.any():
        i = int(np.flatnonzero(dup)[0]) + 1
        raise DuplicatePositionError(int(seq[i]), int(pos[i]))
    brk = np.flatnonzero((ds != 0) | (dp != 1))
    first = np.concatenate(([0], brk + 1))
    last = np.concatenate((brk, [n - 1]))
    return seq[first], pos[first], pos[last] + 1


@dataclass
class PositionRuns:
    """The merged runs: per sequence (sorted), how many runs and where the first starts."""

    sequence_id_S: np.ndarray
    runs_S: np.ndarray
    first_position_S: np.ndarray


class PositionTracker:
    """Feed every batch's ``sequence_id`` and ``position``; :meth:`finish` raises on any duplicate."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending = 0

    def add(self, sequence_id: np.ndarray, position: np.ndarray) -> None:
        self.add_runs(position_runs(sequence_id, position))

    def add_runs(self, runs: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        """Take one batch's runs from :func:`position_runs` (computed wherever the batch was analysed)."""
        if runs is None:
            return
        self._parts.append(runs)
        self._pending += runs[0].size
        if self._pending >= COMPACT_RUNS:
            self._compact()

    def _compact(self) -> None:
        if not self._parts:
            return
        seq = np.concatenate([p[0] for p in self._parts])
        start = np.concatenate([p[1] for p in self._parts])
        end = np.concatenate([p[2] for p in self._parts])
        order = np.lexsort((start, seq))
        seq, start, end = seq[order], start[order], end[order]
        same = seq[1:] == seq[:-1]
        # Runs sorted by start and disjoint so far have increasing ends, so the first
        # run that starts before its predecessor ends is the first overlap.
        overlap = same & (start[1:] < end[:-1])
        if overlap.any():
            i = int(np.flatnonzero(overlap)[0]) + 1
            raise DuplicatePositionError(int(seq[i]), int(start[i]))
        joins = same & (start[1:] == end[:-1])
        head = np.concatenate(([True], ~joins))
        tail = np.concatenate((~joins, [True]))
        self._parts = [(seq[head], start[head], end[tail])]
        self._pending = 0

    def finish(self) -> PositionRuns:
        self._compact()
        if not self._parts:
            empty = np.zeros(0, dtype=np.int64)
            return PositionRuns(empty, empty, empty)
        seq, start, _ = self._parts[0]
        ids, first, counts = np.unique(seq, return_index=True, return_counts=True)
        return PositionRuns(ids, counts, start[first])
