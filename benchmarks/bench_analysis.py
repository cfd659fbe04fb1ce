"""Benchmark: compare-masks and report against a bare pyarrow read.

Writes a 10-million-token file (100,000 sequences, top-k 5 columns), then
measures, each in a fresh subprocess so peak RSS is per command:

  (a) compare-masks with every rule  vs  pyarrow reading the columns it uses
  (b) report                         vs  pyarrow reading the columns it uses

Target: ratio <= 3 for each, peak RSS under 1.5 GB.

Run: python benchmarks/bench_analysis.py [--tokens 10000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MASK_COLUMNS = ["sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob", "advantage"]
REPORT_COLUMNS = MASK_COLUMNS + ["trainer_entropy", "sampler_topk_ids", "sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk"]


def make_file(path: Path, tokens: int, seqs: int, k: int = 5, seed: int = 0) -> None:
    """Realistic-enough pairs, written in row groups so generation stays in memory bounds."""
    rng = np.random.default_rng(seed)
    per_seq = tokens // seqs
    writer = None
    chunk_seqs = 10_000
    for start in range(0, seqs, chunk_seqs):
        n_seq = min(chunk_seqs, seqs - start)
        n = n_seq * per_seq
        lq = -rng.exponential(0.8, n)
        lp = np.minimum(lq + rng.normal(0, 0.02, n) * (1 + 10 * (rng.random(n) < 0.01)), 0.0)
        top_lq = np.sort(-rng.exponential(2.0, (n, k)), axis=1)[:, ::-1]
        top_lq[:, 0] = np.maximum(top_lq[:, 0], lq)  # keep lists plausible
        offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
        cols = {
            "sequence_id": pa.array(np.repeat(np.arange(start, start + n_seq, dtype=np.int64), per_seq)),
            "position": pa.array(np.tile(np.arange(per_seq, dtype=np.int32), n_seq)),
            "token_id": pa.array(rng.integers(0, 150_000, n)),
            "sampler_logprob": pa.array(lq),
            "trainer_logprob": pa.array(lp),
            "advantage": pa.array(np.repeat(rng.normal(0, 1, n_seq), per_seq)),
            "trainer_entropy": pa.array(rng.exponential(1.0, n)),
            "sampler_topk_ids": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 150_000, n * k))),
            "sampler_topk_logprobs": pa.ListArray.from_arrays(offsets, pa.array(top_lq.ravel())),
            "trainer_logprobs_at_sampler_topk": pa.ListArray.from_arrays(
                offsets, pa.array(np.minimum(top_lq + rng.normal(0, 0.02, (n, k)), 0.0).ravel())),
        }
        table = pa.table(cols)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1 << 20)
    writer.close()


CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
cols = json.loads(sys.argv[3])
t0 = time.perf_counter()
if mode == "read":
    import pyarrow.parquet as pq
    t = pq.read_table(path, columns=cols)
    n = t.num_rows
else:
    from mismatchscope.analysis.engine import AnalysisRequest, analyse
    from mismatchscope.rules import default_rules
    req = AnalysisRequest(report=(mode == "report"), masks=(mode == "masks"), rules=default_rules() if mode == "masks" else [])
    n = analyse(path, req).tokens
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "rows": n, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(mode: str, path: Path, cols: list[str], repeat: int) -> dict:
    best = None
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), json.dumps(cols)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        if best is None or r["seconds"] < best["seconds"]:
            best = r
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--sequences", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.keep or Path(tmp)) / "bench_pairs.parquet"
        if not path.exists():
            t0 = time.perf_counter()
            make_file(path, args.tokens, args.sequences)
            print(f"wrote {args.tokens:,} tokens in {time.perf_counter() - t0:.1f} s ({path.stat().st_size / 1e6:.0f} MB)")
        rows = []
        for label, mode, cols in (("compare-masks (all rules)", "masks", MASK_COLUMNS), ("report", "report", REPORT_COLUMNS)):
            base = measure("read", path, cols, args.repeat)
            run = measure(mode, path, cols, args.repeat)
            ratio = run["seconds"] / base["seconds"]
            rows.append((label, base, run, ratio))
            print(f"{label:28s} read {base['seconds']:.2f} s  run {run['seconds']:.2f} s  ratio {ratio:.2f} (target <= 3)  "
                  f"peak RSS {run['peak_rss_mb']:.0f} MB (read alone {base['peak_rss_mb']:.0f} MB; target < 1500)")


if __name__ == "__main__":
    main()
