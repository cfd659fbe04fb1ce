"""Route flips against the reference, and the replay variant's preconditions, on hand-made ``routes/`` files.

The files follow :mod:`mismatchscope.routing.layout`; the numbers are derived
by hand in the comments.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.diagnose.document import Absent, RoutesAgainstReference, SideFlips
from mismatchscope.diagnose.routes import flips_against_reference, replay_failed, replay_unavailable
from mismatchscope.routing.layout import RoutingMeta, SideRoutes, routes_schema
from tests.helpers import REPO

MOE = REPO / "sample_data" / "tiny-qwen3-moe"


def _run(tmp_path, rows, sampler_recorded=True, replay=None, why=None):
    """A run directory with a manifest's routing entry and one route shard of ``rows``:
    (sequence_id, input_position, token_position, sampler [layer][k], trainer [layer][k])."""
    run = tmp_path / "run"
    (run / "routes").mkdir(parents=True)
    meta = RoutingMeta(
        family="qwen3_moe",
        num_layers=2,
        moe_layers=(0, 1),
        num_experts=8,
        top_k=2,
        sampler=SideRoutes(sampler_recorded, why=why),
        trainer=SideRoutes(True),
        replay=replay,
    )
    (run / "manifest.json").write_text(json.dumps({"routing": meta.to_dict()}))
    schema = routes_schema(8)
    cols = {
        "sequence_id": [r[0] for r in rows],
        "input_position": [r[1] for r in rows],
        "token_position": [r[2] for r in rows],
        "sampler_experts": [r[3] if sampler_recorded else None for r in rows],
        "trainer_experts": [r[4] for r in rows],
        "sampler_weights": [None] * len(rows),
        "trainer_weights": [None] * len(rows),
        "trainer_margin": [None] * len(rows),
    }
    pq.write_table(pa.table(cols, schema=schema), run / "routes" / "part-00000.parquet")
    return run


# prompt of 2 tokens, completion of 3: input positions 0..3, completion tokens predicted at 1, 2, 3
REFERENCE = {
    7: np.array(
        [
            [[0, 1], [2, 3]],  # position 0: predicts a prompt token, not counted
            [[0, 1], [2, 3]],  # position 1
            [[4, 5], [6, 7]],  # position 2
            [[1, 0], [3, 2]],
        ]
    )
}  # position 3
ROWS = [
    (7, 0, None, [[5, 6], [5, 6]], [[5, 6], [5, 6]]),  # differs everywhere, but predicts a prompt token
    (7, 1, 0, [[1, 0], [2, 3]], [[0, 1], [2, 3]]),  # sampler: same sets (order ignored); trainer: same
    (7, 2, 1, [[4, 5], [6, 0]], [[4, 5], [6, 7]]),  # sampler flips in layer 1
    (7, 3, 2, [[1, 2], [3, 0]], [[0, 1], [3, 2]]),  # sampler flips in both layers
]


def test_each_sides_flip_rate_against_the_reference_by_hand(tmp_path):
    got = flips_against_reference(_run(tmp_path, ROWS), REFERENCE, [0, 1])
    # completion tokens: 3. sampler: layer 0 flips at position 3 only -> 1/3; layer 1 at 2 and 3 -> 2/3;
    # any layer: positions 2 and 3 -> 2/3. trainer: never.
    assert isinstance(got, RoutesAgainstReference) and got.status == "ok" and got.tokens == 3
    assert isinstance(got.sampler, SideFlips) and isinstance(got.trainer, SideFlips)
    assert got.sampler.flip_rate_per_layer == pytest.approx([1 / 3, 2 / 3], abs=1e-12)
    assert got.sampler.flipped_any_layer == pytest.approx(2 / 3, abs=1e-12)
    assert got.trainer.flip_rate_per_layer == [0.0, 0.0] and got.trainer.flipped_any_layer == 0.0


def test_a_side_without_routes_says_why(tmp_path):
    run = _run(tmp_path, ROWS, sampler_recorded=False, why="vLLM's CPU build cannot return routed experts")
    got = flips_against_reference(run, REFERENCE, [0, 1])
    assert isinstance(got, RoutesAgainstReference)
    assert got.sampler == Absent("absent", "vLLM's CPU build cannot return routed experts")
    assert got.trainer.status == "ok"
    assert flips_against_reference(tmp_path / "nothing", REFERENCE, [0, 1]).status == "absent"
    assert flips_against_reference(run, {}, []) == Absent("absent", "the checkpoint is dense")


def test_replay_needs_the_samplers_routes_and_must_have_happened(tmp_path):
    assert replay_unavailable(tmp_path / "no-routes", "vllm") == (
        "trainer.replay_routes needs the sampler's routes, and the baseline run recorded no routes "
        "(use --sampler hf, whose routes are recorded on any machine)"
    )
    none = _run(tmp_path, ROWS, sampler_recorded=False, why="no routes from this engine")
    assert replay_unavailable(none, "hf") == (
        "trainer.replay_routes needs the sampler's routes, and the baseline's "
        "sampler recorded none: no routes from this engine"
    )
    assert replay_failed(none).endswith("the trainer did not replay the sampler's routes (its run records no replay)")


def test_a_replay_whose_trainer_routes_differ_is_refused(tmp_path):
    ok_rows = [(7, i, None, s, s) for i, (_, _, _, s, _) in enumerate(ROWS)]
    ok = _run(tmp_path / "a", ok_rows, replay="ids")
    assert replay_unavailable(ok, "hf") is None
    assert replay_failed(ok) is None
    bad = _run(tmp_path / "b", ROWS, replay="ids")  # rows 0 and 1 hold the same sets, 2 and 3 differ
    assert replay_failed(bad) == (
        "trainer.replay_routes: the replayed trainer's routes differ from the sampler's at 2 of 4 positions"
    )


@pytest.mark.slow
@pytest.mark.skipif(not MOE.is_dir(), reason="sample checkpoint missing")
def test_reference_routes_are_its_float64_routers_choices():
    """The recorded ids are the top-k of a float64 softmax over the router's logits, at every input position."""
    import torch

    from mismatchscope.diagnose.reference import load_reference
    from mismatchscope.probe.checkpoint import inspect_checkpoint
    from mismatchscope.probe.types import SamplingConfig

    ref = load_reference(inspect_checkpoint(MOE))
    assert ref.moe_layers == [0, 1]
    routes: list = []
    prompts, comps = [[5, 6, 7], [8, 9]], [[20, 21], [30]]
    ref.score(prompts, comps, SamplingConfig(), routes=routes)  # one padded batch of two rows
    assert [r.shape for r in routes] == [(4, 2, 2), (2, 2, 2)]  # (prompt + completion - 1, layers, k)
    seen: dict[int, torch.Tensor] = {}
    hooks = [
        ref.routers[i].register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, a[0].clone())) for i in (0, 1)
    ]
    try:
        with torch.inference_mode():
            ref.model.get_decoder()(input_ids=torch.tensor([[5, 6, 7, 20, 21]]), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    for j, layer in enumerate((0, 1)):
        probs = (seen[layer] @ ref.routers[layer].weight.T).softmax(-1)
        want = probs.topk(2, dim=-1).indices[:4].sort(-1).values.numpy()
        np.testing.assert_array_equal(np.sort(routes[0][:, j, :], axis=-1), want)


@pytest.mark.slow
@pytest.mark.skipif(not MOE.is_dir(), reason="sample checkpoint missing")
def test_diagnose_on_the_moe_sample_with_the_transformers_sampler_and_the_replay_variant(tmp_path):
    """The MoE checkpoint diagnoses end to end (its float64 reference included) with --sampler hf, and
    trainer.replay_routes=true is in the JSON's variants: run where the baseline recorded the sampler's routes
    (then the replayed trainer's flips against the reference are the sampler's), failed with the reason where not."""
    from tests.helpers import cli

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join((REPO / "sample_data" / "prompts.jsonl").read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "out"
    r = cli(
        "diagnose",
        str(MOE),
        "--sampler",
        "hf",
        "--sampler-dtype",
        "bfloat16",
        "--trainer-dtype",
        "float32",
        "--prompts",
        str(prompts),
        "-n",
        "2",
        "--max-tokens",
        "6",
        "--bootstrap",
        "100",
        "--no-determinism",
        "--out",
        str(out),
        "--format",
        "json",
        "--vary",
        "trainer.replay_routes=true",
        timeout=900,
    )
    assert r.returncode in (0, 3), r.stderr[-2000:]
    p = json.loads(r.stdout)
    assert p["reference"]["dtype"] == "float64" and p["reference"]["moe_layers"] == [0, 1]
    assert p["baseline"]["sampler"]["kind"] == "hf"
    replay = next(v for v in p["variants"] if v["name"] == "trainer.replay_routes=true")
    manifest = json.loads((out / "baseline" / "manifest.json").read_text())
    if (manifest.get("routing") or {}).get("sampler", {}).get("recorded"):
        assert r.returncode == 0 and replay["status"] == "ok"
        flips = replay["routes"]
        assert flips["status"] == "ok"
        assert flips["trainer"]["flip_rate_per_layer"] == flips["sampler"]["flip_rate_per_layer"]
        assert p["decomposition"]["routes"]["status"] == "ok"
    else:
        assert r.returncode == 3 and replay["status"] == "failed"
        assert replay["reason"] == (
            "trainer.replay_routes needs the sampler's routes, and the baseline run recorded no routes"
        )
        assert p["decomposition"]["routes"]["status"] == "absent"
