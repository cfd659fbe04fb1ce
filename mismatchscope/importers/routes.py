"""``import --routes``: a stack's recorded MoE routes into the run's ``routes/`` (sampler side).

Routes come as a JSONL file (or a folder of them) beside the token dump, one
line per sequence:

    {"sequence_id": 7, "prompt_token_ids": [...], "completion_token_ids": [...],
     <the source's route field(s)>, ["loss_mask": [...]]}

``sequence_id`` is the imported run's (the generic formats keep the user's own
ids; the framework formats number sequences in reading order, and the
manifest lists each file's first id). The prompt and completion ids size the
route rows and are kept in ``OUT/sequences.parquet``, so the run holds every
token a trainer has to score again (``rescore``). The completion must equal
the sequence's imported tokens, or, where the source's loss mask dropped some,
``loss_mask`` over the completion says which were kept.

Two passes: the first decodes and checks every record before anything is
written (a bad record, an unknown layout, a model that does not fit: one
error, nothing written); the second, after the tokens are imported, checks
each record against its sequence's tokens and writes the shards. A failure
there removes what the import wrote.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..documents import json_edge
from ..errors import ImportFormatError, InputError, UsageError
from ..routing import layout
from ..schema import WRITE_OPTIONS
from ._base import short
from ._records import parse_record
from .registry import ROUTE_ENCODINGS
from .route_checks import CheckedRoutes, check_routes
from .route_sources import DumpRoutes
from .routes_model import RoutesModel

SEQUENCES = "sequences.parquet"
"""per routed sequence: its prompt and completion token ids, which completion tokens are in ``tokens/`` (the
k-th kept one has ``position`` k), and where its routes start."""
FLUSH_IDS = 1 << 24
"""expert ids buffered before a route shard is written (~16M: tens of MB)."""
MOSTLY_MISSING = 0.5

_SEQUENCES_SCHEMA = pa.schema(
    [
        pa.field("sequence_id", pa.int64(), nullable=False),
        pa.field("prompt_token_ids", pa.list_(pa.int64())),
        pa.field("completion_token_ids", pa.list_(pa.int64())),
        pa.field("completion_kept", pa.list_(pa.bool_())),
        pa.field("routes_start", pa.int32()),
    ]
)


@dataclass(frozen=True)
class RoutesOptions:
    """``--routes SRC --routes-format NAME --routes-config CHECKPOINT``."""

    src: Path
    encoding: str
    config: Path


@dataclass
class RouteCounts:
    """What the routes of a run hold, counted the same way by both passes."""

    sequences: int = 0
    rows: int = 0
    missing: int = 0
    moe_entries: int = 0
    mtp_dropped: int = 0
    placeholders: int = 0
    weights: bool = False
    layer_axes: set[str] = field(default_factory=set)
    sequence_ids: set[int] = field(default_factory=set)

    def add(self, sid: int, checked: CheckedRoutes, moe_layers: int) -> None:
        self.sequence_ids.add(sid)
        self.sequences += 1
        self.rows += len(checked.ids)
        self.missing += checked.missing
        self.moe_entries += len(checked.ids) * moe_layers
        self.mtp_dropped = max(self.mtp_dropped, checked.mtp_dropped)
        self.placeholders += checked.placeholder_dropped
        self.weights = self.weights or checked.weights is not None
        self.layer_axes.add(checked.layer_axis)


@dataclass
class RoutesPlan:
    """The checked routes source: what the writing pass reads again."""

    options: RoutesOptions
    model: RoutesModel
    files: list[tuple[Path, str]]
    counts: RouteCounts = field(default_factory=RouteCounts)
    trust_pickle: bool = False
    """slime dumps: allow full unpickling, as for the token import."""


def prepare(options: RoutesOptions, trust_pickle: bool = False) -> RoutesPlan:
    """Decode and check every routes record; nothing is written."""
    if options.encoding not in ROUTE_ENCODINGS:
        raise UsageError(
            f"unknown --routes-format {options.encoding!r}", hint=f"choose one of: {', '.join(ROUTE_ENCODINGS)}"
        )
    model = RoutesModel.load(options.config)
    plan = RoutesPlan(options, model, _discover(options), trust_pickle=trust_pickle)
    for where, rec, checked in _checked(plan):
        assert checked is not None  # the first pass numbers every row
        if rec["sequence_id"] in plan.counts.sequence_ids:
            raise ImportFormatError(f"sequence_id {rec['sequence_id']} has routes twice", **where)
        plan.counts.add(rec["sequence_id"], checked, len(model.moe_layers))
    if not plan.counts.sequences:
        raise InputError(f"--routes {options.src}: no routes record", hint=_SRC_HINT)
    return plan


_SRC_HINT = "pass a .jsonl file or a folder of them, one line per sequence (docs/import.md, Routes)"


def _dump_reader(encoding: str, src: Path) -> DumpRoutes | None:
    """What reads routes in place from a stack's own dump (slime, SkyRL), where the encoding declares one and
    ``src`` is such a dump; None for a routes JSONL."""
    reader = ROUTE_ENCODINGS[encoding].dump_reader()
    return reader if reader is not None and reader.is_dump(src) else None


def _discover(options: RoutesOptions) -> list[tuple[Path, str]]:
    src = Path(options.src)
    reader = _dump_reader(options.encoding, src)
    if reader is not None:
        return reader.files(src)
    if src.is_file():
        return [(src, src.name)]
    if not src.is_dir():
        raise UsageError(f"--routes {src}: no such file or directory", hint=_SRC_HINT)
    return [(p, p.relative_to(src).as_posix()) for p in sorted(src.rglob("*.jsonl"))]


Checked = tuple[dict[str, Any], dict[str, Any], "CheckedRoutes | None"]
"""``(where, record, routes)``: where is ``{"file", "line"}`` or ``{"file", "record"}``, for error messages;
routes None for a stack's batch row the token import skipped."""


def _checked(plan: RoutesPlan, source_rows: dict[tuple[str, int], int] | None = None) -> Iterator[Checked]:
    """Every record decoded and checked. A record read in place from a stack's batch (slime, SkyRL) takes the
    ``sequence_id`` its batch row was imported as (``source_rows``), None where the token import skipped that
    row; before the tokens are imported (``source_rows`` None) the records are numbered in reading order."""
    decode = ROUTE_ENCODINGS[plan.options.encoding].decode()
    reader = _dump_reader(plan.options.encoding, Path(plan.options.src))
    next_id = 0
    for path, rel in plan.files:
        try:
            recs = reader.records(path, rel, plan.trust_pickle) if reader is not None else _jsonl_records(path, rel)
            for where, rec in recs:
                if reader is not None and source_rows is None:
                    rec["sequence_id"], next_id = next_id, next_id + 1
                elif reader is not None and source_rows is not None:
                    rec["sequence_id"] = source_rows.get((str(Path(path).resolve()), where["record"]))
                    if rec["sequence_id"] is None:  # a row the token import skipped (checked by the first pass)
                        yield where, rec, None
                        continue
                yield where, rec, _check_one(decode, plan.model, where, rec)
        except OSError as e:
            raise InputError(f"{rel}: cannot read it ({short(e)})") from None


@json_edge
def _jsonl_records(path: Path, rel: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    with open(path, "rb") as fh:
        for line, raw in enumerate(fh, 1):
            if raw.isspace():
                continue
            try:
                rec = parse_record(raw)
            except ImportFormatError as e:
                raise ImportFormatError(e.reason, file=rel, line=line, hint=e.hint) from None
            yield {"file": rel, "line": line}, rec


def _check_one(decode: Any, model: RoutesModel, where: dict[str, Any], rec: dict[str, Any]) -> CheckedRoutes:
    try:
        _require(rec)
        prompt_len, completion_len = len(rec["prompt_token_ids"]), len(rec["completion_token_ids"])
        return check_routes(decode(rec, model, prompt_len), model, prompt_len, completion_len)
    except ImportFormatError as e:
        raise ImportFormatError(e.reason, hint=e.hint, **where) from None
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as e:
        raise ImportFormatError(f"unexpected value ({short(e)})", **where) from None


def _require(rec: Any) -> None:
    if not isinstance(rec, dict):
        raise ImportFormatError(f"a routes record must be a JSON object, got {type(rec).__name__}")
    sid = rec.get("sequence_id")
    if "sequence_id" not in rec:
        raise ImportFormatError(
            "the record has no sequence_id: routes are matched to the imported sequences by it",
            hint="write each routes line with the sequence_id of its sequence in the import",
        )
    if isinstance(sid, bool) or not isinstance(sid, int):
        raise ImportFormatError(
            f"sequence_id is {sid!r}, not an integer: routes are matched to the imported sequences by it"
        )
    for key in ("prompt_token_ids", "completion_token_ids"):
        v = rec.get(key)
        if not isinstance(v, list) or not v or not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
            raise ImportFormatError(f"{key} must be a non-empty list of token ids (it sizes the route rows)")


# -- the writing pass -----------------------------------------------------------------------------------------------


@json_edge
def write(
    out: Path,
    plan: RoutesPlan,
    token_shards: list[Path],
    skip_bad: bool = False,
    source_rows: dict[tuple[str, int], int] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Check each record against its imported tokens and write ``routes/`` and ``sequences.parquet``.

    With ``skip_bad``, routes of a sequence the token import skipped as bad are
    skipped and counted too; so are, always, the routes of a stack's batch row
    the token import did not import (``source_rows``: ``(file, record)`` ->
    ``sequence_id``; a row that trains no token). Returns the manifest entries
    (``routing`` and ``routes``) and the warnings to show.
    """
    model = plan.model
    kept = _imported_tokens(token_shards)
    schema = layout.routes_schema(model.num_experts)
    id_type = layout.expert_id_type(model.num_experts)
    buffer: list[pa.RecordBatch] = []
    buffered = 0
    shards: list[Path] = []
    seqs: dict[str, list] = {name: [] for name in _SEQUENCES_SCHEMA.names}
    counts, orphans = RouteCounts(), 0
    for where, rec, checked in _checked(plan, source_rows or {}):
        if checked is None or (skip_bad and rec["sequence_id"] not in kept):
            orphans += 1
            continue
        counts.add(rec["sequence_id"], checked, len(model.moe_layers))
        try:
            token_pos = _token_positions(rec, kept)
        except ImportFormatError as e:
            raise ImportFormatError(e.reason, hint=e.hint, **where) from None
        buffer.append(_batch(schema, id_type, rec, checked, token_pos))
        buffered += checked.ids.size
        for name, value in (
            ("sequence_id", rec["sequence_id"]),
            ("prompt_token_ids", rec["prompt_token_ids"]),
            ("completion_token_ids", rec["completion_token_ids"]),
            ("completion_kept", (token_pos >= 0).tolist()),
            ("routes_start", checked.start),
        ):
            seqs[name].append(value)
        if buffered >= FLUSH_IDS:
            shards.append(_write_shard(out, schema, buffer, len(shards)))
            buffer, buffered = [], 0
    if buffer:
        shards.append(_write_shard(out, schema, buffer, len(shards)))
    from ..rundir import atomic_path

    with atomic_path(out / SEQUENCES) as tmp:
        pq.write_table(pa.Table.from_pydict(seqs, schema=_SEQUENCES_SCHEMA), tmp, **WRITE_OPTIONS)
    unrouted = len(set(kept) - counts.sequence_ids)
    return _manifest(plan, counts, shards, out, unrouted, orphans), _warnings(counts, unrouted, orphans)


def _imported_tokens(token_shards: list[Path]) -> dict[int, np.ndarray]:
    """Each imported sequence's token ids, in position order."""
    table = pa.concat_tables(
        [pq.ParquetFile(p).read(columns=["sequence_id", "position", "token_id"]) for p in token_shards]
    )  # not read_table: it imports pyarrow.dataset (~2 s)
    sid = table["sequence_id"].to_numpy()
    order = np.lexsort((table["position"].to_numpy(), sid))
    sid, tok = sid[order], table["token_id"].to_numpy()[order]
    cuts = np.flatnonzero(np.diff(sid)) + 1
    return {int(s[0]): t for s, t in zip(np.split(sid, cuts), np.split(tok, cuts), strict=True) if len(s)}


def _token_positions(rec: dict[str, Any], kept: dict[int, np.ndarray]) -> np.ndarray:
    """Per completion token, its ``position`` in ``tokens/`` (-1: the source's loss mask dropped it)."""
    sid = rec["sequence_id"]
    imported = kept.get(sid)
    if imported is None:
        raise ImportFormatError(
            f"sequence_id {sid} is not in the imported run",
            hint="use the sequence ids of the import (the manifest lists each file's first id)",
        )
    completion = np.asarray(rec["completion_token_ids"], dtype=np.int64)
    mask = rec.get("loss_mask")
    keep = np.ones(len(completion), dtype=bool) if mask is None else np.asarray(mask) != 0
    if len(keep) != len(completion) or not np.array_equal(completion[keep], imported):
        what = "completion_token_ids" if mask is None else "completion_token_ids where loss_mask is set"
        raise ImportFormatError(
            f"sequence_id {sid}: {what} ({int(keep.sum())} tokens) differ from its {len(imported)} imported tokens",
            hint="match routes to the right sequence_id; give loss_mask where the source's "
            "mask dropped completion tokens",
        )
    positions = np.full(len(completion), -1, dtype=np.int64)
    positions[keep] = np.arange(int(keep.sum()))
    return positions


def _batch(
    schema: pa.Schema, id_type: pa.DataType, rec: dict[str, Any], checked: CheckedRoutes, token_pos: np.ndarray
) -> pa.RecordBatch:
    rows = len(checked.ids)
    input_pos = checked.start + np.arange(rows, dtype=np.int64)
    completion_index = input_pos - (len(rec["prompt_token_ids"]) - 1)
    tp = np.where(completion_index >= 0, token_pos[np.clip(completion_index, 0, None)], -1)
    columns = {
        "sequence_id": _flat(np.full(rows, rec["sequence_id"]), pa.int64()),
        "input_position": _flat(input_pos, pa.int32()),
        "token_position": _flat(tp, pa.int32(), valid=tp >= 0),
        layout.SAMPLER_EXPERTS: _nested(checked.ids, checked.present, id_type),
        layout.SAMPLER_WEIGHTS: (
            pa.nulls(rows, schema.field(layout.SAMPLER_WEIGHTS).type)
            if checked.weights is None
            else _nested(checked.weights, checked.present, pa.float32())
        ),
    }
    return pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(rows, f.type)) for f in schema], schema=schema)


def _nested(values: np.ndarray, present: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """``[rows, layers, k]`` -> ``list<list<value>>``, a layer's list null where ``present`` is False."""
    rows, layers, k = values.shape
    flat_present = present.reshape(-1)
    inner_offsets = np.zeros(rows * layers + 1, dtype=np.int32)
    np.cumsum(np.where(flat_present, k, 0), out=inner_offsets[1:])
    inner = pa.ListArray.from_arrays(
        _flat(inner_offsets, pa.int32()), _flat(values[present], value_type), mask=pa.array(~flat_present)
    )
    return pa.ListArray.from_arrays(_flat(np.arange(rows + 1) * layers, pa.int32()), inner)


def _flat(values: np.ndarray, value_type: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """numpy -> Arrow without ``pa.array``'s one-off pandas import (~0.5 s)."""
    data = np.ascontiguousarray(values.reshape(-1), dtype=value_type.to_pandas_dtype())
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(value_type, len(data), [bitmap, pa.py_buffer(data)])


def _write_shard(out: Path, schema: pa.Schema, batches: list[pa.RecordBatch], index: int) -> Path:
    from ..rundir import ShardIndex, atomic_path

    path = out / layout.ROUTES / f"part-{index:05d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {b"mismatchscope": json.dumps({"routes_version": layout.ROUTES_VERSION}).encode()}
    table = pa.Table.from_batches(batches, schema=schema.with_metadata(meta))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **WRITE_OPTIONS)
    ShardIndex(out, layout.ROUTES).commit(path, table.num_rows)
    return path


@json_edge
def _manifest(
    plan: RoutesPlan, c: RouteCounts, shards: list[Path], out: Path, unrouted: int, orphans: int
) -> dict[str, Any]:
    m = plan.model
    meta = layout.RoutingMeta(
        family=m.family,
        num_layers=m.num_layers,
        moe_layers=m.moe_layers,
        num_experts=m.num_experts,
        top_k=m.top_k,
        sampler=layout.SideRoutes(True, weights=c.weights),
        trainer=layout.SideRoutes(False, why="an imported run: the trainer's routes come from scoring it again"),
    )
    return {
        layout.MANIFEST_KEY: meta.to_dict(),
        "routes": {
            "format": plan.options.encoding,
            "root": os.fspath(plan.options.src),
            "files": [rel for _, rel in plan.files],
            "config": os.fspath(plan.options.config),
            "layer_axis": sorted(c.layer_axes),
            "sequences": c.sequences,
            "sequences_without_routes": unrouted,
            "routes_of_skipped_sequences": orphans,
            "rows": c.rows,
            "moe_entries": c.moe_entries,
            "missing_captures": c.missing,
            "mtp_layers_dropped": c.mtp_dropped,
            "placeholder_rows_dropped": c.placeholders,
            "shards": [p.relative_to(out).as_posix() for p in shards],
            "sequences_file": SEQUENCES,
        },
    }


def _warnings(c: RouteCounts, unrouted: int, orphans: int) -> list[str]:
    out = []
    if c.missing:
        share = c.missing / c.moe_entries
        line = (
            f"{c.missing:,} of {c.moe_entries:,} MoE layer routes ({share:.1%}) are all-zero rows: "
            "failed captures, stored as null (not expert 0)"
        )
        if share > MOSTLY_MISSING:
            line = (
                "MOST ROUTES ARE MISSING: " + line + "; the engine's capture failed (known with some parallel "
                "layouts): routing numbers from this run cover only the rest"
            )
        out.append(line)
    if c.mtp_dropped:
        out.append(f"left out {c.mtp_dropped} MTP/draft layer(s) after the model's decoder layers")
    if unrouted:
        out.append(f"{unrouted} imported sequence(s) have no routes")
    if orphans:
        out.append(
            f"skipped the routes of {orphans} sequence(s) the token import skipped "
            "(bad records, or rows that train no token)"
        )
    return out
