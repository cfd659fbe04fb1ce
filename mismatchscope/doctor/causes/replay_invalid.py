"""``replay_invalid``: a routing replay that does not do what it claims, layer by layer.

Read from the run's ``routes/`` under a declared replay, four ways a replay
goes wrong that a run-wide flip rate hides:

* one MoE layer's flips far above the others' (the replay hook missing on it);
* a layer whose recorded routes equal another layer's row for row (an MTP
  layer handed the backbone's routes: NeMo-RL #3903, #4057): two routers never
  agree on every token by chance;
* routes recorded for layers that have no router (miles #2570): the layout
  keeps a dense layer's entry null;
* a flip rate far from the replace rate the stack declares (prime-rl #2703
  replaces replayed experts its trainer scores low, and reports how often).

The route rows are read once, up to :data:`ROWS` of them.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..document import Evidence, ExplainedShare, Finding
from ..findings import clear, detected, not_checked, pct
from ..registry import Cause, Context
from .routing_replay import declared_replace_rate
from .routing_replay import share as flipped_share

ROWS = 50_000
"""route rows read at most."""
SAME_SHARE = 0.99
"""a layer equals another when at least this share of rows (50 or more) hold the same expert set in both."""
LAYER_FACTOR = 5.0
LAYER_FLOOR = 0.05
"""a layer's flips at least this many times the median MoE layer's and above this rate: the replay missed it."""
REPLACE_FAR = 0.02
"""a flip rate this far (absolute, and 3 binomial SDs) from the declared replace rate."""


def _read(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(sampler sets [N, M, k] sorted, rows valid [N], entries at router-less layers) from the first rows."""
    run = ctx.routes
    if run is None:
        return None
    meta = run.meta
    moe, L, k = list(meta.moe_layers), meta.num_layers, meta.top_k
    parts, extra, got = [], 0, 0
    for path in run.files:
        for batch in pq.ParquetFile(path).iter_batches(columns=["sampler_experts", "trainer_experts"], batch_size=8192):
            for name in ("sampler_experts", "trainer_experts"):
                col = batch.column(name)
                inner = col.flatten()
                valid_rows = np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
                lengths = col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
                if not (lengths[valid_rows] == L).all():
                    continue  # rows of another shape: the report refuses them itself
                entries = np.asarray(inner.is_valid().to_numpy(zero_copy_only=False)).reshape(-1)
                layer = np.tile(np.arange(L), int(valid_rows.sum()))
                dense = ~np.isin(layer, moe)
                extra += int((entries & dense).sum())
                if name == "sampler_experts" and valid_rows.any():
                    ids = _sets(inner, valid_rows, L, moe, k)
                    if ids is not None:
                        parts.append(ids)
            got += batch.num_rows
            if got >= ROWS:
                break
        if got >= ROWS:
            break
    if not parts:
        return np.zeros((0, len(moe), k)), np.zeros(0, bool), np.array(extra)
    sets = np.concatenate(parts)
    return sets, np.ones(sets.shape[0], bool), np.array(extra)


def _sets(inner: pa.Array, valid_rows: np.ndarray, L: int, moe: list[int], k: int) -> np.ndarray | None:
    n = int(valid_rows.sum())
    index = (np.arange(n)[:, None] * L + np.asarray(moe)[None, :]).reshape(-1)
    picked = inner.take(pa.array(index))
    widths = picked.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    if (widths != k).any():
        return None
    values = picked.flatten().to_numpy(zero_copy_only=False).reshape(n, len(moe), k)
    return np.sort(values, axis=2)


def detect(ctx: Context) -> Finding:
    r = ctx.report.routing
    if r is None or ctx.routes is None:
        return not_checked("replay_invalid", ["routes/ with both sides' experts (MoE runs)"])
    if not r.replay:
        return clear("replay_invalid", "no routing replay declared")
    problems: list[str] = []
    ev: list[Evidence] = []
    estimate: dict[str, float | str | None] = {}
    layers = [x for x in (r.route_flip_rate_by_layer or []) if x.flip_rate is not None]
    if len(layers) >= 2:
        rates = np.array([x.flip_rate for x in layers], dtype=float)
        med = float(np.median(rates))
        missed = [x.layer for x, v in zip(layers, rates, strict=True) if v >= LAYER_FLOOR and v >= LAYER_FACTOR * med]
        ev.append(Evidence("largest MoE layer's flip rate under replay", float(rates.max()), "0, like every layer"))
        if missed:
            problems.append(
                f"layer(s) {', '.join(map(str, missed))} flip far more than the rest (the replay missed them)"
            )
            estimate["layers_missed"] = ", ".join(map(str, missed))
    read = _read(ctx)
    if read is not None:
        sets, _valid, extra = read
        M = sets.shape[1]
        moe = list(ctx.routes.meta.moe_layers)
        dup = []
        if sets.shape[0] >= 50:
            for i, j in combinations(range(M), 2):
                same = float(np.mean(np.all(sets[:, i] == sets[:, j], axis=1)))
                if same >= SAME_SHARE:
                    dup.append(f"{moe[j]} = {moe[i]}")
        if dup:
            problems.append(f"layer {', '.join(dup)} row for row (one layer's routes handed to another)")
            estimate["duplicate_layers"] = "; ".join(dup)
        ev.append(Evidence("route entries recorded for layers without a router", float(extra), "0 (null)"))
        if int(extra):
            problems.append(f"{int(extra)} route entries for layers that have no router")
            estimate["routerless_entries"] = float(extra)
    declared = declared_replace_rate(ctx)
    if declared is not None and r.route_flip_rate is not None and r.tokens_compared:
        sd = math.sqrt(max(declared * (1 - declared), 1e-12) / r.tokens_compared)
        ev.append(Evidence("flip rate against the declared replace rate", r.route_flip_rate - declared, "0"))
        if abs(r.route_flip_rate - declared) > max(REPLACE_FAR, 3 * sd):
            problems.append(
                f"tokens flip at {pct(r.route_flip_rate)} where the stack says it replaced {pct(declared)} of "
                "the replayed experts"
            )
            estimate["replace_rate"] = declared
            estimate["flip_rate"] = r.route_flip_rate
    if not problems:
        return clear("replay_invalid", "the replay is consistent layer by layer", ev)
    return detected(
        "replay_invalid",
        "the routing replay does not do what it claims: " + "; ".join(problems),
        ev,
        estimate,
        "high",
        "replay each MoE layer from its own recorded routes, only on layers with a router, and check the replace "
        "rate the stack reports against the flips it leaves",
    )


def share(ctx: Context, f: Finding) -> ExplainedShare | None:
    return flipped_share(ctx, f)


CAUSE = Cause(
    "replay_invalid",
    detect,
    share=share,
    correction="the flipped tokens' excess gap (from the routes)",
    sample_scope=False,
)
