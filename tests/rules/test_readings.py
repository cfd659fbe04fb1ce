"""Framework readings (``RULE@READING``) and the reference code's endpoints, on tokens derived by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mismatchscope.divergence import token_terms
from mismatchscope.errors import UsageError
from mismatchscope.rules import REJECT, RULES, make_instance, parse_rule
from mismatchscope.rules.readings import READINGS
from mismatchscope.rules.token import dppo_binary_kl
from tests.helpers import cli

# The endpoint table: (log q, log p, A), one token per sequence.
#   T1 q = 0.999, p = 1 (trainer logprob exactly 0), A > 0
#   T2 q = 1 (sampler logprob exactly 0), p = 0.5, A < 0
#   T3 q = p = 1, A > 0
#   T4 q = 0.999, log p = -1e-9 (p = 1 - 1e-9, as fp32 engines report confident tokens), A > 0
#   T5 q = 0.5, p = 0.25, A = 0
#   T6 q = 0.3, p = 0.5, A > 0: p - q is exactly 0.2 in float64
#   T7 q = 0.3, p = 0.15, A < 0: p - q is exactly -0.15
#   T8 q = 0.2, p = 0.4, A > 0: p - q exactly 0.2, r exactly 2
#   T9 q = 0.25, p = 0.75, A > 0: r = 3
TABLE = [
    (math.log(0.999), 0.0, 1.0),
    (0.0, math.log(0.5), -1.0),
    (0.0, 0.0, 1.0),
    (math.log(0.999), -1e-9, 1.0),
    (math.log(0.5), math.log(0.25), 0.0),
    (math.log(0.3), math.log(0.5), 1.0),
    (math.log(0.3), math.log(0.15), -1.0),
    (math.log(0.2), math.log(0.4), 1.0),
    (math.log(0.25), math.log(0.75), 1.0),
]
LQ = np.array([r[0] for r in TABLE])
LP = np.array([r[1] for r in TABLE])
ADV = np.array([r[2] for r in TABLE])
T = token_terms(LP, LQ)


def rejected(name: str, **params) -> list[int]:
    """1-based token numbers the rule (or reading) rejects on the table."""
    acts = make_instance(name, params).token_actions(T, ADV)
    return [i + 1 for i in np.flatnonzero(acts == REJECT)]


def test_the_table_is_what_the_comments_say():
    assert T.p_T[5] - T.q_T[5] == 0.2 and T.p_T[6] - T.q_T[6] == -0.15 and T.p_T[7] - T.q_T[7] == 0.2
    assert T.ratio_T[7] == 2.0 and T.p_T[0] == 1.0 and T.q_T[1] == 1.0


def test_dppo_kl_at_p_equal_1_follows_the_reference_code():
    # q = 0.999, p = 1, A > 0: D = q ln(q/p) + (1-q) ln((1-q+1e-8)/(1-p+1e-8))
    #   = 0.999 ln 0.999 + 0.001 ln(0.00100001 / 1e-8) = -0.00099950 + 0.001 * 11.5129355 = 0.0105134
    d = dppo_binary_kl(np.array([math.log(0.999)]), np.array([0.0]), 1e-8)
    assert d[0] == pytest.approx(0.999 * math.log(0.999) + 0.001 * math.log(0.00100001 / 1e-8), rel=1e-9)
    assert d[0] == pytest.approx(0.0105134, abs=1e-7)
    assert 1 not in rejected("dppo-kl")  # 0.0105 <= 0.05: kept
    assert 1 in rejected("dppo-kl", eps=0)  # without the epsilon D = 0.001 ln(0.001 / 0) = +inf: rejected


def test_dppo_kl_at_the_other_endpoints():
    d = dppo_binary_kl(LQ, LP, 1e-8)
    # T2 q = 1, p = 0.5: 1 * (0 - ln 0.5) + 0 * (...) = ln 2
    assert d[1] == pytest.approx(math.log(2), rel=1e-12)
    # T3 both 1: 0 + 0 = 0
    assert d[2] == 0
    # T4 log p = -1e-9: 1 - p = 1e-9 (-expm1), so 0.999 (ln 0.999 + 1e-9) + 0.001 ln(0.00100001 / 1.1e-8) = 0.0104181
    assert d[3] == pytest.approx(0.999 * (math.log(0.999) + 1e-9) + 0.001 * math.log(0.00100001 / 1.1e-8), rel=1e-6)
    # T5 q = 0.5, p = 0.25: 0.5 ln 2 + 0.5 ln(0.5 / 0.75) = 0.1438410
    assert d[4] == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75), rel=1e-6)


def test_dppo_kl_readings_on_the_table():
    # D per token (p moved the advantage's way in every token but T3):
    # T1 0.0105, T2 0.6931 (A<0, p<q), T4 0.0104, T5 0.1438 (A=0, p<q), T6 0.3 ln 0.6 + 0.7 ln 1.4 = 0.0823,
    # T7 0.3 ln 2 + 0.7 ln(0.7/0.85) = 0.0720 (A<0, p<q), T8 0.2 ln 0.5 + 0.8 ln(0.8/0.6) = 0.0915,
    # T9 0.25 ln(1/3) + 0.75 ln 3 = 0.5493
    # mismatchscope = verl (delta 0.05, A = 0 negative): T2, T5, T6, T7, T8, T9 -> 6
    for name in ("dppo-kl", "dppo-kl@verl"):
        assert rejected(name) == [2, 5, 6, 7, 8, 9], name
    # reference (its config default 0.2, A = 0 negative): T2 0.69, T9 0.55; T5's 0.1438 is kept -> 2
    assert rejected("dppo-kl@reference") == [2, 9]
    # skyrl (delta 0.2, A = 0 never masked): T2 0.69, T9 0.55 -> 2
    assert rejected("dppo-kl@skyrl") == [2, 9]
    # skyrl at mismatchscope's delta: the only difference left is A = 0 (T5) -> 5
    assert rejected("dppo-kl@skyrl", delta=0.05) == [2, 6, 7, 8, 9]
    # without the epsilon T1 (p = 1) joins: 7
    assert rejected("dppo-kl", eps=0) == [1, 2, 5, 6, 7, 8, 9]


def test_dppo_tv_readings_on_the_table():
    # p - q: T1 0.001, T2 -0.5, T3 0, T4 0.001, T5 -0.25 (A=0), T6 0.2, T7 -0.15, T8 0.2, T9 0.5
    # mismatchscope = verl (0.15 both ways, A = 0 negative): T2, T5 (-0.25 < -0.15), T6, T8 (0.2 > 0.15),
    # T9; T7 sits exactly on -0.15 and is kept (strict <) -> 5
    for name in ("dppo-tv", "dppo-tv@verl"):
        assert rejected(name) == [2, 5, 6, 8, 9], name
    # reference = prime-rl (0.2 both ways, A = 0 negative): T2, T5 (-0.25 < -0.2), T9; T6, T8 on 0.2 kept -> 3
    assert rejected("dppo-tv@reference") == [2, 5, 9]
    # skyrl (0.2, A = 0 never masked): T2, T9; T6 and T8 sit exactly on 0.2 (kept) -> 2
    assert rejected("dppo-tv@skyrl") == [2, 9]
    # prime-rl (0.2, A = 0 negative): T2, T5 (-0.25 < -0.2), T9 -> 3
    assert rejected("dppo-tv@prime-rl") == [2, 5, 9]


def test_ipo_icepop_and_kpop_readings_on_the_table():
    # |p - q|: T2 0.5, T5 0.25, T6 0.2, T7 0.15, T8 0.2, T9 0.5, the rest ~0.001 or 0
    assert rejected("ipo") == [2, 9]  # > 0.3
    assert rejected("ipo@prime-rl") == [2, 5, 6, 7, 8, 9]  # > 0.1
    # r: T1 1.001, T2 0.5, T5 0.5, T6 1.667, T7 0.5, T8 2 (exactly), T9 3; r = 0.5 sits on alpha and is kept
    assert rejected("icepop") == [] and rejected("icepop@verl") == []  # [0.5, 5]
    assert rejected("icepop@slime") == [9]  # [0, 2]: T8's r = 2 exactly is kept, T9's 3 is not
    assert rejected("icepop@areal") == []  # [0, 5]
    # kpop@verl (phi 2.0): the largest binary KL on the table is T2's, D(p||q) with p = 0.5, q = 1 clamped to
    # 1 - 1e-6: 0.5 ln(0.5/(1-1e-6)) + 0.5 ln(0.5/1e-6) = -0.34657 + 6.56118 = 6.2146 > 2 -> T2 only;
    # T9: D(0.75||0.25) = 0.75 ln 3 + 0.25 ln(1/3) = 0.5493 < 2
    assert rejected("kpop@verl") == [2]
    # kpop@areal (phi 5, p and q clamped to [1e-8, 1 - 1e-8]): T2's D(p||q) = 0.5 ln(0.5/(1-1e-8)) + 0.5 ln(0.5/1e-8)
    # = -0.34657 + 8.86374 = 8.5172 > 5; every other token's larger D stays below 0.55 (T9) -> T2 only
    assert rejected("kpop@areal") == [2]
    # the clamp decides at phi 7: AReaL's 1e-8 gives 8.5172 (rejected), prime-rl's 1e-6 gives 6.2146 (kept)
    assert rejected("kpop@areal", phi=7.0) == [2] and rejected("kpop@prime-rl", phi=7.0) == []


def test_k3_seq_in_areal_orientation(write):
    from mismatchscope.analysis.engine import AnalysisRequest, analyse

    path = write(
        {
            "sequence_id": list(range(len(TABLE))),
            "position": [0] * len(TABLE),
            "token_id": [7] * len(TABLE),
            "sampler_logprob": LQ.tolist(),
            "trainer_logprob": LP.tolist(),
            "advantage": ADV.tolist(),
        }
    )
    # one token per sequence, so the sequence mean is the token's value; l = ln r
    # k3 of r, (r-1) - l:     T2/T5/T7 (r = 0.5) 0.1931, T6 (r = 5/3) 0.1558, T8 (r = 2) 0.3069, T9 (r = 3) 0.9014
    # k3 of 1/r, (1/r-1) + l: T2/T5/T7 0.3069, T6 0.1108, T8 0.1931, T9 0.4319
    # at delta 0.2: r rejects T8, T9 -> 2 tokens; 1/r rejects T2, T5, T7, T9 -> 4 tokens
    rules = [parse_rule("k3-seq:delta=0.2"), parse_rule("k3-seq@areal:delta=0.2")]
    rows = analyse(str(path), AnalysisRequest(report=False, masks=True, rules=rules)).masks.rules
    assert {r.name: r.tokens_rejected for r in rows} == {"k3-seq": 2, "k3-seq@areal": 4}


@pytest.mark.slow
def test_side_by_side_counts_and_categories(write):
    path = write(
        {
            "sequence_id": list(range(len(TABLE))),
            "position": [0] * len(TABLE),
            "token_id": [7] * len(TABLE),
            "sampler_logprob": LQ.tolist(),
            "trainer_logprob": LP.tolist(),
            "advantage": ADV.tolist(),
        }
    )
    r = cli("compare-masks", str(path), "--readings", "dppo-tv", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = {row["reading"]: row for row in json.loads(r.stdout)["readings"]}
    assert {k: v["tokens_acted"] for k, v in rows.items()} == {
        "mismatchscope": 5,
        "reference": 3,
        "verl": 5,
        "skyrl": 2,
        "prime-rl": 3,
    }
    # skyrl parts from the defaults on T5 (A = 0) and T6, T8 (p - q exactly on its 0.2)
    assert rows["skyrl"]["differs_from_first"] == {"A = 0": 1, "p or q = 1": 0, "at threshold": 2, "other": 0}
    assert (rows["skyrl"]["first_only"], rows["skyrl"]["this_only"]) == (3, 0)
    # prime-rl: T6 and T8, on its threshold
    assert rows["prime-rl"]["differs_from_first"] == {"A = 0": 0, "p or q = 1": 0, "at threshold": 2, "other": 0}
    # parameters given after the readings hold in each: dppo-kl at 0.05 parts skyrl from the reference on T5 alone
    r = cli("compare-masks", str(path), "--readings", "dppo-kl@reference,skyrl:delta=0.05", "--format", "json")
    assert r.returncode == 0, r.stderr
    sky = json.loads(r.stdout)["readings"][1]
    assert sky["differs_from_first"] == {"A = 0": 1, "p or q = 1": 0, "at threshold": 0, "other": 0}


def test_a_trainer_logprob_of_0_is_its_own_category():
    from mismatchscope.analysis.side_by_side import CATEGORIES, Differences, categories

    rules = [make_instance("dppo-kl", {}), make_instance("dppo-kl", {"eps": 0})]
    d = Differences()
    acted = [r.token_actions(T, ADV) == REJECT for r in rules]
    d.add((1, "data"), categories(T, ADV, rules), acted[0], acted[1])
    # only T1 differs (D = 0.0105 with the epsilon, +inf without), and its p is exactly 1
    assert dict(zip(CATEGORIES, d.by_key[(1, "data")].tolist(), strict=True)) == {
        "A = 0": 0,
        "p or q = 1": 1,
        "at threshold": 0,
        "other": 0,
    }


@pytest.mark.slow
def test_a_rule_a_framework_lacks_names_the_rules_it_has():
    with pytest.raises(UsageError) as e:
        parse_rule("geo-mask@verl")
    assert "verl has no geo-mask" in str(e.value) and "dppo-tv, dppo-kl, icepop, kpop" in e.value.hint
    assert "verl-rs" in e.value.hint
    with pytest.raises(UsageError, match="unknown reading 'nope'"):
        parse_rule("icepop@nope")
    r = cli("compare-masks", "unused.parquet", "--rule", "k3-seq@slime")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: slime has no k3-seq (reading 'slime') (slime's reading has icepop, opsm)"
    ]


def test_every_reading_is_a_valid_instance_of_its_rule():
    for reading in READINGS.values():
        for rule, rr in reading.rules.items():
            inst = make_instance(f"{rule}@{reading.name}", {})
            assert inst.reading == reading.name and inst.name == f"{rule}@{reading.name}"
            assert {k: inst.params[k] for k in rr.params} == rr.params
            assert rr.file and rule in RULES
            assert parse_rule(inst.label).params == inst.params  # the label reads back as the same instance


def test_help_lists_the_readings():
    r = cli("compare-masks", "--help", env={"COLUMNS": "250"})
    assert r.returncode == 0
    for name in READINGS:
        assert f"{name}:" in r.stdout
    assert "--readings" in r.stdout


def test_gate_and_monitor_take_readings():
    from mismatchscope.gate.config import default_config, with_overrides
    from mismatchscope.live.monitor import Monitor

    cfg = with_overrides(
        default_config(),
        limits=["dppo-kl@skyrl.token_reject_rate<=0.5"],
        rules=["dppo-kl@skyrl:delta=0.05"],
        absolute_only=True,
    )
    (inst,) = [i for i in cfg.rule_instances() if i.name == "dppo-kl@skyrl"]
    assert inst.params == {"delta": 0.05, "eps": 1e-8, "zero_advantage": "keep"}
    m = Monitor(rules=["dppo-tv@skyrl", "icepop@slime"])
    assert [r.name for r in m.rules] == ["dppo-tv@skyrl", "icepop@slime"]
    out = m.add(0, LQ[:, None], LP[:, None], advantages=ADV)  # 9 sequences of one token
    # the step's rates are the table's counts over its 9 tokens: dppo-tv@skyrl 2, icepop@slime 1
    assert out["mismatch/dppo-tv@skyrl_reject_rate"] == pytest.approx(2 / 9)
    assert out["mismatch/icepop@slime_reject_rate"] == pytest.approx(1 / 9)


def test_readings_without_a_rule_say_so():
    from mismatchscope.analysis.side_by_side import parse_readings

    # once "names 1 reading(s) ... (e.g. --readings @mismatchscope,skyrl)": a hint that repeats the mistake
    with pytest.raises(UsageError, match=r"--readings '@skyrl' names no rule") as e:
        parse_readings("@skyrl")
    assert "dppo-kl" in e.value.hint
