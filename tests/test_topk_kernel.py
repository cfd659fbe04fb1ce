"""The compiled top-k bounds loop (``analysis.kernels``) against a plain-Python reference, bit for bit.

The reference follows the formulas of ``topk.topk_bounds``' docstring one row at a time with ``math.exp`` and
``math.log`` (the C library's, as the loop's), adding each row's terms to 0.0 in list order and taking numpy's
``maximum``/``minimum`` semantics (a NaN stays NaN). The inputs are chosen to hit every branch: empty, ragged
and repeated lists, the sampled id listed or not, q = 0 or p = 0 (logprob -inf or below exp's underflow),
subnormal probabilities, list masses above 1 (both clamps), a rest bucket at and around REST_EPS.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from mismatchscope.analysis.kernels import bounds_rows
from mismatchscope.analysis.topk import REST_EPS, topk_bounds


def _maximum(x: float, floor: float) -> float:
    return x if (x != x or x >= floor) else floor  # np.maximum: NaN propagates


def _minimum(x: float, cap: float) -> float:
    return x if (x != x or x <= cap) else cap


def _reference(tok, slog, tlog, q_T, p_T, lists):
    """(tv, kl, sum_K q, sum_K p) per row; ``lists[i]`` = [(id, sampler logprob, trainer logprob), ...]."""
    out = []
    for i, entries in enumerate(lists):
        q_sum = p_sum = abs_sum = kl_in = 0.0
        listed = False
        for id_, s, t in entries:
            q, p = math.exp(s), math.exp(t)
            q_sum += q
            p_sum += p
            abs_sum += abs(p - q)
            kl_in += 0.0 if q == 0.0 else (s - t) * q
            listed = listed or id_ == tok[i]
        extra_q, extra_p = (0.0, 0.0) if listed else (float(q_T[i]), float(p_T[i]))
        q_sum += extra_q
        p_sum += extra_p
        abs_sum += abs(extra_p - extra_q)
        tv = 0.5 * (abs_sum + abs(q_sum - p_sum))
        kl_in += 0.0 if (listed or extra_q <= 0.0) else extra_q * (float(slog[i]) - float(tlog[i]))
        q_rest, p_rest = _maximum(1.0 - q_sum, 0.0), _maximum(1.0 - p_sum, REST_EPS)
        kl_rest = q_rest * (math.log(q_rest) - math.log(p_rest)) if q_rest > REST_EPS else 0.0
        out.append((_minimum(tv, 1.0), _maximum(kl_in + kl_rest, 0.0), q_sum, p_sum))
    return [np.array(c, dtype=np.float64) for c in zip(*out)] if out else [np.zeros(0)] * 4


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(nan_a, nan_b) and np.array_equal(a[~nan_a].view(np.int64), b[~nan_b].view(np.int64)))


LOGPROBS = (0.0, -0.0, 1e-7, -1e-300, -1e-12, -1e-7, -0.1, math.log(0.5), -1.0, -5.0, -700.0, -745.0, -746.0, -math.inf)
"""1e-7: the rounding the reader lets through above 0; -745: exp gives a subnormal; -746 and -inf: exp gives 0."""


def _adversarial(seed: int, n: int):
    rng = np.random.default_rng(seed)
    pick = np.array(LOGPROBS)
    lengths = rng.integers(0, 7, n)
    lengths[: n // 4] = 0 if seed % 2 else 5  # a run of empty lists, or of equal ones
    lists = [
        [(int(rng.integers(0, 4)), float(rng.choice(pick)), float(rng.choice(pick))) for _ in range(k)] for k in lengths
    ]
    tok = rng.integers(0, 5, n)  # 4 is never listed
    slog, tlog = rng.choice(pick, n), rng.choice(pick, n)
    slog[::7] = np.nan  # a row the reader would drop still gets the same bits
    return tok, slog, tlog, lists


@pytest.mark.parametrize("seed", range(6))
def test_bounds_loop_equals_the_reference_bit_for_bit(seed):
    tok, slog, tlog, lists = _adversarial(seed, 400)
    with np.errstate(over="ignore"):
        q_T, p_T = np.exp(slog), np.exp(tlog)
    b = topk_bounds(
        tok,
        slog,
        tlog,
        pa.array([[e[0] for e in row] for row in lists], pa.list_(pa.int64())),
        pa.array([[e[1] for e in row] for row in lists], pa.list_(pa.float64())),
        pa.array([[e[2] for e in row] for row in lists], pa.list_(pa.float64())),
    )
    want = _reference(tok, slog, tlog, q_T, p_T, lists)
    got = (b.tv_lower_T, b.kl_lower_T, b.sampler_mass_T, b.trainer_mass_T)
    for name, g, w in zip(("tv", "kl", "sampler mass", "trainer mass"), got, want):
        assert _same_bits(g, w), name


def test_bounds_loop_hand_derived():
    # one row, sampled id 7 listed with q = 0.5, p = 0.25, so K = {7}:
    # TV = (|0.25 - 0.5| + |0.5 - 0.25|) / 2 = 0.25
    # KL = 0.5 log(0.5 / 0.25) + rest 0.5 log(0.5 / 0.75) = 0.5 log(4 / 3) = 0.143841...
    # second row: an empty list, sampled q = 1 (logprob 0), p = 0.5: K = {sampled}, q_rest = 0 (no rest term)
    # TV = (0.5 + |1 - 0.5|) / 2 = 0.5, KL = 1 * (0 - log 0.5) = log 2
    slog, tlog = np.array([-1.0, 0.0]), np.array([-1.0, math.log(0.5)])
    tv, kl, q_mass, p_mass = bounds_rows(
        np.array([0, 1, 1]),
        np.array([7, 3]),
        slog,
        tlog,
        np.exp(slog),
        np.exp(tlog),
        np.array([7]),
        np.array([math.log(0.5)]),
        np.array([math.log(0.25)]),
        REST_EPS,
    )
    assert tv == pytest.approx([0.25, 0.5], abs=1e-15)
    assert kl == pytest.approx([0.5 * math.log(4 / 3), math.log(2)], abs=1e-15)
    assert q_mass.tolist() == [0.5, 1.0] and p_mass == pytest.approx([0.25, 0.5], abs=1e-15)


def _bounds(ends, tok, rows, ids, slp, tlp):
    """``bounds_rows`` with the four per-row float arrays (sampler lp, trainer lp, q, p) given as one tuple."""
    return bounds_rows(np.asarray(ends), tok, rows[0], rows[1], rows[2], rows[3], ids, slp, tlp, REST_EPS)


def test_bounds_loop_takes_no_rows_and_other_dtypes():
    empty = _bounds([0], np.zeros(0, np.int64), [np.zeros(0)] * 4, np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    assert [a.size for a in empty] == [0, 0, 0, 0]
    # float32 logprobs and int32 ids widen exactly: the same bits as float64/int64
    rows = [np.array([-0.5]), np.array([-0.7]), np.exp([-0.5]), np.exp([-0.7])]
    ids, slp, tlp = np.array([1, 2]), np.array([-0.25, -2.0]), np.array([-0.5, -1.5])
    wide = _bounds([0, 2], np.array([1]), rows, ids, slp, tlp)
    narrow = _bounds([0, 2], np.array([1]), rows, ids.astype(np.int32), slp.astype(np.float32), tlp.astype(np.float32))
    assert all(np.array_equal(a, b) for a, b in zip(wide, narrow))


@pytest.mark.parametrize(
    "ends, n_ids",
    [([0, 2], 2), ([0, 1, 3], 2), ([1, 1, 2], 2), ([0, 2, 1], 2), ([0, 1, 2], 3)],
    ids=["too-few-offsets", "past-the-lists", "not-from-0", "decreasing", "lists-longer"],
)
def test_bounds_loop_refuses_offsets_that_do_not_fit(ends, n_ids):
    # the loop reads raw memory: every offset must stay inside the lists it indexes
    with pytest.raises(ValueError):
        _bounds(
            ends, np.zeros(2, np.int64), [np.zeros(2)] * 4, np.zeros(n_ids, np.int64), np.zeros(n_ids), np.zeros(n_ids)
        )
