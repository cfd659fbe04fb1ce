"""The sample's arithmetic by hand: the top-k sums, the within-position slope, a correction's affine map."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mismatchscope.doctor.causes._topk import within_slope
from mismatchscope.doctor.causes.low_precision import GRID_SHARE, _grid, bit_counts, bits
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
    collector.take(collector.pick(batch))
    s = collector.finish().affine("sampler", 0.5, 0.0)
    assert s.lq.tolist() == [-0.5]
    assert (s.columns["k_sy"][0], s.columns["k_syy"][0], s.columns["k_sxy"][0]) == pytest.approx((-2.0, 2.5, 2.5))
    assert s.lists is not None and s.lists.y.tolist() == [-0.5, -1.5]
    slope, r2 = within_slope(s, np.array([0]))
    assert slope == pytest.approx(1.0) and r2 == pytest.approx(1.0)


def test_stand_in_values_are_left_out_and_counted():
    # vLLM writes -9999 for -inf and a writer may fill -1e300: neither is a logprob (float64's log floor is -708)
    collector = SampleCollector(total_rows=3)
    collector.take(
        collector.pick(
            {
                "sequence_id": np.array([1, 1, 1]),
                "position": np.array([0, 1, 2]),
                "token_id": np.array([4, 5, 6]),
                "trainer_logprob": np.array([-0.1, -0.2, -0.3]),
                "sampler_logprob": np.array([-0.1, -9999.0, -1e300]),
            }
        )
    )
    s = collector.finish()
    assert len(s) == 1 and s.sentinel_rows == 2 and s.sentinel_sampler == 2


def _sampled(with_sums: bool):
    """Forty 3-token sequences, kept by hash down to about 60 rows, their lists down to about 30; float32
    lists as a run stores them. ``with_sums``: the batch carries the run's summaries (the sums from the lists,
    as a writer stores them), so the lists are gathered on the list sub-sample's rows alone."""
    from mismatchscope.doctor.sample import TOPK_FIELDS
    from mismatchscope.schema import ROW_SUMS

    seq = np.repeat(np.arange(40), 3)
    rng = np.random.default_rng(0)
    x = pa.array([rng.uniform(-5, 0, 2).astype(np.float32) for _ in seq], pa.list_(pa.float32()))
    y = pa.array([rng.uniform(-5, 0, 2).astype(np.float32) for _ in seq], pa.list_(pa.float32()))
    batch = {
        "sequence_id": seq,
        "position": np.tile(np.arange(3), 40),
        "trainer_logprob": np.full(seq.size, -0.5),
        "sampler_logprob": np.full(seq.size, -0.6),
        "sampler_topk_logprobs": y,
        "trainer_logprobs_at_sampler_topk": x,
    }
    if with_sums:
        sums = topk_sums(y, x)
        batch.update({c: sums[k].astype(np.float32) for k, c in zip(TOPK_FIELDS, ROW_SUMS, strict=True)})
    collector = SampleCollector(total_rows=seq.size, cap=60, list_cap=30)
    collector.take(collector.pick(batch))
    return collector.finish()


def test_a_run_with_summaries_keeps_the_same_lists_for_the_same_rows():
    """The list sub-sample is picked by the sequence hash either way: the same rows keep the same values."""
    lists, summaries = _sampled(False), _sampled(True)
    assert 0 < len(lists) < 120 and lists.lists is not None and summaries.lists is not None
    assert 0 < lists.lists.offsets[-1] < 2 * len(lists)
    assert np.array_equal(lists.columns["list_row"], summaries.columns["list_row"])
    for a, b in ((lists.lists.x, summaries.lists.x), (lists.lists.y, summaries.lists.y)):
        assert np.array_equal(a, b)
    assert np.array_equal(lists.lists.offsets, summaries.lists.offsets)
    assert np.allclose(lists.columns["k_sxy"], summaries.columns["k_sxy"], rtol=1e-6)


def test_rows_read_out_of_order_are_sorted_and_rows_in_order_kept_as_they_are():
    # batches of one file in any order: sequence 2 before 1, and 1's positions 1 then 0; a duplicate row (same
    # sequence and position) keeps its place either way, as a stable sort keeps it
    collector = SampleCollector(total_rows=5)
    lp = np.array([-0.1, -0.2, -0.3, -0.4, -0.5])
    batch = {"sequence_id": np.array([2, 2, 1, 1, 1]), "position": np.array([0, 0, 1, 0, 2])}
    collector.take(collector.pick({**batch, "token_id": np.arange(5), "trainer_logprob": lp, "sampler_logprob": lp}))
    s = collector.finish()
    assert s.columns["sequence_id"].tolist() == [1, 1, 1, 2, 2] and s.columns["position"].tolist() == [0, 1, 2, 0, 0]
    assert s.lp.tolist() == [-0.4, -0.3, -0.5, -0.1, -0.2]
    collector = SampleCollector(total_rows=5)
    batch = {"sequence_id": np.array([1, 1, 2, 2, 2]), "position": np.array([0, 1, 0, 0, 1])}
    collector.take(collector.pick({**batch, "token_id": np.arange(5), "trainer_logprob": lp, "sampler_logprob": lp}))
    assert collector.finish().lp.tolist() == lp.tolist()


def test_the_values_every_reader_shares_are_made_once_kept_read_only_and_never_carried_to_a_correction():
    # two sequences (ids 7 and 9) of two and one rows; l = lp - lq = [-0.1, 0.2, 0.0]
    cols = {
        "sequence_id": np.array([7, 7, 9]),
        "position": np.array([0, 1, 0]),
        "trainer_logprob": np.array([-0.6, -0.3, -1.0]),
        "sampler_logprob": np.array([-0.5, -0.5, -1.0]),
    }
    s = Sample(cols, rows_seen=3, sampled=False)
    assert s.gap() is s.gap() and s.abs_gap() is s.abs_gap()
    assert s.gap() == pytest.approx([-0.1, 0.2, 0.0]) and s.abs_gap() == pytest.approx([0.1, 0.2, 0.0])
    # k3 = e^l - 1 - l: e^-0.1 - 0.9 = 0.0048374, e^0.2 - 1.2 = 0.0214028, 0
    assert s.k3() == pytest.approx([0.0048374180, 0.0214027582, 0.0])
    assert [a.tolist() for a in s.segments()] == [[0, 2], [2, 3]] and s.row_sequence().tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="read-only"):
        s.abs_gap()[0] = 1.0  # a reader that would change a shared value in place fails at once
    # a correction makes a new sample: its gap is its own (the sampler doubled: l = [0.4, 0.7, 1.0])
    moved = s.affine("sampler", 2.0, 0.0)
    assert moved.gap() == pytest.approx([0.4, 0.7, 1.0]) and s.gap() == pytest.approx([-0.1, 0.2, 0.0])
    assert s.take(np.array([2])).segments()[0].tolist() == [0]


def test_the_grid_read_from_bit_counts_is_numpys_higher_quantile_of_the_bits():
    # 1.0, 1.5, 1.25 and 1.125 use 0, 1, 2 and 3 mantissa bits; the 99th percentile ("higher") of four values is
    # the value at index ceil(3 x 0.99) = 3 of the sorted bits: 3, a bfloat16 grid
    values = np.array([1.0, 1.5, 1.25, 1.125])
    assert bit_counts(values)[:4].tolist() == [1, 1, 1, 1] and _grid(values) == ("bfloat16", 3)
    rng = np.random.default_rng(1)
    for n in (1, 2, 99, 100, 101, 5000):
        v = -rng.exponential(size=n)
        for grid in (v, bf16_round(v), v.astype(np.float32).astype(np.float64), np.r_[v, 2.0**-30, np.nan, np.inf]):
            assert bit_counts(grid).tolist() == np.bincount(bits(grid), minlength=53).tolist()
            assert _grid(grid)[1] == int(np.quantile(bits(grid), GRID_SHARE, method="higher"))
