"""The checkpoint both sides load, and the prompt ids both sides see.

A probe is only meaningful if the sampler and the trainer run the *same*
weights on the *same* token ids. This module refuses everything that would
quietly break that: a missing folder, pickle weights nobody asked for, a
tokenizer larger than the embedding, prompts that do not round-trip, two
tokenizers that disagree, prompts that leave no room for the completion.

``inspect_checkpoint`` reads ``config.json`` with :mod:`json` only (no torch),
so the CLI can validate a run before paying for the heavy imports.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mismatchscope.errors import CheckpointError, PromptError, TokenizerMismatchError

SAFE_WEIGHTS = ("*.safetensors",)
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth")
NOT_WEIGHTS = {"training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}
"""Pickles a trainer writes next to the weights; they are not the model."""

CONFIG_FILES = ("config.json", "generation_config.json")
"""generation_config.json is hashed too: vLLM takes default sampling values from it."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
VOCAB_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
"""files that hold a vocabulary: a tokenizer folder without any of them is empty."""
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")

_HASH_BLOCK = 1 << 20


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


def inspect_checkpoint(
    path: str | Path, *, allow_pickle: bool = False, trust_remote_code: bool = False
) -> CheckpointInfo:
    """Validate a local checkpoint folder and fingerprint it.

    Raises :class:`CheckpointError` for a missing folder or ``config.json``,
    no weights, pickle weights without ``allow_pickle`` (unpickling runs
    arbitrary code), or custom model code without ``trust_remote_code``.
    """
    root = Path(path)
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
    max_len = _required_int(
        text, ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"), root
    )
    hashed = _hashed_files(root, weights)
    return CheckpointInfo(
        path=root,
        sha256=_sha256_files(root, hashed),
        model_type=model_type,
        vocab_size=vocab_size,
        max_model_len=max_len,
        is_moe=_is_moe(text, config),
        config=config,
        weight_files=tuple(weights),
        pickle_weights=pickled,
    )


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config (multimodal configs nest it)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def _read_config(root: Path) -> dict[str, Any]:
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(
            f"{str(root)!r} has no config.json, so it is not a transformers checkpoint",
            hint="point at the folder that save_pretrained() wrote",
        )
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {str(cfg_path)!r}: {exc}") from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"{str(cfg_path)!r} is not a JSON object")
    return config


def _weight_files(root: Path, allow_pickle: bool) -> tuple[list[str], bool]:
    """The weight files to load: safetensors when present, pickle only if allowed."""
    safe = sorted({p.name for pat in SAFE_WEIGHTS for p in root.glob(pat) if p.is_file()})
    if safe:
        return safe, False
    pickled = sorted(
        {p.name for pat in PICKLE_WEIGHTS for p in root.glob(pat) if p.is_file()} - NOT_WEIGHTS
    )
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
    """Refuse custom model code that transformers would have to import from the folder."""
    if trust_remote_code or "auto_map" not in config:
        return
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # no torch import

    if model_type not in CONFIG_MAPPING_NAMES:
        raise CheckpointError(
            f"model_type {model_type!r} is not built into transformers; the checkpoint ships its "
            "own model code (config.json has auto_map)",
            hint="read that code, then pass --trust-remote-code (trust_remote_code=True)",
        )


def _required_int(cfg: dict[str, Any], keys: Sequence[str], root: Path) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and value > 0:
            return value
    raise CheckpointError(f"config.json in {str(root)!r} has none of {list(keys)}")


def _is_moe(text: dict[str, Any], config: dict[str, Any]) -> bool:
    for key in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"):
        value = text.get(key)
        if isinstance(value, int) and value > 1:
            return True
    archs = config.get("architectures") or []
    return any("moe" in str(a).lower() for a in archs)


def _hashed_files(root: Path, weights: list[str]) -> list[str]:
    names = set(weights)
    for name in CONFIG_FILES + TOKENIZER_FILES + INDEX_FILES:
        if (root / name).is_file():
            names.add(name)
    return sorted(names)


def _sha256_files(root: Path, names: list[str]) -> str:
    """One digest over (name, size, bytes) of each file, in sorted order, streamed.

    The name and size are part of the digest so that renaming or splitting a
    file changes it; streaming keeps memory flat for multi-GB shards.
    """
    digest = hashlib.sha256()
    for name in names:
        path = root / name
        digest.update(name.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
        with open(path, "rb") as f:
            while block := f.read(_HASH_BLOCK):
                digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- tokenizer


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False):
    """The checkpoint's tokenizer (transformers ``AutoTokenizer``).

    transformers 5 builds an *empty* tokenizer from a folder with a config
    but no vocabulary files instead of failing; that is refused here.
    """
    from transformers import AutoTokenizer

    root = Path(path)
    hint = "save the tokenizer next to the weights (tokenizer.save_pretrained)"
    has_vocab = any((root / name).is_file() for name in VOCAB_FILES) or any(root.glob("*.tiktoken"))
    if not has_vocab and not trust_remote_code:
        raise CheckpointError(
            f"cannot load a tokenizer from {str(root)!r}: none of {', '.join(VOCAB_FILES)} is there", hint=hint
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(root), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"cannot load a tokenizer from {str(root)!r}: {exc}", hint=hint) from exc
    if len(tokenizer) < 2:
        raise CheckpointError(f"cannot load a tokenizer from {str(root)!r}: it has no vocabulary", hint=hint)
    return tokenizer


def check_tokenizer(tokenizer, info: CheckpointInfo, prompts: list[str], other=None) -> None:
    """Refuse a tokenizer that would make sampler and trainer see different ids.

    Checks, in order: every id fits the model's vocabulary; each prompt
    round-trips ``decode(encode(x)) == x`` (special tokens not added, so a
    prepended BOS does not count as a difference); and, when ``other`` is
    given (say, the sampler's own tokenizer), the two vocabularies and the
    encodings of every prompt are identical.
    """
    n_tokens = len(tokenizer)
    if n_tokens > info.vocab_size:
        raise TokenizerMismatchError(
            f"the tokenizer has {n_tokens} tokens but the model's vocab_size is {info.vocab_size}: "
            f"ids {info.vocab_size}..{n_tokens - 1} have no row in the embedding",
            hint="use the tokenizer saved with this checkpoint",
        )
    for i, text in enumerate(prompts):
        ids = tokenizer.encode(text, add_special_tokens=False)
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            raise TokenizerMismatchError(
                f"prompt {i} does not round-trip through the tokenizer: {_short(text)} -> ids "
                f"{_short(ids)} -> {_short(back)}",
                hint="the sampler would see different text than the trainer; fix the tokenizer "
                "(normalisation, clean_up_tokenization_spaces) or the prompt",
            )
    if other is not None:
        _compare_tokenizers(tokenizer, other, prompts)


def _compare_tokenizers(a, b, prompts: list[str]) -> None:
    vocab = _vocab_difference(a.get_vocab(), b.get_vocab(), ("first", "second"))
    if vocab:
        raise TokenizerMismatchError(
            "the two tokenizers have different vocabularies: " + vocab,
            hint="give the sampler and the trainer the same tokenizer files",
        )
    encoding = _encoding_difference(a, b, prompts)
    if encoding:
        raise TokenizerMismatchError(
            f"the two tokenizers {encoding}",
            hint="give the sampler and the trainer the same tokenizer files (special tokens "
            "and add_bos_token included)",
        )


def tokenizer_difference(a, b, prompts: list[str], names: tuple[str, str]) -> str | None:
    """What tells tokenizer ``a`` from ``b`` (vocabulary, then prompt encodings), or None.

    ``names`` label the two sides in the text, e.g. ``("sampler's", "trainer's")``.
    """
    vocab = _vocab_difference(a.get_vocab(), b.get_vocab(), names)
    if vocab:
        return f"the vocabularies differ ({names[0]} vs {names[1]}: {vocab})"
    encoding = _encoding_difference(a, b, prompts)
    return f"they {encoding}" if encoding else None


def _vocab_difference(vocab_a: dict, vocab_b: dict, names: tuple[str, str]) -> str | None:
    if vocab_a == vocab_b:
        return None
    only_a = sorted(set(vocab_a) - set(vocab_b))
    only_b = sorted(set(vocab_b) - set(vocab_a))
    moved = sorted(t for t in set(vocab_a) & set(vocab_b) if vocab_a[t] != vocab_b[t])
    parts = [f"sizes {len(vocab_a)} vs {len(vocab_b)}"]
    if only_a:
        parts.append(f"{len(only_a)} tokens only in the {names[0]}, e.g. {only_a[0]!r}")
    if only_b:
        parts.append(f"{len(only_b)} tokens only in the {names[1]}, e.g. {only_b[0]!r}")
    if moved:
        t = moved[0]
        parts.append(f"{len(moved)} tokens with other ids, e.g. {t!r}: {vocab_a[t]} vs {vocab_b[t]}")
    return "; ".join(parts)


def _encoding_difference(a, b, prompts: list[str]) -> str | None:
    for i, text in enumerate(prompts):
        ids_a, ids_b = a.encode(text), b.encode(text)
        if ids_a != ids_b:
            at = next((j for j, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
            return (f"encode prompt {i} ({_short(text)}) differently from position "
                    f"{at}: {_short(ids_a)} vs {_short(ids_b)}")
    return None


def tokenizer_files_digest(root: str | Path) -> str:
    """One digest over the tokenizer files present: equal digests, identical tokenizers."""
    root = Path(root)
    return _sha256_files(root, [name for name in TOKENIZER_FILES if (root / name).is_file()])


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tokenize_prompts(
    tokenizer,
    prompts: list[str],
    *,
    max_model_len: int,
    max_tokens: int,
    add_special_tokens: bool = True,
) -> list[list[int]]:
    """Prompt ids for both sides, each leaving room for ``max_tokens`` in the context.

    ``add_special_tokens`` defaults to True, which is what vLLM itself does
    with a text prompt (a model whose tokenizer prepends BOS gets it).
    """
    if not prompts:
        raise PromptError("there are no prompts", hint="give at least one non-empty prompt")
    out: list[list[int]] = []
    for i, text in enumerate(prompts):
        if not isinstance(text, str) or not text:
            raise PromptError(f"prompt {i} is empty", hint="remove empty lines from the prompts file")
        ids = list(tokenizer.encode(text, add_special_tokens=add_special_tokens))
        if not ids:
            raise PromptError(f"prompt {i} ({_short(text)}) has no tokens")
        if len(ids) + max_tokens > max_model_len:
            raise PromptError(
                f"prompt {i} ({_short(text, 40)}) is {len(ids)} tokens; with max_tokens={max_tokens} "
                f"it needs {len(ids) + max_tokens} > max_model_len={max_model_len}",
                hint="lower --max-tokens, shorten or drop the prompt, or use a model with a longer "
                "context (--max-model-len cannot exceed the model's)",
            )
        out.append(ids)
    return out
