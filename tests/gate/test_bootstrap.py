"""The gate's bootstrap by hand: intervals from order statistics, seeded and blocked by sequence, infinities kept."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope.gate.bootstrap import interval, resample_sums, safe_ratio


def test_identical_sequences_give_a_zero_width_interval():
    # every row is (n=2, sum_tv=0.02): any resample of S=5 rows sums to (10, 0.1): the mean is 0.01 in every replicate
    X = np.tile([[2.0, 0.02]], (5, 1))
    S_B = resample_sums(X, 200, np.random.default_rng(0))
    assert np.allclose(S_B, [10.0, 0.1])
    lo, hi = interval(S_B[:, 1] / S_B[:, 0], 0.95)
    assert lo == pytest.approx(0.01) and hi == pytest.approx(0.01)


def test_two_sequence_bootstrap_by_hand():
    # sequence A: n=1, sum_tv=0.1; sequence B: n=3, sum_tv=0.9. A resample of 2 draws is
    #   (A, A) with probability 1/4 -> 0.2 / 2 = 0.1
    #   (A, B) with probability 1/2 -> 1.0 / 4 = 0.25
    #   (B, B) with probability 1/4 -> 1.8 / 6 = 0.3
    X = np.array([[1.0, 0.1], [3.0, 0.9]])
    S_B = resample_sums(X, 4000, np.random.default_rng(1))
    assert set(np.round(S_B[:, 0])) == {
        2.0,
        4.0,
        6.0,
    }  # always 2 draws: n = 2, 4 or 6 tokens, each seen in 4000 resamples
    means = S_B[:, 1] / S_B[:, 0]
    values, counts = np.unique(np.round(means, 12), return_counts=True)
    assert values.tolist() == [0.1, 0.25, 0.3]
    assert counts / 4000 == pytest.approx([0.25, 0.5, 0.25], abs=0.03)  # binomial sd ~0.008
    # the 95% interval is the 2.5th and 97.5th percentile replicate: the two extremes
    assert interval(means, 0.95) == pytest.approx((0.1, 0.3))


def test_bootstrap_is_seeded_and_blocked_consistently():
    X = np.random.default_rng(3).random((1000, 3))
    a = resample_sums(X, 50, np.random.default_rng(7))
    b = resample_sums(X, 50, np.random.default_rng(7))
    assert np.array_equal(a, b)
    # every replicate is a resample of 1000 rows: the counts sum to 1000, so the "ones" column would too
    ones = resample_sums(np.ones((1000, 1)), 50, np.random.default_rng(7))
    assert np.all(ones == 1000)


def test_interval_uses_order_statistics_and_keeps_infinities():
    x = np.arange(1, 101, dtype=float)  # 1..100
    # B=100, alpha=0.025: lower index floor(0.025*99)=2 -> 3; upper index ceil(0.975*99)=97 -> 98
    assert interval(x, 0.95) == (3.0, 98.0)
    assert interval(np.array([1.0, np.inf, np.inf, np.inf]), 0.5)[1] == np.inf
    assert safe_ratio(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.0, 4.0])).tolist() == [1.0, np.inf, 0.5]


def test_bootstrap_leaves_an_infinite_sequence_out_of_the_resamples_that_did_not_draw_it():
    """X = [1, inf] over two sequences: a resample draws 2 indices of {0, 1}; counts (2, 0) sum to 2 * 1 = 2
    (finite: sequence 1 was not drawn), any count of sequence 1 gives inf. The product alone gave
    2 * 1 + 0 * inf = NaN there, with numpy's "invalid value" warning on stderr."""
    import warnings

    X = np.array([[1.0, 1.0], [np.inf, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sums = resample_sums(X, 200, np.random.default_rng(0))
    left_out = sums[:, 1] == 2.0  # column 1 is finite: its sum 2 means both draws were sequence 0
    assert left_out.any() and (~left_out).any()
    assert np.array_equal(sums[left_out, 0], np.full(left_out.sum(), 2.0))
    assert np.isinf(sums[~left_out, 0]).all()
    assert not np.isnan(sums).any()
