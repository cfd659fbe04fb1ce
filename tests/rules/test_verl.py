"""verl's rollout_rs against the hand table: its token and sequence options, k1's orientation, the clamp."""

from __future__ import annotations

import math

import numpy as np

from mismatchscope.divergence import token_terms
from mismatchscope.rules import (
    RULES,
    SequenceInputs,
    parse_rule,
)
from tests.rules.hand_table import K, R, T, seq_inputs, tok


def verl(option, threshold, x=None):
    inst = parse_rule(f"verl-rs:option={option},threshold={threshold}")
    if inst.level == "token":
        return list(inst.token_actions(T if x is None else x, None))
    return list(inst.sequence_actions(seq_inputs(None) if x is None else x))


def test_verl_rs_token_options_and_k1_orientation():
    # l = [-0.916291, 1.098612, 0, -10.819778, 0]; k1 = -l = [0.916291, -1.098612, 0, 10.819778, 0]
    # token_k1 0.5_2.0 keeps ln .5 <= -l <= ln 2 (+-0.693147): A, B, D out
    assert verl("token_k1", "0.5_2.0") == [R, R, K, R, K]
    assert verl("token_k1", "2") == [R, R, K, R, K]  # one number U: L = 1/U
    # verl's orientation: 0.3_2.6 bounds 1/r (ln .3 = -1.203973, ln 2.6 = 0.955511): A (0.916) and B (-1.099) kept;
    # the natural orientation (token-mask on r in [0.3, 2.6]) rejects B (r = 3)
    assert verl("token_k1", "0.3_2.6") == [K, K, K, R, K]
    assert tok("token-mask", lo=0.3, hi=2.6) == [K, R, K, R, K]
    # k2 = l^2/2 = [0.419795, 0.603474, 0, 58.533, 0]; k3 = [0.316291, 0.901388, 0, 9.819798, 0]
    assert verl("token_k2", "0.5") == [K, R, K, R, K]
    assert verl("token_k3", "0.5") == [K, R, K, R, K]
    assert verl("token_k3", "0.3") == [R, R, K, R, K]


def test_verl_rs_clamps_the_log_ratio_first():
    # l = -30: clamped to -20, k1 = 20, k3 = expm1(-20) + 20 = 19.000000002 (unclamped: 30 and 29)
    t = token_terms(np.array([-30.0]), np.array([0.0]))
    assert verl("token_k3", "19.5", t) == [K]
    assert verl("token_k3", "18.5", t) == [R]
    # token_k1 with ln U = 25: the clamped k1 (20) is inside, the raw one (30) would not be
    assert verl("token_k1", f"1e-11_{math.exp(25):.6g}", t) == [K]
    # seq_max_k3 takes k3 at the clamped extreme: k3(-20) = 19.0
    s = SequenceInputs(
        np.array([1.0]),
        np.array([-30.0]),
        np.array([-30.0]),
        np.array([-30.0]),
        np.array([29.0]),
        None,
        np.array([20.0]),
        np.array([200.0]),
        np.array([19.0]),
    )
    assert verl("seq_max_k3", "19.5", s) == [K]
    assert verl("seq_sum_k3", "19.5", s) == [K]
    assert verl("seq_sum_k1", f"1e-9_{math.exp(21):.6g}", s) == [K]


def test_verl_rs_sequence_options():
    # seq 1: sum k1 = -0.182322 (mean -0.060774); sum k2 = 1.023269; sum k3 = 1.217679; max k2 0.603474, max k3 0.901388
    # seq 2: sum k1 = 10.819778 (mean 5.409889); sum k2 = 58.533; sum k3 = 9.819798 (mean 4.909899)
    assert verl("seq_sum_k1", "2") == [K, R]  # [ln .5, ln 2] = [-0.693, 0.693]
    assert verl("seq_mean_k1", "1.1") == [K, R]  # [-0.09531, 0.09531]: -0.060774 inside
    assert verl("seq_mean_k1", "1.05") == [R, R]  # [-0.04879, 0.04879]: -0.060774 outside
    assert verl("seq_mean_k3", "0.01") == [R, R]
    assert verl("seq_mean_k3", "1") == [K, R]
    assert verl("seq_sum_k2", "1") == [R, R]  # 1.023269 > 1
    assert verl("seq_sum_k2", "1.1") == [K, R]
    assert verl("seq_sum_k3", "1.2") == [R, R]  # 1.217679 > 1.2
    assert verl("seq_max_k2", "0.5") == [R, R]
    assert verl("seq_max_k2", "0.61") == [K, R]
    assert verl("seq_max_k3", "0.95") == [K, R]
    assert verl("seq_max_k3", "0.9") == [R, R]


def test_verl_rs_level_follows_the_option():
    assert parse_rule("verl-rs:option=token_k1,threshold=0.5_2.0").level == "token"
    assert parse_rule("verl-rs:option=seq_mean_k3,threshold=0.01").level == "sequence"
    assert RULES["verl-rs"].fixed_level is None and RULES["icepop"].fixed_level == "token"
