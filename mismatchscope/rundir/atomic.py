"""Atomic files: written beside their final name and renamed over it, so a reader sees a whole file or none."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On an exception the temporary file is removed and ``path`` is untouched.
    The rename is atomic on POSIX filesystems, so a reader sees the old file,
    the new file, or no file, never a part of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_json(path: str | os.PathLike, payload: Mapping[str, Any]) -> Path:
    """JSON, indented and key-sorted (diffable), written atomically."""
    text = json.dumps(dict(payload), indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write_bytes(path, text.encode())
