"""The identities read from a checkpoint folder, each checked against a computation that does not use the module:
``sha256sum`` itself for the weights, hashlib by hand for the rest."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mismatchscope.execution import digests
from tests.helpers import REPO

SAMPLE = REPO / "sample_data" / "tiny-qwen3"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _checkpoint(tmp_path: Path) -> Path:
    """Two weight shards (not real tensors: only their bytes are hashed) beside the sample's config and tokenizer."""
    root = tmp_path / "ckpt"
    shutil.copytree(SAMPLE, root)
    (root / "model.safetensors").unlink()
    (root / "model-00001-of-00002.safetensors").write_bytes(b"first shard" * 1000)
    (root / "model-00002-of-00002.safetensors").write_bytes(b"second shard" * 3)
    return root


def test_each_file_and_the_combined_weights_digest_are_what_sha256sum_gives(tmp_path):
    root = _checkpoint(tmp_path)
    weights = sorted(p.name for p in root.glob("*.safetensors"))
    _, own = digests.hash_files(root, weights)
    found = digests.weights_digest(own)
    # by hand: each file's sha256, then the sha256 of the lines "SHA256  NAME\n" sorted by name
    by_hand = {name: _sha((root / name).read_bytes()) for name in weights}
    assert found.files == by_hand
    lines = "".join(f"{by_hand[n]}  {n}\n" for n in sorted(by_hand))
    assert found.combined == _sha(lines.encode())
    # and by the standard tools, as docs/provenance.md tells a user to check it
    shell = "sha256sum *.safetensors | LC_ALL=C sort -k2 | sha256sum"
    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum on this machine")
    out = subprocess.run(["sh", "-c", shell], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == found.combined


def test_the_checkpoint_digest_is_the_one_probe_runs_always_recorded(tmp_path):
    """One read feeds both digests; the checkpoint's is unchanged: sha256 over (name, size, bytes) of each file."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.json").write_bytes(b"{}")
    (root / "b.safetensors").write_bytes(b"x" * 10_000_000)  # more than one read block
    combined, own = digests.hash_files(root, ["a.json", "b.safetensors"])
    legacy = hashlib.sha256(b"a.json\x002\x00{}" + b"b.safetensors\x0010000000\x00" + b"x" * 10_000_000)
    assert combined == legacy.hexdigest()
    assert own == {"a.json": _sha(b"{}"), "b.safetensors": _sha(b"x" * 10_000_000)}
    # the bundled checkpoint's digest, as tests/data/golden-probe recorded it
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    golden = json.loads((REPO / "tests" / "data" / "golden-probe" / "manifest.json").read_text())
    assert inspect_checkpoint(SAMPLE).sha256 == golden["config"]["checkpoint"]["sha256"]


def test_the_chat_template_is_an_identity_of_its_own(tmp_path):
    root = _checkpoint(tmp_path)
    config = json.loads((root / "tokenizer_config.json").read_text())
    assert "chat_template" not in config and not (root / "chat_template.jinja").exists()
    tokenizer = digests.tokenizer_digest(root)
    assert digests.template_digest(digests.chat_template_text(root)) == "none"
    # a template in tokenizer_config.json: the template's digest is its text's, the tokenizer's does not move
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (root / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    assert digests.template_digest(digests.chat_template_text(root)) == _sha(template.encode())
    assert digests.tokenizer_digest(root) == tokenizer
    # chat_template.jinja wins over tokenizer_config.json, as transformers reads them
    (root / "chat_template.jinja").write_text("{{ messages }}")
    assert digests.template_digest(digests.chat_template_text(root)) == _sha(b"{{ messages }}")
    # another vocabulary moves the tokenizer's digest
    spec = json.loads((root / "tokenizer.json").read_text())
    spec["added_tokens"] = [*spec.get("added_tokens", []), {"id": 999, "content": "<x>", "special": True}]
    (root / "tokenizer.json").write_text(json.dumps(spec))
    assert digests.tokenizer_digest(root) != tokenizer


def test_the_generation_config_is_recorded_without_the_library_that_saved_it(tmp_path):
    root = _checkpoint(tmp_path)
    (root / "generation_config.json").write_text(
        json.dumps({"temperature": 0.7, "top_p": 0.9, "transformers_version": "5.19.0"})
    )
    assert digests.generation_config(root) == {"temperature": 0.7, "top_p": 0.9}
    (root / "generation_config.json").unlink()
    assert digests.generation_config(root) is None


def test_checkpoint_identities_of_the_sample(tmp_path):
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    info = inspect_checkpoint(SAMPLE)
    ids = digests.checkpoint_identities(SAMPLE, info.file_sha256, info.weight_files, info.sha256)
    assert ids.weights is not None
    assert ids.weights.files == {"model.safetensors": _sha((SAMPLE / "model.safetensors").read_bytes())}
    assert ids.checkpoint_sha256 == info.sha256 and ids.chat_template == "none" and ids.tokenizer
    assert ids.sampling is None  # the caller's to add
