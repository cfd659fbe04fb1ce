"""Hand-made run directories with ``routes/``: the layout of ``mismatchscope.routing.layout``, written with pyarrow.

``RUN_ROWS`` is a model of 3 decoder layers (layer 0 dense, 1 and 2 MoE),
8 experts, top-2, whose flip rates the tests derive by hand:

=====  ====  ====  ====================  ====================  ==============================
seq    in.   tok.  sampler L1 / L2       trainer L1 / L2       what
=====  ====  ====  ====================  ====================  ==============================
10     0     -     [1,2] / [3,4]         [2,1] / [3,5]         prompt row: L1 same set, L2 flip
10     1     0     [0,1] / [2,3]         [1,0] / [2,3]         same sets (order differs)
10     2     1     [4,5] / [6,7]         [4,6] / [7,6]         L1 flip
10     3     2     [1,3] / [0,0]         [1,3] / [2,5]         sampler L2 all zero: missing
20     0     0     [2,3] / [4,5]         [2,7] / [5,1]         L1 and L2 flip
20     1     1     null row              [0,1] / [2,3]         sampler row missing
=====  ====  ====  ====================  ====================  ==============================
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mismatchscope.routing.layout import ROUTES, RoutingMeta, SideRoutes, routes_schema
from mismatchscope.schema import write_table

META = RoutingMeta(
    family="qwen3_moe",
    num_layers=3,
    moe_layers=(1, 2),
    num_experts=8,
    top_k=2,
    sampler=SideRoutes(True),
    trainer=SideRoutes(True),
)

N = None
RUN_ROWS = [
    # sequence_id, input_position, token_position, sampler [L0, L1, L2], trainer, trainer margin [L0, L1, L2]
    (10, 0, None, [N, [1, 2], [3, 4]], [N, [2, 1], [3, 5]], [N, 0.0, 0.0]),
    (10, 1, 0, [N, [0, 1], [2, 3]], [N, [1, 0], [2, 3]], [N, 0.5, 0.05]),
    (10, 2, 1, [N, [4, 5], [6, 7]], [N, [4, 6], [7, 6]], [N, 0.00005, 0.2]),
    (10, 3, 2, [N, [1, 3], [0, 0]], [N, [1, 3], [2, 5]], [N, 0.005, 0.3]),
    (20, 0, 0, [N, [2, 3], [4, 5]], [N, [2, 7], [5, 1]], [N, 0.0005, 0.02]),
    (20, 1, 1, None, [N, [0, 1], [2, 3]], [N, 0.5, 0.5]),
]

TOKENS = {
    # (sequence_id, position): (sampler_logprob, trainer_logprob); |l| = |lp - lq| in the comment
    (10, 0): (-1.0, -1.0),  # 0.0, unflipped
    (10, 1): (-1.0, -1.5),  # 0.5, flipped (L1)
    (10, 2): (-0.5, -0.7),  # 0.2, unflipped (L2 not compared)
    (20, 0): (-2.0, -1.0),  # 1.0, flipped (L1, L2)
    (20, 1): (-0.3, -0.4),  # 0.1, no compared route (sampler row null)
    (30, 0): (-0.2, -0.2),  # 0.0, no route row at all
}


def write_tokens(run: Path, tokens: dict = TOKENS) -> None:
    keys = sorted(tokens)
    cols = {
        "sequence_id": [k[0] for k in keys],
        "position": [k[1] for k in keys],
        "token_id": [5 + i for i in range(len(keys))],
        "sampler_logprob": [tokens[k][0] for k in keys],
        "trainer_logprob": [tokens[k][1] for k in keys],
    }
    write_table(run / "tokens" / "part-00000.parquet", cols)


def routes_table(rows: list, meta: RoutingMeta = META, margin: bool = True) -> pa.Table:
    schema = routes_schema(meta.num_experts)
    cols = {
        "sequence_id": [r[0] for r in rows],
        "input_position": [r[1] for r in rows],
        "token_position": [r[2] for r in rows],
        "sampler_experts": [r[3] for r in rows],
        "trainer_experts": [r[4] for r in rows],
        "sampler_weights": [None] * len(rows),
        "trainer_weights": [None] * len(rows),
        "trainer_margin": [r[5] if margin else None for r in rows],
    }
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema}, schema=schema)


def write_run(
    run: Path,
    rows: list = RUN_ROWS,
    meta: RoutingMeta | None = META,
    tokens: dict = TOKENS,
    shards: int = 1,
    table: pa.Table | None = None,
) -> Path:
    """A complete run directory: tokens/, routes/part-*.parquet (``rows`` split into ``shards``), the manifest."""
    run.mkdir(parents=True, exist_ok=True)
    write_tokens(run, tokens)
    t = table if table is not None else routes_table(rows, meta or META)
    (run / ROUTES).mkdir(exist_ok=True)
    step = -(-t.num_rows // shards)
    for i in range(shards):
        pq.write_table(t.slice(i * step, step), run / ROUTES / f"part-{i:05d}.parquet")
    manifest: dict = {"status": "complete"}
    if meta is not None:
        manifest["routing"] = meta.to_dict()
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run
