"""The shared primitive, checked against values derived by hand."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchscope.divergence import binary_kl, token_terms


def test_token_terms_hand_derived():
    # token A: q = 0.5, p = 0.2 -> r = 0.4, l = log 0.4 = -0.916291
    #   tv = 0.3; k1 = 0.916291; k2 = 0.5 * 0.839589 = 0.419794
    #   k3 = (0.4 - 1) + 0.916291 = 0.316291; rev-k3 = 0.4 * -0.916291 + 0.6 = 0.233484
    # token B: q = 0.2, p = 0.6 -> r = 3, l = log 3 = 1.098612
    #   tv = 0.4; k1 = -1.098612; k2 = 0.603474; k3 = 2 - 1.098612 = 0.901388
    #   rev-k3 = 3 * 1.098612 - 2 = 1.295837
    # token C: q = p = 0.9 -> everything 0, r = 1
    t = token_terms(np.log([0.2, 0.6, 0.9]), np.log([0.5, 0.2, 0.9]))
    np.testing.assert_allclose(t.ratio_T, [0.4, 3.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(t.tv_T, [0.3, 0.4, 0.0], atol=1e-12)
    np.testing.assert_allclose(t.k1_T, [0.916291, -1.098612, 0.0], atol=1e-6)
    np.testing.assert_allclose(t.k2_T, [0.419794, 0.603474, 0.0], atol=1e-6)
    np.testing.assert_allclose(t.k3_T, [0.316291, 0.901388, 0.0], atol=1e-6)
    np.testing.assert_allclose(t.kl_reverse_k3_T, [0.233484, 1.295837, 0.0], atol=1e-6)


def test_k3_keeps_precision_for_tiny_mismatch():
    # l = 1e-7: k3 = expm1(l) - l = l^2/2 + l^3/6 ~ 5e-15; naive (exp(l)-1)-l loses it to rounding
    t = token_terms(np.array([-1.0 + 1e-7]), np.array([-1.0]))
    assert t.k3_T[0] == pytest.approx(5e-15, rel=1e-3)


def test_binary_kl_hand_derived():
    # q = 0.5, p = 0.2: 0.5 log(0.5/0.2) + 0.5 log(0.5/0.8) = 0.458145 - 0.235002 = 0.223144
    # q = 0.2, p = 0.6: 0.2 log(1/3) + 0.8 log(2) = -0.219722 + 0.554518 = 0.334795
    # q = 1, p = 0.5: 1 * log 2 + 0 = 0.693147 (0 log 0 = 0)
    np.testing.assert_allclose(
        binary_kl(np.array([0.5, 0.2, 1.0]), np.array([0.2, 0.6, 0.5])), [0.223144, 0.334795, math.log(2)], atol=1e-6
    )


logprob = st.floats(min_value=-30.0, max_value=0.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(logprob, logprob), min_size=1, max_size=50))
def test_invariants(pairs):
    lp = np.array([a for a, _ in pairs])
    lq = np.array([b for _, b in pairs])
    t = token_terms(lp, lq)
    assert np.all((t.tv_T >= 0) & (t.tv_T <= 1))
    assert np.all(t.k2_T >= 0) and np.all(t.k3_T >= 0) and np.all(t.kl_reverse_k3_T >= 0)
    same = token_terms(lq, lq)
    for arr in (same.tv_T, same.k1_T, same.k2_T, same.k3_T, same.kl_reverse_k3_T, same.log_ratio_T):
        assert np.all(arr == 0)


def test_k3_per_token_by_hand_and_as_token_terms_computes_it():
    from mismatchscope.divergence import k3_per_token

    l = np.array([math.log(2.0), -math.log(2.0), 0.0, 1e-9])
    # l = ln 2: r = 2, (r - 1) - l = 1 - 0.693147... = 0.306853; l = -ln 2: r = 1/2, -0.5 + 0.693147 = 0.193147;
    # l = 0: 0; l = 1e-9: ~ l^2 / 2 = 5e-19 (expm1 keeps it; exp(l) - 1 would round it away)
    got = k3_per_token(l)
    assert got[0] == pytest.approx(1.0 - math.log(2.0), rel=1e-15)
    assert got[1] == pytest.approx(math.log(2.0) - 0.5, rel=1e-15)
    assert got[2] == 0.0
    assert got[3] == pytest.approx(5e-19, rel=1e-6)
    lq = np.array([-1.0, -0.3, -2.5])
    lp = np.array([-0.9, -0.7, -2.5])
    # the same expression, fused in token_terms (equal to rounding: the two may take different SIMD loops)
    np.testing.assert_allclose(k3_per_token(lp - lq), token_terms(lp, lq).k3_T, rtol=1e-15, atol=0)


def test_the_binary_kls_from_a_batchs_exponentials_are_the_same_to_the_bit():
    """The audit's statistics reuse the terms' exp(l) and expm1(l); the rules compute them afresh: the values must
    be identical, clamped or not (near-certain tokens, tiny probabilities, a logprob a hair above 0)."""
    from mismatchscope.divergence import binary_kl_logs_both
    from mismatchscope.rules.token import _exps, dppo_binary_kl

    rng = np.random.default_rng(3)
    lq = np.concatenate([-rng.exponential(0.8, 2000), [0.0, 5e-5, -1e-9, -1e-7, -30.0, -200.0]])
    lp = np.minimum(lq + rng.normal(0, 0.3, lq.size), 0.0)
    lp[-3:] = [0.0, -1e-12, -50.0]
    t = token_terms(lp, lq)
    for eps in (0.0, 1e-8, 1e-6, 0.01):
        for a, b in zip(binary_kl_logs_both(lq, lp, eps), binary_kl_logs_both(lq, lp, eps, _exps(t)), strict=True):
            assert np.array_equal(a, b, equal_nan=True), eps
        d = dppo_binary_kl(lq, lp, eps)
        assert np.array_equal(d, dppo_binary_kl(lq, lp, eps, (t.q_T, t.one_minus_q_T, t.one_minus_p_T)), equal_nan=True)
