"""Which directories a Recorder may write into: a new or empty one, or a run that Recorders wrote.

Several ranks of one job start on the same directory without coordination,
so the test is on what the directory holds (a Recorder's manifest, its own
folders with the names each may hold), never on who got there first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import rundir
from ..errors import UsageError

_TMP = r"(\.\d+\.tmp)?"
"""the suffix of a file being written (``rundir.atomic_path``: ``.NAME.PID.tmp``)."""
_OWN_FILES = re.compile(rf"\.?{re.escape(rundir.MANIFEST)}{_TMP}")
_OWN_FOLDERS = {
    rundir.RANKS: re.compile(rf"rank-\d{{4,}}\.lock|\.?rank-\d{{4,}}\.json{_TMP}"),
    rundir.TOKENS: re.compile(rf"\.?step-\d{{6,}}-rank-\d{{4,}}(-part-\d{{4,}})?\.parquet{_TMP}"),
    rundir.ROUTES: re.compile(rf"\.?step-\d{{6,}}-rank-\d{{4,}}(-part-\d{{4,}})?\.parquet{_TMP}"),
    rundir.INDEX: re.compile(r"(tokens|routes)\.rank-\d{4,}\.jsonl"),
}
"""what a recorded run holds: its manifest, and its folders with the names each may hold."""


def check_recorder_directory(
    path: Path, given: str | os.PathLike, *, resume: bool = False, world_size: int | None = None
) -> None:
    """Refuse a directory that holds anything but a recorded run: another writer's run, a folder inside a run,
    a file, other files, or an empty path (the working directory).

    Several ranks of one job start on the same directory without coordination,
    so a recorded run (or an empty or new directory) is always accepted here;
    whether this rank may add to it is its rank record's business (``resume``).
    A recorded run of another world size is reopened only with ``resume``.
    """
    if not str(given).strip():
        raise UsageError(
            "the Recorder was given an empty path (the working directory)",
            hint="name the run directory, e.g. Recorder('runs/my-run')",
        )
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a run directory", hint="record into a new or empty directory")
    for up in _ancestors(path):
        if rundir.is_run_dir(up):
            raise UsageError(
                f"{path} lies inside the run {up}",
                hint="record into a directory of its own, not into another run's folders",
            )
    if not path.is_dir():
        return
    if (path / rundir.MANIFEST).exists():
        _check_recorded_manifest(path, resume=resume, world_size=world_size)
    _check_recorded_files(path)


def _check_recorded_manifest(path: Path, *, resume: bool, world_size: int | None) -> None:
    """The run's manifest must be a Recorder's, of this world size unless ``resume``."""
    manifest = rundir.read_manifest(path)
    if manifest is None or manifest.get("writer") != "recorder":
        raise UsageError(
            f"{path} already holds {_what_run(manifest)}, not a recorded run",
            hint="record into a new or empty directory",
        )
    old_world = manifest.get("world_size")
    if world_size is not None and isinstance(old_world, int) and old_world != world_size and not resume:
        raise UsageError(
            f"{path} holds a run recorded with world_size {old_world}, not {world_size}",
            hint="pass resume=True to add to it, or record into another directory",
        )


def _check_recorded_files(path: Path) -> None:
    """Every file and folder in the run must be one a Recorder writes."""
    for entry in sorted(path.iterdir()):
        names = _OWN_FOLDERS.get(entry.name) if entry.is_dir() else None
        if names is None and not (entry.is_file() and _OWN_FILES.fullmatch(entry.name)):
            raise UsageError(
                f"{path} holds files that are not a recorded run's (e.g. {entry.name})",
                hint="record into a new or empty directory",
            )
        stray = next((c.name for c in entry.iterdir() if not names.fullmatch(c.name)), None) if names else None
        if stray is not None:
            raise UsageError(
                f"{path} holds files that are not a recorded run's (e.g. {entry.name}/{stray})",
                hint="record into a new or empty directory",
            )


def _ancestors(path: Path) -> list[Path]:
    absolute = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    return list(dict.fromkeys([*absolute.parents, *(real.parents if real != absolute else [])]))


def _what_run(manifest: Mapping[str, Any] | None) -> str:
    if manifest is None:
        return f"an unreadable {rundir.MANIFEST}"
    if "fingerprint" in manifest:
        return "a probe run"
    if isinstance(manifest.get("source"), dict) and "format" in manifest["source"]:
        return "an imported run"
    return f"another writer's run ({rundir.MANIFEST})"
