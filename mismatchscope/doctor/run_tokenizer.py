"""The tokenizer ``doctor`` re-encodes a multi-turn run's turns with: ``--tokenizer CHECKPOINT``, else the
checkpoint a probe run recorded (when it is still there), else none (the ``retokenized`` cause then reads the
gap's signature). transformers is imported only when a tokenizer is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, MissingDependencyError
from .sample import Sample


@dataclass(frozen=True)
class RunTokenizer:
    tokenizer: Any = None
    source: str | None = None
    """how the finding names it: ``the tokenizer of CHECKPOINT``."""


def run_tokenizer(path: str | None, run: dict[str, Any] | None, sample: Sample) -> RunTokenizer:
    """The tokenizer to use. A given one that cannot be loaded is an error; a recorded one is only a try."""
    if path is not None:
        return RunTokenizer(load(path), f"the tokenizer of {path}")
    if not sample.has("turn") or sample.has("trainer_token_id"):
        return RunTokenizer()  # nothing to re-encode, or the ids of both sides are there
    recorded = ((run or {}).get("checkpoint") or {}).get("path")
    if not isinstance(recorded, str) or not Path(recorded).is_dir():
        return RunTokenizer()
    try:
        return RunTokenizer(load(recorded), f"the tokenizer of the run's checkpoint {recorded}")
    except (CheckpointError, MissingDependencyError):
        return RunTokenizer()


def load(path: str) -> Any:
    """A checkpoint's tokenizer (no remote code), with one-line errors."""
    if not Path(path).is_dir():
        raise CheckpointError(
            f"--tokenizer {path}: not a checkpoint folder", hint="give the folder holding tokenizer.json"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise MissingDependencyError(
            "--tokenizer needs transformers", hint="pip install 'mismatchscope[cpu]'"
        ) from None
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, TypeError) as e:
        raise CheckpointError(f"--tokenizer {path}: cannot load a tokenizer ({str(e).splitlines()[0][:160]})") from None
