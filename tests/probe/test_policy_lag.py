"""``--trainer-checkpoint``: the trainer scores the sampled tokens with other weights.

Pins: a trainer checkpoint with the sampler's weights changes no number; with
later weights the trainer logprobs are those of an independent transformers
forward of the later weights; the manifest and every shard record both
checkpoints and their digests; ``report`` reads the run as policy lag mixed
with numerics; ``gate`` refuses a lag run against a same-weights baseline
unless ``--allow-different trainer.checkpoint`` (or ``trainer``); a resumed
run keeps its trainer checkpoint; another tokenizer, vocabulary or
architecture is a one-line exit-2 error before any engine starts.

The runs sample with ``--sampler hf`` (transformers generate, fp32): the
sampler side does not matter here, and it starts no vLLM engine. The "later"
checkpoint is the bundled dense model with seeded noise on its weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import CheckpointError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.policy_lag import open_trainer_checkpoint
from mismatchscope.probe.tokenizer import load_tokenizer
from tests.helpers import cli_no_engine as cli

from ._probe_utils import naive_logprobs

NOISE = 0.05
"""weight noise, in units of each tensor's std: enough to move the tiny model's
distributions visibly (|log p - log q| ~ 0.1 at high entropy), not enough to break it."""


def _args(prompts: Path) -> list[str]:
    return [
        "--prompts",
        str(prompts),
        "--sampler",
        "hf",
        "--sampler-dtype",
        "float32",
        "-n",
        "2",
        "--max-tokens",
        "8",
        "--seed",
        "3",
        "--round-prompts",
        "8",
    ]


def _tokens(run: Path):
    return pq.read_table(run / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")])


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _ok(*args: str):
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def perturbed_copy(src: Path, dst: Path, noise: float, seed: int = 0) -> Path:
    """``src`` with ``noise * std(w) * N(0, 1)`` added to every weight tensor (seeded): a later checkpoint."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    gen = torch.Generator().manual_seed(seed)
    weights = load_file(dst / "model.safetensors")
    out = {}
    for name in sorted(weights):
        w = weights[name]
        out[name] = (
            (w + noise * w.float().std() * torch.randn(w.shape, generator=gen)).to(w.dtype) if w.numel() > 1 else w
        )
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    from .conftest import sample_data_dir

    path = sample_data_dir() / "prompts.jsonl"
    if not path.is_file():
        pytest.skip("sample_data/prompts.jsonl is missing")
    return path


@pytest.fixture(scope="module")
def later_dir(dense_dir, tmp_path_factory) -> Path:
    return perturbed_copy(dense_dir, tmp_path_factory.mktemp("lag") / "later", NOISE)


@pytest.fixture(scope="module")
def same_weights_dir(dense_dir, tmp_path_factory) -> Path:
    """The sampler's checkpoint at another path: same digest."""
    return Path(shutil.copytree(dense_dir, tmp_path_factory.mktemp("lag") / "copy"))


@pytest.fixture(scope="module")
def other_vocab_dir(dense_dir, tmp_path_factory) -> Path:
    """The same weights with two token ids swapped in the tokenizer: same sizes, other vocabulary."""
    dst = Path(shutil.copytree(dense_dir, tmp_path_factory.mktemp("lag") / "other-vocab"))
    spec = json.loads((dst / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = list(vocab)[10], list(vocab)[11]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (dst / "tokenizer.json").write_text(json.dumps(spec))
    return dst


@pytest.fixture(scope="module")
def base_run(dense_dir, prompts_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lag") / "base"
    _ok("probe", str(dense_dir), *_args(prompts_file), "--out", str(out), "--format", "json")
    return out


@pytest.fixture(scope="module")
def lag_run(dense_dir, later_dir, prompts_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lag") / "lag"
    _ok(
        "probe",
        str(dense_dir),
        *_args(prompts_file),
        "--trainer-checkpoint",
        str(later_dir),
        "--out",
        str(out),
        "--format",
        "json",
    )
    return out


# ------------------------------------------------------------ numbers


def test_the_sampler_weights_as_trainer_checkpoint_change_nothing(base_run, same_weights_dir, tmp_path):
    plain, same = tmp_path / "plain", tmp_path / "same"
    _ok("rescore", str(base_run), "--out", str(plain), "--format", "json")
    _ok("rescore", str(base_run), "--out", str(same), "--trainer-checkpoint", str(same_weights_dir), "--format", "json")
    a, b = _tokens(plain), _tokens(same)
    for col in (
        "token_id",
        "sampler_logprob",
        "trainer_logprob",
        "trainer_logprobs_at_sampler_topk",
        "trainer_entropy",
    ):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col  # same weights, same code: bit-identical
    cfg = _manifest(same)["config"]
    assert cfg["trainer_checkpoint"]["same_as_sampler"] is True
    assert cfg["trainer_checkpoint"]["sha256"] == cfg["checkpoint"]["sha256"]
    assert cfg["semantics"]["policy_lag"] is False


def test_the_trainer_scores_with_the_later_weights(lag_run, base_run, later_dir):
    """Equal to a plain transformers forward of the later weights, and far from the sampler's weights."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(later_dir), dtype=torch.float32).eval()
    prompts = {r["prompt_id"]: r["prompt_token_ids"] for r in pq.read_table(lag_run / "prompts.parquet").to_pylist()}
    t = _tokens(lag_run).to_pydict()
    seqs: dict[int, dict] = {}
    for sid, pid, tok, lp in zip(t["sequence_id"], t["prompt_id"], t["token_id"], t["trainer_logprob"], strict=True):
        s = seqs.setdefault(sid, {"prompt": prompts[pid], "ids": [], "lp": []})
        s["ids"].append(tok)
        s["lp"].append(lp)
    worst = 0.0
    for s in seqs.values():
        ref = naive_logprobs(model, [*s["prompt"], *s["ids"]], len(s["prompt"]))
        worst = max([worst, *(abs(x - y) for x, y in zip(s["lp"], ref, strict=True))])
    # Same fp32 weights, same ops: the trainer's batched, right-padded forward and chunked
    # lm_head differ from this one-row full forward only in how the CPU BLAS blocks its
    # matmuls, about 1e-5 on this model (test_probe_trainer's chunked-scoring cases see
    # up to ~1.2e-5). 1e-4 leaves room for that and is still 100x below the lag (> 1e-2),
    # so scoring with the sampler's weights could not pass.
    assert worst < 1e-4
    base = _tokens(base_run)
    assert base.column("token_id").to_pylist() == t["token_id"]  # the seeded sampler drew the same tokens
    lag = max(abs(x - y) for x, y in zip(base.column("trainer_logprob").to_pylist(), t["trainer_logprob"], strict=True))
    assert lag > 1e-2


def test_rescore_with_the_later_weights_equals_the_lag_probe(base_run, lag_run, later_dir, tmp_path):
    out = tmp_path / "later"
    _ok("rescore", str(base_run), "--out", str(out), "--trainer-checkpoint", str(later_dir), "--format", "json")
    a, b = _tokens(lag_run), _tokens(out)
    assert a.column("token_id").to_pylist() == b.column("token_id").to_pylist()
    assert a.column("sampler_logprob").to_pylist() == b.column("sampler_logprob").to_pylist()  # no resampling
    # the same samples in the same batches through the same weights: identical
    assert a.column("trainer_logprob").to_pylist() == b.column("trainer_logprob").to_pylist()
    cfg = _manifest(out)["config"]
    assert cfg["trainer_checkpoint"]["path"] == str(later_dir) and cfg["semantics"]["policy_lag"] is True


# ------------------------------------------------------------ metadata and readings


def test_manifest_and_shards_record_both_checkpoints(lag_run, dense_dir, later_dir):
    sampler_sha, trainer_sha = inspect_checkpoint(dense_dir).sha256, inspect_checkpoint(later_dir).sha256
    assert sampler_sha != trainer_sha
    manifest = _manifest(lag_run)
    shard = json.loads(pq.read_schema(next((lag_run / "tokens").glob("*.parquet"))).metadata[b"mismatchscope"])
    for cfg in (manifest["config"], shard):
        assert cfg["checkpoint"]["sha256"] == sampler_sha and cfg["checkpoint"]["path"] == str(dense_dir)
        tc = cfg["trainer_checkpoint"]
        assert (tc["path"], tc["sha256"], tc["same_as_sampler"]) == (str(later_dir), trainer_sha, False)
        assert cfg["semantics"]["policy_lag"] is True
    assert manifest["fingerprint"]["trainer_checkpoint_sha256"] == trainer_sha


def test_report_reads_the_gap_as_policy_lag_and_numerics(lag_run, base_run, dense_dir, later_dir):
    r = _ok("report", str(lag_run), "--format", "json")
    readings = {x["metric"]: x for x in json.loads(r.stdout)["interpretation"]}
    sampler_sha, trainer_sha = inspect_checkpoint(dense_dir).sha256, inspect_checkpoint(later_dir).sha256
    assert readings["trainer_logprob"]["reading"] == (
        f"the trainer scored the sampled tokens with another checkpoint than the sampler's ({later_dir}, sha256 "
        f"{trainer_sha[:12]}; sampler {dense_dir}, sha256 {sampler_sha[:12]}): the gap mixes policy lag with "
        "numerical mismatch"
    )
    text = _ok("report", str(lag_run)).stdout
    assert "the gap mixes policy lag with numerical mismatch" in " ".join(text.split())
    assert "trainer on another checkpoint (policy lag)" in " ".join(text.split())  # the header wraps at 80
    base = json.loads(_ok("report", str(base_run), "--format", "json").stdout)
    assert "trainer_logprob" not in {x["metric"] for x in base["interpretation"]}


def test_gate_needs_the_trainer_checkpoint_allowed(base_run, lag_run, later_dir):
    trainer_sha = inspect_checkpoint(later_dir).sha256
    r = cli("gate", str(lag_run), "--baseline", str(base_run), "--bootstrap", "0")
    assert r.returncode == 2
    assert r.stderr == (
        "error: baseline and candidate are not comparable: trainer.checkpoint differs (baseline the sampler's, "
        f"candidate {trainer_sha[:12]}...) (only the serving stack should differ; if the difference is intended, "
        "pass --allow-different trainer.checkpoint)\n"
    )
    for key in ("trainer.checkpoint", "trainer"):
        r = cli("gate", str(lag_run), "--baseline", str(base_run), "--bootstrap", "0", "--allow-different", key)
        assert r.returncode in (0, 1), r.stderr[-2000:]  # a verdict, whichever it is
        assert "trainer.checkpoint differs" in " ".join(r.stdout.split())  # the line wraps at the width


# ------------------------------------------------------------ provenance: are the two sides one program?


def _weights_by_hand(folder: Path) -> dict:
    """Each safetensors file's sha256 and the sha256 of their 'SHA256  NAME' lines, computed here from the files."""
    import hashlib

    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}
    listing = "".join(f"{files[n]}  {n}\n" for n in sorted(files))
    return {"combined": hashlib.sha256(listing.encode()).hexdigest(), "files": files}


def test_a_probe_records_both_sides_and_the_record_validates(base_run, lag_run, dense_dir, later_dir):
    from tests.execution.test_record import validate

    for run, trainer_weights in ((base_run, dense_dir), (lag_run, later_dir)):
        record = _manifest(run)["provenance"]
        validate(record)
        sampler, trainer = record["sampler"], record["trainer"]
        assert (sampler["source"], trainer["source"]) == ("probe", "probe")
        assert (sampler["engine"], trainer["engine"]) == ("transformers-generate", "transformers")
        assert sampler["identities"]["weights"] == _weights_by_hand(dense_dir)
        assert trainer["identities"]["weights"] == _weights_by_hand(trainer_weights)
        assert sampler["requested"]["weights_dtype"] == sampler["used"]["weights_dtype"] == "float32"
        assert sampler["identities"]["sampling"]["seed"] == 3 and trainer["identities"]["sampling"]["top_k"] == 0
        assert trainer["deployment"]["max_batch_tokens"] == 8192 and trainer["software"]["torch"]


def test_other_trainer_weights_are_a_contract_difference_doctor_names_first(lag_run):
    r = cli("doctor", str(lag_run), "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "pipeline" and doc["top"]["cause"] == "contract_difference"
    assert doc["top"]["status"] == "detected" and doc["top"]["pipeline"]
    assert "weights differ" in doc["top"]["sentence"] and "model.safetensors" in doc["top"]["sentence"]
    assert doc["top"]["sentence"].endswith("no numerical reading applies until they match")
    numerics = next(f for f in doc["findings"] if f["cause"] == "numerics")
    assert numerics["status"] == "clear"  # not read as numerics
    table = cli("doctor", str(lag_run))
    assert table.returncode == 1 and "contract_difference" in table.stdout


def test_certify_names_the_identity_that_differs(lag_run):
    r = cli("certify", str(lag_run), "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [d["identity"] for d in doc["identities"]["differences"]] == ["weights"]
    check = next(c for c in doc["checks"] if c["name"] == "identities")
    assert check["passed"] is False and "weights differ" in check["detail"]
    assert any(
        x.startswith("identities: the two sides are not the same program: weights differ") for x in doc["reasons"]
    )
    rows = {row["field"]: row for row in doc["sides"]}
    assert rows["identities.weights"]["status"] == "changed"


def test_the_same_weights_are_no_contract_difference(base_run, same_weights_dir, tmp_path):
    """The sampler's checkpoint, and a copy of it at another path as the trainer's: one program either way."""
    copy = tmp_path / "copy"
    _ok("rescore", str(base_run), "--out", str(copy), "--trainer-checkpoint", str(same_weights_dir), "--format", "json")
    for run in (base_run, copy):
        doc = json.loads(cli("doctor", str(run), "--format", "json").stdout)
        contract = next(f for f in doc["findings"] if f["cause"] == "contract_difference")
        assert contract["status"] == "clear", contract
        assert doc["top"]["cause"] != "contract_difference"
        certify = json.loads(cli("certify", str(run), "--format", "json").stdout)
        assert certify["identities"]["differences"] == []
        assert next(c for c in certify["checks"] if c["name"] == "identities")["passed"] is True
    # the rescore kept the recorded sampler's side and recorded its own trainer's
    base, again = _manifest(base_run)["provenance"], _manifest(copy)["provenance"]
    assert again["sampler"] == base["sampler"] and again["trainer"]["source"] == "rescore"
    assert again["trainer"]["identities"]["weights"] == base["trainer"]["identities"]["weights"]
    # the two runs ran the same stack: gate lists nothing, though the trainer's files sit elsewhere
    r = cli("gate", str(copy), "--baseline", str(base_run), "--bootstrap", "0", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    stack = json.loads(r.stdout)["stack"]
    assert stack["changes"] == [] and stack["baseline_recorded"] and stack["candidate_recorded"]


def test_gate_lists_the_trainers_other_weights_as_a_stack_change(base_run, lag_run):
    args = ("--baseline", str(base_run), "--bootstrap", "0", "--allow-different", "trainer", "--format", "json")
    r = cli("gate", str(lag_run), *args)
    assert r.returncode in (0, 1), r.stderr
    changes = json.loads(r.stdout)["stack"]["changes"]
    assert [(c["side"], c["field"]) for c in changes] == [
        ("trainer", "identities.weights"),
        ("trainer", "identities.checkpoint_sha256"),
    ]


# ------------------------------------------------------------ resume


def test_a_resumed_run_keeps_its_trainer_checkpoint(lag_run, dense_dir, prompts_file, tmp_path):
    out = Path(shutil.copytree(lag_run, tmp_path / "run"))
    last = sorted((out / "tokens").glob("part-*.parquet"))[-1]
    last.unlink()  # as if killed before the last round was scored
    _ok("probe", str(dense_dir), *_args(prompts_file), "--out", str(out), "--resume", "--format", "json")
    a, b = _tokens(lag_run), _tokens(out)
    assert a.column("sequence_id").to_pylist() == b.column("sequence_id").to_pylist()
    assert a.column("trainer_logprob").to_pylist() == b.column("trainer_logprob").to_pylist()  # the later weights again
    assert _manifest(out)["config"]["trainer_checkpoint"] == _manifest(lag_run)["config"]["trainer_checkpoint"]


def test_resume_with_another_trainer_checkpoint_is_refused(lag_run, dense_dir, later_dir, prompts_file, tmp_path):
    out = Path(shutil.copytree(lag_run, tmp_path / "run"))
    sampler_sha, trainer_sha = inspect_checkpoint(dense_dir).sha256, inspect_checkpoint(later_dir).sha256
    r = cli(
        "probe",
        str(dense_dir),
        *_args(prompts_file),
        "--out",
        str(out),
        "--resume",
        "--trainer-checkpoint",
        str(dense_dir),
    )
    assert r.returncode == 2
    assert r.stderr == (
        f"error: cannot resume {out}: it was scored with trainer checkpoint {str(later_dir)!r} (sha256 "
        f"{trainer_sha[:12]}...), not {str(dense_dir)!r} (sha256 {sampler_sha[:12]}...) (leave --trainer-checkpoint "
        "out to keep the recorded one, or start a new --out)\n"
    )


# ------------------------------------------------------------ refusals


def test_another_tokenizer_is_a_one_line_error(base_run, dense_dir, other_vocab_dir, prompts_file, tmp_path):
    vocab = load_tokenizer(dense_dir).get_vocab()
    names = list(json.loads((dense_dir / "tokenizer.json").read_text())["model"]["vocab"])[10:12]
    first = min(names)
    other = names[1] if first == names[0] else names[0]
    expected = (
        f"error: the trainer checkpoint {str(other_vocab_dir)!r} has another tokenizer than the sampler's: the "
        f"vocabularies differ (sampler's vs trainer's: sizes {len(vocab)} vs {len(vocab)}; 2 tokens with other ids, "
        f"e.g. {first!r}: {vocab[first]} vs {vocab[other]}) (--trainer-checkpoint must use the sampler checkpoint's "
        "tokenizer)\n"
    )
    r = cli("rescore", str(base_run), "--out", str(tmp_path / "r"), "--trainer-checkpoint", str(other_vocab_dir))
    assert (r.returncode, r.stderr) == (2, expected)
    out = tmp_path / "p"
    r = cli(
        "probe", str(dense_dir), *_args(prompts_file), "--out", str(out), "--trainer-checkpoint", str(other_vocab_dir)
    )
    assert (r.returncode, r.stderr) == (2, expected)
    assert not out.exists()  # refused before the run directory or any engine


def test_another_architecture_is_refused(dense_info, dense_tokenizer, moe_dir, prompt_texts):
    with pytest.raises(CheckpointError) as err:
        open_trainer_checkpoint(moe_dir, dense_info, dense_tokenizer, prompt_texts)
    assert str(err.value) == (
        f"the trainer checkpoint {str(moe_dir)!r} is not the same model as the sampler's: model_type 'qwen3' (sampler) "
        "vs 'qwen3_moe' (trainer) (--trainer-checkpoint takes a later checkpoint of the same model (same config.json "
        "architecture and vocabulary))"
    )


def test_another_vocabulary_size_is_refused(dense_info, dense_tokenizer, later_dir, prompt_texts, tmp_path):
    bigger = Path(shutil.copytree(later_dir, tmp_path / "bigger"))
    cfg = json.loads((bigger / "config.json").read_text())
    cfg["vocab_size"] = dense_info.vocab_size + 64
    (bigger / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        CheckpointError,
        match=f"vocab_size {dense_info.vocab_size} \\(sampler\\) vs {dense_info.vocab_size + 64} \\(trainer\\)",
    ):
        open_trainer_checkpoint(bigger, dense_info, dense_tokenizer, prompt_texts)


def test_the_trainer_checkpoint_gets_the_same_safety_checks(
    dense_info, dense_tokenizer, later_dir, prompt_texts, tmp_path
):
    pickled = Path(shutil.copytree(later_dir, tmp_path / "pickled"))
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="--allow-pickle"):
        open_trainer_checkpoint(pickled, dense_info, dense_tokenizer, prompt_texts)
    custom = Path(shutil.copytree(later_dir, tmp_path / "custom"))
    cfg = json.loads((custom / "config.json").read_text())
    cfg.update({"model_type": "my_model", "auto_map": {"AutoModelForCausalLM": "modeling_my.MyModel"}})
    (custom / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="--trust-remote-code"):
        open_trainer_checkpoint(custom, dense_info, dense_tokenizer, prompt_texts)
