"""The gate on hand-built files: bootstrap numbers derived by hand, check
semantics, comparability, configuration errors, exit codes and outputs.

Every number asserted here is derived in a comment from the tokens written.
The real-vLLM end-to-end checks live in ``tests/cli/test_gate.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import GateConfigError, IncomparableRunsError, UsageError
from mismatchscope.gate.bootstrap import interval, resample_sums, safe_ratio
from mismatchscope.gate.compare import compare_runs
from mismatchscope.gate.config import STARTER_TOML, default_config, load_config, with_overrides
from mismatchscope.gate.limits import lookup_metric
from mismatchscope.gate.run import run_gate
from tests.helpers import PROBE_META, REPO, cli, probe_meta, validate_junit

meta = probe_meta


def seqs(spec: list[list[tuple[float, float]]], first_id: int = 1) -> dict:
    """Columns from sequences of (q, p) probability pairs."""
    cols: dict[str, list] = {
        k: [] for k in ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob")
    }
    for s, tokens in enumerate(spec):
        for pos, (q, p) in enumerate(tokens):
            cols["sequence_id"].append(first_id + s)
            cols["position"].append(pos)
            cols["token_id"].append(7)
            cols["sampler_logprob"].append(math.log(q))
            cols["trainer_logprob"].append(math.log(p))
    return cols


def cfg_from(text: str):
    import tomllib

    from mismatchscope.gate.config import parse_config

    return parse_config(tomllib.loads(text), "test")


# ---- bootstrap ------------------------------------------------------------------------


def test_identical_sequences_give_a_zero_width_interval():
    # every row is (n=2, sum_tv=0.02): any resample of S=5 rows sums to (10, 0.1): the mean is 0.01 in every replicate
    X = np.tile([[2.0, 0.02]], (5, 1))
    S_B = resample_sums(X, 200, np.random.default_rng(0))
    assert np.allclose(S_B, [10.0, 0.1])
    lo, hi = interval(S_B[:, 1] / S_B[:, 0], 0.95)
    assert lo == pytest.approx(0.01) and hi == pytest.approx(0.01)


def test_two_sequence_bootstrap_by_hand():
    # sequence A: n=1, sum_tv=0.1; sequence B: n=3, sum_tv=0.9. A resample of 2 draws is
    #   (A, A) with probability 1/4 -> 0.2 / 2 = 0.1
    #   (A, B) with probability 1/2 -> 1.0 / 4 = 0.25
    #   (B, B) with probability 1/4 -> 1.8 / 6 = 0.3
    X = np.array([[1.0, 0.1], [3.0, 0.9]])
    S_B = resample_sums(X, 4000, np.random.default_rng(1))
    assert set(np.round(S_B[:, 0])) == {
        2.0,
        4.0,
        6.0,
    }  # always 2 draws: n = 2, 4 or 6 tokens, each seen in 4000 resamples
    means = S_B[:, 1] / S_B[:, 0]
    values, counts = np.unique(np.round(means, 12), return_counts=True)
    assert values.tolist() == [0.1, 0.25, 0.3]
    assert counts / 4000 == pytest.approx([0.25, 0.5, 0.25], abs=0.03)  # binomial sd ~0.008
    # the 95% interval is the 2.5th and 97.5th percentile replicate: the two extremes
    assert interval(means, 0.95) == pytest.approx((0.1, 0.3))


def test_bootstrap_is_seeded_and_blocked_consistently():
    X = np.random.default_rng(3).random((1000, 3))
    a = resample_sums(X, 50, np.random.default_rng(7))
    b = resample_sums(X, 50, np.random.default_rng(7))
    assert np.array_equal(a, b)
    # every replicate is a resample of 1000 rows: the counts sum to 1000, so the "ones" column would too
    ones = resample_sums(np.ones((1000, 1)), 50, np.random.default_rng(7))
    assert np.all(ones == 1000)


def test_interval_uses_order_statistics_and_keeps_infinities():
    x = np.arange(1, 101, dtype=float)  # 1..100
    # B=100, alpha=0.025: lower index floor(0.025*99)=2 -> 3; upper index ceil(0.975*99)=97 -> 98
    assert interval(x, 0.95) == (3.0, 98.0)
    assert interval(np.array([1.0, np.inf, np.inf, np.inf]), 0.5)[1] == np.inf
    assert safe_ratio(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.0, 4.0])).tolist() == [1.0, np.inf, 0.5]


# ---- checks on files, by hand ----------------------------------------------------------


def _two_seq_file(write, name="two.parquet", metadata=None):
    # A: one token q=0.5, p=0.6 -> tv 0.1; B: three tokens q=0.5, p=0.8 -> tv 0.3 each, 0.9 in all
    return write(seqs([[(0.5, 0.6)], [(0.5, 0.8)] * 3]), name, metadata)


@pytest.mark.parametrize(
    "limit, status, inconclusive",
    [
        (0.09, "fail", False),  # interval [0.1, 0.3]: even its lower end is above 0.09
        (0.2, "pass", True),  # point estimate 1.0 / 4 = 0.25 is above 0.2, but the interval reaches 0.1
        (0.35, "pass", False),  # everything below 0.35
    ],
)
def test_absolute_limit_judged_on_the_interval(write, limit, status, inconclusive):
    path = _two_seq_file(write)
    cfg = cfg_from(f"[gate]\nbootstrap = 2000\n[absolute]\ntv_token_mean = {{ max = {limit} }}\n")
    (check,) = run_gate(str(path), None, cfg).checks
    assert check.estimate == pytest.approx(0.25)
    assert check.interval == pytest.approx((0.1, 0.3))
    assert (check.status, check.inconclusive, check.method) == (status, inconclusive, "bootstrap")


def test_min_limit_fails_when_the_upper_end_is_below(write):
    path = _two_seq_file(write)
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
    path = _two_seq_file(write)
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

    path = _two_seq_file(write)
    with pytest.raises(InputError, match="no top-k columns"):
        run_gate(str(path), None, cfg_from("[absolute]\ntv_topk_lower_mean = 0.1\n"))


# ---- metric names and configuration -------------------------------------------------------


def test_metric_names():
    assert lookup_metric("tv_token_mean").bootstrapped
    assert lookup_metric("sequence_metrics.max_tv.mean").bootstrapped
    assert not lookup_metric("ratio_quantiles.0.99").bootstrapped
    assert not lookup_metric("ratio_tail_high.2").bootstrapped
    assert lookup_metric("icepop.token_reject_rate").rule == "icepop"
    with pytest.raises(GateConfigError, match="unknown metric 'tv_mean'.*valid metrics: tv_token_mean"):
        lookup_metric("tv_mean")
    with pytest.raises(GateConfigError, match="token rule"):
        lookup_metric("icepop.sequence_reject_rate")
    with pytest.raises(GateConfigError, match="never rejects"):
        lookup_metric("tis.token_reject_rate")
    with pytest.raises(GateConfigError, match="unknown rule statistic"):
        lookup_metric("icepop.reject_rate")


def test_starter_file_is_the_default(tmp_path):
    (tmp_path / "gate.toml").write_text(STARTER_TOML)
    from_file = load_config(None, cwd=tmp_path)
    defaults = default_config()
    assert from_file.absolute == defaults.absolute and from_file.regression == defaults.regression
    assert (defaults.bootstrap, defaults.confidence, defaults.seed) == (1000, 0.95, 0)
    assert {r.metric for r in defaults.regression} == {
        "tv_token_mean",
        "abs_logprob_diff_mean",
        "k3_mean",
        "icepop.token_reject_rate",
        "ipo.token_reject_rate",
    }
    assert dict((a.metric, a.max) for a in defaults.absolute)["tv_token_mean"] == 0.01  # verl's yardstick
    assert load_config(None, cwd=tmp_path / "nowhere").source == "built-in defaults"


def test_flags_override_the_file():
    cfg = default_config()
    out = with_overrides(
        cfg,
        limits=["tv_token_mean<=0.005", "ess>=0.9"],
        increases=["k3_mean=50%"],
        bootstrap=10,
        allow_different=["seed"],
    )
    ab = {a.metric: a for a in out.absolute}
    assert ab["tv_token_mean"].max == 0.005 and ab["ess"].min == 0.9 and len(out.absolute) == len(cfg.absolute) + 1
    k3 = next(r for r in out.regression if r.metric == "k3_mean")
    assert k3.max_increase == 0.5 and k3.floor == 1e-6  # the file's floor is kept
    assert out.bootstrap == 10 and out.allow_different == ("seed",)
    assert with_overrides(cfg, absolute_only=True).regression == ()
    with pytest.raises(GateConfigError, match="cannot parse --limit"):
        with_overrides(cfg, limits=["tv_token_mean=0.1"])
    with pytest.raises(GateConfigError, match="lower is worse"):
        with_overrides(cfg, increases=["ess=10%"])
    with pytest.raises(GateConfigError, match="confidence"):
        with_overrides(cfg, confidence=1.5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[gate\n", "is not valid TOML"),
        ("[regresion]\n", "unknown table 'regresion'"),
        ("[gate]\nbootstrap = -1\n", "bootstrap must be an integer between 0 and 100,000, got -1"),
        (
            "[gate]\nbootstrap = 1000000000000\n",
            "bootstrap must be an integer between 0 and 100,000, got 1000000000000",
        ),
        ("[absolute]\nbogus = 1\n", "unknown metric 'bogus'"),
        ("[absolute]\ntv_token_mean = { maximum = 1 }\n", "unknown key 'maximum'"),
        ("[regression]\nk3_mean = { floor = 1e-6 }\n", "max_increase is missing"),
        ("[regression]\nk1_mean = 0.25\n", "no 'worse' direction"),
        ("[rules]\nicepop = { gamma = 2 }\n", "valid parameters of icepop"),
        (
            "[rules]\nipo = { delta = -0.1 }\n",
            r"gate.toml \[rules\]: rule 'ipo': delta=-0.1 is outside its range \[0, 1\]",
        ),
        ('[gate]\nallow_different = ["colour"]\n', "not a comparability key"),
    ],
)
def test_bad_config_files(tmp_path, text, message):
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(GateConfigError, match=message):
        load_config(path)


# ---- comparability ---------------------------------------------------------------------------


def test_comparability():
    ok = compare_runs(meta(), meta(sampler={"dtype": "float16"}))
    assert ok.checked and [d.change() for d in ok.serving] == ["sampler.dtype: 'float32' -> 'float16'"]
    with pytest.raises(IncomparableRunsError) as e:
        compare_runs(meta(), meta(checkpoint={"sha256": "c" * 64}, sampling={"seed": 1, "temperature": 0.7}))
    text = str(e.value)
    for bit in (
        "checkpoint.sha256 differs",
        "sampling.seed differs (baseline 0, candidate 1)",
        "sampling.temperature differs",
        "--allow-different checkpoint",
        "--allow-different seed",
        "--allow-different sampling.temperature",
    ):
        assert bit in text
    allowed = compare_runs(meta(), meta(sampling={"seed": 1}), ["seed"])
    assert [d.key for d in allowed.differences] == ["sampling.seed"]
    assert compare_runs(meta(), meta(trainer={"dtype": "bfloat16"}), ["trainer"]).checked
    with pytest.raises(IncomparableRunsError, match="trainer.dtype differs"):
        compare_runs(meta(), meta(trainer={"dtype": "bfloat16"}))
    foreign = compare_runs(meta(), None)
    assert not foreign.checked and "comparability could not be checked" in foreign.warning


def test_a_trainer_checkpoint_other_than_the_samplers_must_be_allowed():
    """The trainer's weights are compared as a relation: "the sampler's", or another digest (policy lag)."""
    sampler = PROBE_META["checkpoint"]["sha256"]
    same = {"path": "copy", "sha256": sampler, "same_as_sampler": True}
    later = {"path": "later", "sha256": "d" * 64, "same_as_sampler": False}
    # runs from before the key, and runs whose trainer checkpoint has the sampler's weights, compare equal
    assert compare_runs(meta(), meta(trainer_checkpoint=same)).differences == []
    with pytest.raises(IncomparableRunsError) as e:
        compare_runs(meta(), meta(trainer_checkpoint=later))
    assert str(e.value) == (
        "baseline and candidate are not comparable: trainer.checkpoint differs (baseline the sampler's, "
        "candidate dddddddddddd...) (only the serving stack should differ; if the difference is "
        "intended, pass --allow-different trainer.checkpoint)"
    )
    for allow in (["trainer.checkpoint"], ["trainer"]):
        ok = compare_runs(meta(trainer_checkpoint=same), meta(trainer_checkpoint=later), allow)
        assert [d.change() for d in ok.differences] == ["trainer.checkpoint: the sampler's -> dddddddddddd..."]
    # both lagging on the same later weights: nothing differs
    assert compare_runs(meta(trainer_checkpoint=later), meta(trainer_checkpoint=later)).differences == []
    # another main checkpoint without lag differs in checkpoint alone
    other = meta(checkpoint={"sha256": "e" * 64}, trainer_checkpoint={"sha256": "e" * 64, "same_as_sampler": True})
    assert [d.key for d in compare_runs(meta(), other, ["checkpoint"]).differences] == ["checkpoint.sha256"]


def test_regression_without_baseline_is_a_usage_error(write):
    with pytest.raises(UsageError, match="need a baseline"):
        run_gate(str(_two_seq_file(write)), None, default_config())


# ---- the console script ------------------------------------------------------------------------


@pytest.fixture
def pair(write):
    """A comparable baseline/candidate pair (fp32 vs fp16 sampler metadata) plus a worse candidate."""
    rng = np.random.default_rng(0)

    def cols(sigma, seed):
        r = np.random.default_rng(seed)
        n_seq, length = 60, 20
        lq = -r.exponential(0.8, n_seq * length)
        lp = np.minimum(lq + r.normal(0, sigma, lq.size), 0.0)
        return {
            "sequence_id": np.repeat(np.arange(n_seq), length),
            "position": np.tile(np.arange(length), n_seq),
            "token_id": rng.integers(0, 100, lq.size),
            "sampler_logprob": lq,
            "trainer_logprob": lp,
        }

    base = write(cols(0.002, 1), "base.parquet", meta())
    same = write(cols(0.002, 2), "same.parquet", meta())
    worse = write(cols(0.02, 3), "worse.parquet", meta(sampler={"dtype": "float16"}))
    return base, same, worse


def test_cli_exit_codes_and_table(pair, tmp_path):
    base, same, worse = pair
    r = cli("gate", str(same), "--baseline", str(base), env={"COLUMNS": "200"})  # wide: one table, one row a check
    assert r.returncode == 0, r.stderr
    assert "PASS: all 8 checks hold" in r.stdout
    # each bootstrapped check prints its interval around the estimate: a real interval of nonzero width
    est, lo, hi = map(
        float, re.search(r"tv_token_mean <= 0\.01 .*?│ +([\d.e-]+) │ +\[([\d.e-]+), ([\d.e-]+)\]", r.stdout).groups()
    )
    assert lo < est < hi
    r = cli("gate", str(worse), "--baseline", str(base))
    assert r.returncode == 1, r.stderr
    assert "FAIL" in r.stdout and "k3_mean rise <= +25%" in r.stdout
    assert "sampler.dtype: 'float32' -> 'float16'" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--limit", "nope<=1"], "unknown metric 'nope'"),
        (["--config", "{bad}"], "is not valid TOML"),
        (["--config", "{missing}"], "not found"),
        (["--baseline", "{incomparable}"], "not comparable: sampling.seed differs"),
        (["--baseline", "{nofile}"], "no such file"),
        ([], "need a baseline"),
        (["--allow-different", "colour", "--baseline", "{base}"], "not a comparability key"),
    ],
)
def test_cli_errors_exit_2(pair, tmp_path, write, args, message):
    base, same, worse = pair
    bad = tmp_path / "bad.toml"
    bad.write_text("[gate\nseed = 1\n")
    incomparable = write(pq.read_table(same).to_pydict(), "other_seed.parquet", meta(sampling={"seed": 1}))
    subs = {
        "{bad}": str(bad),
        "{missing}": str(tmp_path / "missing.toml"),
        "{incomparable}": str(incomparable),
        "{nofile}": str(tmp_path / "nofile.parquet"),
        "{base}": str(base),
    }
    r = cli("gate", str(same), *[subs.get(a, a) for a in args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_allow_different_and_foreign_files(pair, write, tmp_path):
    base, same, _ = pair
    other_seed = write(pq.read_table(same).to_pydict(), "seed1.parquet", meta(sampling={"seed": 1}))
    r = cli("gate", str(other_seed), "--baseline", str(base), "--allow-different", "seed")
    assert r.returncode == 0, r.stderr
    assert "allowed to differ: sampling.seed differs (baseline 0, candidate 1)" in r.stdout
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table(pq.read_table(same).to_pydict()), foreign)  # no mismatchscope metadata
    r = cli("gate", str(foreign), "--baseline", str(base))
    assert r.returncode == 0, r.stderr
    assert "comparability could not be checked" in r.stderr


def test_cli_reads_gate_toml_from_the_current_directory(pair, tmp_path):
    base, same, _ = pair
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(
        [str(Path(sys.executable).with_name("mismatchscope")), "gate", "--init"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and (work / "gate.toml").read_text() == STARTER_TOML
    r = subprocess.run(
        [str(Path(sys.executable).with_name("mismatchscope")), "gate", "--init"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "already exists" in r.stderr
    (work / "gate.toml").write_text("[absolute]\ntv_token_mean = 1e-9\n")  # certain to fail
    r = subprocess.run(
        [str(Path(sys.executable).with_name("mismatchscope")), "gate", str(same), "--format", "json"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["config"]["source"].endswith("gate.toml") and [c["name"] for c in data["checks"]] == [
        "tv_token_mean <= 1e-09"
    ]


def test_cli_json_is_reproducible(pair):
    base, same, _ = pair
    runs = [cli("gate", str(same), "--baseline", str(base), "--format", "json", "--bootstrap", "300") for _ in range(2)]
    assert all(r.returncode == 0 for r in runs)
    a, b = (json.loads(r.stdout) for r in runs)
    assert a["checks"] == b["checks"]
    check = a["checks"][0]
    for key in (
        "name",
        "metric",
        "kind",
        "method",
        "status",
        "limit",
        "op",
        "estimate",
        "interval",
        "candidate",
        "baseline",
        "difference",
        "difference_interval",
        "floor",
        "inconclusive",
        "explanation",
    ):
        assert key in check
    assert a["verdict"] == "pass" and a["comparability"]["checked"] is True
    assert a["candidate"]["run"]["sampling"]["seed"] == 0
    other = json.loads(
        cli("gate", str(same), "--baseline", str(base), "--format", "json", "--bootstrap", "300", "--seed", "5").stdout
    )
    assert other["checks"][0]["estimate"] == check["estimate"]  # the point estimate does not depend on the seed


def test_junit_markdown_and_step_summary(pair, tmp_path):
    base, _, worse = pair
    junit, md, summary = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md", tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    r = cli(
        "gate",
        str(worse),
        "--baseline",
        str(base),
        "--junit-xml",
        str(junit),
        "--markdown",
        str(md),
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.returncode == 1, r.stderr
    validate_junit(junit)
    root = ET.parse(junit).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 8 == int(root.get("tests"))
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert int(root.get("failures")) == len(failed) and "k3_mean rise <= +25%" in failed
    assert "tv_token_mean <= 0.01" not in failed

    text = md.read_text()
    _assert_markdown_table(text, rows=8)
    assert "❌ mismatchscope gate: fail" in text and "`sampler.dtype: 'float32' -> 'float16'`" in text
    assert summary.read_text() == "# earlier step\n" + text + "\n"  # appended, not overwritten


def _assert_markdown_table(text: str, rows: int) -> None:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    types = [t.type for t in tokens]
    assert "table_open" in types, "the summary does not render as a table"
    assert types.count("tr_open") == rows + 1  # header + one row per check


def test_help_stays_light():
    code = "import sys, mismatchscope.cli.main; bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'scipy', 'torch', 'vllm')]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    r = cli("gate", "--help")
    assert r.returncode == 0 and "--baseline" in r.stdout and "--allow-different" in r.stdout


def test_readme_documents_the_starter_keys():
    readme = (REPO / "docs" / "gate.md").read_text()
    for key in (
        "bootstrap",
        "confidence",
        "seed",
        "allow_different",
        "max_increase",
        "floor",
        "[absolute]",
        "[regression]",
        "[rules]",
        "--allow-different",
        "--junit-xml",
        "--markdown",
        "GITHUB_STEP_SUMMARY",
        "examples/gate-workflow.yml",
    ):
        assert key in readme, key
    assert (REPO / "examples" / "gate-workflow.yml").is_file()
    assert os.path.getsize(REPO / "examples" / "gate-workflow.yml") > 500


def test_same_data_is_a_deterministic_rerun_unless_the_run_records_are_the_same(tmp_path):
    """Two probes of one stack at one seed write the same bytes: the expected case of a determinism check.

    The golden probe copied twice is a copy (the same manifest, start time and timings); the same data with
    the second run's own manifest (another session start, other measured seconds) is two runs that agree to
    the bit, which the gate says in a note, not a warning."""
    golden = REPO / "tests" / "data" / "golden-probe"
    base = shutil.copytree(golden, tmp_path / "base")
    copy = shutil.copytree(golden, tmp_path / "copy")
    rerun = shutil.copytree(golden, tmp_path / "rerun")
    manifest = json.loads((rerun / "manifest.json").read_text())
    manifest["sessions"] = [{"started_at": "2030-01-01T00:00:00+00:00", "resumed": False, "sampling_seconds": 4.9}]
    (rerun / "manifest.json").write_text(json.dumps(manifest))
    lenient = ["--format", "json", "--bootstrap", "50", "--limit", "tv_token_mean<=1"]

    r = cli("gate", str(copy), "--baseline", str(base), *lenient)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["notes"] == [] and any(w.endswith("is it a copy?") for w in doc["warnings"]), doc["warnings"]
    assert "the same run records" in r.stderr

    r = cli("gate", str(rerun), "--baseline", str(base), *lenient)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert not any("copy" in w for w in doc["warnings"]) and "warning: the baseline" not in r.stderr
    assert doc["notes"] == [
        f"the baseline {base} holds the same data as the candidate (same sizes, identical Parquet footers), from "
        "two runs (their run records differ): the two runs are bit-identical: the stack is deterministic at seed 0"
    ]
    assert "deterministic at seed 0" in r.stderr


def test_bootstrap_leaves_an_infinite_sequence_out_of_the_resamples_that_did_not_draw_it():
    """X = [1, inf] over two sequences: a resample draws 2 indices of {0, 1}; counts (2, 0) sum to 2 * 1 = 2
    (finite: sequence 1 was not drawn), any count of sequence 1 gives inf. The product alone gave
    2 * 1 + 0 * inf = NaN there, with numpy's "invalid value" warning on stderr."""
    import warnings

    X = np.array([[1.0, 1.0], [np.inf, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sums = resample_sums(X, 200, np.random.default_rng(0))
    left_out = sums[:, 1] == 2.0  # column 1 is finite: its sum 2 means both draws were sequence 0
    assert left_out.any() and (~left_out).any()
    assert np.array_equal(sums[left_out, 0], np.full(left_out.sum(), 2.0))
    assert np.isinf(sums[~left_out, 0]).all()
    assert not np.isnan(sums).any()
