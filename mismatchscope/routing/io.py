"""Writing and reading a run's ``routes/`` shards (:mod:`.layout`) as numpy blocks.

Code that records or replays routes holds one side's routes of a sequence
as :class:`SeqRoutes`: arrays over the *MoE* layers only, one row per routed
input position. The shards hold the engines' layout (every decoder layer,
dense layers null); :func:`routes_table` and :func:`side_block` convert
between the two without a Python loop per element, so recording stays cheap.

Readers for other code: ``reader.read_routes`` (the shards as one Arrow table, read the way every
command reads shards), :func:`read_meta` (the manifest's :class:`~.layout.RoutingMeta`) and
:func:`locate_routes` (the one run an analysis input's routes belong to, its shards and entry checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchscope import rundir
from mismatchscope.errors import InputError
from mismatchscope.routing import layout
from mismatchscope.routing.layout import RoutingMeta
from mismatchscope.schema import WRITE_OPTIONS

SAMPLER_ROUTES_PREFIX = "routes-"
"""``samples/routes-NNNNN.parquet``: a sampling round's sampler routes, kept until its tokens are scored."""


@dataclass
class SeqRoutes:
    """One side's routes of one sequence, MoE layers only."""

    ids: np.ndarray
    """[rows, moe_layers, k] int64: rows are input positions 0 .. prompt + completion - 2."""
    weights: np.ndarray | None = None
    """[rows, moe_layers, k] float32."""
    margin: np.ndarray | None = None
    """[rows, moe_layers] float32."""


@dataclass(frozen=True)
class Shape:
    """What a model's routes look like: the ``RoutingMeta`` fields a reader checks against."""

    num_layers: int
    moe_layers: tuple[int, ...]
    num_experts: int
    top_k: int

    @classmethod
    def of(cls, meta: RoutingMeta) -> Shape:
        return cls(meta.num_layers, tuple(meta.moe_layers), meta.num_experts, meta.top_k)


# ------------------------------------------------------------------ writing


def routes_table(
    shape: Shape,
    sequence_ids: list[int],
    prompt_lengths: list[int],
    rows: list[int],
    sampler: list[SeqRoutes | None] | None,
    trainer: list[SeqRoutes | None] | None,
) -> pa.Table:
    """One shard's table: ``rows[i]`` input positions of sequence ``sequence_ids[i]``, both sides.

    A side given as None (or a None entry) is null in those rows.
    """
    n = len(sequence_ids)
    seq = np.repeat(np.asarray(sequence_ids, dtype=np.int64), rows)
    pos = np.concatenate([np.arange(r, dtype=np.int32) for r in rows]) if n else np.zeros(0, np.int32)
    first = np.repeat(np.asarray(prompt_lengths, dtype=np.int32) - 1, rows)
    token = pos - first
    schema = layout.routes_schema(shape.num_experts)
    cols = {
        "sequence_id": pa.array(seq),
        "input_position": pa.array(pos),
        "token_position": pa.array(token, mask=token < 0),
    }
    total = int(seq.size)
    for side, block in (("sampler", sampler), ("trainer", trainer)):
        block = block if block is not None else [None] * n
        for what, suffix in (("ids", "experts"), ("weights", "weights")):
            name = f"{side}_{suffix}"
            parts = [None if s is None else getattr(s, what) for s in block]
            cols[name] = _nested(parts, rows, shape, schema.field(name).type, total)
        margins = [None if s is None else s.margin for s in block] if side == "trainer" else None
        if margins is not None:
            cols[layout.TRAINER_MARGIN] = _margins(margins, rows, shape, total)
    return pa.table([cols[f.name] for f in schema], schema=schema)


def _nested(parts: list[np.ndarray | None], rows: list[int], shape: Shape, typ: pa.ListType, total: int) -> pa.Array:
    """``list<list<x>>`` rows over every decoder layer from [rows, M, k] blocks (None: null rows)."""
    if all(p is None for p in parts):
        return pa.nulls(total, typ)
    L, k = shape.num_layers, shape.top_k
    present = np.repeat(np.array([p is not None for p in parts]), rows)
    values = np.concatenate([p.reshape(-1) for p in parts if p is not None])
    moe = np.zeros(L, dtype=bool)
    moe[list(shape.moe_layers)] = True
    n_present = int(present.sum())
    inner_len = np.tile(np.where(moe, k, 0), n_present)
    inner_off = np.concatenate([[0], np.cumsum(inner_len)]).astype(np.int32)
    inner_mask = np.tile(~moe, n_present)
    value_type = typ.value_type.value_type
    inner = pa.ListArray.from_arrays(
        pa.array(inner_off), pa.array(values.astype(value_type.to_pandas_dtype())), mask=pa.array(inner_mask)
    )
    outer_off = np.concatenate([[0], np.cumsum(np.where(present, L, 0))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(outer_off), inner, mask=pa.array(~present), type=typ)


def _margins(parts: list[np.ndarray | None], rows: list[int], shape: Shape, total: int) -> pa.Array:
    typ = pa.list_(pa.float32())
    if all(p is None for p in parts):
        return pa.nulls(total, typ)
    L = shape.num_layers
    present = np.repeat(np.array([p is not None for p in parts]), rows)
    n_present = int(present.sum())
    full = np.zeros((n_present, L), dtype=np.float32)
    full[:, list(shape.moe_layers)] = np.concatenate([p for p in parts if p is not None]).reshape(n_present, -1)
    moe = np.zeros(L, dtype=bool)
    moe[list(shape.moe_layers)] = True
    values = pa.array(full.reshape(-1), mask=np.tile(~moe, n_present))
    offsets = np.concatenate([[0], np.cumsum(np.where(present, L, 0))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~present), type=typ)


def write_shard(path: Path, table: pa.Table) -> Path:
    """Write a route shard atomically, its layout version in the Parquet metadata."""
    meta = {b"mismatchscope.routes_version": str(layout.ROUTES_VERSION).encode()}
    with rundir.atomic_path(path) as tmp:
        pq.write_table(table.replace_schema_metadata(meta), tmp, **WRITE_OPTIONS)
    return path


# ------------------------------------------------------------------ reading


def routes_dir(run_dir: Path) -> Path:
    return Path(run_dir) / layout.ROUTES


def read_meta(run_dir: Path) -> RoutingMeta | None:
    """The run manifest's routing entry, or None (a dense run, or one recorded without routes)."""
    manifest = rundir.read_manifest(Path(run_dir))
    raw = (manifest or {}).get(layout.MANIFEST_KEY)
    return RoutingMeta.from_dict(raw) if raw else None


def route_shards(run_dir: Path) -> list[Path]:
    """The run's route shards, held against its shard index first (:func:`mismatchscope.rundir.check_folder`):
    a lost, truncated or foreign shard of a complete run is refused, never read as fewer routes."""
    paths = sorted(p for p in routes_dir(run_dir).glob("*.parquet") if not p.name.startswith("."))
    rundir.check_folder(run_dir, layout.ROUTES, paths)
    return paths


@dataclass(frozen=True)
class RoutesRun:
    """A run directory's route shards and what its manifest says about them."""

    root: Path
    files: list[Path]
    meta: RoutingMeta

    @property
    def both_sides(self) -> bool:
        """Both sides recorded their routes: their top-k sets can be compared token by token."""
        return self.meta.sampler.recorded and self.meta.trainer.recorded


def locate_routes(files: list[Path]) -> tuple[RoutesRun | None, str | None]:
    """The routes of the run these token shards belong to, and a warning when they cannot be used.

    Routing metrics need one run: a folder holding several runs with routes
    is analysed without them (and says so). A run with ``routes/`` but no
    ``"routing"`` entry in its manifest, or an unreadable entry, is an error.
    """
    roots = [r for r in rundir.run_roots(files) if routes_dir(r).is_dir()]
    if not roots:
        return None, None
    if len(roots) > 1:
        return None, (
            f"{len(roots)} runs with routes/ in the input ({roots[0]}, {roots[1]}, ...): routing metrics "
            "are per run, none are shown (give one run directory)"
        )
    root = roots[0]
    shards = route_shards(root)
    if not shards:
        return None, None
    meta = _manifest_meta(root, len(shards))
    _check_meta(root, meta)
    return RoutesRun(root, shards, meta), None


def _manifest_meta(root: Path, n_shards: int) -> RoutingMeta:
    """The manifest's routing entry of a run that holds route shards: it must be there and readable."""
    raw = (rundir.read_manifest(root) or {}).get(layout.MANIFEST_KEY)
    if not isinstance(raw, dict):
        raise InputError(
            f"{root}: routes/ holds {n_shards} shard(s) but the manifest has no {layout.MANIFEST_KEY!r} entry",
            hint="the manifest must say which layers route and how many experts they choose from",
        )
    try:
        return RoutingMeta.from_dict(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(
            f"{root}: the manifest's {layout.MANIFEST_KEY!r} entry cannot be read ({type(e).__name__}: {e})",
            hint="it needs family, num_layers, moe_layers, num_experts and top_k",
        ) from None


def _check_meta(root: Path, meta: RoutingMeta) -> None:
    bad = [x for x in meta.moe_layers if not 0 <= x < meta.num_layers]
    if meta.num_layers < 1 or not meta.moe_layers or bad or len(set(meta.moe_layers)) != len(meta.moe_layers):
        raise InputError(
            f"{root}: the manifest's routing entry names MoE layers {list(meta.moe_layers)} for a "
            f"model of {meta.num_layers} decoder layers",
            hint="MoE layers are distinct decoder-layer indices",
        )
    if not 1 <= meta.top_k <= meta.num_experts:
        raise InputError(
            f"{root}: the manifest's routing entry says top_k {meta.top_k} of {meta.num_experts} experts",
            hint="top_k is between 1 and the number of routed experts",
        )


KEY_COLUMNS = ["sequence_id", "input_position"]
"""what names a route row: each routed input position of a sequence is written once."""


def check_unique_rows(where: Path, seqs: list[np.ndarray], inputs: list[np.ndarray]) -> None:
    """Each ``(sequence_id, input_position)`` once: writers write rows in order, so order is checked first (O(n))."""
    from ..errors import FileFormatError

    if not seqs:
        return
    s, p = np.concatenate(seqs).astype(np.int64, copy=False), np.concatenate(inputs).astype(np.int64, copy=False)
    if s.size < 2:
        return
    ds, dp = np.diff(s), np.diff(p)
    if ((ds > 0) | ((ds == 0) & (dp > 0))).all():
        return
    order = np.lexsort((p, s))
    s, p = s[order], p[order]
    same = (s[1:] == s[:-1]) & (p[1:] == p[:-1])
    if same.any():
        i = int(np.flatnonzero(same)[0])
        raise FileFormatError(
            f"{where}: sequence {s[i]} input position {p[i]} has more than one route row",
            hint="a routed position is written once; remove the duplicate shard",
        )


def side_block(table: pa.Table, side: str, shape: Shape, *, weights: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(present [N] bool, [N_present, M, k] ids or weights) of one side, checked against ``shape``.

    A row whose layer count, per-layer k or ids do not fit the model is refused
    with one line naming what differs.
    """
    name = f"{side}_{'weights' if weights else 'experts'}"
    col = table.column(name).combine_chunks() if table.num_rows else pa.array([], table.schema.field(name).type)
    present = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    L, M, k = shape.num_layers, len(shape.moe_layers), shape.top_k
    if not present.any():
        return present, np.zeros((0, M, k))
    lengths = col.value_lengths().to_numpy(zero_copy_only=False)[present]
    if (lengths != L).any():
        bad = int(lengths[lengths != L][0])
        raise InputError(
            f"{name} rows hold {bad} layers but the checkpoint has {L} decoder layers",
            hint="the routes were recorded for another model",
        )
    inner = col.flatten()
    index = (np.arange(int(present.sum()))[:, None] * L + np.asarray(shape.moe_layers)[None, :]).reshape(-1)
    picked = inner.take(pa.array(index))
    widths = picked.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    if (widths != k).any():
        bad = int(widths[widths != k][0])
        raise InputError(
            f"{name} has {bad} experts per MoE layer where the checkpoint routes top-{k}",
            hint="the routes were recorded for another model or top-k",
        )
    values = picked.flatten().to_numpy(zero_copy_only=False).reshape(-1, M, k)
    if not weights and values.size and int(values.max()) >= shape.num_experts:
        raise InputError(
            f"{name} holds expert id {int(values.max())} but the checkpoint has {shape.num_experts} experts",
            hint="the routes were recorded for another model",
        )
    return present, values


def write_sampler_round(path: Path, sequence_ids: list[int], routes: list[SeqRoutes]) -> None:
    """A sampling round's sampler routes, flat, so a resumed run scores them without sampling again."""
    ids = [r.ids.astype(np.int32).reshape(-1).tolist() for r in routes]
    shapes = [list(r.ids.shape) for r in routes]
    w = [None if r.weights is None else r.weights.astype(np.float32).reshape(-1).tolist() for r in routes]
    table = pa.table(
        {
            "sequence_id": pa.array(sequence_ids, pa.int64()),
            "shape": pa.array(shapes, pa.list_(pa.int32())),
            "ids": pa.array(ids, pa.list_(pa.int32())),
            "weights": pa.array(w, pa.list_(pa.float32())),
        }
    )
    with rundir.atomic_path(path) as tmp:
        pq.write_table(table, tmp, **WRITE_OPTIONS)


def read_sampler_round(path: Path) -> dict[int, SeqRoutes]:
    if not path.is_file():
        return {}
    out = {}
    for row in pq.read_table(path).to_pylist():
        shp = tuple(row["shape"])
        w = None if row["weights"] is None else np.asarray(row["weights"], np.float32).reshape(shp)
        out[row["sequence_id"]] = SeqRoutes(np.asarray(row["ids"], np.int64).reshape(shp), w)
    return out


def sequences_of(table: pa.Table, side: str, shape: Shape, *, weights: bool = False) -> dict[int, SeqRoutes]:
    """One side's routes per sequence id (rows in input-position order), checked against ``shape``.

    Sequences with no row of that side recorded are left out.
    """
    if not table.num_rows:
        return {}
    order = np.lexsort((table.column("input_position").to_numpy(), table.column("sequence_id").to_numpy()))
    table = table.take(pa.array(order))
    present, ids = side_block(table, side, shape)
    w = side_block(table, side, shape, weights=True)[1] if weights else None
    seq = table.column("sequence_id").to_numpy()[present]
    pos = table.column("input_position").to_numpy()[present]
    out: dict[int, SeqRoutes] = {}
    bounds = np.flatnonzero(np.diff(seq)) + 1
    for part in np.split(np.arange(seq.size), bounds):
        if not part.size:
            continue
        s = int(seq[part[0]])
        if not np.array_equal(pos[part], np.arange(part.size)):
            raise InputError(
                f"{side} routes of sequence {s} do not cover input positions 0..{part.size - 1} one row each",
                hint="the routes file is incomplete or holds duplicate rows",
            )
        out[s] = SeqRoutes(ids[part].astype(np.int64), None if w is None else w[part].astype(np.float32))
    return out
