"""The checkpoint both sides load (its tokenizer and the prompt ids: ``tokenizer.py``).

A probe is only meaningful if the sampler and the trainer run the *same*
weights. This module refuses everything that would quietly break that: a
missing folder, pickle weights nobody asked for, a config that needs remote
code nobody allowed, weights that do not cover the config, a damaged
safetensors header.

``inspect_checkpoint`` reads ``config.json`` with :mod:`json` only (no torch),
so the CLI can validate a run before paying for the heavy imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mismatchscope.checks import json_object
from mismatchscope.errors import CheckpointError, NotAJsonObjectError
from mismatchscope.execution import digests

from ..documents import json_edge

SAFE_WEIGHTS = ("*.safetensors",)
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth")
NOT_WEIGHTS = {"training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}
"""Pickles a trainer writes next to the weights; they are not the model."""

CONFIG_FILES = ("config.json", "generation_config.json")
"""generation_config.json is hashed too: vLLM takes default sampling values from it."""
TOKENIZER_FILES = (*digests.TOKENIZER_FILES, *digests.CHAT_TEMPLATE_FILES)
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SAFETENSORS_MAX_HEADER = 100_000_000
"""safetensors' own bound on the JSON header: a larger length means a corrupt file."""


@dataclass(frozen=True)
class CheckpointRecord:
    """What a run's manifest records of the checkpoint (``config.checkpoint``)."""

    path: str
    sha256: str
    model_type: str
    vocab_size: int
    max_model_len: int
    is_moe: bool


@dataclass
class CheckpointInfo:
    """What the probe needs to know about a checkpoint before loading it."""

    path: Path
    sha256: str
    """over config, weights and tokenizer files: equal digests mean the same checkpoint."""
    model_type: str
    vocab_size: int
    """rows of the lm_head: every token id must be below it."""
    max_model_len: int
    """``max_position_embeddings`` (or the config's equivalent)."""
    is_moe: bool
    config: dict
    weight_files: tuple[str, ...] = field(default_factory=tuple)
    """names (relative to ``path``) of the weight files that were hashed and will be loaded."""
    pickle_weights: bool = False
    """True when the weights are ``.bin``/``.pt`` (only accepted with ``allow_pickle``)."""
    file_sha256: dict[str, str] = field(default_factory=dict)
    """each hashed file's own sha256 (what ``sha256sum`` prints): the run's provenance records the weights'."""

    def record(self) -> CheckpointRecord:
        """What a run's manifest records of the checkpoint (``config.checkpoint``)."""
        return CheckpointRecord(
            str(self.path), self.sha256, self.model_type, self.vocab_size, self.max_model_len, self.is_moe
        )


def inspect_checkpoint(
    path: str | Path, *, allow_pickle: bool = False, trust_remote_code: bool = False
) -> CheckpointInfo:
    """Validate a local checkpoint folder and fingerprint it.

    Raises :class:`CheckpointError` for a missing folder or ``config.json``,
    no weights, pickle weights without ``allow_pickle`` (unpickling runs
    arbitrary code), custom model code without ``trust_remote_code``, a
    ``model_type`` transformers does not know, a malformed size in the config,
    or a safetensors file whose header is unreadable (empty, truncated, not
    safetensors): each would otherwise stop the run only when an engine loads it.
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise CheckpointError(
            f"{str(root)!r} is a file, not a checkpoint folder",
            hint="pass the folder that holds config.json, *.safetensors and the tokenizer files",
        )
    if not root.is_dir():
        raise CheckpointError(
            f"checkpoint folder {str(root)!r} does not exist",
            hint="pass a local folder holding config.json, *.safetensors and the tokenizer files",
        )
    config = _read_config(root)
    weights, pickled = _weight_files(root, allow_pickle)
    text = text_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "unknown")
    _check_remote_code(config, model_type, trust_remote_code)
    vocab_size = _required_int(text, ("vocab_size",), root)
    max_len = _required_int(text, ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"), root)
    if not pickled:
        for name in weights:
            _check_safetensors(root / name)
    sha256, file_sha256 = digests.hash_files(root, _hashed_files(root, weights))
    return CheckpointInfo(
        path=root,
        sha256=sha256,
        model_type=model_type,
        vocab_size=vocab_size,
        max_model_len=max_len,
        is_moe=_is_moe(text, config),
        config=config,
        weight_files=tuple(weights),
        pickle_weights=pickled,
        file_sha256=file_sha256,
    )


@json_edge
def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config (multimodal configs nest it)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


@json_edge
def _read_config(root: Path) -> dict[str, Any]:
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(
            f"{str(root)!r} has no config.json, so it is not a transformers checkpoint",
            hint="point at the folder that save_pretrained() wrote",
        )
    try:
        return json_object(cfg_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {str(cfg_path)!r}: {exc}") from exc
    except NotAJsonObjectError:
        raise CheckpointError(f"{str(cfg_path)!r} is not a JSON object") from None


def _weight_files(root: Path, allow_pickle: bool) -> tuple[list[str], bool]:
    """The weight files to load: safetensors when present, pickle only if allowed."""
    safe = sorted({p.name for pat in SAFE_WEIGHTS for p in root.glob(pat) if p.is_file()})
    if safe:
        return safe, False
    pickled = sorted({p.name for pat in PICKLE_WEIGHTS for p in root.glob(pat) if p.is_file()} - NOT_WEIGHTS)
    if not pickled:
        raise CheckpointError(
            f"{str(root)!r} has no weights (*.safetensors, or *.bin/*.pt)",
            hint="save the model with save_pretrained(..., safe_serialization=True)",
        )
    if not allow_pickle:
        raise CheckpointError(
            f"{str(root)!r} holds only pickle weights ({', '.join(pickled)}); loading a pickle "
            "runs arbitrary code, so it is refused",
            hint="convert the checkpoint to safetensors, or pass --allow-pickle (allow_pickle=True) "
            "if you trust its source",
        )
    return pickled, True


def _check_remote_code(config: dict[str, Any], model_type: str, trust_remote_code: bool) -> None:
    """Refuse custom model code that transformers would have to import from the folder, and a
    ``model_type`` transformers does not know (the trainer is always transformers: without this
    it fails only when it loads, after sampling)."""
    if trust_remote_code and "auto_map" in config:
        return
    try:
        import transformers
        from transformers.models.auto.configuration_auto import (  # no torch import
            CONFIG_MAPPING_NAMES,  # pyright: ignore[reportPrivateImportUsage]  # public in practice, not in __all__
        )
    except ImportError:  # the probe extra is missing: loading the model says so
        return
    if "auto_map" in config:
        if model_type not in CONFIG_MAPPING_NAMES:
            raise CheckpointError(
                f"model_type {model_type!r} is not built into transformers; the checkpoint ships its "
                "own model code (config.json has auto_map)",
                hint="read that code, then pass --trust-remote-code (trust_remote_code=True)",
            )
        return
    declared = config.get("model_type")
    if declared is not None and (not isinstance(declared, str) or declared not in CONFIG_MAPPING_NAMES):
        # (absent, transformers guesses the type from the folder name and says so itself)
        raise CheckpointError(
            f"config.json's model_type {_shown(declared)} is not a model transformers {transformers.__version__} knows",
            hint="fix model_type in config.json, or upgrade transformers if the model is newer than it",
        )


def _required_int(cfg: dict[str, Any], keys: Sequence[str], root: Path) -> int:
    """The first of ``keys`` present; a present value that is not a positive integer
    (``true``, ``"320"``, ``-1``) is a malformed config, not a reason to try the next key."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CheckpointError(
                f"config.json in {str(root)!r} is malformed: {key} should be a positive integer, got {_shown(value)}",
                hint="fix config.json (save_pretrained writes it)",
            )
        return value
    raise CheckpointError(f"config.json in {str(root)!r} has none of {list(keys)}")


def _shown(value: Any) -> str:
    """A config value as JSON, cut short: ``true`` reads as JSON where Python would print ``True``."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_safetensors(path: Path) -> None:
    """Read a safetensors file's header (8-byte length, then JSON) and check it fits the file.

    Costs one small read per file; an empty, truncated or foreign file fails
    here with its name instead of as a ``SafetensorError`` when an engine loads it.
    """
    problem = _safetensors_problem(path)
    if problem:
        raise CheckpointError(
            f"{str(path)!r} is not a readable safetensors file: {problem}",
            hint="the file is empty, truncated or not safetensors: copy or save the checkpoint again",
        )


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if size < 8:
        return f"it is {size} bytes, too short for the 8-byte header length"
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if length < 2 or length > SAFETENSORS_MAX_HEADER or 8 + length > size:
            return f"its header length ({length} bytes) does not fit the file ({size} bytes)"
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or any(isinstance(o, bool) or not isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            return f"tensor {name!r} has no valid data_offsets"
        end = max(end, offsets[1])
    if 8 + length + end > size:
        return f"its tensors need {8 + length + end} bytes but the file has {size} (truncated?)"
    return None


def check_weights_cover_config(info: CheckpointInfo, *, trust_remote_code: bool = False) -> None:
    """Refuse a checkpoint whose safetensors tensors miss or add tensors against the model its config.json
    describes (transformers' missing and unexpected keys), without loading a weight.

    transformers fills a missing tensor (a layer the config has and the weights
    do not) with random values and only warns; every logprob of the trainer
    would then be noise read as mismatch. The model is built on the meta
    device (no memory), and the tensor names of the files go through the same
    renaming transformers applies when it loads them (fused MoE experts, prefixes).
    Pickle weights, or a model transformers cannot build here, are left to the loader.
    """
    if info.pickle_weights:
        return
    problem = _weights_problem(info, trust_remote_code)
    if problem:
        raise CheckpointError(
            f"the weights in {str(info.path)!r} do not match its config.json: {problem}",
            hint="the config and the weights come from different models, or a save was cut "
            "short; save the checkpoint again with save_pretrained()",
        )


def _weights_problem(info: CheckpointInfo, trust_remote_code: bool) -> str | None:
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:  # the probe extra is missing, or another transformers: the loader judges
        return None
    names = set()
    for f in info.weight_files:
        names |= _safetensors_names(info.path / f)
    try:
        config = AutoConfig.from_pretrained(info.path, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        expected = model.state_dict()
        transforms = get_model_conversion_mapping(model)
        renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        converters = [t for t in transforms if isinstance(t, WeightConverter)]
        got = {rename_source_key(k, renamings, converters, model.base_model_prefix, expected)[0] for k in names}
    except Exception:  # a model transformers cannot build on the meta device: loading it will say why
        return None
    tied = set(getattr(model, "_tied_weights_keys", None) or ()) if _ties_embeddings(config) else set()
    missing = _unignored(set(expected) - got - tied, getattr(model, "_keys_to_ignore_on_load_missing", None))
    unexpected = _unignored(got - set(expected), getattr(model, "_keys_to_ignore_on_load_unexpected", None))
    parts = []
    if missing:
        parts.append(f"{len(missing)} tensor(s) its model needs are not in the files (e.g. {missing[0]})")
    if unexpected:
        parts.append(f"{len(unexpected)} tensor(s) in the files have no place in its model (e.g. {unexpected[0]})")
    return "; ".join(parts) or None


def _ties_embeddings(config: Any) -> bool:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text, "tie_word_embeddings", False) or getattr(config, "tie_word_embeddings", False))


def _unignored(keys: set[str], patterns: Any) -> list[str]:
    pats = [re.compile(p) for p in (patterns or ())]
    return sorted(k for k in keys if not any(p.search(k) for p in pats))


def _safetensors_names(path: Path) -> set[str]:
    """The tensor names in a safetensors header (already checked readable by ``_check_safetensors``)."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    return {name for name in header if name != "__metadata__"}


def _is_moe(text: dict[str, Any], config: dict[str, Any]) -> bool:
    for key in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            return True
    archs = config.get("architectures") or []
    return any("moe" in str(a).lower() for a in archs)


def _hashed_files(root: Path, weights: list[str]) -> list[str]:
    names = set(weights)
    for name in CONFIG_FILES + TOKENIZER_FILES + INDEX_FILES:
        if (root / name).is_file():
            names.add(name)
    return sorted(names)


def sha256_files(root: Path, names: list[str]) -> str:
    """One digest over (name, size, bytes) of each file, in the order given, streamed.

    The name and size are part of the digest so that renaming or splitting a
    file changes it; streaming keeps memory flat for multi-GB shards.
    """
    return digests.hash_files(root, names)[0]
