"""The per-sequence reduction gives the same sums however the rows are split into batches."""

from __future__ import annotations

import numpy as np


def test_the_per_sequence_reduction_does_not_depend_on_how_it_is_split(monkeypatch):
    # per-batch partials folded by SequenceAggregator, reduced a few runs at a time (keys in order) or
    # all at once (keys out of order), must equal one reduceat over every partial sorted stably by key,
    # bit for bit: sums (whose order of addition shows in the last bits), minima and maxima, runs
    # spread over many batches, empty batches
    from mismatchscope.analysis import grouping
    from mismatchscope.analysis.grouping import Op, SequenceAggregator, group_reduce

    monkeypatch.setattr(grouping, "CHUNK_ROWS", 7)
    rng = np.random.default_rng(5)
    ops: dict[str, Op] = {"a": "sum", "lo": "min", "b": "sum", "hi": "max"}
    for trial in range(40):
        in_order = trial % 2 == 0
        n = int(rng.integers(0, 400))
        keys = np.sort(rng.integers(0, 30, n)) if in_order else rng.integers(0, 30, n)
        vals = {k: rng.normal(0, 1, n) * 10.0 ** rng.integers(-8, 8, n) for k in ops}
        agg = SequenceAggregator(ops)
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 80))))
        batch_keys, batch_vals = [], {k: [] for k in ops}
        for rows in np.split(np.arange(n), cuts):
            uk, red = group_reduce(keys[rows], {k: (vals[k][rows], op) for k, op in ops.items()})
            agg.add_reduced(uk, red)
            batch_keys.append(uk)
            for k in ops:
                batch_vals[k].append(red[k])
        want_keys, want = group_reduce(
            np.concatenate(batch_keys), {k: (np.concatenate(batch_vals[k]), op) for k, op in ops.items()}
        )
        got_keys, got = agg.result()
        assert np.array_equal(got_keys, want_keys), trial
        for k in ops:
            assert got[k].tobytes() == want[k].tobytes(), (trial, k)
