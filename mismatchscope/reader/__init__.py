"""Streaming reader for token-pair files.

Accepts one Parquet file, a directory of shards (a probe run directory reads
its ``tokens/`` folder), or a glob, and yields record batches of only the
columns asked for, renamed to the canonical names. Memory is bounded by the
batch size, never by the file.

Input hygiene lives here so every command sees the same cleaned tokens:
``-9999`` sentinels become ``-inf``; rows with a non-finite logprob are counted
and dropped (with a warning); clearly positive logprobs are an error.

One idea a module: :mod:`.sources` (which files, checked), :mod:`.columns`
(``--column`` mappings, column types), :mod:`.metadata` (what a file says
about itself), :mod:`.streaming` (the batches, decoded ahead), :mod:`.hygiene`
(cleaning), :mod:`.routes` (the MoE route shards). This module only hands on
the entry points the rest of the package uses.
"""

from .columns import check_mapped_once, parse_column_mapping
from .hygiene import Hygiene, token_keys
from .metadata import printable
from .routes import read_routes
from .sources import Source, open_source, require_complete, resolve_files
from .streaming import BATCH_ROWS, RawBatch, iter_batches, read_batches

__all__ = [
    "BATCH_ROWS",
    "Hygiene",
    "RawBatch",
    "Source",
    "check_mapped_once",
    "iter_batches",
    "open_source",
    "parse_column_mapping",
    "printable",
    "read_batches",
    "read_routes",
    "require_complete",
    "resolve_files",
    "token_keys",
]
