"""Top-k overlap: ids near 2^63 by hand, through the report and alone."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from tests.helpers import (
    one_sequence,
    raw_parquet,
    report_json,
    topk_lists,
)


def test_topk_overlap_with_ids_near_two_to_the_63(tmp_path):
    """Row 0: both lists hold {2^62, 9}: 2 of 2 shared. Row 1: {8, 2^62 + 1} against {2^62 + 1, 5}: 1 of 2.
    Mean overlap (1 + 0.5) / 2 = 0.75. (row * width + id overflowed int64 for the shared 2^62 + 1 of row 1.)"""
    big = 2**62
    path = raw_parquet(
        tmp_path / "o.parquet",
        one_sequence(2, **topk_lists(ids=[[big, 9], [8, big + 1]], trainer_ids=[[big, 9], [big + 1, 5]])),
    )
    overlap = report_json(path)["score_centering"]["topk_overlap"]
    assert overlap["tokens"] == 2 and overlap["mean"] == pytest.approx(0.75)


def test_topk_overlap_of_huge_ids_by_hand():
    from mismatchscope.analysis.topk import topk_overlap

    top = 2**63 - 1
    # equal lengths: row 0 shares {0, top}: 2/2; row 1: A = {7} (7 twice counts once), B = {7, 1}: 1/2
    a = pa.array([[top, 0], [7, 7]], pa.list_(pa.int64()))
    b = pa.array([[0, top], [7, 1]], pa.list_(pa.int64()))
    assert topk_overlap(a, b).tolist() == [1.0, 0.5]
    # ragged: row 0 A = {3, top} of 3 listed, B = {3, top}: 2 / max(3, 2); row 1: nothing shared of 1: 0;
    # row 2: both empty: NaN
    a = pa.array([[top, 3, 3], [5], []], pa.list_(pa.int64()))
    b = pa.array([[3, top], [], []], pa.list_(pa.int64()))
    got = topk_overlap(a, b)
    assert got[:2].tolist() == [2 / 3, 0.0] and math.isnan(got[2])
