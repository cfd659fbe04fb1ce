"""The value detectors' arithmetic by hand: mantissa bits, the within-position slope, top-k sums."""

from __future__ import annotations

import numpy as np
import pytest

from tests.doctor.injections import bf16_round


def test_the_mantissa_bits_and_the_within_position_slope_by_hand():
    import pyarrow as pa

    from mismatchscope.doctor.sample import Sample, topk_sums
    from mismatchscope.doctor.values import _bits, within_position_slope

    # 1.0 = 1.0 x 2^0 uses no mantissa bit; 1.5 = 1.1b one; 1.25 = 1.01b two; 1 + 2^-23 float32's all 23;
    # bfloat16's -0.1 is -1.1001101b x 2^-4: seven
    values = np.array([1.0, 1.5, 1.25, 1 + 2.0**-23, float(bf16_round(np.array([-0.1]))[0])])
    assert _bits(values).tolist() == [0, 1, 2, 23, 7]
    # two positions, the sampler at T = 0.5 (y = 2x + c within each): slope 2, R^2 1. An id the sampler gives
    # -inf is left out of the fit and counted as cut
    trainer = pa.array([[-1.0, -2.0, -4.0], [-0.5, -3.0]])
    sampler = pa.array([[-0.1, -2.1, -6.1], [-0.2, -float("inf")]])
    sums = topk_sums(sampler, trainer)
    assert sums["k_n"].tolist() == [3, 1] and sums["k_cut"].tolist() == [0, 1]
    s = Sample(dict(sums), rows_seen=2, sampled=False)
    slope, r2 = within_position_slope(s, np.array([0]))
    assert slope == pytest.approx(2.0) and r2 == pytest.approx(1.0)
