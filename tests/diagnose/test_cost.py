"""The cost of each variant: the Pareto front of gap against throughput, by hand."""

from __future__ import annotations


def test_pareto_front_by_hand():
    from mismatchscope.diagnose.cost import pareto_front

    # (mismatch, throughput): a (1, 10) and c (0.1, 5) trade off; b (2, 8) is beaten by a on both; d ties a exactly
    pts = [("a", 1.0, 10.0), ("b", 2.0, 8.0), ("c", 0.1, 5.0), ("d", 1.0, 10.0)]
    assert pareto_front(pts) == ["a", "c", "d"]
