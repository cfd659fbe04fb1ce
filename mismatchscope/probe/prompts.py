"""The prompts file: JSON Lines, one object per prompt.

``{"prompt": "123+456=", "answer": "579"}`` -- ``prompt`` is required,
``answer`` optional (it turns on the 0/1 reward), ``id`` optional (any JSON
scalar, kept as text). Prompts are tokenized by the trainer's tokenizer and
sent to the sampler as token ids, so both sides see exactly the same ids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import PromptError


@dataclass(frozen=True)
class Prompt:
    prompt_id: int
    text: str
    answer: str | None = None
    source_id: str | None = None


def load_prompts(path: Path) -> list[Prompt]:
    if not path.is_file():
        raise PromptError(
            f"{path}: prompts file not found", hint='pass --prompts FILE.jsonl with one {"prompt": ...} per line'
        )
    prompts: list[Prompt] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise PromptError(
                    f"{path}:{lineno}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})",
                    hint="save the prompts file as UTF-8",
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise PromptError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            except RecursionError:
                raise PromptError(f"{path}:{lineno}: JSON nested too deeply") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                raise PromptError(f'{path}:{lineno}: each line needs a string field "prompt"')
            answer = obj.get("answer")
            prompt = Prompt(
                prompt_id=len(prompts),
                text=obj["prompt"],
                answer=None if answer is None else str(answer),
                source_id=None if obj.get("id") is None else str(obj["id"]),
            )
            for field, value in (("prompt", prompt.text), ("answer", prompt.answer), ("id", prompt.source_id)):
                _check_unicode(value, field, path, lineno)
            prompts.append(prompt)
    if not prompts:
        raise PromptError(f"{path}: the prompts file is empty")
    return prompts


def _check_unicode(value: str | None, field: str, path: Path, lineno: int) -> None:
    """JSON can spell a lone UTF-16 surrogate (``"\\ud800"``), which is no character:
    the tokenizer and Parquet would both fail on it far from this line."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PromptError(
            f'{path}:{lineno}: "{field}" holds {value[e.start]!r}, a lone UTF-16 surrogate that is not a character',
            hint="write the character itself, or its escaped surrogate pair",
        ) from None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
