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


def group_reduce(
    keys: np.ndarray, columns: dict[str, tuple[np.ndarray, Op]]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Reduce aligned columns by key. Returns (sorted unique keys, reduced columns)."""
    g = Groups(keys)
    return g.keys, {k: g.reduce(v, op) for k, (v, op) in columns.items()}


class Groups:
    """The runs of equal keys in one batch: what every per-sequence reduction of the batch shares.

    Sorting (when the batch is not already in key order) and finding the run
    starts happen once; each column is then one ``reduceat``, and a count of
    flagged tokens per run (a rule's rejections) is a ``bincount`` over the
    flagged tokens only, which costs nothing when few are flagged.
    """

    def __init__(self, keys: np.ndarray):
        self.size = keys.size
        self.order = None
        if keys.size and np.any(keys[1:] < keys[:-1]):
            self.order = np.argsort(keys, kind="stable")
            keys = keys[self.order]
        self.starts = (
            np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1]))) if keys.size else np.zeros(0, np.intp)
        )
        self.keys = keys[self.starts]
        self._inv: np.ndarray | None = None

    @property
    def n(self) -> int:
        """number of runs (distinct keys)."""
        return self.keys.size

    def counts(self) -> np.ndarray:
        """tokens per run, as float64 (a sum like any other)."""
        return np.diff(self.starts, append=self.size).astype(np.float64)

    def reduce(self, values: np.ndarray, op: Op) -> np.ndarray:
        if self.size == 0:
            return values[:0]
        v = values if self.order is None else values[self.order]
        return _UFUNC[op].reduceat(v, self.starts)

    @property
    def inverse(self) -> np.ndarray:
        """each token's run index, in the batch's own row order."""
        if self._inv is None:
            run = np.zeros(self.size, np.intp)
            if self.size:
                run[self.starts[1:]] = 1
                np.cumsum(run, out=run)
            if self.order is not None:
                inv = np.empty_like(run)
                inv[self.order] = run
                run = inv
            self._inv = run
        return self._inv

    def count_at(self, rows: np.ndarray) -> np.ndarray:
        """per run: how many of the tokens at ``rows`` (row indices of the batch) it holds (float64)."""
        if rows.size == 0:
            return np.zeros(self.n)
        return np.bincount(self.inverse[rows], minlength=self.n).astype(np.float64)

    def count_codes(self, code: np.ndarray, n_codes: int) -> np.ndarray:
        """``[n_runs, n_codes]``: per run, how many of its tokens carry each code (0 <= code < n_codes)."""
        flat = self.inverse * n_codes + code
        return np.bincount(flat, minlength=self.n * n_codes).reshape(self.n, n_codes).astype(np.float64)


class SequenceAggregator:
    """Accumulates per-sequence reductions of per-token columns across batches."""

    def __init__(self, ops: dict[str, Op], compact_every: int = 4_000_000):
        self.ops = dict(ops)
        self._keys: list[np.ndarray] = []
        self._parts: dict[str, list[np.ndarray]] = {k: [] for k in ops}
        self._rows = 0
        self._compact_every = compact_every

    def add_reduced(self, uk: np.ndarray, red: dict[str, np.ndarray]) -> None:
        """Take one batch already reduced per key (``Groups``): one row per distinct key, every column."""
        self._keys.append(uk)
        for k in self.ops:
            self._parts[k].append(red[k])
        self._rows += uk.size
        if self._rows > self._compact_every:
            self._compact()
            self._compact_every = max(self._compact_every, 2 * self._rows)

    def _compact(self) -> None:
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.int64)
        cols: dict[str, tuple[np.ndarray, Op]] = (
            {k: (np.concatenate(self._parts[k]), op) for k, op in self.ops.items()} if self._keys else {}
        )
        uk, red = group_reduce(keys, cols) if self._keys else (keys, {k: np.zeros(0) for k in self.ops})
        self._keys = [uk]
        self._parts = {k: [red[k]] for k in self.ops}
        self._rows = uk.size

    def result(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sorted sequence ids and one reduced value per sequence for each column."""
        self._compact()
        return self._keys[0], {k: self._parts[k][0] for k in self.ops}
