"""Runs built by hand for certify's tests, so every expected number is known: float32 values widened to
float64 (what probe, import and the Recorder write), routes of a tiny MoE layout."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchscope import rundir
from mismatchscope.routing.layout import ROUTES, RoutingMeta, SideRoutes, routes_schema
from mismatchscope.schema import write_table
from tests.helpers import cli

# 3 sequences of 4 tokens; float32 logprobs (exactly representable), widened to float64 as the writers store them
SEQ = [0] * 4 + [1] * 4 + [2] * 4
POS = list(range(4)) * 3
LP32 = np.array([-0.5, -1.25, -2.0625, -0.1, -3.3, -0.01, -7.5, -0.25, -1e-3, -4.0, -0.75, -2.5], dtype=np.float32)
LP = LP32.astype(np.float64)


def flip_low_bit(values: np.ndarray, i: int) -> np.ndarray:
    """values with the lowest mantissa bit of float32 element i flipped: exactly 1 ULP away."""
    out = values.astype(np.float32)
    out.view(np.int32)[i] ^= 1
    return out.astype(np.float64)


def make_run(path, sampler=LP, trainer=LP, prefill=None, manifest=None, **extra):
    """A complete run at ``path``: the 12 tokens of SEQ/POS with these logprobs (and columns ``extra``)."""
    cols = {
        "sequence_id": SEQ,
        "position": POS,
        "token_id": [11 + i for i in range(len(SEQ))],
        "sampler_logprob": list(sampler),
        "trainer_logprob": list(trainer),
        **extra,
    }
    if prefill is not None:
        cols["sampler_prefill_logprob"] = list(prefill)
    write_table(path / "tokens" / "part-00000.parquet", cols)
    rundir.write_manifest(path, {"status": "complete", **(manifest or {})})
    return path


def run_json(path, *args) -> tuple[Any, Any]:
    """``certify --format json`` of ``path``: (the result, the parsed document or None)."""
    r = cli("certify", str(path), "--format", "json", *args)
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


NUM_LAYERS, MOE_LAYERS, NUM_EXPERTS, TOP_K = 4, (1, 3), 8, 2
PROMPT_LEN = 3


def routes_of(run, sampler_rows, trainer_rows, replay=None, recorded=True):
    """One route row per input position; completion token t is predicted at input PROMPT_LEN - 1 + t."""
    meta = RoutingMeta(
        "qwen3_moe",
        NUM_LAYERS,
        MOE_LAYERS,
        NUM_EXPERTS,
        TOP_K,
        SideRoutes(recorded),
        SideRoutes(recorded),
        replay=replay,
    )
    seqs, inputs, tokpos = [], [], []
    for s in sorted(set(SEQ)):
        for ip in range(PROMPT_LEN - 1 + 4):
            seqs.append(s)
            inputs.append(ip)
            tokpos.append(ip - (PROMPT_LEN - 1) if ip >= PROMPT_LEN - 1 else None)
    n = len(seqs)
    table = pa.table(
        {
            "sequence_id": seqs,
            "input_position": inputs,
            "token_position": tokpos,
            "sampler_experts": sampler_rows(n),
            "trainer_experts": trainer_rows(n),
            "sampler_weights": [None] * n,
            "trainer_weights": [None] * n,
            "trainer_margin": [None] * n,
        },
        schema=routes_schema(NUM_EXPERTS),
    )
    (run / ROUTES).mkdir(parents=True, exist_ok=True)
    pq.write_table(table, run / ROUTES / "part-00000.parquet")
    m = rundir.read_manifest(run)
    rundir.write_manifest(run, {**m, "routing": meta.to_dict(), "config": {"checkpoint": {"is_moe": True}}})
    return run


def route_row(i, layer_ids=None):
    """Layers 0 and 2 dense (null); MoE layers 1 and 3 pick experts {i % 8, (i + 3) % 8} unless given."""
    base = {1: [i % 8, (i + 3) % 8], 3: [(i + 1) % 8, (i + 5) % 8]}
    base.update(layer_ids or {})
    return [base.get(layer) for layer in range(NUM_LAYERS)]


def route_rows(changes=None):
    return lambda n: [route_row(i, (changes or {}).get(i)) for i in range(n)]
