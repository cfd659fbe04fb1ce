"""``replay_invalid`` and ``routing_replay``: a replay that does not do what it claims, layer by layer."""

from __future__ import annotations

import json
from dataclasses import replace

from mismatchscope.doctor import doctor
from tests.routes_fixture import META, RUN_ROWS, write_run

N = None


def _by(doc) -> dict:
    return {f.cause: f for f in doc.findings}


def test_a_layer_handed_another_layers_routes_and_routes_for_a_dense_layer_are_invalid(tmp_path):
    # four layers: 0 dense, 1-3 MoE; layer 3 (an MTP layer) is given layer 2's routes row for row, on 60 rows;
    # the dense layer 0 holds an entry on every row. The trainer follows the replay (no flips)
    meta = replace(META, num_layers=4, moe_layers=(1, 2, 3), replay="ids")
    rows = []
    for i in range(60):
        a, b = [i % 8, (i + 1) % 8], [(3 * i) % 8, (3 * i + 2) % 8]
        routes = [[0, 1], a, b, b]
        rows.append((10 + i // 6, i % 6, None if i % 6 == 0 else i % 6 - 1, routes, routes, [N, 0.1, 0.1, 0.1]))
    tokens = {(10 + i // 6, p): (-1.0, -1.0) for i in range(60) for p in range(5)}
    doc = doctor(str(write_run(tmp_path / "run", rows=rows, meta=meta, tokens=tokens)))
    f = _by(doc)["replay_invalid"]
    assert f.status == "detected", f.sentence
    assert f.estimate["duplicate_layers"] == "3 = 2" and f.estimate["routerless_entries"] == 120
    assert "row for row" in f.sentence and "no router" in f.sentence


def test_flips_at_the_replace_rate_the_run_declares_are_the_replace_at_work(tmp_path):
    # RUN_ROWS flip on 2 of the 4 compared tokens; a stack that says it replaced half the replayed experts
    run = write_run(tmp_path / "declared", meta=replace(META, replay="ids"))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["routing"]["replace_rate"] = 0.5
    (run / "manifest.json").write_text(json.dumps(manifest))
    by = _by(doctor(str(run)))
    assert by["routing_replay"].status == "clear" and "replace rate" in by["routing_replay"].sentence
    # declared at 5%: the flips are far from it
    manifest["routing"]["replace_rate"] = 0.05
    (run / "manifest.json").write_text(json.dumps(manifest))
    by = _by(doctor(str(run)))
    assert by["replay_invalid"].status == "detected" and by["replay_invalid"].estimate["replace_rate"] == 0.05
    assert RUN_ROWS  # the fixture's rows, flips derived by hand there
