"""Every sequence rule against counts derived by hand on the two sequences of the hand table."""

from __future__ import annotations

import math

import numpy as np

from tests.rules.hand_table import K, R, W, seq, seq_inputs


def test_sequence_inputs_match_hand_values():
    s = seq_inputs(None)
    np.testing.assert_allclose(s.seq_log_ratio_S, [math.log(1.2), math.log(2e-5)], rtol=1e-9)
    np.testing.assert_allclose(s.mean_k3_S, [0.405893, 4.909899], atol=1e-6)


def test_seq_tis_and_seq_mis():
    # prod r = [1.2, 2e-5]. seq-tis C = 2: none; C = 1.1: seq 1 reweighted
    assert seq("seq-tis") == [K, K]
    assert seq("seq-tis", C=1.1) == [W, K]
    # seq-mis [0.5, 2]: seq 2 (2e-5 < 0.5); hi = 1.1 also seq 1
    assert seq("seq-mis") == [K, R]
    assert seq("seq-mis", hi=1.1) == [R, R]


def test_geo_mask():
    # geo = [1.062659, 0.004472]: both outside [0.999, 1.001]; [0.001, 1.1]: none
    assert seq("geo-mask") == [R, R]
    assert seq("geo-mask", lo=0.001, hi=1.1) == [K, K]


def test_k3_seq():
    # mean k3 = [0.405893, 4.909899] > 0.01 -> both; delta 1 -> seq 2 only
    assert seq("k3-seq") == [R, R]
    assert seq("k3-seq", delta=1) == [K, R]


def test_veto():
    # min r = [0.4, 2e-5]: lo 1e-4 -> seq 2. hi 2 (max r = [3, 1]) -> seq 1 too
    assert seq("veto") == [K, R]
    assert seq("veto", hi=2) == [R, R]


def test_opsm():
    # mean(lq - lp) = [-0.060774, 5.409889]; rejected only if A < 0 and value > 1e-4 -> seq 2 when A < 0
    assert seq("opsm", np.array([-1.0, -1.0])) == [K, R]
    assert seq("opsm", np.array([1.0, 1.0])) == [K, K]
    assert seq("opsm", np.array([-1.0, 0.0])) == [K, K]  # A == 0 is not negative for OPSM
