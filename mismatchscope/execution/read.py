"""A run's provenance as every command reads it: recorded, implied by an older manifest, or not there at all.

Never an error: a run recorded before provenance reads with what its
manifest implies (:mod:`.derived`) and the rest "not recorded"; token shards
outside any run, or several runs at once, read as not recorded; a record
this version cannot read (edited, or from a later layout) is said so in the
note and read as its manifest implies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import rundir
from .derived import from_manifest
from .record import MANIFEST_KEY, RECORD_VERSION, RunProvenance, SideProvenance, read_record

NO_RUN = "none"
"""``source`` of the sides of an input that is no run directory."""


@dataclass(frozen=True)
class RunRecord:
    """What a run says it ran, and how much of that it recorded."""

    run: str
    provenance: RunProvenance
    recorded: bool
    """the manifest holds a provenance record (False: read from an older manifest, or no manifest)."""
    note: str | None = None
    """why the record is partial or absent, in one sentence; None for a record written with the run."""


def read_run(path: str | os.PathLike) -> RunRecord:
    """The record of the run at ``path`` (a run directory, its ``tokens/`` folder or one of its shards)."""
    root = run_root(path)
    if root is None:
        note = f"{path} is not one run directory: no manifest to read what ran"
        return RunRecord(str(path), empty(NO_RUN), False, note)
    manifest = rundir.read_manifest(root)
    if manifest is None:
        return RunRecord(str(path), empty(NO_RUN), False, f"{root} has no readable manifest")
    return of_manifest(str(path), manifest)


def of_manifest(run: str, manifest: dict[str, Any]) -> RunRecord:
    entry = manifest.get(MANIFEST_KEY)
    if entry is None:
        return RunRecord(
            run,
            from_manifest(manifest),
            False,
            "recorded before runs recorded provenance: what its configuration says is shown, the rest is not recorded",
        )
    try:
        return RunRecord(run, read_record(entry), True)
    except TypeError as e:
        version = entry.get("version") if isinstance(entry, dict) else None
        why = (
            f"its record is of layout {version}, newer than this version reads ({RECORD_VERSION})"
            if isinstance(version, int) and version > RECORD_VERSION
            else f"its record is not readable ({str(e)[:120]})"
        )
        return RunRecord(run, from_manifest(manifest), False, f"{why}: what its configuration says is shown")


def empty(source: str) -> RunProvenance:
    return RunProvenance(RECORD_VERSION, SideProvenance(source=source), SideProvenance(source=source))


def run_root(path: str | os.PathLike) -> Path | None:
    """The one run directory ``path`` names or lies in: the run, its ``tokens/`` folder, or a shard of it."""
    p = Path(path)
    if rundir.is_run_dir(p):
        return p
    if p.is_file():
        roots = rundir.run_roots([p])
        return roots[0] if len(roots) == 1 else None
    if p.is_dir() and p.name == rundir.TOKENS and rundir.is_run_dir(p.parent):
        return p.parent
    return None
