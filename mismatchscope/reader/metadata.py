"""What a file says about itself: its ``mismatchscope`` metadata, checked (JSON, an object, a known
schema_version, tables where tables belong), made safe to print, and with credentials redacted.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..documents import json_edge
from ..errors import FileFormatError
from ..redact import redact_obj
from ..schema import METADATA_KEY, SCHEMA_VERSION, decode_metadata

METADATA_SECTIONS = (
    "checkpoint",
    "trainer_checkpoint",
    "prompts",
    "sampling",
    "sampler",
    "trainer",
    "semantics",
    "source",
    "timings",
)
"""sections of the ``mismatchscope`` metadata that readers index into: each must be a table when present."""


@json_edge
def read_metadata(path: Path, schema_metadata: Mapping[bytes, bytes] | None) -> dict[str, Any] | None:
    """The file's ``mismatchscope`` metadata, checked: JSON, an object, a known schema_version, tables where tables belong.

    Its text is made safe to print on the way in: JSON may spell an unpaired
    surrogate (``"\\ud800"``), which no UTF-8 output (a terminal, ``--html``,
    ``--format json``) can encode; each is kept as its escape text instead.
    Nesting too deep to walk (or to quote in a message) is reported like
    nesting too deep to parse, with the file's name.
    """
    if not schema_metadata or METADATA_KEY not in schema_metadata:
        return None
    try:
        meta = decode_metadata(schema_metadata)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else "not valid JSON"
        raise FileFormatError(f"{path}: the 'mismatchscope' file metadata is {reason}", hint=_DAMAGED) from None
    try:
        meta = printable(meta)
        _check_metadata(path, meta)
        return redact_obj(meta)  # a file from elsewhere may carry a URL with credentials: never print it
    except RecursionError:
        raise FileFormatError(
            f"{path}: the 'mismatchscope' file metadata is nested too deeply", hint=_DAMAGED
        ) from None


_DAMAGED = "the file was not written by mismatchscope, or was damaged; rewrite it without that metadata key"
_FOREIGN = "the file was not written by mismatchscope; rewrite it without that metadata key"


def _check_metadata(path: Path, meta: Any) -> None:
    if not isinstance(meta, dict):  # JSON null too: the key is there, so it must hold the object
        kind = "null" if meta is None else type(meta).__name__
        raise FileFormatError(
            f"{path}: the 'mismatchscope' file metadata is a JSON {kind}, not an object", hint=_FOREIGN
        )
    version = meta.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FileFormatError(
            f"{path}: the 'mismatchscope' file metadata has schema_version {_short_repr(version)}, "
            "not a version number",
            hint=_FOREIGN,
        )
    if version > SCHEMA_VERSION:
        raise FileFormatError(
            f"{path}: schema_version {version} is newer than this mismatchscope understands ({SCHEMA_VERSION})",
            hint="upgrade mismatchscope",
        )
    nested = [(key, meta.get(key)) for key in METADATA_SECTIONS]
    source = meta.get("source")
    if isinstance(source, dict):
        nested.append(("source.semantics", source.get("semantics")))
    for key, value in nested:
        if value is not None and not isinstance(value, dict):
            raise FileFormatError(
                f"{path}: the 'mismatchscope' file metadata has {key!r} = {_short_repr(value)}, not a table",
                hint="the file's metadata was damaged; rewrite it without that metadata key",
            )


def printable(obj: Any) -> Any:
    """``obj`` with every unpaired surrogate in its strings (keys included) replaced by its escape text.

    ``json.loads`` turns ``"\\ud800"`` into a lone surrogate, a ``str`` that
    UTF-8 cannot encode: printed, or written to ``--html``, it would crash the
    command long after the file was read, so the text is fixed where it is read.
    """
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, dict):
        return {printable(k): printable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [printable(v) for v in obj]
    return obj


def _short_repr(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."
