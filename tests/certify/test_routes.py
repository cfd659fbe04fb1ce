"""certify on MoE runs: the experts each token was routed to, compared as sets, the replay level named."""

from __future__ import annotations

from tests.certify.runs import make_run, route_row, route_rows, routes_of, run_json


def test_moe_equal_routes_certify_and_order_is_ignored(tmp_path):
    run = make_run(tmp_path / "run")
    swapped = lambda n: [[None if x is None else x[::-1] for x in route_row(i)] for i in range(n)]
    routes_of(run, route_rows(), swapped)
    r, out = run_json(run)
    assert r.returncode == 0, r.stdout
    assert out["routes"]["passed"] is True and out["routes"]["tokens_flipped"] == 0


def test_moe_one_expert_flip_names_token_and_layer(tmp_path):
    run = make_run(tmp_path / "run")
    # route row 8 = sequence 1, input position 2 = completion position 0 (PROMPT_LEN - 1 = 2); row 9 is its position 1
    flip_row = 9
    routes_of(run, route_rows(), route_rows({flip_row: {3: [(flip_row + 1) % 8, 7 if (flip_row + 5) % 8 != 7 else 6]}}))
    r, out = run_json(run)
    assert r.returncode == 1
    routes = out["routes"]
    assert routes["tokens_flipped"] == 1 and routes["flips_by_layer"] == {"3": 1} and routes["first_layer"] == 3
    # the layers that flipped, out of the model's two MoE layers (once "in 2 MoE layers", the model's count)
    assert routes["status"] == "1 of 12 certified tokens flip an expert set, in 1 of the 2 MoE layers (layer 3)"
    f = routes["first"][0]
    assert (f["sequence_id"], f["position"], f["layer"]) == (1, 1, 3)
    assert f["sampler"] == sorted([2, 6]) and f["trainer"] == [2, 7]


def test_moe_all_zero_capture_is_not_a_real_capture(tmp_path):
    run = make_run(tmp_path / "run")
    routes_of(run, route_rows({4: {1: [0, 0]}}), route_rows({4: {1: [0, 0]}}))
    _, out = run_json(run)
    assert out["routes"]["passed"] is False and out["routes"]["dead_rows"] == {"sampler": 1, "trainer": 1}


def test_moe_replayed_routes_name_the_level(tmp_path):
    run = make_run(tmp_path / "run")
    routes_of(run, route_rows(), route_rows(), replay="ids+weights")
    r, out = run_json(run)
    assert r.returncode == 0
    assert out["routes"]["replay"] == "ids+weights" and "expert ids and gate weights" in out["routes"]["status"]


def test_moe_without_routes_does_not_certify(tmp_path):
    run = make_run(tmp_path / "run", manifest={"config": {"checkpoint": {"is_moe": True}}})
    r, out = run_json(run)
    assert r.returncode == 1 and out["routes"]["passed"] is False


def test_a_declared_replay_is_checked_against_recorded_routes(tmp_path):
    run = make_run(tmp_path / "run")
    routes_of(run, route_rows(), route_rows({9: {1: [0, 1]}}), replay="ids")  # row 9: layer 1 was {1, 4}
    r, out = run_json(run)
    assert r.returncode == 1
    assert out["routes"]["replay"] == "ids" and out["routes"]["flips_by_layer"] == {"1": 1}
    assert out["routes"]["status"].startswith("routes replayed: the trainer was given the sampler's expert ids (ids)")
