"""``report --worst``: the ranking by hand, traces across shards, the JSON contract, the trace pictures."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from mismatchscope.analysis.engine import AnalysisRequest, analyse
from mismatchscope.analysis.results import WorstSequence
from mismatchscope.analysis.worst import RANKINGS, describe, load_traces, worst_sequences
from mismatchscope.cli.analyse import WorstBy
from mismatchscope.documents import to_json
from mismatchscope.reader import open_source
from tests.helpers import cli

# (sequence_id, position, q, p, prompt_id); k3 = (r - 1) - ln r with r = p / q, l = ln r, tv = |p - q|
#   seq 9 (8 tokens): seven with p = q, one (0.1, 0.4): r = 4, k3 = 3 - ln 4 = 1.613706, l = +1.386294, tv 0.3
#       sum k3 1.613706, mean k3 0.201713, sum |l| 1.386294, mean |l| 0.173287, max tv 0.3, S = +1.386294
#   seq 2 (1 token): (0.2, 0.6): r = 3, k3 = 2 - ln 3 = 0.901388, l = +1.098612, tv 0.4
#   seq 5 and seq 7 (identical, 2 tokens): (0.5, 0.05): r = 0.1, k3 = -0.9 + ln 10 = 1.402585, l = -2.302585, tv 0.45;
#       and (0.5, 0.5): 0. sum k3 1.402585, mean 0.701293, sum |l| 2.302585, mean 1.151293, S = -2.302585
# Equal values rank the smaller sequence id first, so 5 always precedes 7.
ROWS = (
    [(9, i, 0.5, 0.5, 30) for i in range(8) if i != 3]
    + [(9, 3, 0.1, 0.4, 30)]
    + [(2, 0, 0.2, 0.6, 10)]
    + [(s, 0, 0.5, 0.05, 20) for s in (5, 7)]
    + [(s, 1, 0.5, 0.5, 20) for s in (5, 7)]
)

EXPECTED = {  # by -> (order, value of the first)
    "k3_sum": ([9, 5, 7, 2], 3 - math.log(4)),
    "k3_mean": ([2, 5, 7, 9], 2 - math.log(3)),
    "abs_logprob_diff_sum": ([5, 7, 9, 2], math.log(10)),
    "abs_logprob_diff_mean": ([5, 7, 2, 9], math.log(10) / 2),
    "tv_max": ([5, 7, 2, 9], 0.45),
    "log_ratio_sum": ([5, 7, 9, 2], math.log(10)),  # |S|: signed S would put 5 and 7 last
}


def cols(rows) -> dict:
    return {
        "sequence_id": [r[0] for r in rows],
        "position": [r[1] for r in rows],
        "token_id": [100 * r[0] + r[1] for r in rows],
        "sampler_logprob": [math.log(r[2]) for r in rows],
        "trainer_logprob": [math.log(r[3]) for r in rows],
        "prompt_id": [r[4] for r in rows],
    }


@pytest.fixture
def table(write):
    return write(cols(ROWS))


def test_rankings_match_the_cli_choices():
    assert list(RANKINGS) == [b.value for b in WorstBy]


@pytest.mark.parametrize("by", list(EXPECTED))
def test_ranking_by_hand(table, by):
    order, first = EXPECTED[by]
    rows = worst_sequences(analyse(str(table), AnalysisRequest()), 10, by)  # n beyond the 4 sequences: all of them
    assert [r.sequence_id for r in rows] == order and [r.rank for r in rows] == [1, 2, 3, 4]
    assert rows[0].value == pytest.approx(first, rel=1e-12) and rows[0].by == by


def test_default_row_values(table):
    top, second = worst_sequences(analyse(str(table), AnalysisRequest()), 2)
    assert to_json(top) == {
        "rank": 1,
        "sequence_id": 9,
        "tokens": 8,
        "by": "k3_sum",
        "value": pytest.approx(1.613706, abs=1e-6),
        "k3_sum": pytest.approx(1.613706, abs=1e-6),
        "tv_max": pytest.approx(0.3),
        # what the trace knows comes from describe
        "prompt_id": None,
        "max_gap_position": None,
        "max_gap_token_id": None,
        "max_gap_log_ratio": None,
    }
    assert second.sequence_id == 5 and second.k3_sum == pytest.approx(1.402585, abs=1e-6)


def test_traces_across_shards_out_of_order(tmp_path, write):
    # seq 9 split over two shards, positions shuffled in each; read two rows per batch so it is split across batches too
    nine = [r for r in ROWS if r[0] == 9]
    a = [nine[i] for i in (5, 7, 0)] + [r for r in ROWS if r[0] == 2]
    b = [nine[i] for i in (6, 1, 2, 4, 3)] + [r for r in ROWS if r[0] in (5, 7)][::-1]
    write(cols(a), "shards/b-first.parquet")
    write(cols(b), "shards/a-second.parquet")
    source = open_source(tmp_path / "shards")
    traces = load_traces(source, [9, 7], batch_rows=2)
    assert sorted(traces) == [7, 9]
    t = traces[9]
    assert t.position_T.tolist() == list(range(8)) and t.prompt_id == 30 and t.advantage_T is None
    assert t.token_id_T.tolist() == [900 + i for i in range(8)]
    q = [0.1 if i == 3 else 0.5 for i in range(8)]
    p = [0.4 if i == 3 else 0.5 for i in range(8)]
    assert np.array_equal(t.sampler_logprob_T, np.log(q)) and np.array_equal(t.trainer_logprob_T, np.log(p))
    assert traces[7].position_T.tolist() == [0, 1] and traces[7].prompt_id == 20
    # the largest |l| of seq 9 is at position 3 (token 903), l = ln 4
    (row,) = describe(
        [WorstSequence(rank=1, sequence_id=9, tokens=8, by="k3_sum", value=0, k3_sum=0, tv_max=0)], traces
    )
    assert (row.max_gap_position, row.max_gap_token_id, row.prompt_id) == (3, 903, 30)
    assert row.max_gap_log_ratio == pytest.approx(math.log(4)) and row.trace is None
    assert load_traces(source, []) == {}


def test_cli_json_contract(table):
    r = cli("report", str(table), "--worst", "2", "--worst-by", "tv_max", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert "metrics" in data  # the report is all still there
    five, seven = data["worst"]
    assert set(five) == {
        "rank",
        "sequence_id",
        "prompt_id",
        "tokens",
        "by",
        "value",
        "k3_sum",
        "tv_max",
        "max_gap_position",
        "max_gap_token_id",
        "max_gap_log_ratio",
    }
    assert (five["sequence_id"], seven["sequence_id"], five["prompt_id"], five["tokens"]) == (5, 7, 20, 2)
    assert five["by"] == "tv_max" and five["value"] == pytest.approx(0.45)
    assert (five["max_gap_position"], five["max_gap_token_id"]) == (0, 500)
    assert five["max_gap_log_ratio"] == pytest.approx(-math.log(10))

    r = cli("report", str(table), "--worst", "1", "--worst-traces", "--format", "json")
    (nine,) = json.loads(r.stdout)["worst"]
    assert nine["trace"]["position"] == list(range(8)) and nine["trace"]["sampler_logprob"][3] == pytest.approx(
        math.log(0.1)
    )
    assert "worst" not in json.loads(cli("report", str(table), "--format", "json").stdout)  # unchanged without --worst


def test_cli_table_and_usage_errors(table):
    r = cli("report", str(table), "--worst", "3", "--worst-by", "k3_mean")
    assert r.returncode == 0, r.stderr
    assert "Worst sequences (by mean k3" in r.stdout and "k3_mean" in r.stdout
    for args in (["--worst-by", "tv_max"], ["--worst-traces"]):
        r = cli("report", str(table), *args)
        assert r.returncode == 2 and "add --worst N" in r.stderr
    r = cli("report", str(table), "--worst", "2", "--worst-by", "nope")
    assert r.returncode == 2 and "nope" in r.stderr


def test_trace_pictures(table, tmp_path):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra")
    plots, page = tmp_path / "plots", tmp_path / "report.html"
    r = cli("report", str(table), "--worst", "2", "--plots", str(plots), "--html", str(page))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in plots.iterdir() if p.name.startswith("worst-"))
    assert names == ["worst-1-seq9.png", "worst-2-seq5.png"]
    for name in names:
        data = (plots / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        w, h = struct.unpack(">II", data[16:24])
        assert 800 <= w <= 2000 and 500 <= h <= 1200, (name, w, h)
    html = page.read_text()
    assert (
        "Worst sequences" in html and html.count("data:image/png;base64,") == 6
    )  # four report pictures and two traces
