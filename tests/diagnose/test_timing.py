"""Throughput: timing ratios from interleaved rounds, by hand."""

from __future__ import annotations

import pytest


def test_timing_ratios_by_hand():
    """Rounds of 100 tokens; the other side costs 0.01 s a token on both. Baseline 2 s, variant 1 s: (0.02 + 0.01)
    / (0.01 + 0.01) = 1.5; 4 s and 2 s: 0.05 / 0.03 = 1.667; 2 s and 2 s: 1. Median 1.5. Its bootstrap interval:
    a resample's median is 1 when at least two of its three draws are (3 (1/3)^2 (2/3) + (1/3)^3 = 7/27 of
    resamples, above 2.5%), 1.667 likewise: so 1 to 1.667, wider than 1.25x: not rankable. Rounds alternate
    baseline, variant, baseline, ..."""
    from mismatchscope.diagnose.timing import MIN_ROUNDS, SLOW_MIN_ROUNDS, Round, interleave, summarize

    s = summarize(
        [(Round(2, 100), Round(1, 100)), (Round(4, 100), Round(2, 100)), (Round(2, 100), Round(2, 100))],
        "sampler",
        0.01,
    )
    assert s.ratios == pytest.approx([1.5, 5 / 3, 1.0])
    assert (s.median, s.low, s.high) == pytest.approx((1.5, 1.0, 5 / 3))
    assert s.rankable is False and s.rounds == 3
    steady = summarize([(Round(2, 100), Round(1, 100))] * 3, "sampler", 0.0)
    assert steady.median == pytest.approx(2.0) and steady.rankable is True
    calls = []

    def side(name, seconds):
        def one():
            calls.append(name)
            return Round(seconds, 10)

        return one

    pairs = interleave(side("b", 1.0), side("v", 2.0))  # 3 s a pair, over the 6 s budget after 2: the minimum
    assert len(pairs) == MIN_ROUNDS and calls == ["b", "v"] * MIN_ROUNDS
    calls.clear()
    pairs = interleave(side("b", 1.0), side("v", 30.0))  # a variant this slow: the smaller minimum
    assert len(pairs) == SLOW_MIN_ROUNDS and calls == ["b", "v"] * SLOW_MIN_ROUNDS
    calls.clear()
    assert len(interleave(side("b", 0.1), side("v", 0.1))) == 30  # short rounds: up to the most rounds
