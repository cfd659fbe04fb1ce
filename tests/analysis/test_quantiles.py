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
        lambda plan, stats, workers: (
            passes.extend(name for name, acc in stats.quantile_columns().items() if not acc.covers(RATIO_QUANTILES)),
            narrowed.extend(name for name, acc in stats.quantile_columns().items() if acc.window is not None),
            real(plan, stats, workers),
        ),
    )
    windowed = analyse(str(tmp_path / "p.parquet"), req).report
    assert narrowed == ["log_ratio"] and passes == []
    assert windowed == kept


def test_quantiles_are_numpys_to_the_bit():
    # the binned selection must return exactly np.quantile's linear interpolation, ties and zeros included
    from mismatchscope.analysis.quantiles import ExactQuantiles

    rng = np.random.default_rng(7)
    qs = (0.0, 0.001, 0.01, 0.05, 0.25, 0.5, 0.95, 0.99, 0.999, 1.0)
    for trial in range(60):
        n = int(rng.integers(1, 4000))
        v = [
            rng.normal(0, 1e-3, n),
            np.round(rng.normal(0, 1, n), 1),
            np.where(rng.random(n) < 0.6, 0.0, rng.normal(0, 1e-2, n)),
            -rng.exponential(5.0, n),
        ][trial % 4]
        if trial % 5 == 0:
            v = v.astype(np.float32)
        e = ExactQuantiles()
        for part in np.array_split(v, int(rng.integers(1, 6))):
            e.add(part)
        assert np.array_equal(e.quantiles(qs), np.quantile(v.astype(np.float64), qs)), trial
        if v.dtype == np.float64:
            assert np.array_equal(e.quantiles(qs, np.exp), np.quantile(np.exp(v), qs)), trial


def test_quantile_bins_by_hand():
    # a value's bin is the top 16 bits of its order-preserving key plus 2^15: 1.0 is 0x3FF0..., a
    # non-negative float keeps its bits (0x3FF0 + 0x8000 = 0xBFF0); -1.0 is 0xBFF0... and a negative
    # float flips its magnitude bits (0xBFF0 ^ 0x7FFF = 0xC00F, i.e. -16369, + 32768 = 0x400F)
    from mismatchscope.analysis.quantiles import _bins

    v = np.array([1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, 2.0, -2.0])
    assert _bins(v).tolist() == [0xBFF0, 0x400F, 0x8000, 0x7FFF, 0xFFF0, 0x000F, 0xC000, 0x3FFF]
    assert _bins(v.astype(np.float32)).tolist() == [0xBF80, 0x407F, 0x8000, 0x7FFF, 0xFF80, 0x007F, 0xC000, 0x3FFF]
    assert _bins(v[::2]).tolist() == [0xBFF0, 0x8000, 0xFFF0, 0xC000]  # a strided view: the same bins
    s = np.sort(np.random.default_rng(0).normal(0, 1e3, 5000))
    assert (np.diff(_bins(s).astype(np.int64)) >= 0).all()  # bins order like the values


def test_exact_quantiles_past_the_memory_cap_take_a_second_pass(tmp_path, monkeypatch):
    # a column that outgrows its cap keeps only bin counts, and a second pass hands back the values of
    # the bins the quantiles need: the report's quantiles must not change by one bit
    import mismatchscope.analysis.quantiles as quantiles
    from mismatchscope.analysis.topk import REST_EPS  # noqa: F401 - the top-k path must run too

    rng = np.random.default_rng(5)
    cols = random_pairs(rng, n_seq=60, max_len=40)
    n = len(cols["sequence_id"])
    k = 4
    top = np.log(rng.dirichlet(np.ones(k + 1), n)[:, :k])
    cols["sampler_topk_ids"] = rng.integers(0, 1000, (n, k)).tolist()
    cols["sampler_topk_logprobs"] = top.tolist()
    cols["trainer_logprobs_at_sampler_topk"] = np.minimum(top + rng.normal(0, 0.1, (n, k)), 0.0).tolist()
    cols["trainer_topk_ids"] = rng.integers(0, 1000, (n, k)).tolist()
    pq.write_table(pa.table(cols), tmp_path / "p.parquet")
    req = AnalysisRequest(report=True, batch_rows=64)
    kept = analyse(str(tmp_path / "p.parquet"), req).report
    monkeypatch.setattr(quantiles, "KEEP_VALUES", 100)  # n is over 1,000 tokens: every column overflows
    calls = []
    real = quantiles.ExactQuantiles.refill
    monkeypatch.setattr(quantiles.ExactQuantiles, "refill", lambda self, v: (calls.append(v.size), real(self, v)))
    refilled = analyse(str(tmp_path / "p.parquet"), req).report
    assert calls and sum(calls) < 5 * n  # a second pass ran, and kept only a few bins' values
    assert refilled.metrics.ratio_quantiles == kept.metrics.ratio_quantiles
    assert refilled.score_centering == kept.score_centering
    assert refilled == kept
