"""The gate's checks on hand-built files: every number asserted is derived in a comment from the tokens written."""

from __future__ import annotations

import math

import pytest

from mismatchscope.errors import GateConfigError
from mismatchscope.gate.config import default_config, with_overrides
from mismatchscope.gate.run import run_gate
from tests.gate.files import seqs, two_sequence_file
from tests.helpers import PROBE_META


def cfg_from(text: str):
    import tomllib

    from mismatchscope.gate.config import parse_config

    return parse_config(tomllib.loads(text), "test")


@pytest.mark.parametrize(
    "limit, status, inconclusive",
    [
        (0.09, "fail", False),  # interval [0.1, 0.3]: even its lower end is above 0.09
        (0.2, "pass", True),  # point estimate 1.0 / 4 = 0.25 is above 0.2, but the interval reaches 0.1
        (0.35, "pass", False),  # everything below 0.35
    ],
)
def test_absolute_limit_judged_on_the_interval(write, limit, status, inconclusive):
    path = two_sequence_file(write)
    cfg = cfg_from(f"[gate]\nbootstrap = 2000\n[absolute]\ntv_token_mean = {{ max = {limit} }}\n")
    (check,) = run_gate(str(path), None, cfg).checks
    assert check.estimate == pytest.approx(0.25)
    assert check.interval == pytest.approx((0.1, 0.3))
    assert (check.status, check.inconclusive, check.method) == (status, inconclusive, "bootstrap")


def test_min_limit_fails_when_the_upper_end_is_below(write):
    path = two_sequence_file(write)
    cfg = cfg_from("[absolute]\ntv_token_mean = { min = 0.31 }\n")  # interval [0.1, 0.3] lies below 0.31
    (check,) = run_gate(str(path), None, cfg).checks
    assert check.status == "fail" and check.op == ">="


def _const_file(write, name, q, p, n_seq=4, length=2, metadata=None):
    return write(seqs([[(q, p)] * length] * n_seq), name, metadata or PROBE_META)


def test_regression_ratio_and_floor_by_hand(write):
    # identical sequences: every replicate equals the point estimate, so the intervals have zero width
    # baseline tv = |0.51 - 0.5| = 0.01, candidate |0.52 - 0.5| = 0.02: ratio 2.0, rise 0.01
    base = _const_file(write, "base.parquet", 0.5, 0.51)
    cand = _const_file(write, "cand.parquet", 0.5, 0.52)
    cfg = cfg_from("[regression]\ntv_token_mean = { max_increase = 0.25 }\n")  # default floor 1e-4
    (check,) = run_gate(str(cand), str(base), cfg).checks
    assert check.estimate == pytest.approx(2.0) and check.interval == pytest.approx((2.0, 2.0))
    assert check.difference == pytest.approx(0.01) and check.floor == 1e-4
    assert check.status == "fail"
    # the same rise with a floor of 0.02 is noise by definition: pass
    cfg = cfg_from("[regression]\ntv_token_mean = { max_increase = 0.25, floor = 0.02 }\n")
    (check,) = run_gate(str(cand), str(base), cfg).checks
    assert check.status == "pass" and check.below_floor and "below the floor" in check.explanation
    # x2 is within a 150% allowance
    cfg = cfg_from("[regression]\ntv_token_mean = 1.5\n")
    assert run_gate(str(cand), str(base), cfg).checks[0].status == "pass"


def test_fp32_noise_level_rise_does_not_fail(write):
    # baseline |p - q| = 1e-8, candidate 2e-8: +100%, but a rise of 1e-8 is far below the 1e-4 floor
    base = _const_file(write, "base.parquet", 0.5, 0.5 + 1e-8)
    cand = _const_file(write, "cand.parquet", 0.5, 0.5 + 2e-8)
    result = run_gate(str(cand), str(base), default_config())
    tv = next(c for c in result.checks if c.name.startswith("tv_token_mean rise"))
    assert tv.estimate == pytest.approx(2.0, rel=1e-6)
    assert tv.status == "pass" and result.passed


def test_rule_rates_and_rule_parameters(write):
    # r = p/q per token: 0.4 (icepop alpha=0.5 rejects), 1.0, 6.0 (beta=5 rejects), 1.0 -> 2 of 4 tokens
    path = write(seqs([[(0.5, 0.2), (0.5, 0.5)], [(0.1, 0.6), (0.5, 0.5)]]), "r.parquet", PROBE_META)
    cfg = cfg_from(
        '[gate]\nbootstrap = 0\n[absolute]\n"icepop.token_reject_rate" = 1\n"icepop.sequences_with_rejection_rate" = 1\n'
    )
    r = run_gate(str(path), None, cfg)
    assert [c.estimate for c in r.checks] == pytest.approx([0.5, 1.0])  # both sequences have a rejected token
    assert all(c.method == "point" for c in r.checks)  # bootstrap = 0
    # alpha=0.3 keeps r=0.4: 1 of 4
    cfg2 = with_overrides(cfg, rules=["icepop:alpha=0.3"])
    assert run_gate(str(path), None, cfg2).checks[0].estimate == pytest.approx(0.25)
    # the [rules] table does the same
    cfg3 = cfg_from('[rules]\nicepop = { alpha = 0.3 }\n[absolute]\n"icepop.token_reject_rate" = 1\n')
    assert run_gate(str(path), None, cfg3).checks[0].estimate == pytest.approx(0.25)


def test_sequence_rule_and_hypothesis_rules(write):
    # k3-seq (delta 0.01) rejects a sequence whose mean k3 exceeds 0.01. Sequence 1: r = 2 -> k3 = 1 - log 2 = 0.307;
    # sequence 2: r = 1 -> k3 = 0. One of two sequences, 1 of 3 tokens.
    path = write(seqs([[(0.2, 0.4)], [(0.5, 0.5), (0.5, 0.5)]]), "k.parquet", PROBE_META)
    cfg = cfg_from(
        '[absolute]\n"k3-seq.sequence_reject_rate" = 1\n"k3-seq.token_reject_rate" = 1\n"ppo-clip.token_reject_rate" = 1\n'
    )
    seq_rate, tok_rate, ppo = run_gate(str(path), None, cfg).checks
    assert seq_rate.estimate == pytest.approx(0.5) and tok_rate.estimate == pytest.approx(1 / 3)
    # ppo-clip (eps_high 0.28, no advantage column): under A>0 the r=2 token is rejected (1 of 3), under A<0
    # nothing (r=2 is not below 0.8): the gate uses the mean of the two hypotheses, as compare-masks does
    assert ppo.estimate == pytest.approx(1 / 6)


def test_kpop_and_verl_rs_limits(write):
    # tokens (q, p): (0.5, 0.2) D(q||p) = 0.223144 > 0.1 -> kpop rejects; (0.5, 0.5) and (0.5, 0.5) keep; (0.5, 0.45):
    # D(q||p) = .5 ln(.5/.45) + .5 ln(.5/.55) = 0.052680 - 0.047655 = 0.005025, D(p||q) = 0.005008 -> keep. 1 of 4.
    path = write(seqs([[(0.5, 0.2), (0.5, 0.5)], [(0.5, 0.5), (0.5, 0.45)]]), "kv.parquet", PROBE_META)
    cfg = cfg_from(
        '[gate]\nbootstrap = 0\n[rules]\nverl-rs = { option = "seq_mean_k3", threshold = "0.01" }\n'
        '[absolute]\n"kpop.token_reject_rate" = 1\n"verl-rs.sequence_reject_rate" = 1\n'
    )
    kpop, verl = run_gate(str(path), None, cfg).checks
    assert kpop.estimate == pytest.approx(0.25)
    # seq_mean_k3: seq 1 mean k3 = (0.316291 + 0) / 2 = 0.158 > 0.01 -> rejected; seq 2: k3(ln .9) = -0.1 + 0.105361
    # = 0.005361, mean 0.00268 -> kept. 1 of 2 sequences
    assert verl.estimate == pytest.approx(0.5)
    # the level of verl-rs follows its option: token_k1 is a token rule, so a sequence rate is refused
    with pytest.raises(GateConfigError, match="^verl-rs is a token rule"):
        with_overrides(cfg, rules=["verl-rs:option=token_k1,threshold=2"])
    # a limit on verl-rs without its option and threshold: one line saying what to set
    with pytest.raises(GateConfigError) as e:
        cfg_from('[absolute]\n"verl-rs.token_reject_rate" = 1\n')
    assert str(e.value) == (
        "a limit names verl-rs, which has no default for option and threshold (set them in the config "
        "([rules] verl-rs = { option = ..., threshold = ... }) or with --rule verl-rs:...)"
    )


def test_score_centering_limits(write):
    # one token: sampled 5, sampler lists [3, 5] with q = [0.6, 0.3], trainer p = [0.5, 0.3], trainer top-k [3, 7]:
    # rho = (1 - 0.9) / (1 - 0.8) = 0.5, overlap 1/2
    cols = {
        "sequence_id": [1],
        "position": [0],
        "token_id": [5],
        "sampler_logprob": [math.log(0.3)],
        "trainer_logprob": [math.log(0.3)],
        "sampler_topk_ids": [[3, 5]],
        "sampler_topk_logprobs": [[math.log(0.6), math.log(0.3)]],
        "trainer_logprobs_at_sampler_topk": [[math.log(0.5), math.log(0.3)]],
        "trainer_topk_ids": [[3, 7]],
    }
    path = write(cols, "sc.parquet", PROBE_META)
    cfg = cfg_from(
        '[absolute]\n"score_centering.tail_mass_ratio.mean" = { min = 0.9 }\n'
        '"score_centering.topk_overlap.quantiles.0.5" = { min = 0.4 }\n'
    )
    rho, ov = run_gate(str(path), None, cfg).checks
    assert (rho.estimate, rho.status) == (pytest.approx(0.5), "fail") and (ov.estimate, ov.status) == (
        pytest.approx(0.5),
        "pass",
    )


def test_point_metrics_say_so(write):
    path = two_sequence_file(write)
    cfg = cfg_from('[absolute]\ntv_token_max = 0.2\n"ratio_quantiles.0.5" = { min = 1.0 }\n')
    tv_max, q50 = run_gate(str(path), None, cfg).checks
    # max |p - q| = 0.3 > 0.2: no interval for a max, so the point estimate decides
    assert (tv_max.estimate, tv_max.method, tv_max.status, tv_max.interval) == (
        pytest.approx(0.3),
        "point",
        "fail",
        None,
    )
    assert "no per-sequence bootstrap" in tv_max.explanation
    # r = 1.2, 1.6, 1.6, 1.6: the median 1.6 >= 1.0
    assert q50.estimate == pytest.approx(1.6) and q50.status == "pass"


def test_topk_metric_missing_is_an_input_error(write):
    from mismatchscope.errors import InputError

    path = two_sequence_file(write)
    with pytest.raises(InputError, match="no top-k columns"):
        run_gate(str(path), None, cfg_from("[absolute]\ntv_topk_lower_mean = 0.1\n"))
