"""``rescore`` of an imported run: the bundled tiny-qwen3-moe scores a stack's own tokens beside its routes.

The stack here is the test itself. Three sequences of made-up token ids
(prompt + completion: 6 + 8, 4 + 7 with completion token 2 dropped by the
loss mask, 5 + 5) go through an independent float32 forward of the
checkpoint, one sequence at a time: its top-2 experts per layer (2 layers,
both MoE, 8 experts) are the "sampler's" routes, and its logprobs at
T = 0.7 minus a known offset are the "sampler's" logprobs. Imported as a
vLLM dump and rescored with the same checkpoint at ``--temperature 0.7``
(one sequence per batch, as the forward ran), the trainer's routes are the
sampler's: no flip. A second import alters chosen rows (counted by hand in
:data:`ALTERED`) and the report counts exactly those, as sets.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import InputError, UsageError
from mismatchscope.probe.rescore import rescore
from mismatchscope.probe.types import TrainerConfig
from tests.helpers import cli

from .conftest import checkpoint_dir

torch = pytest.importorskip("torch")

slow = pytest.mark.slow  # the tests that load the model: an independent forward, rescores in child processes

T = 0.7
VOCAB = 320
rng = np.random.default_rng(7)
SEQS = {  # sequence id -> (prompt ids, completion ids, loss mask over the completion)
    0: (rng.integers(3, VOCAB, 6).tolist(), rng.integers(3, VOCAB, 8).tolist(), [1] * 8),
    1: (rng.integers(3, VOCAB, 4).tolist(), rng.integers(3, VOCAB, 7).tolist(), [1, 1, 0, 1, 1, 1, 1]),
    2: (rng.integers(3, VOCAB, 5).tolist(), rng.integers(3, VOCAB, 5).tolist(), [1] * 5),
}
ALTERED = [  # (sequence, input position, layer, how): rows whose sampler set the test changes
    (0, 1, 0, "other"),  # a prompt row (prompt 6: rows 0..4 predict prompt tokens): prompt flip at layer 0
    (0, 5, 1, "other"),  # predicts completion token 0: flip at layer 1
    (0, 7, 0, "other"),  # completion token 2: flip at layer 0 ...
    (0, 7, 1, "other"),  # ... and at layer 1: one flipped token
    (0, 8, 0, "reversed"),  # completion token 3: the same set in the other order, no flip
    (1, 6, 1, "other"),  # prompt 4: row 6 predicts completion token 3, the 3rd kept one (token 2 is dropped)
]
FLIPPED_TOKENS = {(0, 0), (0, 2), (1, 2)}  # (sequence, position in tokens/) of the completion flips
OFFSET_FLIPPED, OFFSET_OTHER = 0.5, 0.1  # sampler logprob = the forward's - offset


@pytest.fixture(scope="module")
def reference():
    """Per sequence: the independent forward's top-2 experts [rows, 2 layers, 2] and logprobs at T of each
    completion token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir("tiny-qwen3-moe")), dtype=torch.float32).eval()
    out = {}
    for sid, (prompt, completion, _) in SEQS.items():
        ids = prompt + completion
        with torch.inference_mode():
            res = model(input_ids=torch.tensor([ids]), output_router_logits=True, use_cache=False)
        experts = np.stack([torch.topk(rl.float(), 2).indices.numpy() for rl in res.router_logits], 1)
        lp = torch.log_softmax(res.logits[0].float() / T, -1)
        start = len(prompt) - 1
        token_lp = [float(lp[start + j, t]) for j, t in enumerate(completion)]
        out[sid] = (experts[: len(ids) - 1], np.array(token_lp))
    return out


def _other_set(row: np.ndarray) -> list[int]:
    """Two experts of the 8 that are not in ``row``'s set."""
    return [e for e in range(8) if e not in set(row.tolist())][:2]


def _dump(root: Path, reference, altered=(), sequences=SEQS, config: Path | None = None) -> Path:
    """One JSONL that is both the token dump and the vLLM routes (offline lists), imported into root/imported."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for sid, (prompt, completion, mask) in sequences.items():
        experts, lp = reference[sid]
        experts = experts.copy()
        for s, ip, layer, how in altered:
            if s == sid:
                experts[ip, layer] = experts[ip, layer][::-1] if how == "reversed" else _other_set(experts[ip, layer])
        kept = [j for j, m in enumerate(mask) if m]
        offsets = [OFFSET_FLIPPED if (sid, p) in FLIPPED_TOKENS else OFFSET_OTHER for p in range(len(kept))]
        lines.append(
            {
                "sequence_id": sid,
                "token_ids": completion,
                "mask": mask,
                "sampler_logprobs": [float(lp[j]) - offsets[kept.index(j)] if m else 0.0 for j, m in enumerate(mask)],
                "trainer_logprobs": [-1.0] * len(completion),  # the stack's own trainer: replaced by the rescore
                "prompt_token_ids": prompt,
                "completion_token_ids": completion,
                "loss_mask": mask,
                "routed_experts": experts.tolist(),
            }
        )
    dump = root / "dump.jsonl"
    dump.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = root / "imported"
    cfg = config or checkpoint_dir("tiny-qwen3-moe")
    r = cli(
        "import", "jsonl", str(dump), "--out", str(out),
        "--routes", str(dump), "--routes-format", "vllm", "--routes-config", str(cfg),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


def _rescore(imported: Path, out: Path, *extra: str) -> dict:
    r = cli(
        "rescore", str(imported), "--out", str(out),
        "--trainer-checkpoint", str(checkpoint_dir("tiny-qwen3-moe")), "--temperature", str(T),
        "--trainer-batch-tokens", "1", "--format", "json", *extra,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)["report"]["routing"]


@pytest.fixture(scope="module")
def same(tmp_path_factory, reference):
    root = tmp_path_factory.mktemp("same")
    return root / "rescored", _rescore(_dump(root, reference), root / "rescored")


@pytest.fixture(scope="module")
def altered(tmp_path_factory, reference):
    root = tmp_path_factory.mktemp("altered")
    return root / "rescored", _rescore(_dump(root, reference, ALTERED), root / "rescored")


@slow
def test_the_trainers_own_routes_imported_give_no_flip(same):
    _, routing = same
    assert routing["sides"]["sampler"]["recorded"] and routing["sides"]["trainer"]["recorded"]
    # 8 + 6 kept + 5 completion tokens; prompt rows 5 + 3 + 4, and seq 1's row predicting its dropped token
    assert (routing["tokens_compared"], routing["tokens_flipped"]) == (19, 0)
    assert (routing["prompt_rows_compared"], routing["prompt_rows_flipped"]) == (13, 0)
    assert routing["missing_captures"] == {"sampler": 0, "trainer": 0, "entries": 2 * 32}  # 32 rows x 2 layers


@slow
def test_the_altered_rows_are_exactly_the_flips_as_sets(altered):
    _, routing = altered
    assert (routing["tokens_compared"], routing["tokens_flipped"]) == (19, 3)  # FLIPPED_TOKENS
    by_layer = [(r["layer"], r["compared"], r["flipped"]) for r in routing["route_flip_rate_by_layer"]]
    assert by_layer == [(0, 19, 1), (1, 19, 3)]  # layer 0: (0, tok 2); layer 1: (0, tok 0), (0, tok 2), (1, tok 2)
    prompt = [(r["layer"], r["flipped"]) for r in routing["prompt_route_flip_rate_by_layer"]]
    assert prompt == [(0, 1), (1, 0)]  # (0, row 1) at layer 0; the reversed pair is the same set
    # |log p - log q|: 0.5 on the 3 flipped tokens, 0.1 on the other 16: 1.5 / (1.5 + 1.6)
    assert routing["routing_share_of_gap"] == pytest.approx(1.5 / 3.1, abs=1e-4)
    assert routing["abs_logprob_diff"]["flipped_mean"] == pytest.approx(0.5, abs=1e-4)


@slow
def test_rescored_tokens_are_the_checkpoints_at_the_given_temperature(altered, reference):
    run, _ = altered
    t = pq.read_table(run / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")])
    for sid, (_, completion, mask) in SEQS.items():
        rows = t.filter(t["sequence_id"].to_numpy() == sid)
        kept = [j for j, m in enumerate(mask) if m]
        assert rows["token_id"].to_pylist() == [completion[j] for j in kept]
        assert rows["position"].to_pylist() == list(range(len(kept)))
        np.testing.assert_allclose(rows["trainer_logprob"].to_numpy(), reference[sid][1][kept], atol=1e-4)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["sampling"]["temperature"] == T and manifest["status"] == "complete"
    # every shard of both folders is in the run's index
    index = {f.name for f in (run / "index").iterdir()}
    assert {"tokens.jsonl", "routes.jsonl"} <= index


@slow
def test_a_rescored_import_rescores_again_at_its_temperature(altered, tmp_path):
    run, first = altered
    again = _rescore_fn(run, tmp_path / "again", checkpoint=None, temperature=None)
    assert again.is_dir()
    with pytest.raises(UsageError, match=r"--temperature 1: .* was scored at temperature 0.7"):
        _rescore_fn(run, tmp_path / "other", checkpoint=None, temperature=1.0)


def _rescore_fn(src: Path, out: Path, *, checkpoint: Path | None, temperature: float | None) -> Path:
    return rescore(src, out, TrainerConfig(batch_tokens=1), trainer_checkpoint=checkpoint, temperature=temperature)


def _moe() -> Path:
    return checkpoint_dir("tiny-qwen3-moe")


# -- what does not fit: one line, exit 2, nothing written -------------------------------------------------------------


@pytest.fixture(scope="module")
def made_up():
    """Routes and logprobs of the right shapes, without the model: what the checks before scoring look at."""
    out = {}
    for sid, (prompt, completion, _) in SEQS.items():
        rows = np.arange(len(prompt) + len(completion) - 1)
        out[sid] = (np.stack([rows % 8, (rows + 3) % 8], -1)[:, None].repeat(2, 1), np.full(len(completion), -2.0))
    return out


@pytest.fixture(scope="module")
def good_import(tmp_path_factory, made_up) -> Path:
    return _dump(tmp_path_factory.mktemp("good"), made_up)


def test_an_imported_run_needs_its_temperature_and_a_checkpoint(good_import, tmp_path):
    with pytest.raises(UsageError, match="does not record the sampler's temperature: pass --temperature T"):
        rescore(good_import, tmp_path / "a", TrainerConfig(), trainer_checkpoint=checkpoint_dir("tiny-qwen3-moe"))
    with pytest.raises(UsageError, match="records no checkpoint to score it with"):
        rescore(good_import, tmp_path / "b", TrainerConfig(), temperature=T)
    with pytest.raises(UsageError, match="replaying imported routes is not supported"):
        rescore(
            good_import,
            tmp_path / "c",
            TrainerConfig(replay_routes=True),
            trainer_checkpoint=checkpoint_dir("tiny-qwen3-moe"),
            temperature=T,
        )
    assert not any((tmp_path / x).exists() for x in "abc")


@slow  # a child process
def test_a_dense_checkpoint_for_imported_routes_is_one_line_exit_2(good_import, tmp_path):
    out = tmp_path / "dense"
    r = cli(
        "rescore", str(good_import), "--out", str(out), "--temperature", "1",
        "--trainer-checkpoint", str(checkpoint_dir("tiny-qwen3")),
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") <= 2 and "Traceback" not in r.stderr, r.stderr
    assert "holds routes of an MoE model (qwen3_moe) but" in r.stderr and "is dense" in r.stderr
    assert not out.exists()


def test_routes_of_another_shape_are_refused(tmp_path, made_up):
    """Imported for a 2-layer model of 16 experts: the checkpoint's 8 experts do not fit."""
    cfg = tmp_path / "config.json"
    base = json.loads((checkpoint_dir("tiny-qwen3-moe") / "config.json").read_text())
    cfg.write_text(json.dumps({**base, "num_experts": 16}))
    imported = _dump(tmp_path, made_up, config=cfg)
    with pytest.raises(InputError, match=r"top-2 of 16 experts; .* top-2 of 8 experts"):
        _rescore_fn(imported, tmp_path / "out", checkpoint=_moe(), temperature=T)
    assert not (tmp_path / "out").exists()


def test_ids_past_the_vocabulary_and_sequences_past_the_context_are_refused(tmp_path, made_up):
    prompt, completion, mask = SEQS[2]
    experts = made_up[2][0]
    wide = {2: (prompt, [*completion[:-1], VOCAB + 5], mask)}  # the last completion id: past the 320 tokens
    imported = _dump(tmp_path / "wide", {2: (experts, made_up[2][1])}, sequences=wide)
    with pytest.raises(InputError, match=r"sequence 2 of .* holds token id 325, outside the vocabulary .*0\.\.319"):
        _rescore_fn(imported, tmp_path / "wide" / "out", checkpoint=_moe(), temperature=T)
    # two sequences past it: the first is named with its own id (321), not the run's largest (325, in sequence 2)
    p1, c1, m1 = SEQS[1]
    both = {**wide, 1: (p1, [VOCAB + 1, *c1[1:]], m1)}
    routes = {s: (made_up[s][0], made_up[s][1]) for s in (1, 2)}
    imported = _dump(tmp_path / "both", routes, sequences=both)
    with pytest.raises(InputError, match=r"sequence 1 of .* holds token id 321, .*; the largest id in the run is 325"):
        _rescore_fn(imported, tmp_path / "both" / "out", checkpoint=_moe(), temperature=T)
    n = 320  # prompt 5 + 320 completion tokens: 325 positions, the checkpoint has 320
    long_experts = np.stack([np.arange(n + 4) % 8, (np.arange(n + 4) + 1) % 8], -1)[:, None].repeat(2, 1)
    long = {2: (prompt, (list(range(3, 300)) * 2)[:n], [1] * n)}
    imported = _dump(tmp_path / "long", {2: (long_experts, np.zeros(n))}, sequences=long)
    with pytest.raises(InputError, match=r"sequence 2 of .* is 325 tokens long, more than the 320 positions"):
        _rescore_fn(imported, tmp_path / "long" / "out", checkpoint=_moe(), temperature=T)


@pytest.mark.parametrize(
    "temperature, says",
    [
        (math.inf, "--temperature inf is not a temperature the trainer can divide its logits by"),
        (math.nan, "--temperature nan is not a temperature the trainer can divide its logits by"),
        (-1.0, "--temperature -1 is negative"),
        (1e-30, "--temperature 1e-30 is below 1e-05, where vLLM ignores the temperature and samples greedily"),
        (0.0, "--temperature 0: a rescore scores logits / T, which greedy sampling (T = 0) does not define"),
    ],
)
def test_a_temperature_that_cannot_be_meant_is_refused_before_anything_is_written(
    good_import, tmp_path, temperature, says
):
    # inf scored every token as uniform and 1e-30 as greedy (vLLM ignores T < 1e-5): both were reported as mismatch
    with pytest.raises(UsageError, match=re.escape(says)):
        _rescore_fn(good_import, tmp_path / "out", checkpoint=_moe(), temperature=temperature)
    assert not (tmp_path / "out").exists()


def test_an_import_without_routes_and_a_recorder_run_say_what_they_are(tmp_path):
    # once "config is None, not a table (the manifest was edited or damaged ...)", or "is a probe run"
    from mismatchscope import Recorder

    (tmp_path / "d.jsonl").write_text('{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4]}\n')
    assert cli("import", "jsonl", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "imp")).returncode == 0
    with pytest.raises(UsageError, match="is an import without its prompt tokens, which a rescore needs"):
        _rescore_fn(tmp_path / "imp", tmp_path / "a", checkpoint=_moe(), temperature=1.0)
    with Recorder(tmp_path / "rec") as rec:
        rec.add(step=0, sampler_logprobs=[[-0.5]], trainer_logprobs=[[-0.4]], token_ids=[[5]])
    with pytest.raises(UsageError, match="is a Recorder run: it holds logprob pairs, not the prompts"):
        _rescore_fn(tmp_path / "rec", tmp_path / "b", checkpoint=None, temperature=None)
