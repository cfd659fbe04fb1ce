"""The token-pair file format: one row per generated token.

This module is the single definition of the format (``docs/format.md`` is its
prose twin). Writers (``probe``, ``import``, the sample-data generator) and the
readers share these names, types and the metadata key, so a column can't be
renamed in one place only.

Version history:
  1 -- first version.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
METADATA_KEY = b"mismatchscope"

# Sentinel an OpenAI-style server writes for -inf (vLLM clamps -inf to -9999).
LOGPROB_SENTINEL = -9999.0


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str


REQUIRED: tuple[Column, ...] = (
    Column("sequence_id", pa.int64(), "one completion; rows of one sequence need not be contiguous"),
    Column("position", pa.int32(), "0-based index of the token within its completion"),
    Column("token_id", pa.int64(), "the sampled token"),
    Column("sampler_logprob", pa.float64(), "log q: the sampler's logprob of the sampled token (natural log)"),
    Column("trainer_logprob", pa.float64(), "log p: the trainer's logprob of the same token (natural log)"),
)

OPTIONAL: tuple[Column, ...] = (
    Column("prompt_id", pa.int64(), "the prompt the completion answers (a GRPO group)"),
    Column("sample_index", pa.int32(), "which of the n samples of the prompt"),
    Column("advantage", pa.float64(), "advantage of the token (or of its sequence, repeated)"),
    Column("reward", pa.float64(), "reward of the sequence, repeated on each of its tokens"),
    Column("sampler_topk_ids", pa.list_(pa.int64()), "ids the sampler listed at this position"),
    Column("sampler_topk_logprobs", pa.list_(pa.float64()), "the sampler's logprob of each listed id"),
    Column("trainer_logprobs_at_sampler_topk", pa.list_(pa.float64()),
           "the trainer's logprob of each id in sampler_topk_ids"),
    Column("trainer_topk_ids", pa.list_(pa.int64()), "the trainer's own top-k ids"),
    Column("trainer_topk_logprobs", pa.list_(pa.float64()), "the trainer's logprob of its top-k ids"),
    Column("trainer_entropy", pa.float64(), "entropy (nats) of the trainer's distribution at this position"),
    Column("sampler_kept_logmass", pa.float64(),
           "log of the probability mass the trainer puts on the set top-p/top-k kept; "
           "0 when nothing was truncated. Already removed from trainer_logprob, reported apart"),
    Column("step", pa.int64(), "training step, for files that hold a whole run"),
    Column("sampler_prefill_logprob", pa.float64(),
           "the sampler's logprob of the same token once more, from a prefill of prompt + completion "
           "(probe --sampler-prefill): where a gap starts, decode kernels or the sampler's forward"),
    Column("sampler_step", pa.int64(), "policy version (weight-sync step) the sampler generated the token with"),
    Column("trainer_step", pa.int64(), "policy version (optimizer step) the trainer scored the token with"),
    Column("rank", pa.int32(), "trainer rank that wrote the record in an imported run "
           "(prime-rl: file rank; slime: data-parallel rank)"),
)

COLUMNS: dict[str, Column] = {c.name: c for c in REQUIRED + OPTIONAL}
REQUIRED_NAMES: tuple[str, ...] = tuple(c.name for c in REQUIRED)
TOPK_COLUMNS = ("sampler_topk_ids", "sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")


def arrow_schema(names: list[str] | tuple[str, ...], metadata: Mapping[str, Any] | None = None) -> pa.Schema:
    """The Arrow schema for the given columns (required ones first), with metadata."""
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown columns {unknown}; known: {sorted(COLUMNS)}")
    ordered = [n for n in COLUMNS if n in names]
    fields = [pa.field(n, COLUMNS[n].type) for n in ordered]
    return pa.schema(fields, metadata=encode_metadata(metadata or {}))


def encode_metadata(config: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The file metadata entry: ``{"schema_version": 1, ...config}`` as JSON."""
    payload = {"schema_version": SCHEMA_VERSION, **dict(config)}
    return {METADATA_KEY: json.dumps(payload, sort_keys=True, default=str).encode()}


def decode_metadata(schema_metadata: Mapping[bytes, bytes] | None) -> dict[str, Any] | None:
    """The ``mismatchscope`` metadata of a file, or None when it has none."""
    if not schema_metadata or METADATA_KEY not in schema_metadata:
        return None
    return json.loads(schema_metadata[METADATA_KEY])


def write_table(path: str | os.PathLike, columns: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> Path:
    """Write one shard atomically (temp file, then rename).

    A reader, or a resumed probe, never sees a half-written shard: a shard
    exists completely or not at all.
    """
    path = Path(path)
    schema = arrow_schema(list(columns), metadata)
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns have different lengths: {lengths}")
    table = pa.Table.from_pydict({f.name: columns[f.name] for f in schema}, schema=schema)
    from .rundir import atomic_path

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path
