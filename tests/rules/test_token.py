"""Every token rule against counts derived by hand on the tiny table of ``tests/rules/hand_table.py``
(probabilities; q = sampler, p = trainer):

  seq 1: A q=0.5 p=0.2  (r = 0.4,  p-q = -0.3, l = -0.916291)
         B q=0.2 p=0.6  (r = 3,    p-q = +0.4, l = +1.098612)
         C q=0.9 p=0.9  (r = 1)
  seq 2: D q=0.5 p=1e-5 (r = 2e-5, p-q = -0.49999, l = -10.819778)
         E q=0.5 p=0.5  (r = 1)
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchscope.divergence import token_terms
from mismatchscope.rules import (
    KEEP,
    REJECT,
    SequenceInputs,
    default_rules,
    make_instance,
)
from tests.rules.hand_table import NEG, POS, K, R, W, tok


def test_icepop():
    # r = [0.4, 3, 1, 2e-5, 1]; reject r < 0.5 or r > 5 -> A, D
    assert tok("icepop") == [R, K, K, R, K]
    # beta = 2 also catches B (3 > 2)
    assert tok("icepop", beta=2) == [R, R, K, R, K]


def test_ipo():
    # |p - q| = [0.3, 0.4, 0, 0.49999, 0]. Default 0.3 (prime-rl): B, D (A sits on the bound: 0.3 > 0.3 is false);
    # the earlier default 0.1: A, B, D; delta 0.35 -> B, D
    assert tok("ipo") == [K, R, K, R, K]
    assert tok("ipo", delta=0.1) == [R, R, K, R, K]
    assert tok("ipo", delta=0.35) == [K, R, K, R, K]


def test_dppo_tv():
    # A > 0: reject p - q > 0.15 -> B only. A <= 0: reject p - q < -0.15 -> A, D
    assert tok("dppo-tv", POS) == [K, R, K, K, K]
    assert tok("dppo-tv", NEG) == [R, K, K, R, K]
    # A == 0 falls on the negative branch (reference code)
    assert tok("dppo-tv", np.zeros(5)) == [R, K, K, R, K]


def test_dppo_kl():
    # D(A) = 0.223144 (p < q), D(B) = 0.334795 (p > q), D(D) = 0.5 log(0.5/1e-5) + 0.5 log(0.5/0.99999) = 5.06 (p < q)
    # A > 0 rejects p > q with D > 0.05: B. A <= 0 rejects p < q with D > 0.05: A, D.
    assert tok("dppo-kl", POS) == [K, R, K, K, K]
    assert tok("dppo-kl", NEG) == [R, K, K, R, K]
    # delta 0.3 spares A (0.223) but not B (0.335)
    assert tok("dppo-kl", NEG, delta=0.3) == [K, K, K, R, K]
    assert tok("dppo-kl", POS, delta=0.3) == [K, R, K, K, K]


def test_tis_and_cispo_reweight_not_reject():
    # TIS C = 2: r = 3 > 2 -> B reweighted
    assert tok("tis") == [K, W, K, K, K]
    # CISPO bounds [0, 5]: nothing; with eps_high = 1 (bound 2): B; eps_low = 0.5 (bound 0.5): A, D too
    assert tok("cispo") == [K] * 5
    assert tok("cispo", eps_low=0.5, eps_high=1) == [W, W, K, W, K]


def test_token_mask():
    # [0.5, 2]: A (0.4), B (3), D (2e-5)
    assert tok("token-mask") == [R, R, K, R, K]


def test_ppo_clip():
    # A > 0: r > 1.28 -> B. A < 0: r < 0.8 -> A, D. A == 0: nothing
    assert tok("ppo-clip", POS) == [K, R, K, K, K]
    assert tok("ppo-clip", NEG) == [R, K, K, R, K]
    assert tok("ppo-clip", np.zeros(5)) == [K] * 5


def test_kpop_both_directions():
    # D(a||b) = a ln(a/b) + (1-a) ln((1-a)/(1-b)); KPop takes max(D(q||p), D(p||q)):
    # A q=.5 p=.2: D(q||p) = .5 ln 2.5 + .5 ln .625 = 0.223144; D(p||q) = .2 ln .4 + .8 ln 1.6 = 0.192745
    # B q=.2 p=.6: D(q||p) = .2 ln(1/3) + .8 ln 2 = 0.334795;  D(p||q) = .6 ln 3 + .4 ln .5 = 0.381908
    # D q=.5 p=1e-5: D(q||p) = .5 ln(5e4) + .5 ln(.5/.99999) = 5.063320; C, E: p = q -> 0
    assert tok("kpop") == [R, R, K, R, K]  # phi 0.1
    # phi 0.35: B is caught only by the reverse direction (0.381908 > 0.35 > 0.334795)
    assert tok("kpop", phi=0.35) == [K, R, K, R, K]
    # phi 0.2: A is caught only by the forward direction (0.223144 > 0.2 > 0.192745)
    assert tok("kpop", phi=0.2) == [R, R, K, R, K]
    assert tok("kpop", phi=0.23) == [K, R, K, R, K]


def test_kpop_clamp_and_stability():
    from mismatchscope.divergence import binary_kl_logs

    # p = 1 exactly (an fp32 logprob that rounded to 0), q = 1 - 1e-7: unclamped D(q||p) has (1-q) ln((1-q)/0) = inf;
    # clamped to [1e-6, 1 - 1e-6] both are 1 - 1e-6 and D = 0
    lq, lp = np.array([math.log1p(-1e-7)]), np.array([0.0])
    t = token_terms(lp, lq)
    assert list(make_instance("kpop", {}).token_actions(t, None)) == [K]
    assert list(make_instance("kpop", {"eps": 0}).token_actions(t, None)) == [R]
    # near 1 without clamp: q = 1 - 1e-10, p = 1 - 2e-10: D(q||p) = ln(q/p) + 1e-10 ln(1/2) = 1e-10 (1 - ln 2) = 3.0685282e-11
    # (1 - exp(lq) would keep ~6 digits of 1 - q; -expm1(lq) keeps them all)
    d = binary_kl_logs(np.array([math.log1p(-1e-10)]), np.array([math.log1p(-2e-10)]), 0.0)
    np.testing.assert_allclose(d, [1e-10 * (1 - math.log(2))], rtol=1e-5)
    # lp == lq exactly gives exactly 0, at both ends and in between, clamped or not
    grid = np.array([-1e-12, -1e-7, -0.5, -3.0, -25.0, -800.0])
    assert (binary_kl_logs(grid, grid, 0.0) == 0).all() and (binary_kl_logs(grid, grid, 1e-6) == 0).all()


def _adversarial_logprobs(rng, n):
    """Logprobs where a screen could go wrong: at 0 and just below, deep in the tail, equal, one ulp apart, and plain."""
    edge = np.array(
        [0.0, -1e-300, -1e-17, -1e-13, -1e-12, -1e-10, -1e-7, -1e-6, -1e-3, -0.693147, -20.0, -50.0, -700.0, -745.0]
    )
    lq = np.concatenate([rng.choice(edge, n), -rng.exponential(1.0, n), np.log(rng.uniform(0, 1, n))])
    kind = rng.integers(0, 5, lq.size)
    lp = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3],
        [lq, np.nextafter(lq, -np.inf), np.minimum(lq + rng.normal(0, 1e-3, lq.size), 0.0), rng.choice(edge, lq.size)],
        np.minimum(lq + rng.normal(0, 0.5, lq.size), 0.0),
    )
    return lp, lq


@pytest.mark.parametrize("seed", range(4))
def test_screened_binary_kl_rules_reach_the_full_computations_verdicts(seed):
    # kpop and dppo-kl skip the logarithms where a chi-square bound says the KL is below the threshold;
    # the verdicts must be exactly those of computing the KL for every token
    from mismatchscope.divergence import binary_kl_logs_both
    from mismatchscope.rules.token import dppo_binary_kl

    rng = np.random.default_rng(seed)
    lp, lq = _adversarial_logprobs(rng, 2000)
    t = token_terms(lp, lq)
    adv = rng.choice([-1.0, 0.0, 1.0], lq.size)
    screened_somewhere = False
    for phi in (1e-12, 1e-10, 1e-6, 1e-4, 1e-3, 0.01, 0.1, 1.0):
        for eps in (0.0, 1e-6, 0.1):
            full = np.maximum(*binary_kl_logs_both(t.lq_T, t.lp_T, eps)) > phi
            got = make_instance("kpop", {"phi": phi, "eps": eps}).token_actions(t, None) == REJECT
            assert np.array_equal(got, full), (phi, eps)
            screened_somewhere |= 0 < full.sum() < full.size
        pos = adv > 0
        moved = (pos & (t.p_T > t.q_T)) | (~pos & (t.p_T < t.q_T))
        for eps in (0.0, 1e-8, 1e-3):  # without an epsilon, the reference code's 1e-8 (the default), a large one
            full = moved & (dppo_binary_kl(t.lq_T, t.lp_T, eps) > phi)
            got = make_instance("dppo-kl", {"delta": phi, "eps": eps}).token_actions(t, adv) == REJECT
            assert np.array_equal(got, full), (phi, eps)
    assert screened_somewhere


lp_st = st.floats(min_value=-20.0, max_value=0.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(lp_st, min_size=1, max_size=40), st.sampled_from([-1.0, 0.0, 1.0]))
def test_equal_distributions_reject_nothing(lps, a):
    lp = np.array(lps)
    t = token_terms(lp, lp)
    adv = np.full(lp.size, a)
    s = SequenceInputs(
        np.array([float(lp.size)]), np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([a])
    )
    for rule in default_rules():
        if rule.level == "token":
            assert (rule.token_actions(t, adv) == KEEP).all(), rule.name
        else:
            assert (rule.sequence_actions(s) == KEEP).all(), rule.name
