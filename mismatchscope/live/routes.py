"""Routes from the training loop: the experts each side chose for every recorded token.

A loop that records routes for routing replay holds, per token, the top-k
expert ids of every decoder layer (vLLM, SGLang, slime, verl: ``[tokens,
layers, k]``). ``Recorder.add`` and ``Monitor.add`` take them as
``sampler_experts`` / ``trainer_experts`` of shape ``[B, T, L, k]``, aligned
with the logprobs (entry ``[b, t]`` is the forward that predicted token
``t``), with ``L`` either every decoder layer (dense layers are ignored) or
the MoE layers only, in order. :func:`moe_ids` checks them against the
run's :class:`~mismatchscope.routing.layout.RoutingMeta`; :func:`routes_table`
writes them in the ``routes/`` layout; :func:`route_flags` gives each token's
flip for the Monitor, through the analysis's own set comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ..analysis.expert_sets import compare_sides, sort_side
from ..analysis.route_columns import EXPERT_COLUMNS
from ..errors import RecorderInputError
from ..routing.layout import SIDES, RoutingMeta, expert_id_type, routes_schema


def routing_meta(routing: RoutingMeta | Mapping[str, Any] | None) -> RoutingMeta | None:
    """A ``RoutingMeta`` from itself or its dict form (``RoutingMeta.to_dict``)."""
    if routing is None or isinstance(routing, RoutingMeta):
        return routing
    try:
        return RoutingMeta.from_dict(routing)
    except (KeyError, TypeError, ValueError) as e:
        raise RecorderInputError(
            f"routing cannot be read as RoutingMeta ({type(e).__name__}: {e})",
            hint="give family, num_layers, moe_layers, num_experts and top_k",
        ) from None


def moe_ids(meta: RoutingMeta | None, name: str, ids: np.ndarray) -> np.ndarray:
    """``[N, L or MoE layers, k]`` host ids -> ``[N, MoE layers, k]`` in the layout's id type, checked."""
    if meta is None:
        raise RecorderInputError(
            f"{name} needs the model's routing layout",
            hint="pass routing=RoutingMeta(family, num_layers, moe_layers, num_experts, top_k) "
            "to the Recorder (or the Monitor)",
        )
    moe = list(meta.moe_layers)
    if ids.ndim != 3 or ids.shape[2] != meta.top_k or ids.shape[1] not in (meta.num_layers, len(moe)):
        raise RecorderInputError(
            f"{name} has shape {ids.shape[1:]} per token; expected [layers, top_k] with layers "
            f"{meta.num_layers} (every decoder layer) or {len(moe)} (MoE layers) and top_k "
            f"{meta.top_k}",
            hint="pass [B, T, layers, top_k], aligned with the logprobs",
        )
    if not np.issubdtype(ids.dtype, np.integer):
        raise RecorderInputError(f"{name} must hold integer expert ids, got dtype {ids.dtype}")
    if ids.shape[1] == meta.num_layers and ids.shape[1] != len(moe):
        ids = ids[:, moe]
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= meta.num_experts):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise RecorderInputError(
            f"{name} holds expert id {bad}; the model routes to ids 0..{meta.num_experts - 1}",
            hint="pass logical expert ids (before any expert-parallel remapping)",
        )
    out = np.ascontiguousarray(ids, dtype=expert_id_type(meta.num_experts).to_pandas_dtype())
    _, repeated = sort_side(out)
    if repeated is not None:
        raise RecorderInputError(
            f"{name} names an expert twice in decoder layer {moe[repeated[1]]} (token {repeated[0]} of the batch)",
            hint="a layer's top-k ids are distinct experts",
        )
    return out


def routes_table(
    meta: RoutingMeta, sequence_id: np.ndarray, position: np.ndarray, ids: Mapping[str, np.ndarray | None]
) -> pa.Table:
    """One shard of ``routes/``: a row per recorded token; ``ids[side]`` is ``[N, MoE layers, k]`` or None.

    The loop hands over the completion's tokens only: ``token_position`` is the
    token's position, and so is ``input_position`` (no prompt rows are recorded).
    """
    n, L, k = sequence_id.size, meta.num_layers, meta.top_k
    schema = routes_schema(meta.num_experts)
    is_moe = np.zeros(L, bool)
    is_moe[list(meta.moe_layers)] = True
    inner_len = np.tile(np.where(is_moe, k, 0), n).astype(np.int32)
    inner_offsets = pa.array(np.concatenate([[0], np.cumsum(inner_len)]).astype(np.int32))
    outer_offsets = pa.array(np.arange(0, n * L + 1, L, dtype=np.int32))
    dense = pa.array(np.tile(~is_moe, n))
    cols: dict[str, pa.Array] = {
        "sequence_id": pa.array(sequence_id.astype(np.int64)),
        "input_position": pa.array(position.astype(np.int32)),
        "token_position": pa.array(position.astype(np.int32)),
    }
    for side in SIDES:
        name, a = EXPERT_COLUMNS[side], ids.get(side)
        if a is None:
            cols[name] = pa.nulls(n, schema.field(name).type)
            continue
        inner = pa.ListArray.from_arrays(inner_offsets, pa.array(a.reshape(-1)), mask=dense)
        cols[name] = pa.ListArray.from_arrays(outer_offsets, inner)
    for name in ("sampler_weights", "trainer_weights", "trainer_margin"):
        cols[name] = pa.nulls(n, schema.field(name).type)
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def check_experts(batch: Any, meta: RoutingMeta | None) -> None:
    """Check a prepared batch's expert ids against the run's layout and keep the MoE layers (once)."""
    if batch.experts and not batch.routed:
        batch.experts = {s: moe_ids(meta, f"{s}_experts", a) for s, a in batch.experts.items()}
        batch.routed = True


def route_flags(ids: Mapping[str, np.ndarray | None]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per token: (compared in some MoE layer, flipped in some compared layer); None without both sides."""
    a, b = ids.get("sampler"), ids.get("trainer")
    if a is None or b is None:
        return None
    compared, flipped = compare_sides(sort_side(a)[0], sort_side(b)[0])
    return np.asarray(compared.any(axis=1)), np.asarray(flipped.any(axis=1))
