"""The view's choices on runs built by hand: the ranking, the cap and its window, the rules' decisions, turns."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from mismatchscope import schema
from mismatchscope.analysis.engine import AnalysisRequest, analyse
from mismatchscope.rules import parse_rule
from mismatchscope.view import ViewOptions, build_view
from mismatchscope.view.build import _budget
from mismatchscope.view.text import TextSource
from tests.helpers import pairs

IDS = TextSource(None, "ids")


def _view(path, rules, **options):
    rules = [parse_rule(r) for r in rules]
    result = analyse(str(path), AnalysisRequest(report=False, masks=True, rules=rules))
    return build_view(str(path), result, rules, ViewOptions(**options), None, IDS)


def _run(write, seqs: dict[int, list[tuple[float, float]]], **extra):
    rows = [(s, i, q, p) for s, tokens in seqs.items() for i, (q, p) in enumerate(tokens)]
    return write(pairs(rows, **extra))


def test_ranked_by_k3_by_the_largest_gap_or_by_a_rules_rejections(write):
    # (q, p) per token: sequence 1 has one large gap (r = 0.2), sequence 2 many small ones, sequence 3 none
    path = _run(
        write,
        {1: [(0.5, 0.1), (0.5, 0.5)], 2: [(0.5, 0.3)] * 6, 3: [(0.5, 0.5)] * 3},
    )
    # k3 per token = (r - 1) - ln r: r = 0.2 -> 0.8094; r = 0.6 -> 0.1108, six of them 0.665
    by_k3 = _view(path, ["icepop"], by="k3")
    assert [s.sequence_id for s in by_k3.sequences] == [1, 2, 3]
    assert by_k3.sequences[0].value == pytest.approx(0.2 - 1 - math.log(0.2))
    gap = _view(path, ["icepop"], by="max-gap", worst=2)
    assert [s.sequence_id for s in gap.sequences] == [1, 2] and gap.sequences[0].value == pytest.approx(math.log(5))
    # icepop:alpha=0.7 rejects r = 0.2 once in sequence 1 and r = 0.6 six times in sequence 2
    rule = _view(path, ["icepop:alpha=0.7"], by="icepop")
    assert [(s.sequence_id, s.value) for s in rule.sequences] == [(2, 6.0), (1, 1.0), (3, 0.0)]
    assert rule.rules[0].acted == 7 and rule.sequences[0].acted["r0"] == [0, 1, 2, 3, 4, 5]


def test_the_cap_is_shared_out_and_a_long_sequence_shows_the_window_around_its_largest_gap(write):
    assert _budget([3, 100, 100], 43) == [3, 20, 20] and sum(_budget([5, 5, 5], 100)) == 15
    tokens = [(0.5, 0.5)] * 40
    tokens[30] = (0.5, 0.05)  # its largest gap, at position 30
    view = _view(_run(write, {7: tokens, 8: [(0.5, 0.49)] * 4}), ["ipo"], max_tokens=14)
    long = next(s for s in view.sequences if s.sequence_id == 7)
    assert len(long.position) == 10 and long.position == list(range(25, 35)) and long.start == 25
    assert "positions 25-34 shown, 10 of its 40 tokens" in long.cut and "(position 30)" in long.cut
    assert view.shown_tokens == 14 and view.notes == [f"sequence 7: {long.cut.split(': ', 1)[1]}"]
    assert long.acted["r0"] == [5]  # ipo rejects |p - q| = 0.45 > 0.3: the sixth shown token


def test_sequence_rules_decide_on_the_pass_s_inputs(write):
    # prod r: sequence 1 = 0.2 (seq-mis rejects below 0.5), sequence 2 = 1
    view = _view(_run(write, {1: [(0.5, 0.1), (0.5, 0.5)], 2: [(0.5, 0.5)]}), ["seq-mis", "seq-tis:C=1.5"])
    d = {s.sequence_id: s.sequence_rules for s in view.sequences}
    assert d[1]["r0"].action == "reject" and d[2]["r0"].action == "keep"
    assert d[1]["r0"].statistics["seq_log_ratio"] == pytest.approx(math.log(0.2))
    assert view.rules[0].acted == 2 and view.rules[1].acted == 0


def test_turns_and_tool_spans_where_the_run_has_them(tmp_path, monkeypatch):
    from mismatchscope.render.token_view_html import tokens_section

    for name in ("turn", "turn_position"):
        if name not in schema.COLUMNS:
            monkeypatch.setitem(schema.COLUMNS, name, schema.Column(name, pa.int32(), "multi-turn key"))
    # one sequence, two turns; positions 3-6 (the tool's reply) are not scored
    cols = pairs([(1, p, 0.5, 0.45) for p in (0, 1, 2, 7, 8)]) | {
        "turn": [0, 0, 0, 1, 1],
        "turn_position": [0, 1, 2, 0, 1],
    }
    path = tmp_path / "turns.parquet"
    schema.write_table(path, cols)
    view = _view(path, ["icepop"])
    assert view.sequences[0].turn == [0, 0, 0, 1, 1]
    html = tokens_section(view)
    assert html.count('class="tv-turn"') == 2 and "tool or environment: 4 positions not scored" in html


def test_advantage_rules_without_advantages_are_marked_under_each_hypothesis(write):
    view = _view(_run(write, {1: [(0.5, 0.2)]}), ["dppo-tv"])
    assert [(r.name, r.hypothesis) for r in view.rules] == [("dppo-tv [A>0]", "A>0"), ("dppo-tv [A<0]", "A<0")]
    # p - q = -0.3: past -0.15 on the negative branch only
    assert view.sequences[0].acted == {"r0": [], "r1": [0]}
    assert np.isclose(view.sequences[0].statistics["p_minus_q"][0], -0.3)
