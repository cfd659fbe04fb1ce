"""Routes from the training loop: Recorder.add writes them, the Monitor and timeline carry the flip rate per step.

Model: 3 decoder layers (0 dense, 1 and 2 MoE), 8 experts, top-2. Two steps
of a batch of 2 sequences x 2 tokens; every number is derived in a comment.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mismatchscope import Recorder, rundir
from mismatchscope.analysis.engine import AnalysisRequest, analyse
from mismatchscope.analysis.results import MissingCaptures
from mismatchscope.errors import RecorderInputError
from mismatchscope.live.monitor import Monitor
from mismatchscope.routing.layout import RoutingMeta
from mismatchscope.timeline.series import build_series

META = RoutingMeta("qwen3_moe", 3, (1, 2), 8, 2)

# [B=2, T=2, layers=3, k=2]; layer 0 is dense (what an engine leaves there: zeros, ignored)
SAMPLER = np.array(
    [[[[0, 0], [1, 2], [3, 4]], [[0, 0], [1, 2], [3, 4]]], [[[0, 0], [5, 6], [7, 0]], [[0, 0], [1, 2], [3, 4]]]]
)
TRAINER = SAMPLER.copy()
TRAINER[0, 1, 1] = [2, 1]  # token (0, 1): the same set in another order, no flip
TRAINER[1, 0, 2] = [7, 1]  # token (1, 0): layer 2 {0, 7} vs {1, 7}, a flip ([7, 0] is not all zero: expert 0 is real)
TRAINER[1, 1, 1] = [1, 3]  # token (1, 1): layer 1 {1, 2} vs {1, 3}, a flip
LQ = np.log(np.full((2, 2), 0.5))


@pytest.fixture
def recorded(tmp_path):
    run = tmp_path / "run"
    with Monitor(Recorder(run, routing=META)) as mon:
        first = mon.add(0, LQ, LQ, sampler_experts=SAMPLER, trainer_experts=TRAINER)
        # step 1: the MoE layers only (the engines' MoE-ordinal layout), both sides equal: no flip
        second = mon.add(1, LQ, LQ, sampler_experts=SAMPLER[:, :, 1:], trainer_experts=SAMPLER[:, :, 1:])
    return run, first, second


def test_monitor_carries_the_flip_rate_per_step(recorded):
    _, first, second = recorded
    # step 0: tokens (1, 0) and (1, 1) flipped of 4 compared -> 0.5; step 1: none -> 0
    assert first["mismatch/route_flip_rate"] == pytest.approx(0.5)
    assert second["mismatch/route_flip_rate"] == 0.0


def test_recorded_routes_are_the_layout_and_report_reads_them(recorded):
    run, _, _ = recorded
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["routing"]["moe_layers"] == [1, 2]
    assert manifest["routing"]["sampler"]["recorded"] and manifest["routing"]["trainer"]["recorded"]
    assert sorted(p.name for p in (run / "routes").iterdir()) == [
        "step-000000-rank-0000.parquet",
        "step-000001-rank-0000.parquet",
    ]
    # each rank lists its route shards in its own index, as it does its token shards: 2 sequences x 2 tokens a step
    index = rundir.read_index(run, rundir.ROUTES)
    assert index is not None and {name: e.rows for name, e in index.items()} == {
        "step-000000-rank-0000.parquet": 4,
        "step-000001-rank-0000.parquet": 4,
    }
    ro = analyse(str(run), AnalysisRequest(report=True)).report.routing
    # 8 tokens over both steps, each compared at both MoE layers; layer 1 flipped once (1, 1), layer 2 once (1, 0)
    assert [(r.layer, r.compared, r.flipped) for r in ro.route_flip_rate_by_layer] == [(1, 8, 1), (2, 8, 1)]
    assert ro.route_flip_rate == pytest.approx(2 / 8)
    assert ro.missing_captures == MissingCaptures(sampler=0, trainer=0, entries=16)


def test_timeline_has_the_flip_rate_per_step(recorded):
    run, _, _ = recorded
    series = build_series(str(run), [])
    # the same as the Monitor's: step 0 2/4, step 1 0/4
    assert list(series.step_K) == [0, 1]
    assert series.values["route_flip_rate"].tolist() == [pytest.approx(0.5), 0.0]
    assert "route_flip_rate" in [m.name for m in series.metrics]


def test_dense_timelines_have_no_flip_rate(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        rec.add(0, LQ, LQ)
    assert "route_flip_rate" not in build_series(str(tmp_path / "run"), []).values


@pytest.mark.parametrize(
    "bad, text",
    [
        (dict(sampler_experts=SAMPLER[:, :, :, :1]), "expected [layers, top_k] with layers 3"),
        (dict(sampler_experts=SAMPLER + 6), "expert id 13; the model routes to ids 0..7"),
        (dict(sampler_experts=np.where(SAMPLER == 2, 1, SAMPLER)), "names an expert twice in decoder layer 1"),
        (dict(sampler_experts=SAMPLER[:1]), "expected [B, T, layers, top_k] with [B, T] = (2, 2)"),
    ],
)
def test_bad_routes_are_refused_at_add(tmp_path, bad, text):
    rec = Recorder(tmp_path / "run", routing=META)
    with pytest.raises(RecorderInputError) as e:
        rec.add(0, LQ, LQ, **bad)
    assert text in str(e.value)
    rec.close()


def test_routes_need_the_routing_layout(tmp_path):
    rec = Recorder(tmp_path / "run")
    with pytest.raises(RecorderInputError, match="needs the model's routing layout"):
        rec.add(0, LQ, LQ, sampler_experts=SAMPLER)
    rec.close()
