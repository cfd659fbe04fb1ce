"""The manifest and the completion record: a run is complete only when its manifest and every rank's
record say so (:func:`completion` is the one reader of this record)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import json_object
from ..documents import json_edge
from ..errors import NotAJsonObjectError
from .atomic import atomic_write_json
from .layout import COMPLETE, MANIFEST, RANKS, is_run_dir


@json_edge
def read_json(path: str | os.PathLike) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when the file is absent or not a JSON object."""
    try:
        return json_object(Path(path).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError, NotAJsonObjectError):
        return None


@json_edge
def read_manifest(run: str | os.PathLike) -> dict[str, Any] | None:
    return read_json(Path(run) / MANIFEST)


def write_manifest(run: str | os.PathLike, manifest: Mapping[str, Any]) -> Path:
    return atomic_write_json(Path(run) / MANIFEST, manifest)


@dataclass(frozen=True)
class Completion:
    complete: bool
    reason: str
    """why the run is incomplete ("" when complete)."""


def completion(run: str | os.PathLike) -> Completion | None:
    """The run's completion record read once; None when ``run`` is not a run directory."""
    p = Path(run)
    if not is_run_dir(p):
        return None
    manifest = read_manifest(p)
    if manifest is None:
        return Completion(False, f"no readable {MANIFEST}")
    if manifest.get("status") != COMPLETE:
        return Completion(False, f"{MANIFEST} status is {manifest.get('status')!r}, not {COMPLETE!r}")
    records = {f.stem: read_json(f) or {} for f in sorted((p / RANKS).glob("rank-*.json"))}
    open_ranks = [
        name.removeprefix("rank-").lstrip("0") or "0" for name, rec in records.items() if rec.get("status") != COMPLETE
    ]
    if open_ranks:
        return Completion(False, f"rank(s) {', '.join(open_ranks)} did not close")
    world = manifest.get("world_size")
    if isinstance(world, int) and records and len(records) < world:
        return Completion(False, f"{len(records)} of {world} ranks wrote a record")
    return Completion(True, "")
