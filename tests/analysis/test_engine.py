"""The streaming analysis pass: report and compare-masks numbers on tiny
tables derived by hand, streaming == one-shot, what is counted and excluded.
The top-k bounds, quantiles, threads and the per-sequence reduction are
checked beside their modules."""

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mismatchscope.analysis.engine import AnalysisRequest, analyse, make_plan, run_plan
from mismatchscope.documents import to_json
from mismatchscope.errors import InputError
from mismatchscope.rules import default_rules, parse_rule, parse_sweep
from tests.helpers import pairs, random_pairs
from tests.inputs import ROWS

# seq 1: A q=0.5 p=0.2 (r 0.4), B q=0.2 p=0.6 (r 3), C q=p=0.9; seq 2: D q=0.5 p=1e-5 (r 2e-5), E q=p=0.5


def run(path, report=True, masks=False, rules=None, **kw):
    return analyse(str(path), AnalysisRequest(report=report, masks=masks, rules=rules or [], **kw))


def test_report_hand_derived(write):
    path = write(pairs(ROWS))
    m = run(path).report.metrics
    # tv = [0.3, 0.4, 0, 0.49999, 0] -> mean 1.19999 / 5 = 0.239998, max 0.49999
    assert m.tv_token_mean == pytest.approx(0.239998, abs=1e-6)
    assert m.tv_token_max == pytest.approx(0.49999, abs=1e-9)
    # |l| = [0.916291, 1.098612, 0, 10.819778, 0] -> mean 12.834681 / 5 = 2.566936
    assert m.abs_logprob_diff_mean == pytest.approx(2.566936, abs=1e-6)
    assert m.abs_logprob_diff_max == pytest.approx(10.819778, abs=1e-6)
    # k1 = -l: (0.916291 - 1.098612 + 10.819778) / 5 = 2.127491
    assert m.k1_mean == pytest.approx(2.127491, abs=1e-6)
    # k3 = [0.316291, 0.901388, 0, 9.819798, 0] -> 11.037477 / 5 = 2.207495
    assert m.k3_mean == pytest.approx(2.207495, abs=1e-6)
    # r = [0.4, 3, 1, 2e-5, 1]: sum 5.40002, sum r^2 = 0.16 + 9 + 1 + 4e-10 + 1 = 11.16
    # chi2 = 11.16 / 5 - 1 = 1.232; ess = 5.40002^2 / (5 * 11.16) = 0.522585
    assert m.chi2_token == pytest.approx(1.232, abs=1e-6)
    assert m.ess == pytest.approx(0.522585, abs=1e-6)
    assert m.ratio_min == pytest.approx(2e-5, rel=1e-9) and m.ratio_max == pytest.approx(3.0, rel=1e-12)
    # sorted r = [2e-5, 0.4, 1, 1, 3]; linear quantile 0.5 -> 1; 0.95 -> index 3.8 -> 1 + 0.8 * 2 = 2.6
    assert m.ratio_quantiles["0.5"] == pytest.approx(1.0)
    assert m.ratio_quantiles["0.95"] == pytest.approx(2.6)
    # tails: r > 1.25: {3} = 1/5; r > 5: none; r < 0.8: {0.4, 2e-5} = 2/5; r < 0.1: {2e-5} = 1/5
    assert m.ratio_tail_high == {"1.25": 0.2, "2": 0.2, "5": 0.0, "10": 0.0}
    assert m.ratio_tail_low == {"1.25": 0.4, "2": 0.4, "5": 0.2, "10": 0.2}
    # S = [log 1.2, log 2e-5] -> mean (0.182322 - 10.819778) / 2 = -5.318728
    assert m.seq_log_ratio_mean == pytest.approx(-5.318728, abs=1e-6)
    # geo = [1.2^(1/3), (2e-5)^(1/2)] = [1.062659, 0.004472] -> mean 0.533566
    assert m.geo_ratio_mean == pytest.approx(0.533566, abs=1e-6)
    assert m.tv_topk_lower_mean is None


def test_sequence_metrics_and_breakdowns(write):
    rep = run(write(pairs(ROWS))).report
    s = rep.sequence_metrics
    # max_tv per sequence = [0.4, 0.49999] -> mean 0.449995
    assert s.max_tv.mean == pytest.approx(0.449995, abs=1e-9)
    # log_ppl_diff = mean lq - mean lp = -mean l = [-0.060774, 5.409889] -> mean 2.674557
    assert s.log_ppl_diff.mean == pytest.approx(2.674557, abs=1e-6)
    # chi2_seq = mean(exp(2 S)) - 1 = (1.44 + 4e-10) / 2 - 1 = -0.28
    assert s.chi2_seq == pytest.approx(-0.28, abs=1e-9)
    by_q = {r.bucket: r for r in rep.breakdowns.sampler_prob}
    # q buckets: 0.2 -> [0.1, 0.5); 0.5, 0.5, 0.5 -> [0.5, 0.9); 0.9 -> [0.9, 1]
    assert by_q["[0.1, 0.5)"].tokens == 1 and by_q["[0.5, 0.9)"].tokens == 3 and by_q["[0.9, 1]"].tokens == 1
    # tv in [0.5, 0.9): (0.3 + 0.49999 + 0) / 3
    assert by_q["[0.5, 0.9)"].tv_token_mean == pytest.approx(0.79999 / 3)
    # positions 0..2: longest completion has 3 tokens -> one bucket per position
    by_pos = {r.bucket: r.tokens for r in rep.breakdowns.position}
    assert by_pos == {"0": 2, "1": 2, "2": 1}
    assert rep.breakdowns.entropy is None


def test_compare_masks_hand_derived(write):
    adv = [1.0, 1.0, 1.0, -1.0, -1.0]
    res = run(write(pairs(ROWS, advantage=adv)), report=False, masks=True, rules=default_rules())
    rows = {r.name: r for r in res.masks.rules}
    assert all(r.hypothesis == "data" for r in rows.values())
    # icepop rejects A (seq 1, A > 0) and D (seq 2, A < 0)
    ice = rows["icepop"]
    assert (ice.tokens_rejected, ice.sequences_with_rejection, ice.sequences_rejected) == (2, 2, 0)
    assert ice.token_reject_rate == pytest.approx(0.4)
    assert ice.rejected_by_advantage_sign == {"A>0": 1, "A<0": 1, "A=0": 0}
    # ipo (delta 0.3) rejects B, D; A's |p - q| = 0.3 sits on the bound and is kept
    assert rows["ipo"].tokens_rejected == 2
    # dppo-tv with real advantages: seq 1 (A > 0): B; seq 2 (A < 0): D -> 2
    assert rows["dppo-tv"].tokens_rejected == 2
    # tis reweights B only
    assert (rows["tis"].tokens_rejected, rows["tis"].tokens_reweighted) == (0, 1)
    # seq-mis rejects seq 2: 2 tokens, 1 sequence; veto the same; geo-mask both sequences
    assert (rows["seq-mis"].tokens_rejected, rows["seq-mis"].sequences_rejected) == (2, 1)
    assert rows["geo-mask"].tokens_rejected == 5
    # opsm: seq 2 has A < 0 and mean(lq - lp) = 5.41 > 1e-4
    assert rows["opsm"].tokens_rejected == 2
    assert rows["opsm"].rejected_by_advantage_sign == {"A>0": 0, "A<0": 2, "A=0": 0}
    agree = {(a.a, a.b): a for a in res.masks.agreement}
    # icepop {A, D} vs ipo {B, D}: both 1 (D), only icepop A, only ipo B, Jaccard 1/3
    ii = agree[("icepop", "ipo")]
    assert (ii.both, ii.only_a, ii.only_b) == (1, 1, 1) and ii.jaccard == pytest.approx(1 / 3)
    # ipo {B, D} vs seq-mis {D, E}: both 1 (D), Jaccard 1/3
    im = agree[("ipo", "seq-mis")]
    assert (im.both, im.only_a, im.only_b) == (1, 1, 1) and im.jaccard == pytest.approx(1 / 3)
    # seq-mis {D, E} vs geo-mask {all 5}: both 2
    assert agree[("seq-mis", "geo-mask")].both == 2


def test_hypotheses_without_advantage(write):
    res = run(write(pairs(ROWS)), report=False, masks=True, rules=[parse_rule("dppo-tv"), parse_rule("icepop")])
    rows = [(r.name, r.hypothesis, r.tokens_rejected) for r in res.masks.rules]
    # if A > 0: B only (1); if A < 0: A, D (2); mean 1.5. icepop needs no advantage.
    assert rows == [("dppo-tv", "A>0", 1), ("dppo-tv", "A<0", 2), ("dppo-tv", "mean", 1.5), ("icepop", "data", 2)]


def test_sweep_and_examples(write):
    path = write(pairs(ROWS))
    name, key, inst = parse_sweep("icepop.beta=2,5")
    res = run(
        path,
        report=False,
        masks=True,
        rules=[parse_rule("icepop"), parse_rule("ipo:delta=0.1")],
        sweeps=[(name, key, inst)],
        examples=5,
    )
    sw = res.masks.sweeps[0]
    # beta = 2 adds B (r = 3): 3 of 5; beta = 5: A, D -> 2 of 5
    assert [(p.value, p.token_reject_rate) for p in sw.points] == [(2.0, 0.6), (5.0, 0.4)]
    # icepop {A, D} vs ipo at delta 0.1 {A, B, D}: they split only on B
    ex = res.masks.examples
    assert [(e.sequence_id, e.position) for e in ex] == [(1, 1)]
    assert ex[0].rejected_by == ["ipo"] and ex[0].kept_by == ["icepop"]


"""the top-k bounds' two implementations (the compiled per-row loop and numpy's), each held to the same values."""


def _approx_equal(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _approx_equal(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _approx_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and b is not None:
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 40))
def test_streaming_equals_one_shot(tmp_path_factory, seed, shards, batch_rows):
    rng = np.random.default_rng(seed)
    cols = random_pairs(rng, n_seq=12, max_len=9)
    n = len(cols["sequence_id"])
    d = tmp_path_factory.mktemp("s")
    table = pa.table(cols)
    pq.write_table(table, d / "one.parquet")
    order = rng.permutation(n)  # rows of a sequence scattered across shards and batches
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(shards - 1, n - 1), replace=False)) if n > 1 else []
    shard_dir = d / "shards"
    shard_dir.mkdir()
    for i, part in enumerate(np.split(order, cuts)):
        pq.write_table(table.take(pa.array(part)), shard_dir / f"part-{i:03d}.parquet")
    rules = default_rules()
    sweeps = [parse_sweep("icepop.beta=1.5,3")]
    one = analyse(str(d / "one.parquet"), AnalysisRequest(report=True, masks=True, rules=rules, sweeps=sweeps))
    many = analyse(
        str(shard_dir), AnalysisRequest(report=True, masks=True, rules=rules, sweeps=sweeps, batch_rows=batch_rows)
    )
    assert (one.tokens, one.sequences) == (many.tokens, many.sequences)
    pass_only = ("warnings", "run")  # what the files say about themselves, not the numbers
    _approx_equal(*({k: v for k, v in to_json(r.report).items() if k not in pass_only} for r in (one, many)))
    _approx_equal(*({k: v for k, v in to_json(r.masks).items() if k not in pass_only} for r in (one, many)))


def test_nonfinite_and_sentinels_are_counted_and_excluded(write):
    cols = pairs(ROWS)
    cols["sampler_logprob"][2] = -9999.0
    cols["trainer_logprob"][4] = float("nan")
    res = run(write(cols))
    assert res.tokens == 3
    assert any("2 of 5 tokens have a non-finite logprob" in w and "1 of them -9999" in w for w in res.warnings)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["trainer_logprob"].__setitem__(0, 0.7), "positive logprob"),
        (lambda c: c["position"].__setitem__(1, 0), "duplicate \\(sequence_id, position\\)"),
    ],
)
def test_bad_values_are_errors(write, mutate, message):
    cols = pairs(ROWS)
    mutate(cols)
    with pytest.raises(InputError, match=message):
        run(write(cols))


def test_empty_and_missing(write, tmp_path):
    cols = {k: [] for k in pairs(ROWS)}
    with pytest.raises(InputError, match="no token rows"):
        run(write(cols))
    with pytest.raises(InputError, match="no such file"):
        run(tmp_path / "nope.parquet")


def test_policy_lag_reading_from_a_probe_or_an_import():
    """A probe with --trainer-checkpoint says so in ``semantics``, an import in ``source.semantics``: one reading."""
    from mismatchscope.analysis.results import TokenMetrics
    from mismatchscope.analysis.yardsticks import interpret

    metrics = TokenMetrics(0.02, *[None] * 11, {}, {}, {})
    plain = {r.metric: r.reading for r in interpret(metrics, {"semantics": {"policy_lag": False}})}
    assert plain == {"tv_token_mean": "high (above 0.01): points at an inference precision problem"}
    probe = {
        r.metric: r.reading for r in interpret(metrics, {"semantics": {"policy_lag": True, "policy_lag_note": "lag"}})
    }
    assert probe == {
        "tv_token_mean": "high (above 0.01); with policy lag in the gap, not a verdict on inference precision",
        "trainer_logprob": "lag",
    }
    imported = interpret(TokenMetrics(*[None] * 12, {}, {}, {}), {"source": {"semantics": {"policy_lag": True}}})
    assert [r.reading for r in imported] == [
        "trainer logprobs were taken at update time by an asynchronous trainer: the gap mixes policy lag with numerical mismatch"
    ]


def test_score_centering_hand_derived(write):
    # token 1: sampled 5; sampler lists [3, 5], q = [0.6, 0.3], trainer p there [0.5, 0.3]; trainer's own top-k [3, 7]
    #   sum_K q = 0.9, sum_K p = 0.8, rho = 0.1 / 0.2 = 0.5, overlap |{3,5} & {3,7}| / 2 = 0.5
    # token 2: sampled 1; sampler lists [1, 2], q = [0.7, 0.3] (its tail is empty), p = [0.6, 0.2]; trainer top-k [2, 1]
    #   sum_K q = 1 -> rho undefined (counted apart), sum_K p = 0.8, overlap 2 / 2 = 1
    # token 3: sampled 4; sampler lists [4, 8], q = [0.5, 0.25], p = [0.5, 0.3]; trainer top-k [9, 10]
    #   sum_K q = 0.75, sum_K p = 0.8, rho = 0.25 / 0.2 = 1.25, overlap 0
    lq = np.log([[0.6, 0.3], [0.7, 0.3], [0.5, 0.25]])
    lp = np.log([[0.5, 0.3], [0.6, 0.2], [0.5, 0.3]])
    cols = {
        "sequence_id": [1, 1, 2],
        "position": [0, 1, 0],
        "token_id": [5, 1, 4],
        "sampler_logprob": [lq[0, 1], lq[1, 0], lq[2, 0]],
        "trainer_logprob": [lp[0, 1], lp[1, 0], lp[2, 0]],
        "sampler_topk_ids": [[3, 5], [1, 2], [4, 8]],
        "sampler_topk_logprobs": lq.tolist(),
        "trainer_logprobs_at_sampler_topk": lp.tolist(),
        "trainer_topk_ids": [[3, 7], [2, 1], [9, 10]],
    }
    sc = run(write(cols)).report.score_centering
    assert sc is not None
    assert sc.tokens == 3
    assert sc.sampler_topk_mass.mean == pytest.approx((0.9 + 1.0 + 0.75) / 3, abs=1e-6)
    assert sc.trainer_mass_on_sampler_topk.mean == pytest.approx(0.8, abs=1e-6)
    rho = sc.tail_mass_ratio
    assert (rho.tokens, rho.undefined_tokens, rho.empty_sampler_tail, rho.empty_trainer_tail) == (
        2,
        1,
        1,
        0,
    )
    assert rho.mean == pytest.approx(0.875, abs=1e-6) and rho.quantiles["0.5"] == pytest.approx(0.875, abs=1e-6)
    ov = sc.topk_overlap
    assert ov.tokens == 3 and ov.mean == pytest.approx(0.5) and ov.quantiles["0.5"] == pytest.approx(0.5)
    # without the trainer's own top-k ids there is no overlap, the rest stays
    del cols["trainer_topk_ids"]
    sc2 = run(write(cols)).report.score_centering
    assert sc2.topk_overlap is None and sc2.tail_mass_ratio.tokens == 2


def test_tail_breakdown_hand_derived(write):
    # A q=.5 p=.2 (bucket [0.5, 0.9), p<q), B q=.2 p=.6 ([0.1, 0.5), p>q), C q=p=.9 ([0.9, 1], p=q),
    # D q=.5 p=1e-5 ([0.5, 0.9), p<q), E q=p=.5 ([0.5, 0.9), p=q)
    rules = [parse_rule("icepop"), parse_rule("ipo"), parse_rule("seq-mis"), parse_rule("tis")]
    mk = run(write(pairs(ROWS)), report=False, masks=True, rules=rules).masks
    assert mk.tokens_by_sampler_prob == {
        "[0, 0.001)": 0,
        "[0.001, 0.01)": 0,
        "[0.01, 0.1)": 0,
        "[0.1, 0.5)": 1,
        "[0.5, 0.9)": 3,
        "[0.9, 1]": 1,
    }
    assert mk.tokens_by_pq_sign == {"p>q": 1, "p<q": 2, "p=q": 2}
    rows = {r.name: r for r in mk.rules}
    nz = lambda d: {k: v for k, v in d.items() if v}
    # icepop rejects A and D: both q = 0.5, both p < q
    assert nz(rows["icepop"].rejected_by_sampler_prob) == {"[0.5, 0.9)": 2}
    assert rows["icepop"].rejected_by_pq_sign == {"p>q": 0, "p<q": 2, "p=q": 0}
    # ipo (0.3) rejects B (q 0.2, p > q) and D (q 0.5, p < q)
    assert nz(rows["ipo"].rejected_by_sampler_prob) == {"[0.1, 0.5)": 1, "[0.5, 0.9)": 1}
    assert rows["ipo"].rejected_by_pq_sign == {"p>q": 1, "p<q": 1, "p=q": 0}
    # seq-mis rejects sequence 2, i.e. D (p < q) and E (p = q), both in [0.5, 0.9)
    assert nz(rows["seq-mis"].rejected_by_sampler_prob) == {"[0.5, 0.9)": 2}
    assert rows["seq-mis"].rejected_by_pq_sign == {"p>q": 0, "p<q": 1, "p=q": 1}
    # tis reweights, it rejects nothing: no tail breakdown
    assert rows["tis"].rejected_by_sampler_prob is None
    # the reading names token rules only: icepop 2/2 in q>=0.5 and 2/2 p<q; ipo half and half
    assert mk.tail_reading == (
        "Which tail each rule cuts: icepop rejects mostly q>=0.5 tokens (100%) with p<q (100%); "
        "ipo rejects tokens across all q of both signs."
    )


def _verl_reference_rejections(seq_id, lq, lp, option, threshold):
    """rollout_rs transcribed token by token from the reference's wording (a second path, not the package's code)."""
    rejected = 0
    for s in np.unique(seq_id):
        l = np.clip(lp[seq_id == s] - lq[seq_id == s], -20.0, 20.0)
        k = {"k1": -l, "k2": 0.5 * l**2, "k3": np.exp(l) - 1.0 - l}[option[-2:]]
        if option.endswith("k1"):
            lo, _, hi = threshold.partition("_")
            lo, hi = (float(lo), float(hi)) if hi else (1 / float(lo), float(lo))
            keep = lambda x: (x >= math.log(lo)) & (x <= math.log(hi))
        else:
            keep = lambda x: x <= float(threshold)
        if option.startswith("token_"):
            rejected += int((~keep(k)).sum())
        else:
            stat = {"seq_sum": k.sum(), "seq_mean": k.mean(), "seq_max": k.max()}[option.rpartition("_")[0]]
            rejected += 0 if keep(stat) else l.size
    return rejected


@pytest.mark.parametrize(
    "option, threshold",
    [
        ("token_k1", "0.5_2.0"),
        ("token_k1", "3"),
        ("token_k2", "0.1"),
        ("token_k3", "0.05"),
        ("seq_sum_k1", "0.2_20"),
        ("seq_sum_k2", "2"),
        ("seq_sum_k3", "1"),
        ("seq_mean_k1", "1.5"),
        ("seq_mean_k2", "0.05"),
        ("seq_mean_k3", "0.01"),
        ("seq_max_k2", "1"),
        ("seq_max_k3", "2"),
    ],
)
def test_verl_rs_matches_a_token_by_token_transcription(write, option, threshold):
    rng = np.random.default_rng(7)
    cols = random_pairs(rng, 60, 12, advantage=False)
    # a few tokens far past the +-20 clamp (p down to 1e-15 against q near 1)
    for i in (3, 40, 200):
        cols["trainer_logprob"][i] = math.log(1e-15)
        cols["sampler_logprob"][i] = math.log(0.9)
    res = run(
        write(cols), report=False, masks=True, rules=[parse_rule(f"verl-rs:option={option},threshold={threshold}")]
    )
    got = res.masks.rules[0].tokens_rejected
    seq_id, lq, lp = (np.asarray(cols[c], dtype=float) for c in ("sequence_id", "sampler_logprob", "trainer_logprob"))
    assert got == _verl_reference_rejections(seq_id, lq, lp, option, threshold)
    assert 0 < got < lq.size  # the thresholds are chosen to cut some tokens, not all


def test_duplicates_across_shards(tmp_path):
    from mismatchscope.schema import write_table

    write_table(tmp_path / "a.parquet", pairs(ROWS[:3]))
    write_table(tmp_path / "b.parquet", pairs(ROWS[:3]))
    with pytest.raises(InputError, match="duplicate"):
        run(tmp_path)


def test_gaps_warn(write):
    res = run(write(pairs([(1, 0, 0.5, 0.4), (1, 2, 0.5, 0.4)])))
    assert any("gaps" in w for w in res.warnings)


def test_a_headline_pass_keeps_the_sums_and_decodes_no_bound(tmp_path):
    """doctor's pass (``headline``): the same sums, tails, breakdowns and kept mass as report's own pass, with the
    exact quantiles, the top-k bounds and score centering left out; the same columns read (and checked)."""
    from dataclasses import replace

    from mismatchscope.analysis.summaries import write_token_shard
    from mismatchscope.schema import BOUND_SUMMARIES
    from tests.analysis.test_summaries import _pairs

    cols = _pairs()
    cols["sampler_kept_logmass"] = np.full(cols["position"].size, -0.01)
    path = str(write_token_shard(tmp_path / "s.parquet", cols, {}))
    full = analyse(path, AnalysisRequest()).report
    plan = make_plan(path, AnalysisRequest(headline=True))
    assert plan.headline and not make_plan(path, AnalysisRequest()).headline
    assert plan.columns == make_plan(path, AnalysisRequest()).columns
    assert {*BOUND_SUMMARIES, "sampler_kept_logmass"} <= set(plan.columns)
    head = run_plan(plan).report
    assert full is not None and head is not None
    assert full.topk is not None and full.score_centering is not None and full.kept_mass is not None
    assert head.topk is None and head.score_centering is None and head.kept_mass == full.kept_mass
    assert set(head.metrics.ratio_quantiles.values()) == {None}
    assert None not in full.metrics.ratio_quantiles.values()
    none_q = dict.fromkeys(full.metrics.ratio_quantiles)
    # the metrics report prints from the top-k bounds are the only others it leaves out
    kept = replace(full.metrics, ratio_quantiles=none_q, tv_topk_lower_mean=None, kl_topk_lower_mean=None)
    assert head.metrics == kept
    assert head.breakdowns == full.breakdowns and head.tokens == full.tokens
