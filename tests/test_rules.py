"""Every rule against counts derived by hand on tiny tables.

The table used throughout (probabilities; q = sampler, p = trainer):

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
from mismatchscope.errors import UsageError
from mismatchscope.rules import (
    KEEP, REJECT, REWEIGHT, RULES, SequenceInputs, default_rules, make_instance, parse_rule, parse_sweep,
)

Q = np.array([0.5, 0.2, 0.9, 0.5, 0.5])
P = np.array([0.2, 0.6, 0.9, 1e-5, 0.5])
T = token_terms(np.log(P), np.log(Q))
POS = np.ones(5)
NEG = -np.ones(5)


def tok(name, adv=None, **params):
    return list(make_instance(name, params).token_actions(T, adv))


R, W, K = int(REJECT), int(REWEIGHT), int(KEEP)


def test_icepop():
    # r = [0.4, 3, 1, 2e-5, 1]; reject r < 0.5 or r > 5 -> A, D
    assert tok("icepop") == [R, K, K, R, K]
    # beta = 2 also catches B (3 > 2)
    assert tok("icepop", beta=2) == [R, R, K, R, K]


def test_ipo():
    # |p - q| = [0.3, 0.4, 0, 0.49999, 0] > 0.1 -> A, B, D; with delta 0.35 -> B, D
    assert tok("ipo") == [R, R, K, R, K]
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


def seq_inputs(adv):
    # seq 1: S = log 0.4 + log 3 + 0 = log 1.2 = 0.182322; mean l = 0.060774; geo = 1.2^(1/3) = 1.062659
    #        k3 = [0.316291, 0.901388, 0] -> mean 0.405893; min r 0.4
    # seq 2: S = log 2e-5 = -10.819778; mean l = -5.409889; geo = 0.004472; min r 2e-5
    #        k3(D) = (2e-5 - 1) + 10.819778 = 9.819798 -> mean 4.909899
    return SequenceInputs(
        n_tokens_S=np.array([3.0, 2.0]),
        seq_log_ratio_S=np.array([T.log_ratio_T[:3].sum(), T.log_ratio_T[3:].sum()]),
        min_log_ratio_S=np.array([T.log_ratio_T[:3].min(), T.log_ratio_T[3:].min()]),
        max_log_ratio_S=np.array([T.log_ratio_T[:3].max(), T.log_ratio_T[3:].max()]),
        mean_k3_S=np.array([T.k3_T[:3].mean(), T.k3_T[3:].mean()]),
        advantage_S=adv,
    )


def seq(name, adv=None, **params):
    return list(make_instance(name, params).sequence_actions(seq_inputs(adv)))


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


def test_registry_is_complete_with_reference_defaults():
    expected = {
        "icepop": {"alpha": 0.5, "beta": 5.0}, "ipo": {"delta": 0.1},
        "dppo-tv": {"delta_low": 0.15, "delta_high": 0.15}, "dppo-kl": {"delta": 0.05}, "tis": {"C": 2.0},
        "token-mask": {"lo": 0.5, "hi": 2.0}, "seq-tis": {"C": 2.0}, "seq-mis": {"lo": 0.5, "hi": 2.0},
        "geo-mask": {"lo": 0.999, "hi": 1.001}, "k3-seq": {"delta": 0.01}, "veto": {"lo": 1e-4, "hi": None},
        "opsm": {"delta": 1e-4}, "cispo": {"eps_low": 1.0, "eps_high": 4.0}, "ppo-clip": {"eps_low": 0.2, "eps_high": 0.28},
    }
    assert {r.name: r.params for r in default_rules()} == expected
    assert {n for n, s in RULES.items() if s.uses_advantage} == {"dppo-tv", "dppo-kl", "opsm", "ppo-clip"}


def test_parse_rule_and_errors():
    r = parse_rule("icepop:alpha=0.2,beta=5")
    assert r.params == {"alpha": 0.2, "beta": 5.0}
    with pytest.raises(UsageError, match="valid rules: .*icepop"):
        parse_rule("icepoop")
    with pytest.raises(UsageError, match="valid parameters of icepop: alpha, beta"):
        parse_rule("icepop:gamma=1")
    with pytest.raises(UsageError, match="not a number"):
        parse_rule("icepop:alpha=abc")
    with pytest.raises(UsageError, match="must not exceed"):
        parse_rule("icepop:alpha=3,beta=2")
    name, key, inst = parse_sweep("icepop.beta=1.5,2,3", {"icepop": parse_rule("icepop:alpha=0.2")})
    assert (name, key) == ("icepop", "beta")
    assert [i.params for i in inst] == [{"alpha": 0.2, "beta": b} for b in (1.5, 2.0, 3.0)]
    with pytest.raises(UsageError, match="cannot parse sweep"):
        parse_sweep("icepop=1,2")


lp_st = st.floats(min_value=-20.0, max_value=0.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(lp_st, min_size=1, max_size=40), st.sampled_from([-1.0, 0.0, 1.0]))
def test_equal_distributions_reject_nothing(lps, a):
    lp = np.array(lps)
    t = token_terms(lp, lp)
    adv = np.full(lp.size, a)
    s = SequenceInputs(np.array([float(lp.size)]), np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([a]))
    for rule in default_rules():
        if rule.spec.level == "token":
            assert (rule.token_actions(t, adv) == KEEP).all(), rule.name
        else:
            assert (rule.sequence_actions(s) == KEEP).all(), rule.name
