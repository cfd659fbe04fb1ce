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
    KEEP,
    REJECT,
    REWEIGHT,
    RULES,
    SequenceInputs,
    default_rules,
    make_instance,
    parse_rule,
    parse_sweep,
)
from tests.helpers import REPO

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


@pytest.mark.parametrize(
    "text, message",
    [
        ("ipo:delta=-0.1", "rule 'ipo': delta=-0.1 is outside its range [0, 1]"),
        ("tis:C=-1", "rule 'tis': C=-1 is outside its range [1, inf]"),
        ("cispo:eps_low=-0.5", "rule 'cispo': eps_low=-0.5 is outside its range [0, 1]"),
        ("ppo-clip:eps_high=-0.2", "rule 'ppo-clip': eps_high=-0.2 is outside its range [0, inf]"),
        ("kpop:phi=-1", "rule 'kpop': phi=-1 is outside its range [0, inf]"),
        ("kpop:eps=0.5", "rule 'kpop': eps=0.5 is outside its range [0, 0.5)"),
        ("icepop:alpha=1.5", "rule 'icepop': alpha=1.5 is outside its range [0, 1]"),
        ("seq-mis:hi=0.9", "rule 'seq-mis': hi=0.9 is outside its range [1, inf]"),
        ("opsm:delta=-1e-4", "rule 'opsm': delta=-0.0001 is outside its range [0, inf]"),
        ("ipo:delta=off", "rule 'ipo': delta cannot be off (it must be a number in [0, 1])"),
        ("ipo:delta=abc", "rule 'ipo': parameter delta='abc' is not a number"),
        (
            "verl-rs",
            "rule 'verl-rs' needs option and threshold (e.g. --rule verl-rs:option=seq_mean_k3,threshold=0.01)",
        ),
        (
            "verl-rs:option=token_k1",
            "rule 'verl-rs' needs threshold (e.g. --rule verl-rs:option=seq_mean_k3,threshold=0.01)",
        ),
        (
            "verl-rs:option=token_k4,threshold=1",
            "rule 'verl-rs': option='token_k4' is not one of "
            + ", ".join(
                [
                    "token_k1",
                    "token_k2",
                    "token_k3",
                    "seq_sum_k1",
                    "seq_sum_k2",
                    "seq_sum_k3",
                    "seq_mean_k1",
                    "seq_mean_k2",
                    "seq_mean_k3",
                    "seq_max_k2",
                    "seq_max_k3",
                ]
            ),
        ),
        ("verl-rs:option=seq_mean_k3,threshold=abc", "rule 'verl-rs': threshold 'abc' for seq_mean_k3 is not a number"),
        (
            "verl-rs:option=token_k2,threshold=0.5_2",
            "rule 'verl-rs': threshold '0.5_2' for token_k2 takes one upper bound U, not 'L_U'",
        ),
        (
            "verl-rs:option=token_k3,threshold=-1",
            "rule 'verl-rs': threshold '-1' for token_k3 must be a positive number",
        ),
        (
            "verl-rs:option=token_k1,threshold=x_2",
            "rule 'verl-rs': threshold 'x_2' for token_k1 is not 'L_U' or one number U (e.g. 0.5_2.0 or 2)",
        ),
        (
            "verl-rs:option=token_k1,threshold=0.5",
            "rule 'verl-rs': threshold '0.5' for token_k1 means the band [2, 0.5], "
            "which leaves out r = 1 (give U >= 1, or L_U with L <= 1 <= U)",
        ),
        (
            "verl-rs:option=seq_sum_k1,threshold=-2_3",
            "rule 'verl-rs': threshold '-2_3' for seq_sum_k1: both bounds must be positive",
        ),
    ],
)
def test_parameter_errors_are_one_line(text, message):
    with pytest.raises(UsageError) as e:
        parse_rule(text)
    assert str(e.value) == message


def test_every_parameter_is_bounded_and_defaults_are_inside():
    for spec in RULES.values():
        for f in spec.params():
            rng, choices = f.metadata["range"], f.metadata["choices"]
            assert rng is not None or choices is not None or spec.name == "verl-rs", (spec.name, f.name)
            if rng is not None and f.default is not None:
                assert rng.contains(f.default), (spec.name, f.name)
            if f.metadata["optional"]:
                assert f.default is None or rng is not None
    assert [f"{s.name}.{f.name}" for s in RULES.values() for f in s.params() if f.metadata["optional"]] == ["veto.hi"]
    assert parse_rule("veto:hi=off").params["hi"] is None


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
        clamped_sum_k1_S=np.array([T.k1_T[:3].sum(), T.k1_T[3:].sum()]),  # every |l| < 20: clamping changes nothing
        clamped_sum_k2_S=np.array([T.k2_T[:3].sum(), T.k2_T[3:].sum()]),
        clamped_sum_k3_S=np.array([T.k3_T[:3].sum(), T.k3_T[3:].sum()]),
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
        "icepop": {"alpha": 0.5, "beta": 5.0},
        "ipo": {"delta": 0.3},
        "kpop": {"phi": 0.1, "eps": 1e-6},
        "dppo-tv": {"delta_low": 0.15, "delta_high": 0.15, "zero_advantage": "negative"},
        "dppo-kl": {"delta": 0.05, "eps": 1e-8, "zero_advantage": "negative"},
        "tis": {"C": 2.0},
        "token-mask": {"lo": 0.5, "hi": 2.0},
        "seq-tis": {"C": 2.0},
        "seq-mis": {"lo": 0.5, "hi": 2.0},
        "geo-mask": {"lo": 0.999, "hi": 1.001},
        "k3-seq": {"delta": 0.01, "orientation": "r"},
        "veto": {"lo": 1e-4, "hi": None},
        "opsm": {"delta": 1e-4},
        "cispo": {"eps_low": 1.0, "eps_high": 4.0},
        "ppo-clip": {"eps_low": 0.2, "eps_high": 0.28},
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
    with pytest.raises(UsageError, match=r"^rule 'icepop': alpha=3 is outside its range \[0, 1\]$"):
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
    s = SequenceInputs(
        np.array([float(lp.size)]), np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([a])
    )
    for rule in default_rules():
        if rule.level == "token":
            assert (rule.token_actions(t, adv) == KEEP).all(), rule.name
        else:
            assert (rule.sequence_actions(s) == KEEP).all(), rule.name


def test_docs_rules_md_is_the_registry():

    from mismatchscope.rules.reference import rules_markdown

    doc = (REPO / "docs" / "rules.md").read_text()
    assert doc == rules_markdown(), "docs/rules.md is stale: python -m mismatchscope.rules.reference > docs/rules.md"
    for name in RULES:
        assert f"## `{name}`" in doc
