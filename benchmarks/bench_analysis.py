"""Benchmark: compare-masks and report, as a user runs them, against DuckDB and a bare pyarrow read.

Writes a 10-million-token file (100,000 sequences, top-k 5 columns, zstd as
the project writes), then times whole processes, each started fresh so its
start-up, wall time, CPU time and peak RSS are its own:

  (a) ``mismatchscope compare-masks FILE --format json``   (every rule)
  (b) ``mismatchscope report FILE --format json``
  (c) DuckDB computing, from the same file: the token means of k1, k2, k3 and
      TV, chi2, nine exact ratio quantiles (0.001 ... 0.999, min, max), five
      token-rule counts (icepop, ipo, token-mask, tis, cispo) and three
      sequence-rule counts (seq-mis, geo-mask, k3-seq): the hand-written query
      a user would otherwise write (DuckDB is a benchmark-only dependency)
  (d) DuckDB only reading every column ``report`` reads (a trivial aggregate
      over each, top-k lists included): what a columnar engine pays for the
      bytes ``report`` must decode, before any analysis
  (e) ``pyarrow.parquet.read_table`` of the columns each command uses

Targets: compare-masks <= 1.5x DuckDB, report <= 2.5x DuckDB (both against
the query in (c)), CPU / wall >= 1.6 for both on 2 cores, peak RSS < 1 GB.

Run: python benchmarks/bench_analysis.py [--tokens 10000000] [--repeat 3] [--keep DIR] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MASK_COLUMNS = ["sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob", "advantage"]
REPORT_COLUMNS = MASK_COLUMNS + [
    "trainer_entropy",
    "sampler_topk_ids",
    "sampler_topk_logprobs",
    "trainer_logprobs_at_sampler_topk",
]

DUCKDB_SQL = """
WITH t AS (
  SELECT sequence_id, trainer_logprob - sampler_logprob AS l, exp(trainer_logprob) AS p, exp(sampler_logprob) AS q
  FROM read_parquet('{path}')
), u AS (SELECT *, exp(l) AS r FROM t)
SELECT avg(-l) AS k1, avg(0.5 * l * l) AS k2, avg((r - 1) - l) AS k3, avg(abs(p - q)) AS tv, avg(r * r) - 1 AS chi2,
       quantile_disc(r, [0.001, 0.01, 0.05, 0.5, 0.95, 0.99, 0.999]) AS quantiles, min(r) AS rmin, max(r) AS rmax,
       count_if(r < 0.5 OR r > 5) AS icepop, count_if(abs(p - q) > 0.3) AS ipo, count_if(r < 0.5 OR r > 2) AS token_mask,
       count_if(r > 2) AS tis, count_if(r < 0 OR r > 5) AS cispo
FROM u;
WITH s AS (
  SELECT sum(trainer_logprob - sampler_logprob) AS S, avg(trainer_logprob - sampler_logprob) AS m,
         avg(exp(trainer_logprob - sampler_logprob) - 1 - (trainer_logprob - sampler_logprob)) AS k3
  FROM read_parquet('{path}') GROUP BY sequence_id
)
SELECT count_if(S < ln(0.5) OR S > ln(2)) AS seq_mis, count_if(m < ln(0.999) OR m > ln(1.001)) AS geo_mask,
       count_if(k3 > 0.01) AS k3_seq FROM s;
"""

DUCKDB_READ_SQL = """
SELECT count(*), sum(len(sampler_topk_ids)), sum(list_sum(sampler_topk_logprobs)),
       sum(list_sum(trainer_logprobs_at_sampler_topk)), sum(trainer_entropy), sum(token_id), sum(advantage),
       sum(position), sum(sequence_id), sum(sampler_logprob), sum(trainer_logprob)
FROM read_parquet('{path}');
"""

DUCKDB_CHILD = r"""
import sys, duckdb
con = duckdb.connect()
for stmt in sys.argv[2].split(";"):
    if stmt.strip():
        print(con.execute(stmt.replace("{path}", sys.argv[1])).fetchall())
"""

READ_CHILD = r"""
import json, sys
import pyarrow.parquet as pq
print(pq.read_table(sys.argv[1], columns=json.loads(sys.argv[2])).num_rows)
"""


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
                offsets, pa.array(np.minimum(top_lq + rng.normal(0, 0.02, (n, k)), 0.0).ravel())
            ),
        }
        table = pa.table(cols)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1 << 20)
    writer.close()


def run_process(argv: list[str]) -> dict:
    """Wall, CPU (user + system, the process and its threads) and peak RSS of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}): {err[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def commands(path: Path) -> dict[str, list[str]]:
    exe = str(Path(sys.executable).with_name("mismatchscope"))
    return {
        "compare-masks": [exe, "compare-masks", str(path), "--format", "json"],
        "report": [exe, "report", str(path), "--format", "json"],
        "duckdb": [sys.executable, "-c", DUCKDB_CHILD, str(path), DUCKDB_SQL],
        "duckdb, reading report's columns": [sys.executable, "-c", DUCKDB_CHILD, str(path), DUCKDB_READ_SQL],
        "read (compare-masks columns)": [sys.executable, "-c", READ_CHILD, str(path), json.dumps(MASK_COLUMNS)],
        "read (report columns)": [sys.executable, "-c", READ_CHILD, str(path), json.dumps(REPORT_COLUMNS)],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--sequences", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = (args.keep or Path(tmp)) / f"bench_pairs_{args.tokens}.parquet"
        if not path.exists():
            t0 = time.perf_counter()
            make_file(path, args.tokens, args.sequences)
            print(
                f"wrote {args.tokens:,} tokens in {time.perf_counter() - t0:.1f} s ({path.stat().st_size / 1e6:.0f} MB)"
            )
        load = os.getloadavg()[0]
        cmds = commands(path)
        runs: dict[str, list[dict]] = {name: [] for name in cmds}
        for _ in range(args.repeat):  # interleaved, so a busy moment hits every command alike
            for name, argv in cmds.items():
                runs[name].append(run_process(argv))
        best = {name: min(rs, key=lambda r: r["wall"]) for name, rs in runs.items()}
        lines = _table(best, runs)
        print("\n".join(lines))
        if args.results:
            _append(args.results, args.tokens, lines, load)


def _table(best: dict, runs: dict) -> list[str]:
    duck = best["duckdb"]["wall"]
    out = [
        "| | wall (s) | CPU (s) | CPU / wall | peak RSS (MiB) | x DuckDB | x pyarrow read | target | all walls (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    targets = {
        "compare-masks": ("read (compare-masks columns)", "<= 1.5x DuckDB"),
        "report": ("read (report columns)", "<= 2.5x DuckDB"),
    }
    for name, r in best.items():
        read_name, target = targets.get(name, (None, ""))
        x_read = f"{r['wall'] / best[read_name]['wall']:.2f}" if read_name else ""
        walls = ", ".join(f"{x['wall']:.2f}" for x in runs[name])
        out.append(
            f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['cpu'] / r['wall']:.2f} | {r['rss_mb']:.0f} | "
            f"{r['wall'] / duck:.2f} | {x_read} | {target} | {walls} |"
        )
    out.append("")
    for name, limit in (("compare-masks", 1.5), ("report", 2.5)):
        r = best[name]
        checks = [
            (f"{r['wall'] / duck:.2f}x DuckDB", r["wall"] / duck <= limit, f"<= {limit}"),
            (f"CPU / wall {r['cpu'] / r['wall']:.2f}", r["cpu"] / r["wall"] >= 1.6, ">= 1.6"),
            (f"peak RSS {r['rss_mb']:.0f} MiB", r["rss_mb"] < 1000, "< 1 GB"),
        ]
        out.append(
            f"- {name}: " + "; ".join(f"{what} (target {t}: {'met' if ok else 'NOT met'})" for what, ok, t in checks)
        )
    duck_read = best["duckdb, reading report's columns"]["wall"]
    out.append(f"- report against DuckDB only reading the same columns: {best['report']['wall'] / duck_read:.2f}x")
    return out


def _append(results: Path, tokens: int, lines: list[str], load: float) -> None:
    import duckdb
    import numpy
    import pyarrow

    text = [
        f"\n## analysis: compare-masks and report vs DuckDB and a bare read ({datetime.date.today()})\n",
        f"`python benchmarks/bench_analysis.py --results benchmarks/RESULTS.md`: one file of {tokens:,} tokens "
        "(100,000 sequences, top-k 5 columns, zstd). Every row is one fresh process as a user runs it (start-up "
        "included), best of the interleaved repeats; CPU is user + system of the process and its threads.\n",
        *lines,
        "",
        f"Machine: {os.cpu_count()} CPU cores, 1-minute load average {load:.1f} at the start; Python "
        f"{platform.python_version()}, numpy {numpy.__version__}, pyarrow {pyarrow.__version__}, duckdb {duckdb.__version__}.\n",
    ]
    with results.open("a") as f:
        f.write("\n".join(text))


if __name__ == "__main__":
    main()
