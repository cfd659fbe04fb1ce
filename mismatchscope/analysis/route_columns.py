"""One batch of route rows decoded and checked: each side's expert ids at the MoE layers, and the margins.

A route shard (layout: :mod:`mismatchscope.routing.layout`) holds, per
routed input position, ``list<list<int>>`` expert ids indexed by every
decoder layer (dense layers null) and, for the trainer, its router margin per
layer. Each column is checked against the manifest's
:class:`~mismatchscope.routing.layout.RoutingMeta` (layers, top-k, expert
range) before a number is made of it: a malformed shard is one line naming
it, never a silently wrong flip rate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..arrow import to_numpy
from ..errors import FileFormatError
from ..routing.layout import SAMPLER_EXPERTS, TRAINER_EXPERTS, TRAINER_MARGIN, RoutingMeta
from .expert_sets import SideIds, sort_side

MARGIN_EDGES = (0.0, 1e-4, 1e-3, 1e-2, 1e-1)
"""lower edges of the trainer-margin buckets (the last one is open): a flip is expected where the margin is small."""
EXPERT_COLUMNS = {"sampler": SAMPLER_EXPERTS, "trainer": TRAINER_EXPERTS}
"""each side's column of expert ids."""


def side_ids(col: pa.Array, meta: RoutingMeta, name: str, where: str, rows: int) -> SideIds:
    """Decode and check one ``*_experts`` column of a batch (``where`` names the shard in errors)."""
    col = _nested_ints(col, name, where)
    valid = ~to_numpy(col.is_null()).astype(bool) if col.null_count else np.ones(rows, bool)
    nv = int(valid.sum())
    _check_layers(col, meta.num_layers, name, where)
    inner = col.flatten()
    ilen = _entry_lengths(inner, nv, meta, name, where)
    v = _expert_ids(inner.flatten(), meta, name, where)
    side, repeated = sort_side(_moe_ids(v, ilen, valid, meta))
    if repeated is not None:
        r, j = repeated
        raise FileFormatError(
            f"{where}: {name} row {r} names an expert twice in decoder layer {int(meta.moe_layers[j])}",
            hint="a layer's top-k ids are distinct experts",
        )
    return side


def _nested_ints(col: pa.Array, name: str, where: str) -> pa.Array:
    """The column as one ``list<list<int>>`` array, or the error that says what it is instead."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not (
        pa.types.is_list(col.type)
        and pa.types.is_list(col.type.value_type)
        and pa.types.is_integer(col.type.value_type.value_type)
    ):
        raise FileFormatError(
            f"{where}: column {name} is {col.type}, not list<list<int>> indexed [layer][k]",
            hint="write routes with the layout of docs/format.md",
        )
    return col


def _check_layers(col: pa.Array, L: int, name: str, where: str) -> None:
    """Every non-null row lists every decoder layer."""
    lens = to_numpy(col.value_lengths().fill_null(L))
    if (lens != L).any():
        r = int(np.flatnonzero(lens != L)[0])
        raise FileFormatError(
            f"{where}: {name} row {r} has {lens[r]} layers; the manifest says {L} decoder layers",
            hint="routes are indexed by every decoder layer, dense layers null",
        )


def _entry_lengths(inner: pa.Array, nv: int, meta: RoutingMeta, name: str, where: str) -> np.ndarray:
    """``[valid rows, layers]`` ids per entry: 0 (a null, dense or missing entry) or top_k."""
    L, k = meta.num_layers, meta.top_k
    ilen = to_numpy(inner.value_lengths().fill_null(0)).reshape(nv, L)
    bad = (ilen != 0) & (ilen != k)
    if bad.any():
        r, layer = (int(x[0]) for x in np.nonzero(bad))
        raise FileFormatError(
            f"{where}: {name} layer {layer} of a row holds {ilen[r, layer]} expert ids; the manifest says top_k {k}",
            hint="each MoE layer's entry lists the top-k ids it chose",
        )
    return ilen


def _expert_ids(values: pa.Array, meta: RoutingMeta, name: str, where: str) -> np.ndarray:
    """The flat ids, none null and each a logical expert of the model."""
    if values.null_count:
        raise FileFormatError(
            f"{where}: {name} holds a null expert id inside a layer's list",
            hint="a side that could not record leaves the whole row (or layer) null",
        )
    v = to_numpy(values)
    if v.size and (int(v.max()) >= meta.num_experts or (v.dtype.kind == "i" and int(v.min()) < 0)):
        worst = int(v.max()) if int(v.max()) >= meta.num_experts else int(v.min())
        raise FileFormatError(
            f"{where}: {name} holds expert id {worst}; the model routes to ids 0..{meta.num_experts - 1}",
            hint="routes hold logical expert ids, below the manifest's num_experts",
        )
    return v


def _moe_ids(v: np.ndarray, ilen: np.ndarray, valid: np.ndarray, meta: RoutingMeta) -> np.ndarray:
    """``[rows, moe, k]`` ids at the MoE layers; zeros (a missing capture) for null rows and entries."""
    nv, L = ilen.shape
    k, n_moe, at = meta.top_k, len(meta.moe_layers), layer_index(meta)
    if v.size == nv * n_moe * k and (ilen[:, at] == k).all():  # common: the values are the MoE layers' ids in order
        ids = v.reshape(nv, n_moe, k)
    else:
        full = np.zeros((nv * L, k), v.dtype)
        full[(ilen == k).ravel()] = v.reshape(-1, k)
        ids = full.reshape(nv, L, k)[:, at]
    if nv < valid.size:
        out = np.zeros((valid.size, n_moe, k), v.dtype)
        out[valid] = ids
        ids = out
    return ids


def margin_counts(
    col: pa.Array, meta: RoutingMeta, compared: np.ndarray, flipped: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(compared, flipped) ``[rows, moe]`` entries by bucket of the trainer's router margin at that layer.

    The margins are read in float32 straight from the values buffer (no float64 copy); an entry without a
    margin (a null or NaN) is counted in no bucket. One ``bincount`` over a code per entry (bucket, flipped
    or not, or "not counted") does both counts.
    """
    L, moe = meta.num_layers, layer_index(meta)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    lens = to_numpy(col.value_lengths().fill_null(L))
    if (lens != L).any():
        raise FileFormatError(
            f"{where}: {TRAINER_MARGIN} has a row of {int(lens[lens != L][0])} layers; the manifest says {L}",
            hint="margins are indexed by every decoder layer, dense layers null",
        )
    values = col.flatten()
    flat = np.frombuffer(values.buffers()[1], np.float32, len(values), values.offset * 4).reshape(-1, L)[:, moe]
    ok = compared
    if col.null_count:
        valid = ~to_numpy(col.is_null()).astype(bool)
        m = np.zeros((len(col), flat.shape[1]), np.float32)
        m[valid] = flat
        ok = ok & valid[:, None]
    else:
        m = flat
    if values.null_count:  # a null MoE-layer margin: no bucket
        nulls = np.zeros(m.shape, bool)
        nulls[~to_numpy(col.is_null()).astype(bool) if col.null_count else slice(None)] = (
            to_numpy(values.is_null()).astype(bool).reshape(-1, L)[:, moe]
        )
        ok = ok & ~nulls
    return _bucket_counts(m, ok, flipped)


def _bucket_counts(m: np.ndarray, ok: np.ndarray, flipped: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counted, flipped) entries per margin bucket; an entry not ``ok`` or without a finite margin in none."""
    nb = len(MARGIN_EDGES)
    code = np.zeros(m.shape, np.uint8)
    for edge in MARGIN_EDGES[1:]:  # a negative margin (a tie read in float) goes with the smallest
        code += m >= np.float32(edge)
    code += flipped.view(np.uint8) * np.uint8(nb)
    code[~(ok & np.isfinite(m))] = 2 * nb
    counts = np.bincount(code.ravel(), minlength=2 * nb + 1)
    return counts[:nb] + counts[nb : 2 * nb], counts[nb : 2 * nb]


def layer_index(meta: RoutingMeta) -> slice | np.ndarray:
    """The MoE layers as a slice when they are consecutive (a view, not a copy), else as an index array."""
    moe = np.asarray(meta.moe_layers)
    if moe.size and (np.diff(moe) == 1).all():
        return slice(int(moe[0]), int(moe[-1]) + 1)
    return moe
