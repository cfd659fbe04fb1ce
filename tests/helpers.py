"""Shared helpers: tiny token-pair tables, the real console script."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PAIRS = REPO / "sample_data" / "simulated_pairs.parquet"


def pairs(rows: list[tuple[int, int, float, float]], **extra) -> dict:
    """Columns from (sequence_id, position, q, p) rows given as probabilities."""
    return {
        "sequence_id": [r[0] for r in rows],
        "position": [r[1] for r in rows],
        "token_id": [7 + i for i in range(len(rows))],
        "sampler_logprob": [math.log(r[2]) for r in rows],
        "trainer_logprob": [math.log(r[3]) for r in rows],
        **extra,
    }




def cli(*args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real console script installed next to this interpreter."""
    exe = Path(sys.executable).with_name("mismatchscope")
    full_env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"}
    full_env.update(env or {})
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd)


def random_pairs(rng: np.random.Generator, n_seq: int, max_len: int, advantage: bool = True) -> dict:
    cols: dict[str, list] = {k: [] for k in ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob")}
    if advantage:
        cols["advantage"] = []
    for s in range(n_seq):
        length = int(rng.integers(1, max_len + 1))
        lq = np.log(rng.uniform(1e-4, 1.0, length))
        lp = np.minimum(lq + rng.normal(0, 0.5, length), 0.0)
        cols["sequence_id"] += [s * 3 + 1] * length
        cols["position"] += list(range(length))
        cols["token_id"] += rng.integers(0, 1000, length).tolist()
        cols["sampler_logprob"] += lq.tolist()
        cols["trainer_logprob"] += lp.tolist()
        if advantage:
            cols["advantage"] += [float(rng.choice([-1.0, 0.0, 1.5]))] * length
    return cols


PROBE_META = {
    "checkpoint": {"sha256": "a" * 64, "path": "ckpt"},
    "prompts": {"sha256": "b" * 64, "count": 2},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "n": 4, "max_tokens": 16, "top_k_logprobs": 5, "seed": 0,
                 "logprobs_mode": "processed_logprobs"},
    "sampler": {"kind": "vllm", "dtype": "float32", "engine_args": {}},
    "trainer": {"dtype": "float32", "attn_implementation": None, "fp32_lm_head": False},
}
"""File metadata shaped like a probe run's (the parts the gate's comparability check reads)."""


def probe_meta(**changes) -> dict:
    """PROBE_META with sections updated: probe_meta(sampler={"dtype": "float16"})."""
    import json

    out = json.loads(json.dumps(PROBE_META))
    for section, values in changes.items():
        out[section] = {**out.get(section, {}), **values} if isinstance(values, dict) else values
    return out
