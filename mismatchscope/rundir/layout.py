"""The names of a run directory's files and folders, its status values, and what makes a folder a run."""

from __future__ import annotations

import os
from pathlib import Path

MANIFEST = "manifest.json"
TOKENS = "tokens"
RANKS = "ranks"
LOCK = ".lock"
INDEX = "index"
INDEX_VERSION = 3
"""the manifest's ``shard_index`` value: the run keeps ``DIR/index/*.jsonl``. 1: ``tokens/`` only; 2: ``routes/``
too, so a reader of a version-2 run with route shards and no route index knows the index was lost; 3: each
entry carries its shard's footer hash, and every page of the shard its CRC (:func:`footer_hash`)."""
ROUTES = "routes"
"""the folder of MoE route shards (its layout: :mod:`mismatchscope.routing.layout`)."""
COMPLETE = "complete"
RUNNING = "running"
STAGING = ".import-partial"
"""the folder inside a run directory an ``import`` writes into before it moves the run up, its manifest last: a
killed import leaves only this hidden folder (never ``tokens/`` without a manifest), removed by the next import
into the same directory. Not a run of its own to anyone looking for one."""


def is_run_dir(path: str | os.PathLike) -> bool:
    """A directory a mismatchscope writer made: it has a manifest or a ``tokens/`` folder."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).is_file() or (p / TOKENS).is_dir())
