"""The tokenizer both sides use, and the prompt ids both sides see.

A probe is only meaningful if the sampler and the trainer see the *same*
token ids. This module refuses everything that would quietly break that: a
tokenizer larger than the embedding, one that is not the checkpoint's (its
BOS and EOS), prompts that do not round-trip, two tokenizers that disagree,
prompts that leave no room for the completion.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from mismatchscope.checks import json_object
from mismatchscope.errors import CheckpointError, PromptError, TokenizerMismatchError

from ..documents import json_edge
from .checkpoint import TOKENIZER_FILES, CheckpointInfo, sha256_files, text_config

VOCAB_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
"""files that hold a vocabulary: a tokenizer folder without any of them is empty."""


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
    prepended BOS does not count as a difference); the tokenizer's BOS and EOS
    are the ids config.json names (a foreign tokenizer that happens to fit the
    embedding is caught here); and, when ``other`` is given (say, the
    sampler's own tokenizer), the two vocabularies and the encodings of every
    prompt are identical.
    """
    n_tokens = len(tokenizer)
    if n_tokens > info.vocab_size:
        raise TokenizerMismatchError(
            f"the tokenizer has {n_tokens} tokens but the model's vocab_size is {info.vocab_size}: "
            f"ids {info.vocab_size}..{n_tokens - 1} have no row in the embedding",
            hint="use the tokenizer saved with this checkpoint",
        )
    for i, text in enumerate(prompts):
        with quiet_length_warning():
            ids = tokenizer.encode(text, add_special_tokens=False)
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            raise TokenizerMismatchError(
                f"prompt {i} does not round-trip through the tokenizer: {_short(text)} -> ids "
                f"{_short(ids)} -> {_short(back)}",
                hint="the sampler would see different text than the trainer; fix the tokenizer "
                "(normalisation, clean_up_tokenization_spaces) or the prompt",
            )
    _check_special_ids(tokenizer, info)
    if other is not None:
        _compare_tokenizers(tokenizer, other, prompts)


@contextlib.contextmanager
def quiet_length_warning():
    """Mute transformers' "Token indices sequence length is longer than ..." warning.

    The probe measures prompt lengths against the context itself and refuses a
    long one with its own one-line error; the warning would only be an earlier,
    second line on stderr.
    """
    log = logging.getLogger("transformers.tokenization_utils_base")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _special_ids(value: Any) -> list[int]:
    """config.json's ``bos_token_id``/``eos_token_id``: an id, a list of ids, or absent."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _check_special_ids(tokenizer, info: CheckpointInfo) -> None:
    """The tokenizer's BOS and EOS must be the ones the model was configured with.

    A foreign tokenizer with a vocabulary no larger than the embedding passes
    every size check and round-trips the prompts, but puts other ids where the
    model expects BOS (every prompt starts with it) and stops on another EOS.
    EOS may be any of config.json's or generation_config.json's ids (chat
    models list several). A tokenizer smaller than ``vocab_size`` is not
    refused by itself: embeddings are commonly padded past the vocabulary.
    """
    text = text_config(info.config)
    generation = _read_json_object(info.path / "generation_config.json")
    n_tokens = len(tokenizer)
    hint = "use the tokenizer saved with this checkpoint"
    for key in ("bos_token_id", "eos_token_id"):
        for token_id in _special_ids(text.get(key, info.config.get(key))):
            if not 0 <= token_id < n_tokens:
                raise TokenizerMismatchError(
                    f"config.json's {key} {token_id} is not a token of the tokenizer ({n_tokens} tokens): "
                    "the tokenizer is not this checkpoint's",
                    hint=hint,
                )
    bos = _special_ids(text.get("bos_token_id", info.config.get("bos_token_id")))
    eos = _special_ids(text.get("eos_token_id", info.config.get("eos_token_id")))
    more_eos = [i for i in _special_ids(generation.get("eos_token_id")) if i not in eos]
    checks = (
        ("BOS", tokenizer.bos_token, tokenizer.bos_token_id, "config.json's bos_token_id", bos),
        (
            "EOS",
            tokenizer.eos_token,
            tokenizer.eos_token_id,
            "the eos_token_id of config.json and generation_config.json" if more_eos else "config.json's eos_token_id",
            eos + more_eos,
        ),
    )
    for name, token, token_id, source, configured in checks:
        if token_id is not None and configured and token_id not in configured:
            shown = configured[0] if len(configured) == 1 else configured
            raise TokenizerMismatchError(
                f"the tokenizer's {name} {str(token)!r} is id {token_id}, but {source} is {shown}: "
                "the tokenizer is not this checkpoint's",
                hint=hint,
            )


@json_edge
def _read_json_object(path: Path) -> dict[str, Any]:
    """An optional config (``generation_config.json``): empty where it is missing or not a JSON object."""
    try:
        return json_object(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # NotAJsonObjectError is a ValueError
        return {}


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
        with quiet_length_warning():
            ids_a, ids_b = a.encode(text), b.encode(text)
        if ids_a != ids_b:
            # the encodings may differ in length: where the shorter is a prefix, they part at its end
            at = next(
                (j for j, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y), min(len(ids_a), len(ids_b))
            )
            return (
                f"encode prompt {i} ({_short(text)}) differently from position {at}: {_short(ids_a)} vs {_short(ids_b)}"
            )
    return None


def tokenizer_files_digest(root: str | Path) -> str:
    """One digest over the tokenizer files present: equal digests, identical tokenizers."""
    root = Path(root)
    return sha256_files(root, [name for name in TOKENIZER_FILES if (root / name).is_file()])


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
        with quiet_length_warning():
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
