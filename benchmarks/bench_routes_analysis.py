"""Benchmark: the size of recorded MoE routes and what the routing metrics cost to compute.

Simulated routes of a 40-layer model, every layer routed, top-8 of 256
experts, at 1M routed positions (1,000 sequences of a 100-token prompt and a
901-token completion), written in the run-directory layout
(``mismatchscope.routing.layout``: ``list<list<uint8>>`` ids per side, float32
trainer margins, zstd). Sampler ids are 8 distinct random experts per layer
(incompressible, as real ids nearly are); the trainer's are the same set, in
another order at 5% of (token, layer), with one expert replaced at 2%.

Reports, in one run:

(a) bytes per routed token per side on disk (the ``sampler_experts`` column
    chunks over the rows). Target: at most 400 B (int32 nested lists take
    about 1,300).
(b) the routing metrics (``scan_routes``: decode, checks, per-layer flips,
    margins, the completion rows' flip index) against a bare read of the same
    columns through the same pyarrow decoder, each in a fresh process: wall
    time, CPU time and peak RSS. Targets: within 1.5x of the read, RSS < 1 GB.
(c) ``report --format json`` on the run with its routes against the same
    tokens without routes: what the routing section adds to the whole command.

Run: python benchmarks/bench_routes_analysis.py [--tokens 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
LAYERS, EXPERTS, TOP_K = 40, 256, 8
PROMPT, COMPLETION = 100, 901
ROW_GROUP = 1 << 16


def distinct_ids(rng: np.random.Generator, m: int) -> np.ndarray:
    """``[m, TOP_K]`` uint8 rows of distinct experts: draw, redraw the rows that repeat one, until none does."""
    ids = rng.integers(0, EXPERTS, (m, TOP_K), dtype=np.uint8)
    while True:
        s = np.sort(ids, axis=1)
        bad = np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))
        if not bad.size:
            return ids
        ids[bad] = rng.integers(0, EXPERTS, (bad.size, TOP_K), dtype=np.uint8)


def nested(ids: np.ndarray, rows: int) -> pa.Array:
    """``[rows * LAYERS, TOP_K]`` ids -> ``list<list<uint8>>``, one row per position."""
    inner = pa.ListArray.from_arrays(pa.array(np.arange(0, ids.size + 1, TOP_K, dtype=np.int32)), pa.array(ids.ravel()))
    return pa.ListArray.from_arrays(pa.array(np.arange(0, rows * LAYERS + 1, LAYERS, dtype=np.int32)), inner)


def write_run(run: Path, n_tokens: int, seed: int = 0) -> None:
    """routes/ shards, a tokens/ shard of the completion tokens, and the manifest."""
    from mismatchscope.routing.layout import ROUTES, RoutingMeta, SideRoutes, routes_schema
    from mismatchscope.schema import write_table

    rng = np.random.default_rng(seed)
    per_seq = PROMPT + COMPLETION - 1
    n_seq = max(1, n_tokens // per_seq)
    schema = routes_schema(EXPERTS)
    (run / ROUTES).mkdir(parents=True)
    writer = pq.ParquetWriter(run / ROUTES / "part-00000.parquet", schema, compression="zstd")
    seqs_per_group = max(1, ROW_GROUP // per_seq)
    for start in range(0, n_seq, seqs_per_group):
        ns = min(seqs_per_group, n_seq - start)
        rows = ns * per_seq
        s = distinct_ids(rng, rows * LAYERS)
        t = s.copy()
        u = rng.random(rows * LAYERS)
        order = np.flatnonzero(u < 0.05)
        t[order] = t[order][:, ::-1]
        swap = np.flatnonzero(u > 0.98)
        new = (t[swap, -1].astype(np.int64) + rng.integers(1, EXPERTS, swap.size)) % EXPERTS
        clash = (t[swap, :-1] == new[:, None]).any(axis=1)
        t[swap[~clash], -1] = new[~clash].astype(np.uint8)
        inp = np.tile(np.arange(per_seq, dtype=np.int32), ns)
        tok = pa.array(inp - (PROMPT - 1), mask=inp < PROMPT - 1)
        margin = rng.exponential(0.05, rows * LAYERS).astype(np.float32)
        outer = pa.array(np.arange(0, rows * LAYERS + 1, LAYERS, dtype=np.int32))
        margins = pa.ListArray.from_arrays(outer, pa.array(margin))
        cols = {
            "sequence_id": pa.array(np.repeat(np.arange(start, start + ns, dtype=np.int64), per_seq)),
            "input_position": pa.array(inp),
            "token_position": tok.cast(pa.int32()),
            "sampler_experts": nested(s, rows),
            "trainer_experts": nested(t, rows),
            "sampler_weights": pa.nulls(rows, schema.field("sampler_weights").type),
            "trainer_weights": pa.nulls(rows, schema.field("trainer_weights").type),
            "trainer_margin": margins,
        }
        writer.write_table(pa.table(cols, schema=schema), row_group_size=ROW_GROUP)
    writer.close()
    n_comp = n_seq * COMPLETION
    lq = np.log(rng.uniform(0.01, 1.0, n_comp))
    write_table(
        run / "tokens" / "part-00000.parquet",
        {
            "sequence_id": np.repeat(np.arange(n_seq, dtype=np.int64), COMPLETION),
            "position": np.tile(np.arange(COMPLETION, dtype=np.int32), n_seq),
            "token_id": rng.integers(0, 150_000, n_comp),
            "sampler_logprob": lq,
            "trainer_logprob": np.minimum(lq + rng.normal(0, 0.05, n_comp), 0.0),
        },
    )
    meta = RoutingMeta("qwen3_moe", LAYERS, tuple(range(LAYERS)), EXPERTS, TOP_K, SideRoutes(True), SideRoutes(True))
    (run / "manifest.json").write_text(json.dumps({"status": "complete", "routing": meta.to_dict()}))


def bytes_per_token(run: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in sorted((run / "routes").glob("*.parquet")):
        md = pq.ParquetFile(f).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for j in range(rg.num_columns):
                name = rg.column(j).path_in_schema.split(".")[0]
                out[name] = out.get(name, 0) + rg.column(j).total_compressed_size
        rows = md.num_rows
    return {k: v / rows for k, v in out.items()}


READ_CHILD = """
import sys
from pathlib import Path
from mismatchscope.reader.streaming import _record_batches
files = sorted(Path(sys.argv[1]).glob("*.parquet"))
cols = ["sequence_id", "input_position", "token_position", "sampler_experts", "trainer_experts", "trainer_margin"]
n = 0
for _, rb in _record_batches(files, cols, int(sys.argv[2])):
    n += rb.num_rows
"""

SCAN_CHILD = """
import sys
from pathlib import Path
from mismatchscope.analysis.route_scan import scan_routes
from mismatchscope.routing.io import locate_routes
run, note = locate_routes([Path(sys.argv[1]) / "tokens" / "part-00000.parquet"])
scan = scan_routes(run)
assert scan.completion.rows_flipped > 0
"""


def run_process(argv: list[str]) -> dict:
    """Wall, CPU (user + system, the process and its threads) and peak RSS of one fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:3]} failed: {err[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def best(argv: list[str], repeats: int) -> dict:
    runs = [run_process(argv) for _ in range(repeats)]
    out = min(runs, key=lambda r: r["wall"])
    out["walls"] = [round(r["wall"], 2) for r in runs]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1_000_000, help="routed positions (rows of routes/)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="write the runs here and keep them")
    args = ap.parse_args()
    from mismatchscope.analysis.route_scan import ROUTE_BATCH_ROWS

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-routes-"))
    run, dense = root / "moe-run", root / "dense-run"
    try:
        if not run.exists():
            t0 = time.perf_counter()
            write_run(run, args.tokens)
            print(f"wrote {run} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        if not dense.exists():
            (dense / "tokens").mkdir(parents=True)
            shutil.copy(run / "tokens" / "part-00000.parquet", dense / "tokens" / "part-00000.parquet")
            (dense / "manifest.json").write_text(json.dumps({"status": "complete"}))
        sizes = bytes_per_token(run)
        exe = str(Path(sys.executable).with_name("mismatchscope"))
        results = {
            "read": best([sys.executable, "-c", READ_CHILD, str(run / "routes"), str(ROUTE_BATCH_ROWS)], args.repeats),
            "routing metrics": best([sys.executable, "-c", SCAN_CHILD, str(run)], args.repeats),
            "report, no routes": best([exe, "report", str(dense), "--format", "json"], args.repeats),
            "report, with routes": best([exe, "report", str(run), "--format", "json"], args.repeats),
        }
        rows = pq.ParquetFile(sorted((run / "routes").glob("*.parquet"))[0]).metadata.num_rows
        print(f"\n{rows:,} routed positions, {LAYERS} layers, top-{TOP_K} of {EXPERTS}\n")
        print("| column | bytes per routed token |\n|---|---:|")
        for k, v in sorted(sizes.items()):
            print(f"| {k} | {v:.1f} |")
        print(
            f"\nsampler_experts: {sizes['sampler_experts']:.1f} B per token per side "
            f"(target <= 400: {'met' if sizes['sampler_experts'] <= 400 else 'MISSED'})\n"
        )
        print("| | wall (s) | CPU (s) | peak RSS (MiB) | all walls (s) |\n|---|---:|---:|---:|---|")
        for k, r in results.items():
            print(f"| {k} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} | {r['walls']} |")
        cpu_ratio = results["routing metrics"]["cpu"] / results["read"]["cpu"]
        ratio = results["routing metrics"]["wall"] / results["read"]["wall"]
        added = results["report, with routes"]["wall"] / results["report, no routes"]["wall"]
        rss = results["routing metrics"]["rss_mb"]
        print(
            f"\nrouting metrics / read of the same columns: {ratio:.2f}x "
            f"(target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})"
        )
        print(f"routing metrics / read, CPU time (the same on a busy machine): {cpu_ratio:.2f}x")
        print(f"routing metrics peak RSS: {rss:.0f} MiB (target < 1024: {'met' if rss < 1024 else 'MISSED'})")
        print(f"report with routes / report without: {added:.2f}x")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
