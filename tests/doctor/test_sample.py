"""The sample's arithmetic by hand: the top-k sums, the within-position slope, a correction's affine map."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mismatchscope.doctor.causes._topk import within_slope
from mismatchscope.doctor.causes.low_precision import bits
from mismatchscope.doctor.sample import Sample, SampleCollector, topk_sums
from tests.doctor.injections import bf16_round


def test_the_mantissa_bits_and_the_within_position_slope_by_hand():
    # 1.0 = 1.0 x 2^0 uses no mantissa bit; 1.5 = 1.1b one; 1.25 = 1.01b two; 1 + 2^-23 float32's all 23;
    # bfloat16's -0.1 is -1.1001101b x 2^-4: seven
    values = np.array([1.0, 1.5, 1.25, 1 + 2.0**-23, float(bf16_round(np.array([-0.1]))[0])])
    assert bits(values).tolist() == [0, 1, 2, 23, 7]
    # two positions, the sampler at T = 0.5 (y = 2x + c within each): slope 2, R^2 1. An id the sampler gives
    # -inf is left out of the fit and counted as cut
    trainer = pa.array([[-1.0, -2.0, -4.0], [-0.5, -3.0]])
    sampler = pa.array([[-0.1, -2.1, -6.1], [-0.2, -float("inf")]])
    sums = topk_sums(sampler, trainer)
    assert sums["k_n"].tolist() == [3, 1] and sums["k_cut"].tolist() == [0, 1]
    s = Sample(dict(sums), rows_seen=2, sampled=False)
    slope, r2 = within_slope(s, np.array([0]))
    assert slope == pytest.approx(2.0) and r2 == pytest.approx(1.0)


def test_an_affine_correction_moves_the_value_its_lists_and_their_sums_alike():
    # one row: sampled token lq = -1; listed sampler values -1, -3 with the trainer's -0.5, -1.5 (y = 2x exactly).
    # Mapping the sampler by y -> y / 2 makes the lists equal: sum y = -2, sum y^2 = 0.25 + 2.25 = 2.5,
    # sum x y = 0.25 + 2.25 = 2.5; and the value -1 -> -0.5
    collector = SampleCollector(total_rows=1)
    batch = {
        "sequence_id": np.array([7]),
        "position": np.array([0]),
        "token_id": np.array([3]),
        "trainer_logprob": np.array([-0.5]),
        "sampler_logprob": np.array([-1.0]),
        "sampler_topk_logprobs": pa.array([[-1.0, -3.0]]),
        "trainer_logprobs_at_sampler_topk": pa.array([[-0.5, -1.5]]),
    }
    collector.add(None, batch)
    s = collector.finish().affine("sampler", 0.5, 0.0)
    assert s.lq.tolist() == [-0.5]
    assert (s.columns["k_sy"][0], s.columns["k_syy"][0], s.columns["k_sxy"][0]) == pytest.approx((-2.0, 2.5, 2.5))
    assert s.lists is not None and s.lists.y.tolist() == [-0.5, -1.5]
    slope, r2 = within_slope(s, np.array([0]))
    assert slope == pytest.approx(1.0) and r2 == pytest.approx(1.0)


def test_stand_in_values_are_left_out_and_counted():
    # vLLM writes -9999 for -inf and a writer may fill -1e300: neither is a logprob (float64's log floor is -708)
    collector = SampleCollector(total_rows=3)
    collector.add(
        None,
        {
            "sequence_id": np.array([1, 1, 1]),
            "position": np.array([0, 1, 2]),
            "token_id": np.array([4, 5, 6]),
            "trainer_logprob": np.array([-0.1, -0.2, -0.3]),
            "sampler_logprob": np.array([-0.1, -9999.0, -1e300]),
        },
    )
    s = collector.finish()
    assert len(s) == 1 and s.sentinel_rows == 2 and s.sentinel_sampler == 2
