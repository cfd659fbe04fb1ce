"""The run-directory contract: atomic files, the manifest, the completion record, one writer.

Every writer of a run directory (``probe``, ``rescore``, ``import``, the
training-loop :class:`~mismatchscope.Recorder`) follows the same rules, so
every reader can trust what it finds:

* **Atomic files.** A file is written to a hidden temporary name beside it
  and renamed over its final name (:func:`atomic_path`): a killed writer
  leaves whole files or nothing, never half a shard.
* **One completion record.** ``DIR/manifest.json`` carries ``"status"``;
  the run is complete only when it reads ``"complete"``, written after the
  last shard. A run written by several processes (one per trainer rank) also
  keeps one record per rank, ``DIR/ranks/rank-NNNN.json``, with the same
  ``status`` key; it is complete when the manifest and every rank record say
  ``complete`` (and, when the manifest names a ``world_size``, that many rank
  records exist). :func:`completion` is the one reader of this record.
* **A record of every shard.** A writer appends one line to its shard index,
  ``DIR/index/FOLDER[.WRITER].jsonl``, after each shard of ``DIR/FOLDER/``
  (``tokens/``, ``routes/``) is renamed into place: its name, row count,
  size and footer hash (:class:`ShardIndex`; every page of the shard carries
  its own CRC, :data:`mismatchscope.schema.WRITE_OPTIONS`). Every reader holds what it finds against it
  (:func:`check_folder`): a listed shard that is missing or of another size,
  a shard no writer listed, or a file that is not a regular file is an error
  in a complete run and part of the incomplete-run warning otherwise. The
  manifest's ``shard_index`` key says the run keeps one; a run written before
  it did is read as before, with a note.
* **One writer.** A writer takes an exclusive ``flock`` on a lock file in the
  run directory (:class:`WriterLock`); a second process asking for the same
  lock is refused with a one-line error instead of writing the same rows
  twice. The lock goes away with the process, so a killed writer never
  leaves a stale lock behind.

Only the standard library and pyarrow's footer reader are used here: the
readers of the light core import this package. One idea a module:
:mod:`.layout` (the names), :mod:`.atomic`, :mod:`.manifest` (and the
completion record), :mod:`.index` (the shard index and its checks),
:mod:`.contents` (what a reader says about its input's runs), :mod:`.lock`
(one writer). This module only hands their names on.
"""

from .atomic import atomic_path, atomic_write_bytes, atomic_write_json
from .contents import Contents, check_contents, contents_summary, incomplete_message, input_runs, run_roots
from .index import (
    FOOTER_HASH,
    ShardEntry,
    ShardIndex,
    check_folder,
    footer_hash,
    hashed,
    index_files,
    indexed,
    not_regular,
    read_index,
    shard_problems,
)
from .layout import (
    COMPLETE,
    INDEX,
    INDEX_VERSION,
    LOCK,
    MANIFEST,
    RANKS,
    ROUTES,
    RUNNING,
    STAGING,
    TOKENS,
    is_run_dir,
)
from .lock import WriterLock, is_empty_dir, lock_run
from .manifest import Completion, completion, read_json, read_manifest, write_manifest

__all__ = [
    "COMPLETE",
    "FOOTER_HASH",
    "INDEX",
    "INDEX_VERSION",
    "LOCK",
    "MANIFEST",
    "RANKS",
    "ROUTES",
    "RUNNING",
    "STAGING",
    "TOKENS",
    "Completion",
    "Contents",
    "ShardEntry",
    "ShardIndex",
    "WriterLock",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_contents",
    "check_folder",
    "completion",
    "contents_summary",
    "footer_hash",
    "hashed",
    "incomplete_message",
    "index_files",
    "indexed",
    "input_runs",
    "is_empty_dir",
    "is_run_dir",
    "lock_run",
    "not_regular",
    "read_index",
    "read_json",
    "read_manifest",
    "run_roots",
    "shard_problems",
    "write_manifest",
]
