"""Top-k overlap: ids near 2^63 by hand, through the report and alone."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchscope.analysis.compiled import COMPILED_ENV
from mismatchscope.analysis.topk import topk_bounds
from tests.inputs import one_sequence, raw_parquet, report_json, topk_lists


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


TOPK_PATHS = pytest.mark.parametrize("compiled", ["1", "0"], ids=["compiled", "numpy"])


@TOPK_PATHS
def test_topk_bounds_hand_derived(compiled, monkeypatch):
    monkeypatch.setenv(COMPILED_ENV, compiled)
    # sampler lists ids [3, 5] with q = [0.6, 0.3]; trainer p = [0.5, 0.3]; sampled id 5.
    # TV = 0.5 * (|0.5-0.6| + |0.3-0.3| + |(1-0.8) - (1-0.9)|) = 0.5 * (0.1 + 0 + 0.1) = 0.1
    # KL = 0.6 log(0.6/0.5) + 0.3 log(1) + 0.1 log(0.1/0.2) = 0.109393 - 0.069315 = 0.040078
    ids = pa.array([[3, 5]])
    b = topk_bounds(
        np.array([5]),
        np.log([0.3]),
        np.log([0.3]),
        ids,
        pa.array([np.log([0.6, 0.3]).tolist()]),
        pa.array([np.log([0.5, 0.3]).tolist()]),
    )
    assert b.tv_lower_T[0] == pytest.approx(0.1, abs=1e-12)
    assert b.kl_lower_T[0] == pytest.approx(0.040078, abs=1e-6)
    # sampled id 9 not listed: it joins K with its own q = 0.05, p = 0.1
    # TV = 0.5 * (0.1 + 0 + 0.05 + |(1 - 0.9) - (1 - 0.95)|) = 0.5 * 0.2 = 0.1
    b2 = topk_bounds(
        np.array([9]),
        np.log([0.05]),
        np.log([0.1]),
        ids,
        pa.array([np.log([0.6, 0.3]).tolist()]),
        pa.array([np.log([0.5, 0.3]).tolist()]),
    )
    assert b2.tv_lower_T[0] == pytest.approx(0.1, abs=1e-12)


@TOPK_PATHS
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 60), st.integers(1, 8), st.floats(0.01, 3.0))
def test_topk_bounds_never_exceed_full_divergence(compiled, seed, vocab, k, noise):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(COMPILED_ENV, compiled)
        _check_never_exceed(seed, vocab, k, noise)


def _check_never_exceed(seed, vocab, k, noise):
    rng = np.random.default_rng(seed)
    k = min(k, vocab)
    z = rng.normal(0, 3, (20, vocab))
    zq = z + rng.normal(0, noise, z.shape)
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))
    lq = zq - np.log(np.exp(zq).sum(1, keepdims=True))
    p, q = np.exp(lp), np.exp(lq)
    tok = np.array([rng.choice(vocab, p=row) for row in q])
    top = np.argsort(-lq, axis=1)[:, :k]
    rows = np.arange(20)
    b = topk_bounds(
        tok,
        lq[rows, tok],
        lp[rows, tok],
        pa.array(top.tolist()),
        pa.array(np.take_along_axis(lq, top, 1).tolist()),
        pa.array(np.take_along_axis(lp, top, 1).tolist()),
    )
    tv_full = 0.5 * np.abs(p - q).sum(1)
    kl_full = (q * (lq - lp)).sum(1)
    assert np.all(b.tv_lower_T <= tv_full + 1e-12)
    assert np.all(b.kl_lower_T <= kl_full + 1e-9)
    if k == vocab:  # full vocabulary listed: exact
        np.testing.assert_allclose(b.tv_lower_T, tv_full, atol=1e-12)


@TOPK_PATHS
def test_topk_bounds_same_to_the_bit_with_equal_and_ragged_list_lengths(compiled, monkeypatch):
    # numpy takes lists of one length as a [n, k] table and ragged lists by bincount, the compiled loop
    # reads both by their offsets; every way adds a row's values to 0.0 in list order, so the rows the
    # two batches share must agree bit for bit
    monkeypatch.setenv(COMPILED_ENV, compiled)
    rng = np.random.default_rng(3)
    n, k = 200, 5
    ids = rng.integers(0, 50, (n, k))
    lq = np.log(rng.dirichlet(np.ones(k + 1), n)[:, :k])
    lp = np.log(rng.dirichlet(np.ones(k + 1), n)[:, :k])
    tok = np.where(rng.random(n) < 0.5, ids[:, 0], 99)
    slp, tlp = np.log(rng.uniform(0.01, 0.5, n)), np.log(rng.uniform(0.01, 0.5, n))
    same = topk_bounds(tok, slp, tlp, pa.array(ids.tolist()), pa.array(lq.tolist()), pa.array(lp.tolist()))
    ragged = topk_bounds(
        np.append(tok, 7),
        np.append(slp, -1.0),
        np.append(tlp, -1.0),
        pa.array([*ids.tolist(), [7]]),
        pa.array([*lq.tolist(), [-1.0]]),
        pa.array([*lp.tolist(), [-1.0]]),
    )
    for a, b in (
        (same.tv_lower_T, ragged.tv_lower_T),
        (same.kl_lower_T, ragged.kl_lower_T),
        (same.sampler_mass_T, ragged.sampler_mass_T),
        (same.trainer_mass_T, ragged.trainer_mass_T),
    ):
        assert np.array_equal(a.view(np.int64), b[:n].view(np.int64))
