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

from .parallel import trim_heap

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
    """Accumulates per-sequence reductions of per-token columns across batches.

    Each batch arrives reduced to one row per sequence it touches (``Groups``); its columns are kept
    as one block ``[column, row]``, grouped by reduction, so a pass holds about one float per sequence
    and column in a few hundred large allocations. The final reduction (and one whenever the rows pile
    up past ``compact_every``) is the same ``reduceat`` over the same runs of equal keys as one call
    over everything, so the numbers do not depend on how it is split. When the keys arrive in order
    (a file sorted by sequence, as every writer of the format writes it) it goes through the blocks a
    chunk of runs at a time, freeing each chunk's blocks and handing their pages back to the kernel
    before the next, so the peak is the result plus one chunk, not the result twice.
    """

    def __init__(self, ops: dict[str, Op], compact_every: int = 4_000_000):
        self.ops = dict(ops)
        self._names = [k for op in _UFUNC for k, o in self.ops.items() if o == op]
        bounds = np.cumsum([0] + [sum(o == op for o in self.ops.values()) for op in _UFUNC])
        self._rows_of = {
            op: slice(int(lo), int(hi)) for op, lo, hi in zip(_UFUNC, bounds[:-1], bounds[1:], strict=True) if hi > lo
        }
        self._keys: list[np.ndarray] = []
        self._blocks: list[np.ndarray] = []
        self._rows = 0
        self._compact_every = compact_every

    def add_reduced(self, uk: np.ndarray, red: dict[str, np.ndarray]) -> None:
        """Take one batch already reduced per key (``Groups``): one row per distinct key, every column."""
        block = np.empty((len(self._names), uk.size))
        for i, k in enumerate(self._names):
            block[i] = red[k]
        self._keys.append(uk)
        self._blocks.append(block)
        self._rows += uk.size
        if self._rows > self._compact_every:
            self._compact()
            self._compact_every = max(self._compact_every, 2 * self._rows)

    def _compact(self) -> None:
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.int64)
        self._keys = []
        if keys.size and np.any(keys[1:] < keys[:-1]):
            g = Groups(keys)
            values = np.concatenate(self._blocks, axis=1)
            self._blocks = []
            out = self._reduce(values[:, g.order], g.starts)
            keys = g.keys
        else:
            starts = _run_starts(keys)
            out = self._reduce_in_order(starts, keys.size)
            keys = keys[starts]
        self._keys, self._blocks, self._rows = [keys], [out], keys.size

    def _reduce(self, values: np.ndarray, starts: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Each row of ``values`` reduced over the runs beginning at ``starts`` by its column's reduction."""
        if out is None:
            out = np.empty((len(self._names), starts.size))
        if starts.size:
            for op, rows in self._rows_of.items():
                _UFUNC[op].reduceat(values[rows], starts, axis=1, out=out[rows])
        return out

    def _reduce_in_order(self, starts: np.ndarray, n_rows: int) -> np.ndarray:
        """:meth:`_reduce` of the blocks in order, whose keys never decrease, a chunk of whole runs at a time."""
        out = np.empty((len(self._names), starts.size))
        pending: list[np.ndarray] = []
        first, end = 0, 0  # the rows of ``pending``: [first, end), ``first`` a run start
        blocks, self._blocks = self._blocks, []
        blocks.reverse()  # popped from the end in file order, so each block is freed once reduced
        while blocks:
            block = blocks.pop()
            pending.append(block)
            end += block.shape[1]
            del block
            if end - first < CHUNK_ROWS and blocks:
                continue
            cut = end if not blocks else int(starts[np.searchsorted(starts, end, side="right") - 1])
            if cut <= first:  # one run spans every pending row: it goes on
                continue
            values = pending[0] if len(pending) == 1 else np.concatenate(pending, axis=1)
            pending.clear()
            lo, hi = np.searchsorted(starts, [first, cut])
            self._reduce(values[:, : cut - first], starts[lo:hi] - first, out[:, lo:hi])
            if cut < end:
                pending.append(values[:, cut - first :].copy())
            del values
            first = cut
            trim_heap()
        return out

    def result(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sorted sequence ids and one reduced value per sequence for each column."""
        self._compact()
        out, row = self._blocks[0], {k: i for i, k in enumerate(self._names)}
        return self._keys[0], {k: out[row[k]] for k in self.ops}


CHUNK_ROWS = 1 << 16
"""rows of per-batch partials the in-order final reduction takes at a time (2 MB a column)."""


def _run_starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal keys begins, in keys that never decrease."""
    if not keys.size:
        return np.zeros(0, np.intp)
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
