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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .documents import json_edge

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
    Column(
        "trainer_logprobs_at_sampler_topk",
        pa.list_(pa.float64()),
        "the trainer's logprob of each id in sampler_topk_ids",
    ),
    Column("trainer_topk_ids", pa.list_(pa.int64()), "the trainer's own top-k ids"),
    Column("trainer_topk_logprobs", pa.list_(pa.float64()), "the trainer's logprob of its top-k ids"),
    Column("trainer_entropy", pa.float64(), "entropy (nats) of the trainer's distribution at this position"),
    Column(
        "sampler_kept_logmass",
        pa.float64(),
        "log of the probability mass the trainer puts on the set top-p/top-k kept; "
        "0 when nothing was truncated. Already removed from trainer_logprob, reported apart",
    ),
    Column("step", pa.int64(), "training step, for files that hold a whole run"),
    Column(
        "sampler_prefill_logprob",
        pa.float64(),
        "the sampler's logprob of the same token once more, from a prefill of prompt + completion "
        "(probe --sampler-prefill): where a gap starts, decode kernels or the sampler's forward",
    ),
    Column(
        "trainer_forward_logprob",
        pa.float64(),
        "the logprob of the token in the first training forward (the loss's own forward, before any update): "
        "with trainer_logprob and sampler_logprob, the third value a zero-mismatch stack keeps equal",
    ),
    Column("sampler_row_digest", pa.int64(), "64-bit digest of the sampler's whole log-prob row, float32 bytes"),
    Column("trainer_row_digest", pa.int64(), "64-bit digest of the trainer's whole log-prob row, float32 bytes"),
    Column("row_max_abs_diff", pa.float64(), "the largest |difference| between the two sides' whole rows"),
    Column("row_max_diff_id", pa.int64(), "the vocabulary id where the two whole rows differ most"),
    Column("sampler_step", pa.int64(), "policy version (weight-sync step) the sampler generated the token with"),
    Column("trainer_step", pa.int64(), "policy version (optimizer step) the trainer scored the token with"),
    Column(
        "minibatch",
        pa.int32(),
        "which minibatch (optimizer step) of its rollout batch the trainer scored the token in: 0 before any update "
        "of that batch, 1 after one, ... (doctor's off_policy_minibatches)",
    ),
    Column("wall_time", pa.float64(), "Unix time (seconds) at which the step that holds the token was recorded"),
    Column("step_sampling_seconds", pa.float64(), "seconds the token's step spent sampling, where the loop says"),
    Column("step_training_seconds", pa.float64(), "seconds the token's step spent training, where the loop says"),
    Column("step_sampling_tokens", pa.int64(), "tokens the token's step sampled, where the loop says"),
    Column("step_training_tokens", pa.int64(), "tokens the token's step trained on, where the loop says"),
    Column(
        "rank",
        pa.int32(),
        "trainer rank that wrote the record in an imported run (prime-rl: file rank; slime: data-parallel rank)",
    ),
    Column(
        "turn",
        pa.int32(),
        "multi-turn runs: 0-based index of the assistant turn the token belongs to (tool and environment spans "
        "between turns hold no rows); a file without it holds one turn per sequence",
    ),
    Column("turn_position", pa.int32(), "multi-turn runs: the token's 0-based index within its turn"),
    Column(
        "trainer_token_id",
        pa.int64(),
        "the id the trainer scored at this row, where the run holds both sides' ids: another id than "
        "token_id where the conversation was decoded and encoded again between the two sides (re-tokenized)",
    ),
)

TOPK_SUMMARY: tuple[Column, ...] = (
    Column(
        "topk_tv_lower",
        pa.float32(),
        "the top-k lower bound of the token's TV distance: TV on the sampler's listed ids, the sampled id and one "
        "rest bucket",
    ),
    Column("topk_kl_lower", pa.float32(), "the top-k lower bound of KL(sampler || trainer) on the same partition"),
    Column(
        "topk_sampler_rest",
        pa.float32(),
        "1 - the sampler's mass on its listed ids (and the sampled id): the rest bucket; the listed mass is 1 - this",
    ),
    Column("topk_trainer_rest", pa.float32(), "1 - the trainer's mass on the same ids"),
    Column(
        "topk_id_overlap",
        pa.float32(),
        "|sampler's ids & trainer's own top-k ids| / the longer list (NaN where both are empty); "
        "written with trainer_topk_ids",
    ),
    Column("topk_pairs", pa.int32(), "listed ids where both sides' logprobs are finite (the sums below run over them)"),
    Column("topk_sum_trainer", pa.float32(), "sum of the trainer's logprobs x over those ids"),
    Column("topk_sum_sampler", pa.float32(), "sum of the sampler's logprobs y over those ids"),
    Column("topk_sum_trainer_sq", pa.float32(), "sum of x^2 over those ids"),
    Column("topk_sum_product", pa.float32(), "sum of x * y over those ids"),
    Column("topk_sum_sampler_sq", pa.float32(), "sum of y^2 over those ids"),
    Column("topk_cut", pa.int32(), "listed ids the sampler gives -inf and the trainer a finite logprob (a kept set)"),
)
"""Per-token summaries of the sampler's top-k lists, written beside them by every writer of a run (docs/format.md):
``report``, ``compare-masks`` and ``doctor`` read these instead of decoding the lists. Each is the float32 of
the value the analysis computes from the lists (``analysis.summaries``)."""

COLUMNS: dict[str, Column] = {c.name: c for c in REQUIRED + OPTIONAL + TOPK_SUMMARY}
REQUIRED_NAMES: tuple[str, ...] = tuple(c.name for c in REQUIRED)
TOPK_COLUMNS = ("sampler_topk_ids", "sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
SUMMARY_NAMES: tuple[str, ...] = tuple(c.name for c in TOPK_SUMMARY)
BOUND_SUMMARIES = ("topk_tv_lower", "topk_kl_lower", "topk_sampler_rest", "topk_trainer_rest")
OVERLAP = "topk_id_overlap"
"""the summary of the sampler's ids against the trainer's own (written where ``trainer_topk_ids`` is)."""
"""what ``report`` reads in place of the three lists (and ``topk_id_overlap`` in place of ``trainer_topk_ids``)."""
ROW_SUMS = (
    "topk_pairs",
    "topk_sum_trainer",
    "topk_sum_sampler",
    "topk_sum_trainer_sq",
    "topk_sum_product",
    "topk_sum_sampler_sq",
    "topk_cut",
)
"""what ``doctor``'s temperature and truncation fits keep per row, in place of the two logprob lists."""
TURN_COLUMNS = ("turn", "turn_position")
"""the multi-turn columns. Their absence is a value: a file without them holds one turn per sequence
(``turn`` 0, ``turn_position`` equal to ``position``), so a writer leaves them out of a shard of single-turn
sequences and a reader fills them in for it (``reader.streaming``)."""


WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "write_page_checksum": True}
"""How every Parquet file of a run is written: zstd, and a CRC on every page, dictionary pages included.

The readers open files with ``page_checksum_verification`` on, so a byte that
changes inside a page after the writer closed the file is an error naming the
row group, not a silently different number (``docs/errors.md``). Token shards
refine the compression per column (:func:`token_write_options`)."""

TOKEN_CODEC = "lz4"
"""the codec of a token shard's columns (LZ4_RAW in the file).

A logprob's low bytes are noise: zstd saved a few percent of them and spent
most of a read Huffman-decoding the rest, while LZ4 copies them at memory
speed; ids are dictionary indices, bit-packed, which neither codec shrinks
much. Float columns are written without a dictionary (they share no values
to speak of); ids, positions and per-sequence values with one large enough
for a vocabulary (:data:`DICTIONARY_BYTES`), so a token id decodes from its
index into the dictionary instead of as eight plain bytes. A report reads
such a shard two to five times faster than one in zstd, for a file of about
the same size (``benchmarks/RESULTS.md``)."""
DICTIONARY_BYTES = 8 << 20
"""the dictionary page a column may fill before the writer gives up on it (1 MiB by default: a vocabulary of
150,000 ids did not fit, and the column fell back to plain values midway through each row group)."""


@json_edge
def token_write_options(schema: pa.Schema) -> dict[str, Any]:
    """:data:`WRITE_OPTIONS` for a token shard of this schema: :data:`TOKEN_CODEC`, float columns (lists of
    floats too) without a dictionary, every other column with one of up to :data:`DICTIONARY_BYTES`."""
    return {
        **WRITE_OPTIONS,
        "compression": TOKEN_CODEC,
        "use_dictionary": [_leaf(f) for f in schema if not _float_valued(f.type)],
        "dictionary_pagesize_limit": DICTIONARY_BYTES,
    }


def _leaf(f: pa.Field) -> str:
    """The column's path in the file: a list's values are ``NAME.list.element`` (the key of per-column options)."""
    t = f.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"{f.name}.list.element"
    return f.name


def _float_valued(t: pa.DataType) -> bool:
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    return pa.types.is_floating(t)


def narrowed(table: pa.Table) -> pa.Table:
    """``table`` with each float64 column (or list of float64) stored as float32 where every value is a float32
    widened exactly: the width the engines computed it in (vLLM's and transformers' logprobs are float32).

    Lossless by construction (a column with one value that float32 cannot hold stays float64), so every number
    read from the column is the same; the column is half the bytes to decode. Readers widen floats back to
    float64 before any arithmetic.
    """
    for i, field in enumerate(table.schema):
        t = field.type
        is_list = pa.types.is_list(t)
        if not (pa.types.is_float64(t) or (is_list and pa.types.is_float64(t.value_type))):
            continue
        column = table.column(i).combine_chunks()
        values = column.values if is_list else column  # pyright: ignore[reportAttributeAccessIssue]
        if values.null_count:
            continue
        v = values.to_numpy(zero_copy_only=False)
        with np.errstate(over="ignore"):
            v32 = v.astype(np.float32)
        if not np.array_equal(v32.astype(np.float64), v, equal_nan=True):
            continue
        target = pa.list_(pa.float32()) if is_list else pa.float32()
        table = table.set_column(i, pa.field(field.name, target, field.nullable, field.metadata), column.cast(target))
    return table


# -- the limits every reader holds values to, and every writer checks before it writes ---------

MAX_POSITION = (1 << 24) - 1
"""16.7M tokens in one completion: beyond every context length; a larger position is a wrong column."""
MAX_ABS_STEP = 1 << 52
"""``|step|`` up to this (inclusive): ``timeline`` keys tokens by ``step * 1024 + group`` in int64, exact
as a float64; a larger value is not a training step counter."""
NOT_RECORDED_ID = -1
"""the ``token_id`` of a token whose id was not recorded (the Recorder without ``token_ids``): the one negative
id a reader accepts; any other negative id is no token at all."""
TOKEN_ID_RULE = "token ids are >= 0; -1 marks a token whose id was not recorded"
POSITIVE_LOGPROB_TOLERANCE = 1e-4
"""log-softmax in float arithmetic can land a hair above 0 for a near-certain
token; anything beyond this is not a logprob (logits? probabilities?)."""


def positive_logprobs(*sides: np.ndarray) -> np.ndarray:
    """The rows whose logprobs (one array per side) are all finite and one is above
    :data:`POSITIVE_LOGPROB_TOLERANCE`: the one test every reader and writer refuses a logprob by.

    A row with a non-finite side is not one of them: readers drop such rows and count them instead.
    """
    finite = np.isfinite(sides[0])
    high = sides[0] > POSITIVE_LOGPROB_TOLERANCE
    for side in sides[1:]:
        finite &= np.isfinite(side)
        high |= side > POSITIVE_LOGPROB_TOLERANCE
    return finite & high


@dataclass(frozen=True)
class Refusal:
    """The first value of a batch of token rows that the readers would refuse."""

    row: int
    """the token row (0 for a value given once for every row)."""
    column: str
    reason: str


def first_refused(columns: Mapping[str, Any]) -> Refusal | None:
    """The first value in ``columns`` (numpy arrays over token rows, or one scalar for every row) that
    ``report`` or ``timeline`` would refuse, so a writer can refuse it at the call or the line instead.

    The rules are the readers' own: a finite logprob above the rounding
    tolerance, a non-finite advantage, a position outside
    ``0..MAX_POSITION`` (a turn or a position within one likewise), a step beyond ``+-MAX_ABS_STEP``, a token
    id below :data:`NOT_RECORDED_ID`. Non-finite logprobs are not refused (readers count them and leave them out).
    """
    for name in ("sampler_logprob", "trainer_logprob"):
        if name in columns:
            v = np.asarray(columns[name], dtype=np.float64)
            bad = positive_logprobs(v)
            if bad.any():
                i = _first(bad)
                return Refusal(
                    i,
                    name,
                    f"{name} {float(v.flat[i]):.4g} is positive beyond rounding "
                    f"(> {POSITIVE_LOGPROB_TOLERANCE:g}): logprobs are natural logs <= 0",
                )
    if "advantage" in columns:
        v = np.asarray(columns["advantage"], dtype=np.float64)
        bad = ~np.isfinite(v)
        if bad.any():
            i = _first(bad)
            return Refusal(
                i,
                "advantage",
                f"advantage is {float(v.flat[i])} (missing?): report and timeline need a finite "
                "advantage on every token",
            )
    limits = (("position", 0, MAX_POSITION), ("step", -MAX_ABS_STEP, MAX_ABS_STEP))
    limits += tuple((name, 0, MAX_POSITION) for name in TURN_COLUMNS)
    for name, lo, hi in limits:
        if name in columns:
            v = np.asarray(columns[name])
            bad = (v < lo) | (v > hi)
            if np.any(bad):
                i = _first(bad)
                return Refusal(i, name, f"{name} {int(v.flat[i])} is outside {lo}..{hi}")
    if "token_id" in columns:
        v = np.asarray(columns["token_id"])
        bad = v < NOT_RECORDED_ID
        if np.any(bad):
            i = _first(bad)
            return Refusal(i, "token_id", f"token_id {int(v.flat[i])} is negative ({TOKEN_ID_RULE})")
    return None


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(np.atleast_1d(mask))[0])


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


@json_edge
def decode_metadata(schema_metadata: Mapping[bytes, bytes] | None) -> dict[str, Any] | None:
    """The ``mismatchscope`` metadata of a file, or None when it has none."""
    if not schema_metadata or METADATA_KEY not in schema_metadata:
        return None
    return json.loads(schema_metadata[METADATA_KEY])


def write_table(
    path: str | os.PathLike,
    columns: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    derive: Callable[[pa.Table], pa.Table] | None = None,
) -> Path:
    """Write one shard atomically (temp file, then rename).

    A reader, or a resumed probe, never sees a half-written shard: a shard
    exists completely or not at all. Float columns whose values are all float32
    are stored as float32 (:func:`narrowed`), in :data:`TOKEN_CODEC`
    (:func:`token_write_options`). ``derive``, when given, gets the table as
    it will be written and returns it with columns computed from it (a run's
    writers add the top-k summaries this way: ``analysis.summaries.write_token_shard``).
    """
    path = Path(path)
    schema = arrow_schema(list(columns), metadata)
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns have different lengths: {lengths}")
    table = pa.Table.from_pydict({f.name: columns[f.name] for f in schema}, schema=schema)
    if derive is not None:
        table = derive(table)
    table = narrowed(table)
    from .rundir import atomic_path

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **token_write_options(table.schema))
    return path
