"""No secret ever lands in a run, and a training loop records both sides in one call.

* A probe run under an environment holding API keys, tokens, passwords and a URL with credentials: no byte of
  any file of the run directory holds one of them (the probe samples with ``--sampler hf``: the environment is
  the subject, not the engine).
* ``Recorder(..., provenance=mismatchscope.provenance(...))`` with a real transformers model as the trainer, a
  remote sampler described by a mapping (secrets in it too), the bundled checkpoint and the sampling parameters:
  the manifest holds a record that validates, that ``provenance`` reads back whole, and whose contract holds.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from tests.helpers import REPO, cli, cli_no_engine
from tests.inputs import error_line

SECRETS = {
    "VLLM_API_KEY": "sk-prov-0f9e8d7c6b5a",
    "MISMATCHSCOPE_API_KEY": "sk-prov-1a2b3c4d5e6f",
    "HF_TOKEN": "hf_provTokenAbCdEf123",
    "NCCL_IB_PASSWORD": "pw-prov-nccl-4242",
    "VLLM_REMOTE_STORE_URL": "https://alice:pw-prov-url-9876@store.example:8443/bucket",
    "TORCH_SIGNED": "https://cdn.example/w?sig=sigprovsecret55&x=1",
}
VALUES = ("sk-prov-0f9e8d7c6b5a", "sk-prov-1a2b3c4d5e6f", "hf_provTokenAbCdEf123", "pw-prov-nccl-4242")
VALUES += ("pw-prov-url-9876", "sigprovsecret55")


def _leaks(folder: Path, secrets: tuple[str, ...]) -> list[str]:
    """Every (file, secret) where the file's bytes hold the secret as is, percent-encoded or in base64."""
    found = []
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = f.read_bytes()
        for s in secrets:
            forms = {s, quote(s, safe=""), base64.b64encode(s.encode()).decode()}
            if any(form.encode() in data for form in forms):
                found.append(f"{f.relative_to(folder)}: {s}")
    return found


@pytest.fixture(scope="module")
def secret_run(dense_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("secrets") / "run"
    prompts = REPO / "tests" / "data" / "golden-prompts.jsonl"
    args = ["--prompts", str(prompts), "--sampler", "hf", "--sampler-dtype", "float32", "-n", "1"]
    r = cli_no_engine("probe", str(dense_dir), *args, "--max-tokens", "4", "--out", str(out), env=SECRETS)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_no_secret_of_the_environment_lands_in_the_run(secret_run):
    record = json.loads((secret_run / "manifest.json").read_text())["provenance"]
    env = record["sampler"]["environment"]
    # credential-named variables are left out whole; the URL's host stays, its password does not
    assert not {"VLLM_API_KEY", "MISMATCHSCOPE_API_KEY", "HF_TOKEN", "NCCL_IB_PASSWORD"} & set(env)
    assert env["VLLM_REMOTE_STORE_URL"] == "https://<redacted>@store.example:8443/bucket"
    assert "sigprovsecret55" not in env["TORCH_SIGNED"]
    assert _leaks(secret_run, VALUES) == []


def test_a_training_loop_records_both_sides_in_one_call(dense_dir, dense_trainer, tmp_path):
    import mismatchscope
    from tests.execution.test_record import validate

    prov = mismatchscope.provenance(
        sampler={
            "engine": "vllm",
            "software": {"vllm": "0.33.0"},
            "used": {"weights_dtype": "bfloat16", "attention_backend": "FLASH_ATTN"},
            "environment": {
                "VLLM_USE_V1": "1",
                "VLLM_API_KEY": VALUES[0],
                "VLLM_MIRROR": SECRETS["VLLM_REMOTE_STORE_URL"],
            },
            "deployment": {"tensor_parallel": 8},
        },
        trainer=dense_trainer.model,
        checkpoint=dense_dir,
        sampling={"temperature": 0.7, "top_p": 1.0, "top_k": -1, "seed": 1, "logprobs_mode": "processed_logprobs"},
        trainer_sampling={"temperature": 0.7, "top_p": 1.0, "top_k": 0},
        stack="verl 0.5.0",
    )
    run = tmp_path / "run"
    rng = np.random.default_rng(0)
    with mismatchscope.Recorder(run, rank=0, world_size=1, provenance=prov) as rec:
        q = np.log(rng.uniform(0.05, 1.0, size=(2, 5)))
        rec.add(0, q, q)
    record = json.loads((run / "manifest.json").read_text())["provenance"]
    validate(record)
    s, t = record["sampler"], record["trainer"]
    assert (s["source"], s["engine"], t["engine"]) == ("recorder", "vllm", "transformers")
    assert s["software"] == {"vllm": "0.33.0", "rl_stack": "verl 0.5.0"} and t["software"]["rl_stack"] == "verl 0.5.0"
    assert s["environment"] == {"VLLM_MIRROR": "https://<redacted>@store.example:8443/bucket", "VLLM_USE_V1": "1"}
    assert t["used"]["weights_dtype"] == "float32" and t["used"]["attention_backend"] == "sdpa"
    assert s["identities"]["weights"] == t["identities"]["weights"] and s["identities"]["weights"]["files"]
    assert s["identities"]["sampling"]["top_k"] == 0 and s["deployment"]["tensor_parallel"] == 8
    assert _leaks(run, VALUES) == []
    doc = json.loads(cli("provenance", str(run), "--format", "json").stdout)
    assert doc["runs"][0]["recorded"] and doc["runs"][0]["contract"] is True
    changed = {r["field"] for r in doc["rows"] if r["status"] == "changed"}
    assert {"used.weights_dtype", "used.attention_backend"} <= changed  # bfloat16 FLASH_ATTN against float32 sdpa


def test_a_record_of_another_shape_is_refused_before_the_run(tmp_path):
    import mismatchscope
    from mismatchscope.errors import UsageError

    with pytest.raises(UsageError, match="provenance: sampler= does not fit the record"):
        mismatchscope.provenance(sampler={"used": {"flash_magic": True}})
    with pytest.raises(UsageError, match="provenance= takes what mismatchscope.provenance"):
        mismatchscope.Recorder(tmp_path / "run", provenance="vllm 0.33")
    assert not (tmp_path / "run").exists()
    with pytest.raises(UsageError, match="trainer= takes a vllm.LLM, a torch model or a mapping"):
        mismatchscope.provenance(trainer=42)
    error_line(cli("provenance", str(tmp_path)))  # and the command on a folder that is no run: one line
