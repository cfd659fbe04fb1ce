"""Streaming group-by over ``sequence_id``.

Rows of one sequence may be spread over batches and files. Each batch is
reduced to one partial row per sequence it touches; partials are merged by
the same reduction when they pile up and at the end. Memory therefore grows
with the number of sequences (times the number of batches a sequence is
split over), never with the number of tokens.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Op = Literal["sum", "min", "max"]
_UFUNC = {"sum": np.add, "min": np.minimum, "max": np.maximum}


def group_reduce(keys: np.ndarray, columns: dict[str, tuple[np.ndarray, Op]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Reduce aligned columns by key. Returns (sorted unique keys, reduced columns)."""
    if keys.size and np.any(keys[1:] < keys[:-1]):
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        columns = {k: (v[order], op) for k, (v, op) in columns.items()}
    if keys.size == 0:
        return keys, {k: v[:0] for k, (v, _) in columns.items()}
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    out = {k: _UFUNC[op].reduceat(v, starts) for k, (v, op) in columns.items()}
    return keys[starts], out


class SequenceAggregator:
    """Accumulates per-sequence reductions of per-token columns across batches."""

    def __init__(self, ops: dict[str, Op], compact_every: int = 4_000_000):
        self.ops = dict(ops)
        self._keys: list[np.ndarray] = []
        self._parts: dict[str, list[np.ndarray]] = {k: [] for k in ops}
        self._rows = 0
        self._compact_every = compact_every

    def add(self, keys: np.ndarray, values: dict[str, np.ndarray]) -> None:
        uk, red = group_reduce(keys, {k: (values[k], op) for k, op in self.ops.items()})
        self._keys.append(uk)
        for k in self.ops:
            self._parts[k].append(red[k])
        self._rows += uk.size
        if self._rows > self._compact_every:
            self._compact()
            self._compact_every = max(self._compact_every, 2 * self._rows)

    def _compact(self) -> None:
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.int64)
        cols = {k: (np.concatenate(self._parts[k]), op) for k, op in self.ops.items()} if self._keys else {}
        uk, red = group_reduce(keys, cols) if self._keys else (keys, {k: np.zeros(0) for k in self.ops})
        self._keys = [uk]
        self._parts = {k: [red[k]] for k in self.ops}
        self._rows = uk.size

    def result(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sorted sequence ids and one reduced value per sequence for each column."""
        self._compact()
        return self._keys[0], {k: self._parts[k][0] for k in self.ops}
