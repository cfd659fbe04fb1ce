"""Rule parameters are read strictly: given twice, Python-only number spellings, ranges that rounding would make contradict themselves."""

from __future__ import annotations

import pytest

from mismatchscope.errors import UsageError
from mismatchscope.rules import (
    RULES,
    default_rules,
    parse_rule,
    parse_sweep,
)
from tests.helpers import SAMPLE_PAIRS, cli
from tests.inputs import error_line


@pytest.mark.parametrize(
    "rule, message",
    [
        (
            "icepop:alpha=0.2,alpha=0.3",
            "rule 'icepop': alpha is given twice in 'icepop:alpha=0.2,alpha=0.3' (give each parameter once)",
        ),
        ("icepop:beta=1_000", "rule 'icepop': parameter beta='1_000' is not a number"),  # float() would read 1000
        ("icepop:beta=\u0665", "rule 'icepop': parameter beta='\u0665' is not a number"),  # an Arabic-Indic 5
        # '_' separates verl's two bounds; float() would read 0.5 and 2_3 = 23
        (
            "verl-rs:option=token_k1,threshold=0.5_2_3",
            "rule 'verl-rs': threshold '0.5_2_3' for token_k1 is not 'L_U' or one number U (e.g. 0.5_2.0 or 2)",
        ),
        # 1.0000001 printed as :g would read "delta=1 is outside [0, 1]"
        ("ipo:delta=1.0000001", "rule 'ipo': delta=1.0000001 is outside its range [0, 1]"),
    ],
)
def test_rule_parameters_are_read_strictly(rule, message):
    r = cli("compare-masks", str(SAMPLE_PAIRS), "--rule", rule)
    assert error_line(r) == f"error: {message}"


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


def test_every_config_field_is_a_rule_param():
    # RuleInstance.params is typed dict[str, RuleParam]: a config field of another type would make it untrue
    import typing

    from mismatchscope.rules.base import RULES, RuleParam

    allowed = set(typing.get_args(RuleParam))
    for name, spec in RULES.items():
        for f, tp in typing.get_type_hints(spec.config_cls).items():
            parts = set(typing.get_args(tp)) or {tp}
            assert parts <= allowed, f"{name}.{f}: {tp}"
