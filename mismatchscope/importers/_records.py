"""One JSON Lines record parsed: orjson first, the stdlib for what only it reads, and a refusal that says
what the line is instead of an object (another encoding, a pretty-printed file, nesting)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..documents import json_edge
from ..errors import ImportFormatError
from ._base import short

try:  # orjson is ~3x faster on float-heavy lines; the stdlib is the fallback
    import orjson

    _fast_loads: Callable[[bytes], Any] | None = orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson
    _fast_loads = None


def loads(raw: bytes) -> Any:
    """orjson first; the stdlib second, because Python's ``json.dumps`` (which
    NeMo-RL's logger uses) writes ``NaN`` and ``-Infinity``, which orjson
    rightly calls invalid JSON."""
    if _fast_loads is not None:
        try:
            return _fast_loads(raw)
        except ValueError:
            pass
    try:
        return json.loads(raw)
    except RecursionError:  # orjson stops at depth 1024; the stdlib would recurse until the stack ends
        raise ValueError("nested too deeply") from None


@json_edge
def parse_record(raw: bytes) -> dict[str, Any]:
    """One JSON Lines record: a JSON object on one line, or an ImportFormatError saying what the line is instead."""
    try:
        rec = loads(raw)
    except ValueError as e:
        raise ImportFormatError(_why_unparsable(raw, e)) from None
    if not isinstance(rec, dict):
        kind = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(rec), "null")
        raise ImportFormatError(f"expected a JSON object, got a JSON {kind} (JSON Lines hold one object per line)")
    return rec


def _why_unparsable(raw: bytes, e: ValueError) -> str:
    """The cause a user can act on: another encoding, a pretty-printed file, nesting; else the parser's words."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or raw.count(b"\x00") * 3 >= len(
        raw
    ):  # UTF-16 ASCII: every other byte 0
        return "not UTF-8 text (it looks like UTF-16); JSON Lines are UTF-8, one object per line"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        return (
            f"not UTF-8 text (byte 0x{raw[u.start]:02x} at offset {u.start}); JSON Lines are UTF-8, one object per line"
        )
    text = raw.strip()
    if text.endswith((b"{", b"[")):  # '{' alone on the first line: an indented json.dump
        return (
            "not one JSON object per line (this looks like JSON spread over several lines: "
            "write each record on one line)"
        )
    if "nested too deeply" in str(e) or "recursion" in str(e).lower():
        return "malformed JSON (nested too deeply)"
    return f"malformed JSON ({short(e)})"
