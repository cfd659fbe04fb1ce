"""Benchmark: what a run that knows its bytes costs ``report`` (page CRCs verified, footer hashes checked).

The 10-million-token file of ``bench_analysis.py`` (same generator, same
cache folder) is read two ways, each row a fresh process, best of
``--repeat`` interleaved repeats:

  report, shard as written before   the file as ``bench_analysis`` writes it:
                   no page checksums, no run around it (nothing to verify).
  report, run written now           the same rows written again as every writer
                   writes a shard now (``schema.WRITE_OPTIONS``: a CRC per page)
                   into a run directory whose shard index holds the footer hash:
                   the reader verifies every page it decodes and the footer.

and, in this process, the two hashes a reader could check before reading:

  footer hash      ``rundir.footer_hash``: the design chosen (a few kilobytes).
  whole-file hash  ``hashlib.blake2b`` over every byte in 8 MiB blocks: the
                   design not chosen, for scale.

The target: the run written now costs ``report`` under 5% more than the
shard as written before (wall, and CPU).

Run: python benchmarks/bench_checksums.py [--tokens 10000000] [--repeat 5] [--cache DIR] [--results FILE]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analysis import _cli, bench_file, compile_package, measured

from mismatchscope import rundir
from mismatchscope.schema import WRITE_OPTIONS


def checked_run(plain: Path) -> Path:
    """``plain`` written again as a run's shard is written now, indexed, with a complete manifest (once)."""
    run = plain.with_name(plain.stem + "-run")
    shard = run / rundir.TOKENS / "part-00000.parquet"
    if rundir.completion(run) == rundir.Completion(True, ""):
        return run
    src = pq.ParquetFile(plain)
    shard.parent.mkdir(parents=True, exist_ok=True)
    with rundir.atomic_path(shard) as tmp:
        with pq.ParquetWriter(tmp, src.schema_arrow, **WRITE_OPTIONS) as out:
            for i in range(src.metadata.num_row_groups):  # the same row groups as the plain file
                out.write_table(src.read_row_group(i))
    rundir.ShardIndex(run, rundir.TOKENS).commit(shard, src.metadata.num_rows)
    rundir.write_manifest(run, {"status": rundir.COMPLETE, "shard_index": rundir.INDEX_VERSION})
    return run


def hash_times(shard: Path, repeat: int) -> dict[str, float]:
    def whole() -> None:
        h = hashlib.blake2b(digest_size=16)
        with open(shard, "rb") as f:
            while block := f.read(8 << 20):
                h.update(block)

    out = {}
    for name, fn in (("footer hash", lambda: rundir.footer_hash(shard)), ("whole-file hash", whole)):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[name] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR") or "/tmp") / "mismatchscope-bench")
    ap.add_argument("--results", type=Path, default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    plain = bench_file(args.cache, args.tokens)
    run = checked_run(plain)
    shard = run / rundir.TOKENS / "part-00000.parquet"
    compile_package()
    cli = _cli()
    rows = {
        "report, shard as written before": [*cli, "report", str(plain), "--format", "json"],
        "report, run written now": [*cli, "report", str(run), "--format", "json"],
    }
    runs: dict[str, list[dict]] = {name: [] for name in rows}
    for _ in range(args.repeat):
        for name, argv in rows.items():
            runs[name].append(measured(argv))
    best = {name: min(r, key=lambda x: x["wall"]) for name, r in runs.items()}
    hashes = hash_times(shard, args.repeat)
    before, now = best["report, shard as written before"], best["report, run written now"]
    lines = [
        f"### {args.tokens:,} tokens ({plain.stat().st_size / 1e9:.2f} GB plain, {shard.stat().st_size / 1e9:.2f} GB "
        "with page checksums)",
        "",
        "| | wall (s) | CPU (s) | all walls (s) |",
        "|---|---:|---:|---|",
        *(
            f"| {name} | {best[name]['wall']:.2f} | {best[name]['cpu']:.2f} | "
            f"{', '.join(format(r['wall'], '.2f') for r in rs)} |"
            for name, rs in runs.items()
        ),
        *(f"| {name} (in process) | {t:.4f} | | |" for name, t in hashes.items()),
        "",
        f"- cost of verification: wall {100 * (now['wall'] / before['wall'] - 1):+.1f}%, "
        f"CPU {100 * (now['cpu'] / before['cpu'] - 1):+.1f}% (target < 5%)",
        f"- a whole-file hash on every read would add {100 * hashes['whole-file hash'] / before['wall']:.0f}% "
        "of report's wall time",
        f"- machine: {os.cpu_count()} cores, load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}",
    ]
    print("\n".join(lines))
    if args.results:
        with open(args.results, "a") as f:
            f.write(f"\n## Checksums: {datetime.date.today().isoformat()}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
