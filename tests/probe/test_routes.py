"""MoE routes on the bundled tiny-qwen3-moe (2 layers, 8 experts, top-2): recording, replay, refusals.

One probe with the transformers sampler in bfloat16 and a float32 trainer,
one ``rescore --replay-routes`` of it, shared by the module. Everything the
routes say is checked against a forward the test runs itself:

* the trainer's recorded routes against ``output_router_logits`` of an
  independent float32 forward (top-2 of the softmax), as sets;
* the replay run's logprobs against a forward whose MoE blocks the test
  replaces by its own: the sampler's ids, weights = the trainer router's
  softmax at those ids, renormalised (``norm_topk_prob``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope import rundir
from mismatchscope.reader import read_routes
from mismatchscope.routing.io import Shape, read_meta, sequences_of
from tests.helpers import cli_no_engine as cli

from .conftest import checkpoint_dir, sample_data_dir

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # a probe and two rescores of the MoE sample: about a minute


def _ok(r):
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("routes")
    prompts = root / "prompts.jsonl"
    lines = (sample_data_dir() / "prompts.jsonl").read_text().splitlines()[:6]
    prompts.write_text("\n".join(lines) + "\n")
    out = root / "run"
    _ok(
        cli(
            "probe",
            str(checkpoint_dir("tiny-qwen3-moe")),
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--sampler",
            "hf",
            "--sampler-dtype",
            "bfloat16",
            "--trainer-dtype",
            "float32",
            "-n",
            "2",
            "--max-tokens",
            "24",
            "--format",
            "json",
        )
    )
    return out


@pytest.fixture(scope="module")
def replay_run(moe_run) -> Path:
    out = moe_run.parent / "replay"
    _ok(cli("rescore", str(moe_run), "--out", str(out), "--replay-routes", "--format", "json"))
    return out


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(checkpoint_dir("tiny-qwen3-moe")), dtype=torch.float32).eval()


def _sequences(run: Path) -> dict[int, list[int]]:
    """sequence id -> prompt + completion ids, from the run's own files."""
    prompts = pq.read_table(run / "prompts.parquet").to_pylist()
    tokens = pq.read_table(run / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")])
    n = json.loads((run / "manifest.json").read_text())["config"]["sampling"]["n"]
    out: dict[int, list[int]] = {}
    for row in zip(tokens["sequence_id"].to_pylist(), tokens["token_id"].to_pylist(), strict=True):
        out.setdefault(row[0], list(prompts[row[0] // n]["prompt_token_ids"])).append(row[1])
    return out


def _routes(run: Path, side: str, weights: bool = False):
    meta = read_meta(run)
    return sequences_of(read_routes(run), side, Shape.of(meta), weights=weights)


def _sets_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.sort(a, -1) == np.sort(b, -1)).all(-1)


def test_manifest_names_the_routing(moe_run):
    meta = read_meta(moe_run)
    assert (meta.family, meta.num_layers, meta.moe_layers, meta.num_experts, meta.top_k) == (
        "qwen3_moe",
        2,
        (0, 1),
        8,
        2,
    )
    assert meta.sampler.recorded and meta.sampler.weights and meta.trainer.recorded and meta.replay is None
    assert read_routes(moe_run).schema.field("trainer_experts").type == pa.list_(pa.list_(pa.uint8()))


def test_every_routed_position_has_one_row(moe_run):
    seqs = _sequences(moe_run)
    table = read_routes(moe_run).sort_by([("sequence_id", "ascending"), ("input_position", "ascending")])
    prompts = {
        s: len(p["prompt_token_ids"]) for s, p in enumerate(pq.read_table(moe_run / "prompts.parquet").to_pylist())
    }
    n = 2
    for s, ids in seqs.items():
        rows = table.filter(pa.compute.equal(table["sequence_id"], s))
        # all but the last token are fed through the model: len - 1 rows, positions 0 .. len - 2
        assert rows["input_position"].to_pylist() == list(range(len(ids) - 1))
        p = prompts[s // n]
        # the row at input position P - 1 + j predicts completion token j; earlier rows predict prompt tokens
        assert rows["token_position"].to_pylist() == [None] * (p - 1) + list(range(len(ids) - p))


def test_trainer_routes_equal_an_independent_forward(moe_run, model):
    trainer = _routes(moe_run, "trainer")
    agree = []
    for s, ids in _sequences(moe_run).items():
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), output_router_logits=True, use_cache=False)
        want = np.stack([torch.topk(torch.softmax(rl.float(), -1), 2).indices.numpy() for rl in out.router_logits], 1)
        agree.append(_sets_equal(trainer[s].ids, want[: len(ids) - 1]))
    share = np.concatenate(agree).mean()
    assert share >= 0.995, share


def test_sampler_routes_are_recorded_and_sometimes_differ(moe_run):
    sampler, trainer = _routes(moe_run, "sampler", weights=True), _routes(moe_run, "trainer")
    assert sampler.keys() == trainer.keys()
    flips = np.concatenate([~_sets_equal(sampler[s].ids, trainer[s].ids) for s in sampler])
    assert 0 < flips.mean() < 0.2, flips.mean()  # bfloat16 against float32: a few close choices go the other way
    w = np.concatenate([sampler[s].weights.reshape(-1, 2) for s in sampler])
    assert np.allclose(w.sum(-1), 1.0, atol=1e-2)  # norm_topk_prob: each position's top-2 weights sum to 1


def _replayed_logprobs(model, ids: list[int], forced: np.ndarray, prompt_len: int) -> np.ndarray:
    """The test's own replay: each MoE block routes to ``forced`` [len-1, layers, 2], the last position to
    its own top-2; weights = the router's softmax at those ids, renormalised."""
    import torch.nn.functional as F

    blocks = [layer.mlp for layer in model.model.layers]
    saved = []
    for m, block in enumerate(blocks):

        def forward(hidden, block=block, m=m):
            b, t, h = hidden.shape
            x = hidden.reshape(-1, h)
            probs = F.softmax(F.linear(x, block.gate.weight).float(), dim=-1)
            chosen = torch.cat([torch.from_numpy(forced[:, m]).long(), torch.topk(probs, 2).indices[t - 1 :]])
            w = probs.gather(-1, chosen)
            w = (w / w.sum(-1, keepdim=True)).to(x.dtype)
            return block.experts(x, chosen, w).reshape(b, t, h)

        saved.append(block)
        block.forward = forward
    try:
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    finally:
        for block in saved:
            del block.forward
    labels = torch.tensor(ids[prompt_len:])
    return logits.log_softmax(-1)[prompt_len - 1 : len(ids) - 1].gather(-1, labels[:, None])[:, 0].numpy()


def test_replay_equals_an_independent_replay(moe_run, replay_run, model):
    assert read_meta(replay_run).replay == "ids"
    sampler = _routes(moe_run, "sampler")
    replayed = _routes(replay_run, "trainer")
    tokens = pq.read_table(replay_run / "tokens").to_pandas().sort_values(["sequence_id", "position"])
    prompts = pq.read_table(moe_run / "prompts.parquet").to_pylist()
    for s, ids in _sequences(moe_run).items():
        assert _sets_equal(replayed[s].ids, sampler[s].ids).all()  # in the replay run the trainer routes as the sampler
        p = len(prompts[s // 2]["prompt_token_ids"])
        want = _replayed_logprobs(model, ids, sampler[s].ids, p)
        got = tokens[tokens.sequence_id == s].trainer_logprob.to_numpy()
        assert np.abs(got - want).max() < 1e-4, s


def test_replay_shrinks_the_gap_on_flipped_tokens(moe_run, replay_run):
    sampler, trainer = _routes(moe_run, "sampler"), _routes(moe_run, "trainer")
    routes = read_routes(moe_run, columns=["sequence_id", "input_position", "token_position"]).to_pandas()
    flipped = set()
    for s in sampler:
        rows = ~_sets_equal(sampler[s].ids, trainer[s].ids)  # [positions, layers]
        for pos in np.flatnonzero(rows.any(-1)):
            tp = routes[(routes.sequence_id == s) & (routes.input_position == pos)].token_position.iloc[0]
            if not np.isnan(tp):  # a completion token whose predicting position flipped in some layer
                flipped.add((s, int(tp)))
    assert flipped, "no completion token flipped: the check below would be empty"

    def gap(run):
        t = pq.read_table(run / "tokens").to_pandas()
        keep = [(s, p) in flipped for s, p in zip(t.sequence_id, t.position, strict=True)]
        return (t.sampler_logprob - t.trainer_logprob).abs()[keep].mean()

    assert gap(replay_run) < gap(moe_run)


# ------------------------------------------------------------ refusals


def _refused(src: Path, tmp_path: Path, *flags: str) -> str:
    out = tmp_path / "out"
    r = cli("rescore", str(src), "--out", str(out), "--replay-routes", *flags)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, r.stderr
    assert not out.exists(), "a refused replay left files behind"
    return errors[0]


def _copy(moe_run: Path, tmp_path: Path, edit_manifest=None, edit_routes=None) -> Path:
    dst = tmp_path / "src"
    shutil.copytree(moe_run, dst)
    if edit_manifest:
        path = dst / "manifest.json"
        manifest = json.loads(path.read_text())
        edit_manifest(manifest)
        path.write_text(json.dumps(manifest))
    if edit_routes:
        for part in (dst / "routes").glob("part-*.parquet"):
            table = pq.read_table(part)
            rows = table["sampler_experts"].to_pylist()
            typ = table.schema.field("sampler_experts").type
            table = table.set_column(
                table.schema.get_field_index("sampler_experts"),
                "sampler_experts",
                pa.array([edit_routes(r) for r in rows], typ),
            )
            pq.write_table(table, part)
            rundir.ShardIndex(dst, rundir.ROUTES).commit(part, table.num_rows)  # as its writer would list it
    return dst


def _dense(m):
    del m["routing"]
    m["config"]["checkpoint"]["is_moe"] = False


def _no_sampler(m):
    m["routing"]["sampler"] = {"recorded": False, "weights": False, "why": "the vllm sampler returned none"}


def _no_weights(m):
    m["routing"]["sampler"]["weights"] = False


def test_replay_refuses_a_dense_run(moe_run, tmp_path):
    line = _refused(_copy(moe_run, tmp_path, _dense), tmp_path)
    assert "is a dense run: it has no routes" in line


def test_replay_refuses_a_run_without_sampler_routes(moe_run, tmp_path):
    line = _refused(_copy(moe_run, tmp_path, _no_sampler), tmp_path)
    assert "has no sampler routes to replay (the vllm sampler returned none)" in line


def test_replay_weights_refuses_a_run_without_sampler_weights(moe_run, tmp_path):
    line = _refused(_copy(moe_run, tmp_path, _no_weights), tmp_path, "--replay-weights")
    assert "recorded the sampler's expert ids but not its gate weights" in line


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda r: [[*layer, (layer[0] + 1) % 8] for layer in r],
            "has 3 experts per MoE layer where the checkpoint routes top-2",
        ),
        (lambda r: [*r, r[0]], "rows hold 3 layers but the checkpoint has 2 decoder layers"),
        (lambda r: [[9, layer[1]] for layer in r], "holds expert id 9 but the checkpoint has 8 experts"),
    ],
)
def test_replay_refuses_routes_that_do_not_fit_the_checkpoint(moe_run, tmp_path, edit, message):
    line = _refused(_copy(moe_run, tmp_path, edit_routes=edit), tmp_path)
    assert message in line


def test_replay_refuses_a_manifest_for_another_model(moe_run, tmp_path):
    line = _refused(_copy(moe_run, tmp_path, lambda m: m["routing"].update(top_k=3)), tmp_path)
    assert "top-3; the checkpoint has 2, [0, 1], 8, top-2" in line
