"""The identities read from a checkpoint folder: its weights, tokenizer, chat template and generation config.

Each weight file gets its own sha256, the number ``sha256sum`` prints for it,
and the weights one combined digest over those lines, so anyone can check a
record against the files with standard tools::

    sha256sum *.safetensors | LC_ALL=C sort -k2 | sha256sum

:func:`hash_files` reads each file once and feeds two digests, the
checkpoint's (over name, size and bytes of every file: the ``sha256`` every
probe run has recorded, kept as it was so older runs still compare) and the
file's own. The second digest doubles the check's CPU time; it runs on a
second thread (hashlib releases the GIL), so where a core is free it adds
little wall time, and where none is (a loaded machine) it adds as much as it
costs (``benchmarks/bench_weights_digest.py`` measures both).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..documents import json_edge
from .record import NO_TEMPLATE, Identities, WeightsDigest

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
)
"""the files a tokenizer is read from (its chat template aside)."""
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
GENERATION_CONFIG = "generation_config.json"
_NOT_IDENTITY = ("transformers_version",)
"""generation_config.json keys that say which library saved the file, not how to generate."""
_BLOCK = 4 << 20


def hash_files(root: Path, names: list[str]) -> tuple[str, dict[str, str]]:
    """(one sha256 over the name, size and bytes of every file in ``names`` order, each file's own sha256).

    Each file is read once; its blocks feed both digests, the file's own on a
    second thread while this one feeds the other.
    """
    combined = hashlib.sha256()
    own: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mismatchscope-digest") as pool:
        for name in names:
            path = root / name
            combined.update(name.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while block := f.read(_BLOCK):
                    pending = pool.submit(digest.update, block)
                    combined.update(block)
                    pending.result()
            own[name] = digest.hexdigest()
    return combined.hexdigest(), own


def listing_digest(digests: Mapping[str, str]) -> str:
    """sha256 of the ``sha256sum`` lines of ``digests`` (name -> sha256), sorted by name."""
    lines = "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))
    return hashlib.sha256(lines.encode()).hexdigest()


def weights_digest(digests: Mapping[str, str]) -> WeightsDigest:
    return WeightsDigest(listing_digest(digests), {name: digests[name] for name in sorted(digests)})


def tokenizer_digest(root: Path) -> str | None:
    """The tokenizer files' listing digest, ``tokenizer_config.json`` without its chat template (the template is
    an identity of its own); None when the folder holds no tokenizer file."""
    digests = {}
    for name in TOKENIZER_FILES:
        path = root / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        if name == "tokenizer_config.json":
            config = _json_object(data)
            if config is not None:
                config.pop("chat_template", None)
                data = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        digests[name] = hashlib.sha256(data).hexdigest()
    return listing_digest(digests) if digests else None


def chat_template_text(root: Path) -> str | None:
    """The chat template a tokenizer loaded from ``root`` uses, as text (a set of named templates as canonical
    JSON); None when it has none. transformers' order: ``chat_template.jinja``, then ``chat_template.json``, then
    ``tokenizer_config.json``."""
    jinja = root / CHAT_TEMPLATE_FILES[0]
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    for name in (CHAT_TEMPLATE_FILES[1], "tokenizer_config.json"):
        path = root / name
        config = _json_object(path.read_bytes()) if path.is_file() else None
        template = (config or {}).get("chat_template")
        if template:
            return template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return None


def template_digest(text: str | None) -> str:
    """sha256 of a chat template's text, :data:`NO_TEMPLATE` when there is none."""
    return NO_TEMPLATE if not text else hashlib.sha256(text.encode()).hexdigest()


@json_edge
def generation_config(root: Path) -> dict[str, Any] | None:
    """``generation_config.json`` as the record's identity holds it (without the saving library's version)."""
    path = root / GENERATION_CONFIG
    config = _json_object(path.read_bytes()) if path.is_file() else None
    if config is None:
        return None
    return {k: v for k, v in config.items() if k not in _NOT_IDENTITY}


def checkpoint_identities(
    root: Path, file_sha256: Mapping[str, str], weight_files: tuple[str, ...] | list[str], checkpoint_sha256: str | None
) -> Identities:
    """A checkpoint folder's identities (the sampling parameters are the caller's to add). ``file_sha256``: each
    file's sha256 from :func:`hash_files`; a weight file missing there is hashed now."""
    root = Path(root)
    missing = [name for name in weight_files if name not in file_sha256]
    own = dict(file_sha256)
    if missing:
        own.update(hash_files(root, missing)[1])
    return Identities(
        weights=weights_digest({name: own[name] for name in weight_files}) if weight_files else None,
        tokenizer=tokenizer_digest(root),
        chat_template=template_digest(chat_template_text(root)),
        generation_config=generation_config(root),
        checkpoint_sha256=checkpoint_sha256,
    )


@json_edge
def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
