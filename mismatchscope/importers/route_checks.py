"""Checking one sequence's decoded routes against the model, and mapping them onto every decoder layer.

The same for every source, so a dump that any engine wrote passes the same
bar before one route is written:

* rows: ``len(tokens) - 1 - start`` (the last token is never fed through the
  model); one trailing placeholder row more is accepted and dropped.
* layers: every decoder layer (the engines' layout), or only the MoE layers
  (vLLM 0.21, verl's R2 on mixed models: mapped by ordinal onto the config's
  MoE layers); MTP/draft layers appended after them are left out.
* ids: ``0 <= id < num_experts``, no id twice in one row, ``top_k`` per row.
* an MoE layer whose ids are all zero is a capture that failed (engines fill
  a zeroed buffer and write only what they capture), not expert 0: it is
  counted and stored as null. With top-1 routing a single 0 is a real choice,
  so there only a layer that is zero on every row of the sequence counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ImportFormatError
from .route_sources import MOE_ORDINALS, Decoded
from .routes_model import RoutesModel

_CONFIG_HINT = "check --routes-config names the model that recorded the routes, and --routes-format the encoding"


@dataclass
class CheckedRoutes:
    """One sequence's routes in the run's layout: absolute decoder layers, missing captures marked."""

    ids: np.ndarray
    """``[rows, num_layers, top_k]`` int32; meaningful only where :attr:`present`."""
    present: np.ndarray
    """``[rows, num_layers]`` bool: an MoE layer whose capture is there (dense layers are False)."""
    weights: np.ndarray | None
    start: int
    layer_axis: str
    """``"decoder"`` or ``"moe"``: how the source indexed its layer axis."""
    mtp_dropped: int
    placeholder_dropped: bool
    missing: int
    """MoE (row, layer) entries whose capture was all zeros."""


def check_routes(d: Decoded, model: RoutesModel, prompt_len: int, completion_len: int) -> CheckedRoutes:
    ids, weights = d.ids, d.weights
    rows, placeholder = _check_rows(len(ids), d.start, prompt_len, completion_len)
    ids = ids[:rows]
    weights = None if weights is None else weights[:rows]
    uncaptured = np.zeros(rows, dtype=bool) if d.uncaptured is None else np.asarray(d.uncaptured[:rows], dtype=bool)
    ids, weights, axis, mtp = _map_layers(ids, weights, d.layer_axis, model, uncaptured)
    moe = np.asarray(model.moe_layers)
    sub = ids[:, moe, :]
    bad = ((sub < 0) | (sub >= model.num_experts)) & ~uncaptured[:, None, None]
    if bad.any():
        r, j, c = (int(x[0]) for x in np.nonzero(bad))
        raise ImportFormatError(
            f"input position {d.start + r}, decoder layer {moe[j]}: expert id {int(sub[r, j, c])} "
            f"is not below the model's {model.num_experts} experts",
            hint=_CONFIG_HINT,
        )
    zero = (sub == 0).all(axis=-1)
    captured = ~uncaptured
    if model.top_k == 1:  # expert 0 is a real top-1 choice: only a layer zero on every captured row is a failure
        whole = zero[captured].all(axis=0, keepdims=True) & (int(captured.sum()) > 1)
        zero = np.broadcast_to(whole, zero.shape)
    zero = zero | uncaptured[:, None]  # rows the source says it did not capture: missing whatever they hold
    repeated = _repeats(sub) & ~zero
    if repeated.any():
        r, j = (int(x[0]) for x in np.nonzero(repeated))
        raise ImportFormatError(
            f"input position {d.start + r}, decoder layer {moe[j]}: expert ids "
            f"{sub[r, j].tolist()} name one expert twice",
            hint=_CONFIG_HINT,
        )
    present = np.zeros(ids.shape[:2], dtype=bool)
    present[:, moe] = ~zero
    return CheckedRoutes(
        ids=ids,
        present=present,
        weights=weights,
        start=d.start,
        layer_axis=axis,
        mtp_dropped=mtp,
        placeholder_dropped=placeholder,
        missing=int(np.count_nonzero(zero)),
    )


def _repeats(ids: np.ndarray) -> np.ndarray:
    """``[rows, layers]``: whether a row names one expert twice. Pairwise for a small top-k: numpy's sort
    of many tiny rows costs ~10x more than k(k-1)/2 whole-array comparisons."""
    k = ids.shape[-1]
    if k > 16:
        ordered = np.sort(ids, axis=-1)
        return (ordered[..., 1:] == ordered[..., :-1]).any(axis=-1)
    by_k = np.ascontiguousarray(np.moveaxis(ids, -1, 0))  # each comparison then reads contiguous memory
    out = np.zeros(ids.shape[:-1], dtype=bool)
    for i in range(k):
        for j in range(i + 1, k):
            out |= by_k[i] == by_k[j]
    return out


def _check_rows(rows: int, start: int, prompt_len: int, completion_len: int) -> tuple[int, bool]:
    """The rows to keep, and whether a trailing placeholder was dropped."""
    if start > prompt_len:
        raise ImportFormatError(f"routes start at input position {start}, past the {prompt_len}-token prompt")
    want = prompt_len + completion_len - 1 - start
    if rows == want + 1:
        return want, True
    if rows != want:
        raise ImportFormatError(
            f"{rows} route rows; a {prompt_len}-token prompt and {completion_len}-token "
            f"completion starting at {start} need len(tokens) - 1 - start = {want}",
            hint="routes must cover every forwarded token; check prompt_token_ids, completion_token_ids and the start",
        )
    return want, False


def _map_layers(
    ids: np.ndarray, weights: np.ndarray | None, axis: str | None, model: RoutesModel, uncaptured: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, str, int]:
    """Onto every decoder layer: ``(ids, weights, layer axis read, MTP layers dropped)``."""
    n_src, k = ids.shape[1], ids.shape[2]
    if k != model.top_k and len(ids):
        raise ImportFormatError(f"routes hold {k} ids per layer; the model routes top-{model.top_k}", hint=_CONFIG_HINT)
    n, m, mtp = model.num_layers, len(model.moe_layers), model.mtp_layers
    if axis != MOE_ORDINALS and n_src in (n, n + mtp):
        return ids[:, :n], None if weights is None else weights[:, :n], "decoder", n_src - n
    if n_src in (m, m + mtp):
        if axis != MOE_ORDINALS:
            _refuse_dense_layer(ids[:, :m], model, uncaptured)
        full = np.zeros((len(ids), n, model.top_k), dtype=ids.dtype)
        full[:, list(model.moe_layers)] = ids[:, :m]
        w = None
        if weights is not None:
            w = np.zeros(full.shape, dtype=np.float32)
            w[:, list(model.moe_layers)] = weights[:, :m]
        return full, w, MOE_ORDINALS, n_src - m
    want = f"its {m} MoE layers" if axis == MOE_ORDINALS else f"{n} decoder layers or its {m} MoE layers"
    raise ImportFormatError(
        f"routes have {n_src} layers; the model is {model.describe()} (expected {want}"
        f"{f', plus {mtp} MTP' if mtp else ''})",
        hint=_CONFIG_HINT,
    )


def _refuse_dense_layer(ids: np.ndarray, model: RoutesModel, uncaptured: np.ndarray) -> None:
    """Routes whose layer count is the config's MoE count, not its decoder count, are read as MoE ordinals (verl's
    R2 on a mixed model). A layer of them that is 0 on every captured row is then no failed capture: it is the
    dense layer of a model with that many decoder layers, every one of whose layers the engine wrote, and the
    config is another model's. Reading on would store it as missing captures (a third of them, on a model of
    three layers) and shift every other layer by one."""
    rows = ids[~uncaptured]
    if len(rows) < 2:
        return
    dense = np.flatnonzero((rows == 0).all(axis=(0, 2)))
    if dense.size:
        n_src = ids.shape[1]
        raise ImportFormatError(
            f"routes have {n_src} layers; --routes-config's model has {model.num_layers} decoder layers "
            f"({len(model.moe_layers)} MoE): read as its MoE layers, the routes' layer {int(dense[0])} is 0 on "
            f"every row, as the dense layer of a {n_src}-layer model is",
            hint="pass the config of the model that recorded the routes as --routes-config",
        )
