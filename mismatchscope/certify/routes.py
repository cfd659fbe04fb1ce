"""Route agreement of an MoE run: the same expert set in every MoE layer for every certified token.

Bit-equal logprobs on an MoE model can hide nothing about routing only if the
routes agree too, or were forced to agree: a run either shows zero route flips
(expert *sets* compared, top-k order carries no meaning) over every MoE layer
of every certified token, with captures that are real (a row of all-zero ids
in an MoE layer is a capture buffer nobody wrote, not a routing decision), or
its manifest says the trainer replayed the sampler's routes, and at which
level (``ids`` or ``ids+weights``). The routes are read with the layout of
:mod:`mismatchscope.routing.layout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..routing.layout import (
    MANIFEST_KEY,
    ROUTES,
    SAMPLER_EXPERTS,
    TRAINER_EXPERTS,
    RoutingMeta,
)
from .compare import SHOW_FIRST, Tokens

NOT_MOE = "not applicable (dense model)"
UNKNOWN_MOE = "not checked (the run does not say whether the model routes)"


@dataclass
class RouteFlip:
    sequence_id: int
    position: int
    layer: int
    sampler: list[int]
    trainer: list[int]


@dataclass
class RouteResult:
    status: str
    """one line: what was checked, or why nothing was."""
    passed: bool | None
    """None where routes do not apply (a dense model, or a run that does not say)."""
    replay: str | None = None
    moe_layers: list[int] = field(default_factory=list)
    tokens: int = 0
    tokens_flipped: int = 0
    flips_by_layer: dict[int, int] = field(default_factory=dict)
    first_layer: int | None = None
    """the lowest MoE layer where any certified token's expert sets part."""
    first: list[RouteFlip] = field(default_factory=list)
    dead_rows: dict[str, int] = field(default_factory=dict)
    """per side, certified (token, MoE layer) entries whose ids are all zero: the capture was not real."""
    missing_rows: int = 0
    prompt_rows_flipped: int = 0


def check_routes(
    root: Path | None, manifest: Mapping[str, Any] | None, tokens: Tokens, show: int = SHOW_FIRST
) -> RouteResult:
    raw = (manifest or {}).get(MANIFEST_KEY)
    is_moe = ((manifest or {}).get("config") or {}).get("checkpoint", {}).get("is_moe")
    from ..routing.io import route_shards

    files = route_shards(root) if root is not None else []
    if raw is None:
        if files:
            raise InputError(
                f"{root}: {ROUTES}/ holds route shards but the manifest has no {MANIFEST_KEY!r} entry",
                hint="the run was damaged; record it again",
            )
        if is_moe:
            return RouteResult(
                "MoE model without recorded routes and without route replay: route agreement is not shown "
                "(record both sides' routes: probe --routes, or Recorder.add's sampler_experts and trainer_experts)",
                False,
            )
        return RouteResult(NOT_MOE if is_moe is False else UNKNOWN_MOE, None)
    try:
        meta = RoutingMeta.from_dict(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{root}: the manifest's {MANIFEST_KEY!r} entry cannot be read ({e})") from None
    if meta.replay not in (None, "ids", "ids+weights"):
        raise InputError(f"{root}: routing replay {meta.replay!r} is none of ids, ids+weights")
    if meta.replay is not None:
        return _replayed(root, files, meta, tokens, show)
    missing = [s for s in ("sampler", "trainer") if not getattr(meta, s).recorded]
    if missing or not files:
        why = (
            "; ".join(f"{s}: {getattr(meta, s).why or 'not recorded'}" for s in missing)
            or f"no {ROUTES}/part-*.parquet"
        )
        return RouteResult(
            f"routes not recorded on both sides ({why}) and not replayed: route agreement is not shown",
            False,
            moe_layers=list(meta.moe_layers),
        )
    assert root is not None  # files are found in a run directory only
    return _compare_routes(root, meta, tokens, show)


def _replayed(root: Path | None, files: list[Path], meta: RoutingMeta, tokens: Tokens, show: int) -> RouteResult:
    """A replay is taken at its word, and checked where both sides' routes were recorded too:
    a trainer that was given the sampler's ids cannot have chosen others."""
    level = "expert ids" if meta.replay == "ids" else "expert ids and gate weights"
    status = f"routes replayed: the trainer was given the sampler's {level} ({meta.replay})"
    if root is not None and files and meta.sampler.recorded and meta.trainer.recorded:
        seen = _compare_routes(root, meta, tokens, show)
        seen.replay = meta.replay
        seen.status = f"{status}; recorded routes: {seen.status}"
        return seen
    return RouteResult(status, True, replay=meta.replay, moe_layers=list(meta.moe_layers), tokens=len(tokens))


def _compare_routes(root: Path, meta: RoutingMeta, tokens: Tokens, show: int) -> RouteResult:
    from ..reader import read_routes

    table = read_routes(root, ["sequence_id", "token_position", SAMPLER_EXPERTS, TRAINER_EXPERTS])
    layers = np.array(meta.moe_layers, dtype=np.int64)
    out = RouteResult("", True, moe_layers=[int(x) for x in layers], tokens=len(tokens))
    prompt = table.column("token_position").is_null().to_numpy(zero_copy_only=False)
    sides = {
        s: _dense(table.column(c), meta, s) for s, c in (("sampler", SAMPLER_EXPERTS), ("trainer", TRAINER_EXPERTS))
    }
    seq = table.column("sequence_id").to_numpy()
    pos = table.column("token_position").fill_null(-1).to_numpy()
    row_of = _match(tokens, seq[~prompt], pos[~prompt])
    comp_rows = np.flatnonzero(~prompt)
    out.missing_rows = int((row_of < 0).sum())
    covered = row_of >= 0
    picked = {s: ids[comp_rows[row_of[covered]]][:, layers] for s, ids in sides.items()}  # [T, M, K]
    for s, ids in picked.items():
        dead = (ids == 0).all(axis=-1) & (meta.top_k > 1)
        null = (ids < 0).any(axis=-1)
        out.dead_rows[s] = int(dead.sum())
        out.missing_rows += int(null.any(axis=-1).sum())
    a, b = np.sort(picked["sampler"], axis=-1), np.sort(picked["trainer"], axis=-1)
    flipped = (a != b).any(axis=-1)  # [T, M]
    prompt_ids = {s: ids[prompt][:, layers] for s, ids in sides.items()}
    out.prompt_rows_flipped = int(
        (np.sort(prompt_ids["sampler"], -1) != np.sort(prompt_ids["trainer"], -1)).any(-1).any(-1).sum()
    )
    out.tokens_flipped = int(flipped.any(axis=1).sum())
    per_layer = flipped.sum(axis=0)
    out.flips_by_layer = {int(layers[j]): int(c) for j, c in enumerate(per_layer) if c}
    if out.flips_by_layer:
        out.first_layer = min(out.flips_by_layer)
    out.first = _first_flips(tokens, np.flatnonzero(covered), flipped, picked, layers, show)
    out.passed = not (out.tokens_flipped or out.missing_rows or any(out.dead_rows.values()))
    out.status = _status(out)
    return out


def _first_flips(
    tokens: Tokens,
    tok_idx: np.ndarray,
    flipped: np.ndarray,
    picked: dict[str, np.ndarray],
    layers: np.ndarray,
    show: int,
) -> list[RouteFlip]:
    """The first ``show`` flips in (token, layer) order, each with both sides' expert sets."""
    out: list[RouteFlip] = []
    for t, j in zip(*np.nonzero(flipped)):
        if len(out) >= show:
            break
        i = tok_idx[t]
        out.append(
            RouteFlip(
                int(tokens.sequence_id[i]),
                int(tokens.position[i]),
                int(layers[j]),
                sorted(int(x) for x in picked["sampler"][t, j]),
                sorted(int(x) for x in picked["trainer"][t, j]),
            )
        )
    return out


def _status(r: RouteResult) -> str:
    flipped = sorted(layer for layer, n in r.flips_by_layer.items() if n)
    if r.tokens_flipped:
        shown = ", ".join(map(str, flipped[:8])) + (", ..." if len(flipped) > 8 else "")
        head = (
            f"{r.tokens_flipped} of {r.tokens} certified tokens flip an expert set, in {len(flipped)} of the "
            f"{len(r.moe_layers)} MoE layers (layer{'s' if len(flipped) != 1 else ''} {shown})"
        )
    else:
        head = f"0 of {r.tokens} certified tokens flip an expert set in the {len(r.moe_layers)} MoE layers"
    parts = [head]
    if r.missing_rows:
        parts.append(f"{r.missing_rows} certified tokens lack a route row on a side")
    for side, n in r.dead_rows.items():
        if n:
            parts.append(f"{side} capture has {n} all-zero (token, MoE layer) rows: not a real capture")
    return "; ".join(parts)


def _dense(col: pa.ChunkedArray, meta: RoutingMeta, side: str) -> np.ndarray:
    """``list<list<uint>>`` rows as int64 ``[rows, num_layers, top_k]``; -1 marks a null row or layer."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    rows, L, K = len(arr), meta.num_layers, meta.top_k
    out = np.full((rows, L, K), -1, dtype=np.int64)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if not valid.any():
        return out
    lengths = np.asarray(arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False))
    if (lengths[valid] != L).any():
        raise InputError(
            f"{side} expert rows hold {sorted(set(lengths[valid].tolist()))} layers, the manifest says {L}",
            hint="the routes and the manifest disagree: record the run again",
        )
    outer = arr.flatten()
    inner_valid = outer.is_valid().to_numpy(zero_copy_only=False)
    inner_len = np.asarray(outer.value_lengths().fill_null(0).to_numpy(zero_copy_only=False))
    if (inner_len[inner_valid] != K).any():
        raise InputError(
            f"{side} expert rows list {sorted(set(inner_len[inner_valid].tolist()))} experts per layer, "
            f"the manifest says top_k {K}",
            hint="the routes and the manifest disagree: record the run again",
        )
    block = np.full((len(outer), K), -1, dtype=np.int64)
    block[inner_valid] = np.asarray(outer.flatten().to_numpy(zero_copy_only=False), dtype=np.int64).reshape(-1, K)
    out[valid] = block.reshape(-1, L, K)
    return out


def _match(tokens: Tokens, seq: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """For each token, the index of its route row among (seq, pos), or -1."""
    _, inv = np.unique(np.concatenate([tokens.sequence_id, seq]), return_inverse=True)
    width = int(max(tokens.position.max(initial=0), pos.max(initial=0))) + 2
    keys = inv * width + np.concatenate([tokens.position, pos])
    tok_keys, route_keys = keys[: len(tokens)], keys[len(tokens) :]
    order = np.argsort(route_keys, kind="stable")
    found = np.searchsorted(route_keys[order], tok_keys)
    found = np.minimum(found, max(len(order) - 1, 0))
    hit = (route_keys[order][found] == tok_keys) if len(order) else np.zeros(len(tok_keys), bool)
    return np.where(hit, order[found] if len(order) else -1, -1)
