"""Pair counts of the rules' agreement table: by pattern, equal to the dense product."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("rules, density", [(1, 0.5), (9, 0.01), (9, 0.6), (15, 0.0), (63, 0.05)])
def test_pair_counts_by_pattern_equal_the_dense_product(rules, density):
    # each pair's shared rejections, counted through the distinct rejection patterns, against
    # the [R, n] @ [n, R] product it replaces (63 rules take the dense fallback)
    from mismatchscope.analysis.masks import pair_counts

    rng = np.random.default_rng(rules)
    m = rng.random((rules, 5000)) < density
    m[0, :7] = True  # correlated rules: the first rejects whatever the second does on a stretch
    if rules > 1:
        m[1, :7] = True
    dense = m.astype(np.int64) @ m.T.astype(np.int64)
    assert np.array_equal(pair_counts(m), dense)
    assert pair_counts(m).dtype == np.float64
