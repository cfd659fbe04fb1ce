"""What a manifest written before provenance, and an import, say each side ran: filled as far as they go, the rest
null ("not recorded"), nothing guessed, nothing refused."""

from __future__ import annotations

import json

from mismatchscope.execution.derived import from_manifest, imported
from tests.helpers import REPO


def test_a_probe_manifest_fills_what_its_configuration_held():
    manifest = json.loads((REPO / "tests" / "data" / "golden-probe" / "manifest.json").read_text())
    prov = from_manifest(manifest)
    s, t = prov.sampler, prov.trainer
    assert (s.source, s.engine, t.engine) == ("manifest", "vllm", "transformers")
    assert s.software["vllm"] == "0.32.0" and t.software["transformers"] == "5.19.0"
    assert (s.requested.weights_dtype, s.used.weights_dtype, t.used.weights_dtype) == ("float16", "float16", "float32")
    assert (
        s.identities.checkpoint_sha256 == t.identities.checkpoint_sha256 == manifest["config"]["checkpoint"]["sha256"]
    )
    assert s.identities.sampling == {
        "n": 2,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "seed": 0,
        "max_tokens": 64,
        "logprobs": 5,
        "logprobs_mode": "processed_logprobs",
    }
    assert t.identities.sampling == {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    assert s.identities.weights is None and s.environment is None and s.fallbacks is None  # never recorded then


def test_an_import_names_its_stack_and_the_engines_it_fixes():
    prov = imported("slime")
    assert (prov.sampler.source, prov.sampler.engine, prov.trainer.engine) == ("import:slime", "sglang", "megatron")
    assert prov.sampler.software == {"rl_stack": "slime"}
    assert imported("verl").sampler.engine is None  # verl samples with vLLM or SGLang: its dumps do not say


def test_scope_keys_and_odd_values():
    manifest = {
        "writer": "recorder",
        "meta": {"scope": {"sampler": "vllm", "sampler_version": "0.33.0", "sampler_dtype": "bfloat16"}},
        "scope": {"trainer": "fsdp", "tensor_parallel_size": 8, "weights_sha256": "ab" * 32, "sampler_batch": "big"},
    }
    prov = from_manifest(manifest)
    assert prov.sampler.engine == "vllm" and prov.sampler.software == {"vllm": "0.33.0"}
    assert prov.sampler.used.weights_dtype == "bfloat16" and prov.trainer.engine == "fsdp"
    assert prov.sampler.deployment.tensor_parallel == 8 and prov.sampler.deployment.max_batch_sequences is None
    assert prov.trainer.identities.checkpoint_sha256 == "ab" * 32
    assert from_manifest({"config": {"checkpoint": "not a table"}}).sampler.engine is None  # odd: not recorded
