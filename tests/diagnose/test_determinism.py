"""Determinism: two runs of one configuration compared token by token, by hand."""

from __future__ import annotations


def test_determinism_compare_by_hand():
    from mismatchscope.diagnose.determinism import compare
    from mismatchscope.diagnose.document import Repeatability

    # sequence 1: tokens [1, 2, 3] vs [1, 2, 4]: the prefix stays identical for 2 tokens;
    #   logprobs there: -0.5 == -0.5 (bit-identical), -1.0 vs -1.25 (differs by 0.25)
    # sequence 2: [7] vs [7], -2.0 == -2.0
    # tokens: 4 in the first run, 3 identical -> 0.75; of those 3, 2 bit-identical -> 2/3; max diff 0.25
    r = compare(
        [[1, 2, 3], [7]], [[-0.5, -1.0, -3.0], [-2.0]], [[1, 2, 4], [7]], [[-0.5, -1.25, -9.0], [-2.0]], "by hand"
    )
    assert r == Repeatability(
        tokens=4, share_tokens_identical=0.75, share_logprobs_bit_identical=2 / 3, max_abs_diff=0.25, compared="by hand"
    )
