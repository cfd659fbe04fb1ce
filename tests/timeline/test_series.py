"""``timeline``: per-step values derived by hand, ``--by`` splitting, the JSON contract and the errors of the
real console script (change detection itself: test_changes.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchscope.documents import document
from mismatchscope.errors import MissingColumnsError, UsageError
from mismatchscope.rules import parse_rule
from mismatchscope.timeline import timeline
from mismatchscope.timeline.series import grouped_quantile
from tests.helpers import cli, pairs
from tests.inputs import error_line, one_sequence, raw_parquet
from tests.timeline.runs import H, needs_ruptures, synthetic

# (sequence_id, position, q, p) per step; rows are written step 2 first, to check the grouping.
STEP0 = [(1, 0, 0.5, 0.2), (1, 1, 0.5, 0.5)]
STEP1 = [(2, 0, 0.2, 0.6), (2, 1, 0.9, 0.9), (2, 2, 0.8, 0.1)]
STEP2 = [(3, 0, 0.5, 0.5), (4, 0, 0.01, 0.1)]
ROWS = STEP2 + STEP0 + STEP1
STEPS = [2, 2, 0, 0, 1, 1, 1]
ENV = ["math", "code", "math", "math", "code", "code", "code"]  # by sequence: 1, 3 math; 2, 4 code


def tiny(write):
    return write(pairs(ROWS, step=STEPS))


def rows_by_step(result, group="all") -> dict[int, dict]:
    return {r["step"]: r for r in document(result.document())["rows"] if r["group"] == group}


@needs_ruptures
def test_per_step_values_by_hand(write):
    r = timeline(
        tiny(write), [parse_rule("icepop"), parse_rule("ipo:delta=0.1"), parse_rule("seq-mis"), parse_rule("dppo-tv")]
    )
    rows = rows_by_step(r)
    assert sorted(rows) == [0, 1, 2]
    # step 0, one sequence: r = 0.4 (l = ln 0.4 = -0.916291, tv 0.3, k3 = -0.6 + 0.916291 = 0.316291) and r = 1
    s0 = rows[0]
    assert (s0["tokens"], s0["sequences"]) == (2, 1)
    assert s0["tv_token_mean"] == pytest.approx(0.15)
    assert s0["k3_mean"] == pytest.approx(0.316291 / 2, abs=1e-6)
    assert s0["abs_logprob_diff_mean"] == pytest.approx(0.916291 / 2, abs=1e-6)
    assert s0["abs_logprob_diff_p99"] == pytest.approx(0.99 * 0.916291, abs=1e-6)  # sorted [0, .916]: 0 + 0.99 * .916
    assert s0["ratio_outside_band"] == 0.5  # 0.4 < 0.5
    assert s0["icepop_reject_rate"] == 0.5  # 0.4 < alpha 0.5
    assert s0["ipo_reject_rate"] == 0.5  # |p - q| 0.3 > 0.1
    assert s0["seq-mis_reject_rate"] == 1.0  # prod r = 0.4 < 0.5: both tokens
    assert s0["dppo-tv[A>0]_reject_rate"] == 0.0  # p - q = -0.3, 0: never > 0.15
    assert s0["dppo-tv[A<0]_reject_rate"] == 0.5  # -0.3 < -0.15
    # step 1: r = 3 (l = 1.098612, tv 0.4, k3 = 2 - 1.098612 = 0.901388), r = 1, r = 0.125 (l = -2.079442,
    # tv 0.7, k3 = -0.875 + 2.079442 = 1.204442)
    s1 = rows[1]
    assert (s1["tokens"], s1["sequences"]) == (3, 1)
    assert s1["tv_token_mean"] == pytest.approx(1.1 / 3)
    assert s1["k3_mean"] == pytest.approx((0.901388 + 1.204442) / 3, abs=1e-6)
    assert s1["abs_logprob_diff_mean"] == pytest.approx((1.098612 + 2.079442) / 3, abs=1e-6)
    # sorted [0, 1.098612, 2.079442]: position 0.99 * 2 = 1.98 -> 1.098612 + 0.98 * 0.980830
    assert s1["abs_logprob_diff_p99"] == pytest.approx(1.098612 + 0.98 * 0.980830, abs=1e-6)
    assert s1["ratio_outside_band"] == pytest.approx(2 / 3)  # 3 > 2 and 0.125 < 0.5
    assert s1["icepop_reject_rate"] == pytest.approx(1 / 3)  # only 0.125 leaves [0.5, 5]
    assert s1["ipo_reject_rate"] == pytest.approx(2 / 3)  # 0.4 and 0.7 > 0.1
    assert s1["seq-mis_reject_rate"] == 1.0  # prod r = 3 * 0.125 = 0.375 < 0.5
    assert s1["dppo-tv[A>0]_reject_rate"] == pytest.approx(1 / 3)  # 0.4 > 0.15
    assert s1["dppo-tv[A<0]_reject_rate"] == pytest.approx(1 / 3)  # -0.7 < -0.15
    # step 2, two sequences: r = 1 and r = 10 (l = 2.302585, tv 0.09, k3 = 9 - 2.302585 = 6.697415)
    s2 = rows[2]
    assert (s2["tokens"], s2["sequences"]) == (2, 2)
    assert s2["tv_token_mean"] == pytest.approx(0.045)
    assert s2["k3_mean"] == pytest.approx(6.697415 / 2, abs=1e-6)
    assert s2["abs_logprob_diff_p99"] == pytest.approx(0.99 * 2.302585, abs=1e-6)
    assert s2["ratio_outside_band"] == 0.5 and s2["icepop_reject_rate"] == 0.5  # 10 > 2 and > beta 5
    assert s2["ipo_reject_rate"] == 0.0  # 0.09 <= 0.1
    assert s2["seq-mis_reject_rate"] == 0.5  # sequence 4: prod r = 10 > 2
    # three steps are too few to test for changes: said, not silently skipped
    assert r.flags == [] and r.skipped and all("need 8" in s.reason for s in r.skipped)


@needs_ruptures
def test_same_numbers_as_report_on_one_step(write):
    """One primitive: a single-step file gives the whole-file numbers of `report`."""
    from mismatchscope.analysis.engine import AnalysisRequest, analyse

    path = write(pairs(STEP1, step=[7, 7, 7]))
    row = rows_by_step(timeline(path))[7]
    m = analyse(str(path), AnalysisRequest(report=True)).report.metrics
    assert row["tv_token_mean"] == pytest.approx(m.tv_token_mean, rel=1e-12)
    assert row["k3_mean"] == pytest.approx(m.k3_mean, rel=1e-12)
    assert row["abs_logprob_diff_mean"] == pytest.approx(m.abs_logprob_diff_mean, rel=1e-12)
    assert row["ratio_outside_band"] == pytest.approx(m.ratio_tail_high["2"] + m.ratio_tail_low["2"])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 50, allow_nan=False)), min_size=1, max_size=60))
def test_grouped_quantile_is_numpy_quantile(items):
    code = np.array([c for c, _ in items], np.int32)
    v = np.array([x for _, x in items])
    got = grouped_quantile(code, v, 6, 0.99)
    for c in range(6):
        if (code == c).any():
            assert got[c] == np.quantile(v[code == c], 0.99)
        else:
            assert math.isnan(got[c])


@needs_ruptures
def test_by_splits_lines_on_any_column(write, tmp_path):
    path = tmp_path / "env.parquet"
    table = pq.read_table(tiny(write)).append_column("env", pa.array(ENV))  # not a mismatchscope column
    pq.write_table(table, path)
    r = timeline(path, by="env")
    assert r.series.groups == ["code", "math"]
    code, math_ = rows_by_step(r, "code"), rows_by_step(r, "math")
    assert sorted(code) == [1, 2] and sorted(math_) == [0, 2]
    assert code[2]["tv_token_mean"] == pytest.approx(0.09) and code[2]["tokens"] == 1  # sequence 4 only
    assert math_[2]["tv_token_mean"] == 0.0 and math_[0]["tv_token_mean"] == pytest.approx(0.15)
    assert code[1]["tokens"] == 3

    cols = pairs(ROWS, step=STEPS, rank=[1, 0, 1, 1, 0, 0, 0])  # a schema column works the same way
    r = timeline(write(cols, "rank.parquet"), by="rank")
    assert r.series.groups == [0, 1] and rows_by_step(r, 1)[2]["tokens"] == 1


def test_by_errors(write, tmp_path):
    with pytest.raises(UsageError, match="no column 'nope'"):
        timeline(tiny(write), by="nope")
    with pytest.raises(UsageError, match="not categories"):
        timeline(write(pairs(ROWS, step=STEPS, reward=[0.5] * 7), "r.parquet"), by="reward")
    with pytest.raises(MissingColumnsError, match="timeline needs a step column"):
        timeline(write(pairs(ROWS)))


@needs_ruptures
def test_json_contract_and_plot(write, tmp_path):
    path = write(synthetic(0, shift_at=40, spike_at=15))
    r = cli(
        "timeline",
        str(path),
        "--format",
        "json",
        "--plots",
        str(tmp_path / "plots"),
        "--rule",
        "icepop",
        "--rule",
        "tis",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # nothing but JSON on stdout
    assert data["tokens"] == 24_000 and data["steps"] == 60 and data["by"] is None and data["groups"] == ["all"]
    keys = [m["key"] for m in data["metrics"]]
    assert keys == [*H, "ratio_outside_band", "icepop_reject_rate", "tis_reweight_rate"]
    assert all(m["unit"] and m["label"] for m in data["metrics"])
    assert [u["name"] for u in data["rules"]] == ["icepop", "tis"] and data["rules"][1]["acts"] == "reweight"
    row = data["rows"][0]
    assert set(row) == {"group", "step", "tokens", "sequences", *keys} and row["step"] == 0
    assert len(data["rows"]) == 60
    ch = data["changes"]
    assert "Iglewicz-Hoaglin" in ch["methods"]["spike"]["method"] and ch["methods"]["spike"]["threshold"] == 3.5
    assert "ruptures.Binseg" in ch["methods"]["shift"]["method"] and ch["methods"]["shift"]["penalty_factor"] == 3.0
    flag = next(f for f in ch["flags"] if f["kind"] == "shift")
    assert {"group", "metric", "scale", "kind", "step", "before", "after", "size_sd"} <= set(flag)
    assert data["plot"].endswith("timeline.png")
    png = (tmp_path / "plots" / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert "wrote" in r.stderr


@needs_ruptures
def test_table_output(write):
    r = cli("timeline", str(write(synthetic(0, shift_at=40, spike_at=15))))
    assert r.returncode == 0, r.stderr
    assert "Mismatch per step" in r.stdout and "Flagged changes" in r.stdout
    assert "spike: tv mean" in r.stdout and "shift up" in r.stdout and "Binseg" in r.stdout


def test_missing_step_column_exits_2(write, tmp_path):
    r = cli("timeline", str(write(pairs(ROWS))))
    assert r.returncode == 2
    assert "timeline needs a step column" in r.stderr and "--column step=global_step" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@needs_ruptures
def test_step_column_mapping(write, tmp_path):
    cols = pairs(ROWS)
    cols["global_step"] = STEPS
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table(cols), path)
    r = cli("timeline", str(path), "--column", "step=global_step", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [row["step"] for row in json.loads(r.stdout)["rows"]] == [0, 1, 2]


def test_kpop_and_verl_rs_per_step(write):
    r = timeline(tiny(write), [parse_rule("kpop"), parse_rule("verl-rs:option=seq_mean_k3,threshold=0.01")])
    rows = rows_by_step(r)
    # kpop = max(D(q||p), D(p||q)) > 0.1. step 0: (0.5, 0.2) 0.223144 -> R, (0.5, 0.5) 0 -> 1/2
    # step 1: (0.2, 0.6) 0.381908 -> R; (0.9, 0.9) 0; (0.8, 0.1): D(q||p) = .8 ln 8 + .2 ln(.2/.9) = 1.362738 -> R: 2/3
    # step 2: (0.5, 0.5) 0; (0.01, 0.1): D(q||p) = .01 ln .1 + .99 ln 1.1 = 0.071332, D(p||q) = .1 ln 10 + .9 ln(.9/.99)
    #         = 0.144480 -> rejected by the reverse direction only: 1/2
    assert [rows[s]["kpop_reject_rate"] for s in (0, 1, 2)] == pytest.approx([0.5, 2 / 3, 0.5])
    # verl-rs seq_mean_k3 (a sequence rule here): step 0 seq 1 mean k3 (0.316291 + 0) / 2 > 0.01 -> 2/2;
    # step 1 seq 2 mean (0.901388 + 0 + 1.204442) / 3 -> 3/3; step 2 seq 3 k3 0 kept, seq 4 k3 = 9 - ln 10 = 6.697 -> 1/2
    assert [rows[s]["verl-rs_reject_rate"] for s in (0, 1, 2)] == pytest.approx([1.0, 1.0, 0.5])
    levels = {u["name"]: u["level"] for u in document(r.document())["rules"]}
    assert levels == {"kpop": "token", "verl-rs": "sequence"}


INT64_MIN = -(2**63)


@pytest.mark.parametrize("step", [INT64_MIN, -(2**52) - 1, 2**52 + 1, 2**63 - 1])
def test_timeline_refuses_steps_beyond_its_key_range(tmp_path, step):
    """np.abs(INT64_MIN) is INT64_MIN (negative): the old check let it through, and step * 1024 wrapped into step 0."""
    path = raw_parquet(
        tmp_path / "s.parquet",
        one_sequence(4, sequence_id=[1, 1, 2, 2], position=[0, 1, 0, 1], step=[step, step, 0, 0]),
    )
    assert error_line(cli("timeline", str(path))) == (
        f"error: step value {step} is beyond +-2^52: not a training step counter "
        "(map the training step column with --column step=NAME)"
    )


def test_timeline_keeps_the_largest_steps_apart(tmp_path):
    """Steps +-2^52 (the documented bound, inclusive) and 0 are three steps of two tokens each, never merged."""
    big = 2**52
    path = raw_parquet(
        tmp_path / "s.parquet",
        one_sequence(6, sequence_id=[1, 1, 2, 2, 3, 3], position=[0, 1] * 3, step=[-big, -big, 0, 0, big, big]),
    )
    r = cli("timeline", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [(row["step"], row["tokens"]) for row in json.loads(r.stdout)["rows"]] == [(-big, 2), (0, 2), (big, 2)]


def test_by_entropy_splits_the_steps_by_the_trainers_entropy_bucket(tmp_path):
    from mismatchscope.analysis.tokenstats import entropy_bucket_labels
    from mismatchscope.errors import UsageError
    from mismatchscope.schema import write_table
    from mismatchscope.timeline import timeline

    # two steps; entropies 0.05 (bucket [0, 0.1)) and 3 ([2, 4)); the low-entropy tokens carry a gap of 0.02,
    # the high-entropy ones 0.001: per bucket and step, the mean |gap| is exactly that
    n = 8
    cols = {
        "sequence_id": np.repeat([1, 2], n // 2),
        "position": np.tile(np.arange(n // 2), 2),
        "token_id": np.arange(n) + 3,
        "trainer_logprob": np.full(n, -1.0),
        "sampler_logprob": np.where(np.arange(n) % 2 == 0, -1.02, -1.001),
        "trainer_entropy": np.where(np.arange(n) % 2 == 0, 0.05, 3.0),
        "step": np.repeat([0, 1], n // 2),
    }
    path = write_table(tmp_path / "e.parquet", cols)
    r = timeline(path, by="entropy")
    labels = entropy_bucket_labels()
    s = r.series
    gap = {
        (s.groups[int(g)], int(st)): v
        for g, st, v in zip(s.group_K, s.step_K, s.values["abs_logprob_diff_mean"], strict=True)
    }
    assert gap == pytest.approx(
        {(labels[0], 0): 0.02, (labels[0], 1): 0.02, (labels[4], 0): 0.001, (labels[4], 1): 0.001}
    )
    with pytest.raises(UsageError, match="trainer_entropy"):
        timeline(
            write_table(tmp_path / "no.parquet", {k: v for k, v in cols.items() if k != "trainer_entropy"}),
            by="entropy",
        )
