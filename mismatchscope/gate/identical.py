"""Two runs that hold the same data: a deterministic stack, or a copy?

A serving stack that changed nothing and samples deterministically at a fixed
seed writes byte-identical token files: the expected outcome of a determinism
check, and passing is then the right verdict. A baseline that is a copy of the
candidate writes the same files too, and would pass every regression limit by
construction. The data cannot tell the two apart; the runs' own records can:
each probe session stamps its start time and its measured seconds into the
manifest, and each Recorder rank its process id and start time into its rank
record, so two honest runs never share them, while a copied directory carries
the same records byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .. import rundir


@dataclass(frozen=True)
class SameData:
    """The baseline's files are the candidate's bytes: what that means, and whether it looks like a copy."""

    message: str
    copy: bool


def same_data(candidate: str, baseline: str) -> SameData | None:
    """None when the data differ (sizes or Parquet footers); else the reading of the two runs' records.

    Only the footers and the small run records are read, so this costs nothing next to the analysis."""
    a, b = _fingerprint(candidate), _fingerprint(baseline)
    if a is None or a != b:
        return None
    same = f"the baseline {baseline} holds the same data as the candidate (same sizes, identical Parquet footers)"
    ra, rb = _records(candidate), _records(baseline)
    if ra and rb and ra != rb:
        seed = _seed(candidate)
        at = f" at seed {seed}" if seed is not None else " at this seed"
        return SameData(
            f"{same}, from two runs (their run records differ): the two runs are bit-identical: "
            f"the stack is deterministic{at}",
            copy=False,
        )
    why = "the same run records (start times, timings)" if ra else "no run records to tell two runs apart"
    return SameData(f"{same} and {why}: every regression limit passes by construction; is it a copy?", copy=True)


def _fingerprint(p: str) -> list[tuple[int, bytes]] | None:
    from ..reader import resolve_files

    out = []
    for f in resolve_files(p):
        try:
            with open(f, "rb") as fh:
                fh.seek(-8, os.SEEK_END)
                n = int.from_bytes(fh.read(4), "little")
                fh.seek(-8 - n, os.SEEK_END)
                out.append((os.path.getsize(f), fh.read(n)))
        except (OSError, ValueError):
            return None
    return out


def _records(p: str) -> dict[str, bytes]:
    """A run directory's own records (manifest and rank records) by name; empty for bare files."""
    root = Path(p)
    if not root.is_dir():
        return {}
    files = [root / rundir.MANIFEST, *sorted((root / rundir.RANKS).glob("*.json"))]
    out = {}
    for f in files:
        try:
            out[str(f.relative_to(root))] = f.read_bytes()
        except OSError:
            continue
    return out


def _seed(p: str) -> int | None:
    manifest = rundir.read_manifest(Path(p)) if Path(p).is_dir() else None
    sampling = ((manifest or {}).get("fingerprint") or {}).get("sampling") or {}
    seed = sampling.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None
