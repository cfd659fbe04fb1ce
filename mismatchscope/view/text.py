"""The text of the tokens a view shows: the run's tokenizer, found or given, and each token's piece of text.

A probe run records its checkpoint; any other run takes ``--tokenizer
CHECKPOINT``. Without either the page shows token ids and says why
(:class:`TextSource`). A tokenizer that cannot be this run's (ids past its
vocabulary) is an error, never a page of wrong words.

A token's text is what it adds to the decoded text so far (the way serving
engines detokenize a stream): a byte-level BPE splits one character over
several tokens, and decoding each token alone would show each as a
replacement character. The piece of a token that ends in the middle of a
character is empty, and the character appears on the token that completes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, UsageError

CONTEXT = 6
"""tokens decoded before the current one: enough for a character split over several byte tokens, and for a
tokenizer that drops a leading space unless a token precedes it."""


@dataclass(frozen=True)
class TextSource:
    """Where the page's text comes from: a tokenizer, or (``tokenizer`` None) the ids, and why."""

    tokenizer: str | None
    """the checkpoint folder whose tokenizer decoded the tokens."""
    note: str
    """said on the page: which tokenizer, or why the ids are shown."""


@dataclass
class Decoder:
    """A loaded tokenizer: ``decode(ids)`` with special tokens kept, and its vocabulary size."""

    decode: Callable[[Sequence[int]], str]
    size: int

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Each token's piece of the decoded text (see the module's docstring)."""
        out: list[str] = []
        prefix, read = 0, 0
        for i in range(len(ids)):
            before = self.decode(ids[prefix:read]) if read > prefix else ""
            now = self.decode(ids[prefix : i + 1])
            if now.endswith("\ufffd") and i + 1 < len(ids):  # a character not finished yet: it goes with a later token
                out.append("")
                continue
            out.append(now[_common(before, now) :])
            prefix, read = max(0, i + 1 - CONTEXT), i + 1
        return out

    def one(self, token_id: int) -> str:
        """A single token's text, alone (the top-k candidates: no stream to place them in)."""
        return self.decode([token_id])


def _common(a: str, b: str) -> int:
    """The length of the text ``a`` and ``b`` start with (all of ``a`` for any tokenizer that only appends)."""
    if b.startswith(a):
        return len(a)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def find_tokenizer(run_config: dict[str, Any] | None, run_path: str) -> tuple[Decoder | None, TextSource]:
    """The tokenizer of the checkpoint a probe run recorded; else none, and why (said on the page)."""
    recorded = _recorded_checkpoint(run_config)
    if recorded is None:
        why = (
            "token ids are shown: the run does not name its checkpoint (only a probe run records one); "
            "pass --tokenizer CHECKPOINT for the text"
        )
        return None, TextSource(None, why)
    found = _locate(recorded, run_path)
    if found is None:
        why = (
            f"token ids are shown: the run's checkpoint {recorded} is not found from here; "
            "pass --tokenizer CHECKPOINT for the text"
        )
        return None, TextSource(None, why)
    try:
        decoder = load_decoder(found, "the run's checkpoint")
    except (CheckpointError, UsageError) as e:
        return None, TextSource(None, f"token ids are shown: {e}")
    return decoder, TextSource(str(found), f"text from the tokenizer of the run's checkpoint, {found}")


def _recorded_checkpoint(run_config: dict[str, Any] | None) -> str | None:
    """The checkpoint a probe (or a rescore) recorded: the sampler's, else the trainer's (same tokenizer, checked)."""
    for key in ("checkpoint", "trainer_checkpoint"):
        entry = (run_config or {}).get(key)
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) and entry["path"].strip():
            return entry["path"]
    return None


def _locate(recorded: str, run_path: str) -> Path | None:
    """The recorded folder as given (absolute, or from here), else relative to a folder above the run: a probe
    records the path it was given, relative to where it ran (``sample_data/tiny-qwen3``)."""
    p = Path(recorded).expanduser()
    if p.is_dir():
        return p
    if p.is_absolute():
        return None
    for parent in Path(run_path).resolve().parents:
        if (parent / p).is_dir():
            return parent / p
    return None


def load_decoder(folder: Path, what: str) -> Decoder:
    """The folder's tokenizer: its ``tokenizer.json`` through the ``tokenizers`` library (fast, no transformers),
    else transformers' ``AutoTokenizer`` (a sentencepiece model). One-line errors for anything missing."""
    if not folder.is_dir():
        raise UsageError(f"{what} {folder}: no such folder", hint="give the checkpoint folder that holds the tokenizer")
    if (folder / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            Tokenizer = None
        if Tokenizer is not None:
            try:
                tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as e:  # the library raises its own exception type for a bad file
                raise CheckpointError(f"{what} {folder}: cannot read tokenizer.json ({e})") from None
            return Decoder(lambda ids: tok.decode(list(ids), skip_special_tokens=False), tok.get_vocab_size())
    try:
        from ..probe.tokenizer import load_tokenizer
    except ImportError:  # pragma: no cover - the hf extra is missing
        raise CheckpointError(
            f"{what} {folder}: reading its tokenizer needs the tokenizers or transformers package",
            hint="pip install 'mismatchscope[hf]'",
        ) from None
    tok = load_tokenizer(folder)

    def decode(ids: Sequence[int]) -> str:
        return tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    return Decoder(decode, len(tok))


def check_fits(decoder: Decoder, source: TextSource, largest_id: int) -> None:
    """Ids past the tokenizer's vocabulary: not this run's tokenizer."""
    if largest_id >= decoder.size:
        raise UsageError(
            f"the tokenizer of {source.tokenizer} has {decoder.size:,} tokens but the run has token id {largest_id:,}: "
            "it is not this run's tokenizer",
            hint="pass --tokenizer with the checkpoint the run was sampled from",
        )
