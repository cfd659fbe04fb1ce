"""Routing metrics of MoE runs: flip rates per MoE layer, the any-layer share, the gap on flipped tokens.

The fixture (tests/routes_fixture.py) is a table of six route rows whose
every number below is derived by hand in the comments.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from mismatchscope.analysis.engine import AnalysisRequest, analyse
from mismatchscope.analysis.expert_sets import sorted_columns, sorting_network
from mismatchscope.analysis.results import MissingCaptures
from mismatchscope.documents import to_json
from mismatchscope.errors import InputError
from mismatchscope.routing.layout import RoutingMeta, SideRoutes, routes_schema
from mismatchscope.rules import parse_rule
from tests.helpers import SAMPLE_PAIRS, cli
from tests.routes_fixture import META, RUN_ROWS, routes_table, write_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("routes") / "run")


@pytest.fixture(scope="module")
def routing(run):
    result = analyse(str(run), AnalysisRequest(report=True))
    return result.report.routing, result.warnings


def test_flip_rates_per_layer_by_hand(routing):
    ro, _ = routing
    # completion rows (token_position set):
    #   L1: compared 10/0, 10/1, 10/2, 20/0 (20/1: sampler row null) = 4; flipped 10/1 ({4,5} vs {4,6}),
    #       20/0 ({2,3} vs {2,7}) = 2 -> 0.5. 10/0 has {0,1} vs {1,0}: the same set, not a flip.
    #   L2: compared 10/0, 10/1, 20/0 (10/2's sampler L2 is all zeros: missing, never expert 0) = 3; flipped 20/0 -> 1/3
    assert ro.moe_layers == [1, 2]
    assert [r.layer for r in ro.route_flip_rate_by_layer] == [1, 2]
    assert [(r.compared, r.flipped) for r in ro.route_flip_rate_by_layer] == [(4, 2), (3, 1)]
    assert ro.route_flip_rate_by_layer[0].flip_rate == pytest.approx(0.5)
    assert ro.route_flip_rate_by_layer[1].flip_rate == pytest.approx(1 / 3)
    # any layer: tokens with a compared layer 10/0, 10/1, 10/2, 20/0 = 4; flipped 10/1, 20/0 -> 0.5
    assert (ro.tokens_compared, ro.tokens_flipped) == (4, 2)
    assert ro.route_flip_rate == pytest.approx(0.5)
    # the prompt row (10, input 0): L1 {1,2} vs {2,1} same; L2 {3,4} vs {3,5} flipped -> 0 and 1; any layer 1/1
    assert [(r.compared, r.flipped) for r in ro.prompt_route_flip_rate_by_layer] == [(1, 0), (1, 1)]
    assert ro.prompt_route_flip_rate == pytest.approx(1.0)
    assert (ro.prompt_rows_compared, ro.prompt_rows_flipped, ro.rows) == (1, 1, 6)


def test_gap_on_flipped_tokens_by_hand(routing):
    ro, _ = routing
    g = ro.abs_logprob_diff
    # flipped 10/1 |(-1.5) - (-1.0)| = 0.5 and 20/0 |(-1.0) - (-2.0)| = 1.0 -> mean 0.75
    # unflipped 10/0 0.0 and 10/2 |(-0.7) - (-0.5)| = 0.2 -> mean 0.1
    # without a compared route: 20/1 (sampler row null) and 30/0 (no row) -> 2
    assert (g.flipped_tokens, g.unflipped_tokens, g.tokens_without_routes) == (2, 2, 2)
    assert g.flipped_mean == pytest.approx(0.75)
    assert g.unflipped_mean == pytest.approx(0.1)
    # share: (0.5 + 1.0) / (0 + 0.5 + 0.2 + 1.0 + 0.1 + 0) = 1.5 / 1.8
    assert ro.routing_share_of_gap == pytest.approx(1.5 / 1.8)


def test_missing_captures_and_margins_by_hand(routing):
    ro, warnings = routing
    # sampler: 10/2 L2 all zeros (1) + 20/1 null row (2 MoE layers) = 3 of 6 rows x 2 MoE layers = 12; trainer none
    assert ro.missing_captures == MissingCaptures(sampler=3, trainer=0, entries=12)
    assert any("3 of 12 sampler" in w and "never read as expert 0" in w for w in warnings)
    # completion entries compared, by trainer margin: 10/1 L1 5e-5 (flip) -> [0, 1e-4); 20/0 L1 5e-4 (flip) -> [1e-4, 1e-3);
    # 10/2 L1 5e-3 -> [1e-3, 1e-2); 10/0 L2 0.05 and 20/0 L2 0.02 (flip) -> [1e-2, 0.1); 10/0 L1 0.5, 10/1 L2 0.2 -> >= 0.1.
    # The prompt row's 0.0 margins are not completion rows; 10/2 L2 and 20/1 are not compared.
    assert [(r.compared, r.flipped) for r in ro.by_trainer_margin] == [(1, 1), (1, 1), (1, 0), (2, 1), (2, 0)]


def test_compare_masks_counts_flipped_tokens_each_rule_rejects(run):
    result = analyse(
        str(run),
        AnalysisRequest(report=False, masks=True, rules=[parse_rule("token-mask:lo=0.7,hi=2"), parse_rule("seq-mis")]),
    )
    rows = {r.name: r for r in result.masks.rules}
    # r = exp(lp - lq): 10/1 e^-0.5 = 0.607 < 0.7 (flipped), 20/0 e^1 = 2.72 > 2 (flipped), the others in [0.7, 2]
    assert (rows["token-mask"].tokens_rejected, rows["token-mask"].route_flipped_rejected) == (2, 2)
    # seq-mis [0.5, 2] on prod r: seq 10 e^-0.7 = 0.497 and seq 20 e^0.9 = 2.46 rejected, each with one flipped token
    assert (rows["seq-mis"].tokens_rejected, rows["seq-mis"].route_flipped_rejected) == (5, 2)
    assert result.masks.route_flipped_tokens == 2


def test_dense_runs_have_no_routing_entry():
    result = analyse(str(SAMPLE_PAIRS), AnalysisRequest(report=True, masks=True, rules=[parse_rule("icepop")]))
    assert result.report is not None and result.report.routing is None
    assert result.masks is not None and result.masks.route_flipped_tokens is None
    assert all(r.route_flipped_rejected is None for r in result.masks.rules)


def test_sorting_network_sorts_every_k():
    rng = np.random.default_rng(0)
    for k in range(1, 20):
        assert len(sorting_network(8)) == 19  # Batcher's network for 8 inputs
        ids = rng.integers(0, 256, (500, k)).astype(np.uint8)
        got = np.stack(sorted_columns(ids), axis=1)
        assert (got == np.sort(ids, axis=1)).all(), k


def _recompute(rows: list, meta: RoutingMeta) -> dict:
    """Flip rates per MoE layer by a plain loop over the rows: sets compared, all-zero and null entries missing."""
    out = {"completion": {}, "prompt": {}}
    for _seq, _inp, tok, s, t, _m in rows:
        kind = "completion" if tok is not None else "prompt"
        for layer in meta.moe_layers:
            a = None if s is None else s[layer]
            b = None if t is None else t[layer]
            if a is None or b is None or not any(a) or not any(b):
                continue
            c, f = out[kind].get(layer, (0, 0))
            out[kind][layer] = (c + 1, f + (set(a) != set(b)))
    return out


def _random_rows(rng, meta: RoutingMeta, n_seq: int = 6) -> tuple[list, dict]:
    rows, tokens = [], {}
    for s in range(n_seq):
        prompt, completion = int(rng.integers(1, 5)), int(rng.integers(1, 9))
        for inp in range(prompt + completion - 1):
            tok = inp - (prompt - 1) if inp >= prompt - 1 else None
            sides = []
            for _ in range(2):
                row = [None] * meta.num_layers
                for layer in meta.moe_layers:
                    row[layer] = [int(x) for x in rng.choice(meta.num_experts, meta.top_k, replace=False)]
                sides.append(row)
            for layer in meta.moe_layers:  # most layers agree (as a set, in any order); some flip; a few are missing
                u = rng.random()
                if u < 0.6:
                    sides[1][layer] = list(rng.permutation(sides[0][layer]).tolist())
                elif u < 0.65:
                    sides[int(rng.integers(2))][layer] = [0] * meta.top_k
            margin = [None if i not in meta.moe_layers else float(rng.random() * 0.2) for i in range(meta.num_layers)]
            rows.append((100 + s, inp, tok, sides[0], sides[1], margin))
            if tok is not None:
                tokens[(100 + s, tok)] = (float(np.log(rng.uniform(0.05, 1))), float(np.log(rng.uniform(0.05, 1))))
    return rows, tokens


def test_report_flip_rates_equal_a_recount_of_the_routes(tmp_path):
    """The CLI's JSON per-layer flip rates equal a plain recount of routes/ (to 1e-6), over three shards."""
    meta = RoutingMeta(
        family="deepseek_v3",
        num_layers=5,
        moe_layers=(1, 2, 4),
        num_experts=300,
        top_k=6,
        sampler=SideRoutes(True),
        trainer=SideRoutes(True),
    )
    rows, tokens = _random_rows(np.random.default_rng(3), meta)
    write_run(tmp_path / "run", rows, meta, tokens, shards=3)
    p = cli("report", str(tmp_path / "run"), "--format", "json")
    assert p.returncode == 0, p.stderr
    ro = json.loads(p.stdout)["routing"]
    want = _recompute(rows, meta)
    for kind, key in (("completion", "route_flip_rate_by_layer"), ("prompt", "prompt_route_flip_rate_by_layer")):
        for r in ro[key]:
            c, f = want[kind][r["layer"]]
            assert (r["compared"], r["flipped"]) == (c, f)
            assert abs(r["flip_rate"] - f / c) < 1e-6
    flips = [f for _, f in want["completion"].values()]
    assert sum(flips) > 0 and sum(flips) < sum(c for c, _ in want["completion"].values())  # neither all nor none


def test_dense_layers_written_as_zeros_are_ignored(tmp_path):
    """Engines zero-fill dense layers; a row with ids at a dense layer reads them as nothing."""
    rows = [
        (r[0], r[1], r[2], None if r[3] is None else [[0, 0], *r[3][1:]], [[0, 0], *r[4][1:]], r[5]) for r in RUN_ROWS
    ]
    write_run(tmp_path / "run", rows)
    ro = analyse(str(tmp_path / "run"), AnalysisRequest(report=True)).report.routing
    assert [(r.compared, r.flipped) for r in ro.route_flip_rate_by_layer] == [(4, 2), (3, 1)]  # as above


def test_most_missing_is_loud(tmp_path):
    rows = [(r[0], r[1], r[2], [None, [0, 0], [0, 0]], r[4], r[5]) for r in RUN_ROWS]
    write_run(tmp_path / "run", rows)
    result = analyse(str(tmp_path / "run"), AnalysisRequest(report=True))
    # every sampler MoE entry is all zeros: 12 of 12 missing; nothing compared, no rate
    assert result.report.routing.missing_captures.sampler == 12
    assert result.report.routing.route_flip_rate is None
    assert to_json(result.report.routing)["route_flip_rate"] is None  # written as null: both sides were recorded
    assert any(w.startswith("MOST SAMPLER ROUTES ARE MISSING") for w in result.warnings)


def test_a_side_not_recorded_gives_no_flip_rates(tmp_path):
    meta = replace(META, sampler=SideRoutes(False, why="vLLM on this platform cannot return routed experts"))
    rows = [(r[0], r[1], r[2], None, r[4], r[5]) for r in RUN_ROWS]
    write_run(tmp_path / "run", rows, meta)
    result = analyse(str(tmp_path / "run"), AnalysisRequest(report=True))
    ro = result.report.routing
    assert ro.route_flip_rate_by_layer is None and ro.sides.sampler.recorded is False
    assert not {"route_flip_rate", "tokens_compared", "route_flip_rate_by_layer"} & set(to_json(ro))  # left out
    assert any("no sampler routes" in w and "cannot return" in w for w in result.warnings)


def _bad(rows_fn=None, meta=META, table=None):
    rows = [list(r) for r in RUN_ROWS]
    if rows_fn:
        rows_fn(rows)
    return [tuple(r) for r in rows], meta, table


BAD = {
    "layers": (lambda rows: rows[1].__setitem__(3, [None, [0, 1]]), "has 2 layers; the manifest says 3"),
    "k": (
        lambda rows: rows[1].__setitem__(4, [None, [1, 0, 2], [2, 3]]),
        "holds 3 expert ids; the manifest says top_k 2",
    ),
    "id": (lambda rows: rows[2].__setitem__(3, [None, [4, 8], [6, 7]]), "expert id 8; the model routes to ids 0..7"),
    "repeat": (lambda rows: rows[2].__setitem__(4, [None, [4, 4], [7, 6]]), "names an expert twice in decoder layer 1"),
    "row twice": (lambda rows: rows.append(rows[2]), "sequence 10 input position 2 has more than one route row"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_routes_are_one_line_errors(tmp_path, case):
    fn, text = BAD[case]
    rows, meta, _ = _bad(fn)
    write_run(tmp_path / "run", rows, meta)
    with pytest.raises(InputError) as e:
        analyse(str(tmp_path / "run"), AnalysisRequest(report=True))
    assert text in str(e.value) and "\n" not in str(e.value)


def test_routes_without_a_manifest_entry_or_of_the_wrong_type(tmp_path):
    write_run(tmp_path / "a", meta=None)
    with pytest.raises(InputError, match="the manifest has no 'routing' entry"):
        analyse(str(tmp_path / "a"), AnalysisRequest(report=True))
    t = routes_table(RUN_ROWS)
    flat = pa.array([[1, 2]] * t.num_rows, pa.list_(pa.int32()))
    write_run(tmp_path / "b", table=t.set_column(t.schema.get_field_index("sampler_experts"), "sampler_experts", flat))
    with pytest.raises(InputError, match=r"sampler_experts is list<.*int32>, not list<list<int>>"):
        analyse(str(tmp_path / "b"), AnalysisRequest(report=True))


def test_bad_routes_on_the_command_line_exit_2_with_one_line(tmp_path):
    rows, meta, _ = _bad(BAD["id"][0])
    write_run(tmp_path / "run", rows, meta)
    for command in ("report", "compare-masks"):
        p = cli(command, str(tmp_path / "run"))
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "expert id 8" in lines[0]
        assert "Traceback" not in p.stderr


def test_the_fixture_is_written_in_the_layouts_schema():
    assert routes_table(RUN_ROWS).schema.equals(routes_schema(META.num_experts))


def test_gate_limits_the_flip_rate(run):
    import tomllib

    from mismatchscope.gate.config import parse_config
    from mismatchscope.gate.run import run_gate

    cfg = parse_config(
        tomllib.loads("[absolute]\nroute_flip_rate = 0.4\nrouting_share_of_gap = { max = 0.9 }\n"), "test"
    )
    flip, share = run_gate(str(run), None, cfg).checks
    # the any-layer share is 2 / 4 = 0.5 > 0.4: a point estimate (no bootstrap), so the point decides
    assert (flip.estimate, flip.method, flip.status) == (pytest.approx(0.5), "point", "fail")
    # routing's share of the gap 1.5 / 1.8 = 0.833 <= 0.9
    assert (share.estimate, share.status) == (pytest.approx(1.5 / 1.8), "pass")


def test_gate_on_a_dense_run_says_why_the_flip_rate_is_missing():
    import tomllib

    from mismatchscope.gate.config import parse_config
    from mismatchscope.gate.run import run_gate

    cfg = parse_config(tomllib.loads("[absolute]\nroute_flip_rate = 0.4\n"), "test")
    with pytest.raises(InputError, match="route_flip_rate is not available.*routes/ with both sides' expert ids"):
        run_gate(str(SAMPLE_PAIRS), None, cfg)


def test_gate_cli_flip_limit(run):
    p = cli("gate", str(run), "--limit", "route_flip_rate<=0.6", "--absolute-only", "--format", "json")
    assert p.returncode == 0, p.stderr
    checks = json.loads(p.stdout)["checks"]
    assert [(c["metric"], c["status"]) for c in checks if c["metric"] == "route_flip_rate"] == [
        ("route_flip_rate", "pass")
    ]


def test_a_folder_of_runs_reads_tokens_not_route_shards(tmp_path):
    write_run(tmp_path / "runs" / "a")
    result = analyse(str(tmp_path / "runs"), AnalysisRequest(report=True))
    # the six token rows of the fixture; routes/ is not read as token pairs (one run: its routing is shown)
    assert result.tokens == 6 and result.report.routing.route_flip_rate == pytest.approx(0.5)


def test_gate_without_a_routing_limit_does_not_read_the_routes(tmp_path):
    """A gate on token metrics of an MoE run costs what it costs on a dense run: routes/ is not read
    (here it is broken, and the gate still judges the tokens)."""
    import tomllib

    from mismatchscope.gate.config import parse_config
    from mismatchscope.gate.run import run_gate

    rows, meta, _ = _bad(BAD["id"][0])
    write_run(tmp_path / "run", rows, meta)
    cfg = parse_config(tomllib.loads("[absolute]\ntv_token_mean = 1.0\n"), "test")
    (check,) = run_gate(str(tmp_path / "run"), None, cfg).checks
    assert check.status == "pass"
