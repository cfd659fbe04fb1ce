"""Exact quantiles past the memory cap, in one pass: the window kept around the expected quantiles.

A column that outgrows ``KEEP_VALUES`` keeps only the bins near the quantiles
it will be asked for. When every wanted order statistic lies in those bins the
answer must be ``np.quantile``'s to the bit with no second pass; when the
distribution moves away from the window, the column must say so (``covers``
False), so that the caller reads the file again instead of answering wrong.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchscope.analysis.engine import AnalysisRequest, analyse
from mismatchscope.analysis.quantiles import ExactQuantiles
from mismatchscope.analysis.tokenstats import RATIO_QUANTILES
from tests.helpers import random_pairs


def _fold(parts: list[np.ndarray], limit: int) -> ExactQuantiles:
    """Parts analysed as a pass does: each by a spawned accumulator, folded in order."""
    total = ExactQuantiles(limit=limit, expect=RATIO_QUANTILES)
    for p in parts:
        one = total.spawn()
        one.add(p)
        total.merge(one)
    return total


def test_a_stationary_column_is_answered_from_its_window_to_the_bit():
    rng = np.random.default_rng(3)
    v = rng.normal(0, 1e-2, 200_000)
    e = _fold(np.array_split(v, 50), limit=60_000)
    # 60,000 values seen when it narrows; 7 quantiles keep about 0.8% each and their bins a little more
    assert not e.complete and e.window is not None
    assert sum(p.size for p in e.parts) < 30_000
    assert e.covers(RATIO_QUANTILES)
    assert np.array_equal(e.quantiles(RATIO_QUANTILES), np.quantile(v, RATIO_QUANTILES))


def test_a_column_that_drifts_out_of_its_window_asks_for_a_second_pass():
    # the first 60,000 values sit near 0, the rest near 5: the median lands far from where the window was
    rng = np.random.default_rng(4)
    v = np.concatenate([rng.normal(0, 1e-2, 60_000), rng.normal(5, 1e-2, 140_000)])
    e = _fold(np.array_split(v, 50), limit=60_000)
    assert not e.covers(RATIO_QUANTILES)


def test_the_report_past_the_cap_is_the_report_under_it_in_one_pass(tmp_path, monkeypatch):
    import mismatchscope.analysis.engine as engine
    import mismatchscope.analysis.quantiles as quantiles

    rng = np.random.default_rng(5)
    cols = random_pairs(rng, n_seq=200, max_len=60)
    pq.write_table(pa.table(cols), tmp_path / "p.parquet")
    req = AnalysisRequest(report=True, batch_rows=256)
    kept = analyse(str(tmp_path / "p.parquet"), req).report
    n = len(cols["sequence_id"])
    monkeypatch.setattr(quantiles, "KEEP_VALUES", n // 2)  # the column narrows halfway through
    passes, narrowed = [], []
    real = engine._refill_quantiles
    monkeypatch.setattr(
        engine,
        "_refill_quantiles",
        lambda source, columns, rows, stats, workers: (
            passes.extend(name for name, acc in stats.quantile_columns().items() if not acc.covers(RATIO_QUANTILES)),
            narrowed.extend(name for name, acc in stats.quantile_columns().items() if acc.window is not None),
            real(source, columns, rows, stats, workers),
        ),
    )
    windowed = analyse(str(tmp_path / "p.parquet"), req).report
    assert narrowed == ["log_ratio"] and passes == []
    assert windowed == kept
