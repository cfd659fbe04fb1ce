"""Benchmark: ``compare-masks`` and ``report`` as a user runs them, against DuckDB doing the same work.

For each size (``--tokens``, default 10 and 100 million) one file is written
once into a cache folder outside the repository (``--cache``, default
``$TMPDIR/mismatchscope-bench``; 100 million tokens take about 12 GB) and
reused: 100-token sequences, top-k 5 columns, zstd, as :func:`make_file`
writes it. Then, in one run, best of ``--repeat`` interleaved repeats (a busy
moment hits every row alike), each row a fresh process with its own peak RSS:

  compare-masks   ``mismatchscope compare-masks FILE --format json`` (every
                  default rule), timed as a whole process: Python start-up,
                  imports, the pass and the output.
  report          ``mismatchscope report FILE --format json``, the same way.
  DuckDB, aggregates      the peer of compare-masks: one SQL script computing
                  the token aggregates (k1, k2, k3, TV, chi2), seven exact
                  ratio quantiles (``quantile_cont``: linear interpolation,
                  as report prints them), min and max, five token-rule counts
                  and the per-sequence aggregates with three sequence-rule
                  counts. Timed as its queries alone (DuckDB's import and
                  start-up excluded).
  DuckDB, every value     the peer of report: every value of every column
                  report reads (the seven scalar columns summed, each of the
                  three top-k list columns summed list by list), the query
                  alone.
  pyarrow read    report's columns decoded batch by batch
                  (``ParquetFile.iter_batches``), the read alone.

The package's bytecode is compiled once before the runs (``compileall``), as
``pip install`` leaves it: with ``PYTHONDONTWRITEBYTECODE`` set in the
environment every run would otherwise compile the package's sources anew,
about 0.1 s of each command's start-up that no installed copy pays.

Each command runs with the threads it picks by default (one per core), DuckDB
with its default threads (one per core). The ratios printed are the commands'
whole-process wall times over the peers' query times; the targets are
compare-masks <= 1.5x its DuckDB peer, report <= 1.5x its DuckDB peer, peak
RSS under 1 GB. The machine's core count and load average (before and after)
are printed with the table: on a shared machine, a load average near the core
count means the seconds are not the machine's.

Run: python benchmarks/bench_analysis.py [--tokens 10000000 100000000] [--repeat 3]
     [--cache DIR] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPORT_COLUMNS = [
    "sequence_id",
    "position",
    "token_id",
    "sampler_logprob",
    "trainer_logprob",
    "advantage",
    "trainer_entropy",
    "sampler_topk_ids",
    "sampler_topk_logprobs",
    "trainer_logprobs_at_sampler_topk",
]
"""every column of the benchmark file that ``report`` reads (the file has no other)."""

DUCKDB_AGGREGATES_SQL = """
WITH t AS (
  SELECT trainer_logprob - sampler_logprob AS l, exp(trainer_logprob) AS p, exp(sampler_logprob) AS q
  FROM read_parquet('{path}')
), u AS (SELECT *, exp(l) AS r FROM t)
SELECT count(*) AS n, avg(-l) AS k1, avg(0.5 * l * l) AS k2, avg((r - 1) - l) AS k3, avg(0.5 * abs(p - q)) AS tv,
       avg(r * r) - 1 AS chi2, quantile_cont(r, [0.001, 0.01, 0.05, 0.5, 0.95, 0.99, 0.999]) AS quantiles,
       min(r) AS rmin, max(r) AS rmax,
       count_if(r < 0.5 OR r > 5) AS icepop, count_if(abs(p - q) > 0.3) AS ipo, count_if(r < 0.5 OR r > 2) AS token_mask,
       count_if(r > 2) AS tis, count_if(r < 0 OR r > 5) AS cispo
FROM u;
WITH s AS (
  SELECT sum(trainer_logprob - sampler_logprob) AS S, avg(trainer_logprob - sampler_logprob) AS m,
         avg(exp(trainer_logprob - sampler_logprob) - 1 - (trainer_logprob - sampler_logprob)) AS k3,
         min(trainer_logprob - sampler_logprob) AS lo, max(trainer_logprob - sampler_logprob) AS hi,
         count(*) AS n, sum(advantage) AS adv
  FROM read_parquet('{path}') GROUP BY sequence_id
)
SELECT count(*) AS sequences, count_if(S < ln(0.5) OR S > ln(2)) AS seq_mis,
       count_if(m < ln(0.999) OR m > ln(1.001)) AS geo_mask, count_if(k3 > 0.01) AS k3_seq FROM s;
"""

DUCKDB_EVERY_VALUE_SQL = """
SELECT count(*), sum(sequence_id), sum(position), sum(token_id), sum(sampler_logprob), sum(trainer_logprob),
       sum(advantage), sum(trainer_entropy), sum(list_sum(sampler_topk_ids)), sum(list_sum(sampler_topk_logprobs)),
       sum(list_sum(trainer_logprobs_at_sampler_topk))
FROM read_parquet('{path}');
"""

DUCKDB_CHILD = r"""
import json, sys, time
import duckdb
con = duckdb.connect()
t0 = time.perf_counter()
for stmt in sys.argv[2].split(";"):
    if stmt.strip():
        con.execute(stmt.replace("{path}", sys.argv[1])).fetchall()
print(json.dumps({"timed": time.perf_counter() - t0}))
"""

READ_CHILD = r"""
import json, sys, time
import pyarrow.parquet as pq
t0 = time.perf_counter()
for batch in pq.ParquetFile(sys.argv[1], pre_buffer=False, buffer_size=1 << 20).iter_batches(batch_size=1 << 17, columns=json.loads(sys.argv[2])):
    pass
print(json.dumps({"timed": time.perf_counter() - t0}))
"""
"""every batch decoded and dropped: ``read_table`` would hold the whole table (about 35 GB at 100 million tokens)."""

TARGET = 1.5
RSS_LIMIT_MB = 1000


def make_file(path: Path, tokens: int, seqs: int, k: int = 5, seed: int = 0) -> None:
    """Realistic-enough pairs, written in row groups so generation stays in memory bounds.

    Written to a temporary name and renamed at the end, so an interrupted run leaves no half file to reuse.
    """
    rng = np.random.default_rng(seed)
    per_seq = tokens // seqs
    writer = None
    chunk_seqs = 10_000
    part = path.with_name(path.name + ".part")
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
            writer = pq.ParquetWriter(part, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1 << 20)
    assert writer is not None  # seqs >= 1
    writer.close()
    part.rename(path)


def bench_file(cache: Path, tokens: int) -> Path:
    """The benchmark file of ``tokens`` tokens in ``cache``, written once (100-token sequences)."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"bench_pairs_{tokens}.parquet"
    if not path.exists():
        t0 = time.perf_counter()
        make_file(path, tokens, tokens // 100)
        print(
            f"wrote {path} ({tokens:,} tokens, {path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s"
        )
    return path


def measured(argv: list[str]) -> dict:
    """Wall, CPU (user + system of the process and its threads) and peak RSS of one fresh process.

    A child that prints ``{"timed": seconds}`` last (the DuckDB and pyarrow peers) also reports the time of
    its work alone, without its interpreter's start-up and imports: that becomes the row's wall time.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed ({proc.returncode}): {err.decode()[-2000:]}")
    row = {"process": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}
    timed = _timed(out.decode())
    row["wall"] = timed if timed is not None else wall
    return row


def _timed(stdout: str) -> float | None:
    lines = stdout.strip().splitlines()
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except ValueError:
        return None
    return value.get("timed") if isinstance(value, dict) else None


def _cli() -> list[str]:
    """The installed ``mismatchscope`` entry point next to this interpreter, else ``python -m mismatchscope``."""
    exe = Path(sys.executable).with_name("mismatchscope")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mismatchscope"]


ROWS = {
    "compare-masks": "whole process",
    "report": "whole process",
    "DuckDB, aggregates (compare-masks' peer)": "query alone",
    "DuckDB, every value (report's peer)": "query alone",
    "pyarrow read of report's columns": "read alone",
    "start-up: report --help": "whole process",
}


def commands(path: Path) -> dict[str, list[str]]:
    cli = _cli()
    names = list(ROWS)
    return {
        names[0]: [*cli, "compare-masks", str(path), "--format", "json"],
        names[1]: [*cli, "report", str(path), "--format", "json"],
        names[2]: [sys.executable, "-c", DUCKDB_CHILD, str(path), DUCKDB_AGGREGATES_SQL],
        names[3]: [sys.executable, "-c", DUCKDB_CHILD, str(path), DUCKDB_EVERY_VALUE_SQL],
        names[4]: [sys.executable, "-c", READ_CHILD, str(path), json.dumps(REPORT_COLUMNS)],
        names[5]: [*cli, "report", "--help"],
    }


def compile_package() -> None:
    """Write the bytecode of the ``mismatchscope`` the commands import, as an install does (see the docstring)."""
    where = subprocess.run(
        [sys.executable, "-c", "import mismatchscope, os; print(os.path.dirname(mismatchscope.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True, stdout=subprocess.DEVNULL)


def bench(path: Path, repeat: int) -> dict[str, list[dict]]:
    cmds = commands(path)
    runs: dict[str, list[dict]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, argv in cmds.items():
            runs[name].append(measured(argv))
    return runs


def table(tokens: int, runs: dict[str, list[dict]], load_before: tuple, load_after: tuple) -> list[str]:
    best = {name: min(rs, key=lambda r: r["wall"]) for name, rs in runs.items()}
    names = list(ROWS)
    out = [
        f"### {tokens:,} tokens",
        "",
        "| | wall (s) | timed as | process wall (s) | CPU (s) | peak RSS (MiB) | all walls (s) |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for name, r in best.items():
        walls = ", ".join(f"{x['wall']:.2f}" for x in runs[name])
        out.append(
            f"| {name} | {r['wall']:.2f} | {ROWS[name]} | {r['process']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} "
            f"| {walls} |"
        )
    out.append("")
    cm, rep = best[names[0]], best[names[1]]
    ratios = [
        ("compare-masks", cm, best[names[2]], "its DuckDB peer (aggregates, quantiles, rule counts)", True),
        ("report", rep, best[names[3]], "its DuckDB peer (every value of its columns)", True),
        ("report", rep, best[names[4]], "a pyarrow read of its columns", False),
    ]
    for what, a, b, peer, targeted in ratios:
        x = a["wall"] / b["wall"]
        verdict = f" (target <= {TARGET}x: {'met' if x <= TARGET else 'NOT met'})" if targeted else ""
        out.append(f"- {what}: {x:.2f}x {peer}{verdict}")
    for what, r in (("compare-masks", cm), ("report", rep)):
        ok = r["rss_mb"] < RSS_LIMIT_MB
        out.append(f"- {what}: peak RSS {r['rss_mb']:.0f} MiB (target < 1 GB: {'met' if ok else 'NOT met'})")
    out.append(
        f"- machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), load average "
        f"{_load(load_before)} before and {_load(load_after)} after"
    )
    return out


def _load(avg: tuple) -> str:
    return "/".join(f"{x:.1f}" for x in avg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[10_000_000, 100_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR") or "/tmp") / "mismatchscope-bench")
    ap.add_argument("--results", type=Path, default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    compile_package()
    sections = []
    for tokens in args.tokens:
        path = bench_file(args.cache, tokens)
        before = os.getloadavg()
        runs = bench(path, args.repeat)
        lines = table(tokens, runs, before, os.getloadavg())
        print("\n".join(lines) + "\n", flush=True)
        sections.append(lines)
    if args.results:
        _append(args.results, args.tokens, args.repeat, sections)


def _append(results: Path, sizes: list[int], repeat: int, sections: list[list[str]]) -> None:
    import duckdb

    text = [
        f"\n## analysis: compare-masks and report vs DuckDB on the same work ({datetime.date.today()})\n",
        f"`python benchmarks/bench_analysis.py --tokens {' '.join(map(str, sizes))} --repeat {repeat}`: "
        "100-token sequences, top-k 5 columns, zstd (`make_file`). The commands are timed as whole processes "
        "(start-up included) through the CLI entry point; the DuckDB peers as their queries alone, the pyarrow "
        "read as the read alone. Best of the interleaved repeats; CPU is user + system of the whole process.\n",
    ]
    for lines in sections:
        text += [*lines, ""]
    text.append(
        f"Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pa.__version__}, "
        f"duckdb {duckdb.__version__}.\n"
    )
    with results.open("a") as f:
        f.write("\n".join(text))


if __name__ == "__main__":
    main()
