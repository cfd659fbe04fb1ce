"""The audit's columns on tokens whose decisions and statistics are derived by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.audit import DECISIONS, SEQUENCES_FILE, TOKENS_FILE
from mismatchscope.audit.columns import METADATA_KEY
from mismatchscope.rules import RULES
from tests.helpers import cli, pairs
from tests.inputs import ROWS


@pytest.fixture
def audit(tmp_path, write):
    path = write(pairs(ROWS))
    out = tmp_path / "audit"
    r = cli("compare-masks", str(path), "--write", str(out))
    assert r.returncode == 0, r.stderr
    tokens = pq.read_table(out / TOKENS_FILE).to_pydict()
    sequences = pq.read_table(out / SEQUENCES_FILE).to_pydict()
    return tokens, sequences, out


def test_decisions_weights_and_statistics_by_hand(audit):
    tokens, sequences, _ = audit
    # ROWS as (sequence, position, q, p): r = p/q = 0.4, 3, 1, 2e-5, 1
    assert tokens["sequence_id"] == [1, 1, 1, 2, 2] and tokens["position"] == [0, 1, 2, 0, 1]
    assert tokens["ratio"] == pytest.approx([0.4, 3.0, 1.0, 2e-5, 1.0])
    # icepop keeps [0.5, 5]: 0.4 and 2e-5 fall below alpha
    assert tokens["icepop"] == ["reject", "keep", "keep", "reject", "keep"]
    # tis truncates r > C = 2: only r = 3, to a weight of 2; elsewhere the weight is the ratio (null here)
    assert tokens["tis"] == ["keep", "reweight", "keep", "keep", "keep"]
    assert tokens["tis.weight"] == [None, 2.0, None, None, None]
    # cispo clips outside [1 - 1, 1 + 4] = [0, 5]: nothing here
    assert set(tokens["cispo"]) == {"keep"}
    # kpop at (q, p) = (0.2, 0.6): D(q||p) = 0.2 ln(1/3) + 0.8 ln 2 = 0.33480, D(p||q) = 0.6 ln 3 + 0.4 ln 0.5 = 0.38191
    assert tokens["binary_kl_max"][1] == pytest.approx(0.6 * math.log(3) + 0.4 * math.log(0.5), rel=1e-9)
    assert tokens["kpop"][1] == "reject"  # 0.38 > phi = 0.1
    # ipo's |p - q| is dppo-tv's p - q without its sign: stored once, as p_minus_q
    assert "abs_p_minus_q" not in tokens
    assert np.abs(tokens["p_minus_q"]) == pytest.approx([0.3, 0.4, 0.0, 0.5 - 1e-5, 0.0])
    # no advantage column: the rules that read its sign get one column per hypothesis
    assert "dppo-tv [A>0]" in tokens and "dppo-tv [A<0]" in tokens and "dppo-tv" not in tokens
    # p - q = -0.3 at (1, 0): past -delta_low = -0.15 on the negative branch only
    assert tokens["dppo-tv [A<0]"][0] == "reject" and tokens["dppo-tv [A>0]"][0] == "keep"
    # sequence 1: prod r = 0.4 * 3 * 1 = 1.2; sequence 2: 2e-5 (below seq-mis's 0.5 and veto's 1e-4)
    assert sequences["sequence_id"] == [1, 2] and sequences["tokens"] == [3, 2]
    assert sequences["seq_log_ratio"] == pytest.approx([math.log(1.2), math.log(2e-5)])
    assert sequences["seq-mis"] == ["keep", "reject"] and sequences["veto"] == ["keep", "reject"]
    assert sequences["min_ratio"] == pytest.approx([0.4, 2e-5])
    assert sequences["seq-tis"] == ["keep", "keep"] and sequences["seq-tis.weight"] == [None, None]


def test_the_files_describe_themselves(audit):
    _, _, out = audit
    meta = json.loads(pq.read_schema(out / TOKENS_FILE).metadata[METADATA_KEY])
    assert meta["audit_schema_version"] == 2 and meta["decisions"] == list(DECISIONS)
    by_column = {r["column"]: r for r in meta["rules"]}
    assert by_column["tis"]["weight"] == "tis.weight" and by_column["tis"]["statistics"] == ["ratio"]
    assert by_column["dppo-tv [A>0]"]["hypothesis"] == "A>0" and by_column["kpop"]["params"]["phi"] == 0.1
    assert set(meta["statistics"]) == {"ratio", "binary_kl_max", "p_minus_q", "binary_kl_qp"}
    assert meta["absolute_of"] == {"abs_p_minus_q": {"column": "p_minus_q", "doc": "|p - q|"}}
    assert by_column["ipo"]["statistics"] == ["abs_p_minus_q"]
    seq = json.loads(pq.read_schema(out / SEQUENCES_FILE).metadata[METADATA_KEY])
    assert seq["tokens"] == 5 and seq["sequences"] == 2 and {r["level"] for r in seq["rules"]} == {"sequence"}


def test_every_rule_says_what_it_thresholds_and_every_reweighting_rule_its_weight():
    for name, spec in RULES.items():
        assert spec.statistics, f"{name} names no statistic"
        assert (spec.weight is not None) == (spec.acts == "reweight"), name


def test_a_statistic_off_its_default_gets_a_column_of_its_own(tmp_path, write):
    path = write(pairs(ROWS))
    out = tmp_path / "audit"
    r = cli("compare-masks", str(path), "--rule", "kpop", "--rule", "kpop:eps=0", "--write", str(out))
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out / TOKENS_FILE)
    # the two instances share a name: their columns take their labels, and eps=0 its own statistic
    assert {"kpop:phi=0.1,eps=1e-06", "kpop:phi=0.1,eps=0", "binary_kl_max", "binary_kl_max[eps=0]"} <= set(
        t.column_names
    )
    np.testing.assert_allclose(t["binary_kl_max"].to_numpy(), t["binary_kl_max[eps=0]"].to_numpy(), rtol=1e-5)


def test_an_absolute_statistic_is_its_signed_columns_absolute_value_to_the_bit(tmp_path, write):
    """ipo thresholds |p - q|, dppo-tv p - q: with both, the file holds p_minus_q alone, and its absolute value is
    ipo's statistic bit for bit; with ipo alone, abs_p_minus_q is a column of its own."""
    from mismatchscope.divergence import token_terms

    path = write(pairs(ROWS))
    both, alone = tmp_path / "both", tmp_path / "alone"
    for out, rules in ((both, ("ipo", "dppo-tv")), (alone, ("ipo",))):
        args = [a for r in rules for a in ("--rule", r)]
        r = cli("compare-masks", str(path), *args, "--write", str(out))
        assert r.returncode == 0, r.stderr
    signed = pq.read_table(both / TOKENS_FILE)
    own = pq.read_table(alone / TOKENS_FILE)
    assert "abs_p_minus_q" not in signed.column_names and "p_minus_q" not in own.column_names
    run = pq.read_table(path)
    tv = token_terms(run["trainer_logprob"].to_numpy(), run["sampler_logprob"].to_numpy()).tv_T
    np.testing.assert_array_equal(np.abs(signed["p_minus_q"].to_numpy()).view(np.int64), tv.view(np.int64))
    np.testing.assert_array_equal(own["abs_p_minus_q"].to_numpy().view(np.int64), tv.view(np.int64))
    meta = json.loads(own.schema.metadata[METADATA_KEY])
    assert "abs_p_minus_q" in meta["statistics"] and meta["absolute_of"] == {}


def test_every_column_but_the_weights_is_required(audit):
    """Keys, decisions and statistics have a value on every row: written as required columns (no definition
    level per value to encode); a weight is null where its rule leaves the ratio as it is."""
    _, _, out = audit
    for name in (TOKENS_FILE, SEQUENCES_FILE):
        f = pq.ParquetFile(out / name)
        optional = {
            f.schema.column(i).name for i in range(f.metadata.num_columns) if f.schema.column(i).max_definition_level
        }
        assert optional == {c for c in f.schema_arrow.names if c.endswith(".weight")}, name
        assert optional == {field.name for field in f.schema_arrow if field.nullable}, name


def test_statistics_evaluated_slice_by_slice_are_those_of_the_whole_batch():
    """The audit evaluates each statistic a slice of tokens at a time (a slice's temporaries stay in the cache):
    every value must be the bit the statistic gives on the whole batch, edges included (p or q at 0 and 1, the
    clamps of the binary KLs, a ratio that overflows), across slices and a short last one."""
    from mismatchscope.analysis.masks import build_units
    from mismatchscope.audit.columns import SLICE_ROWS, AuditLayout
    from mismatchscope.divergence import token_terms
    from mismatchscope.rules import default_rules, parse_rule

    rng = np.random.default_rng(7)
    n = 2 * SLICE_ROWS + 123
    lq = np.log(rng.uniform(1e-9, 1.0, n))
    lp = lq + rng.normal(0.0, 0.3, n)
    lp[:5], lq[:5] = [0.0, -1e-9, -800.0, 0.0, -1e-300], [-1e-9, 0.0, -1.0, -800.0, 0.0]
    lp = np.minimum(lp, 0.0)
    rules = [
        *default_rules(),
        parse_rule("kpop:eps=0"),
        parse_rule("dppo-kl:eps=0"),
        parse_rule("verl-rs:option=token_k3,threshold=0.01"),
    ]
    layout = AuditLayout.of(build_units(rules, [], True), (), "test")
    t = token_terms(lp, lq)
    sliced = layout._token_statistics(t)
    assert len(sliced) == len(layout.token_statistics) >= 6
    for values, (name, (st, config)) in zip(sliced, layout.token_statistics.items(), strict=True):
        whole = np.asarray(st.fn(config, token_terms(lp, lq)), dtype=np.float64)
        assert values.shape == (n,)
        np.testing.assert_array_equal(values.view(np.int64), whole.view(np.int64), err_msg=name)
