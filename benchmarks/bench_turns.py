"""Benchmark: ``report`` on a multi-turn run against the same run without its turns.

One 10-million-token file (``bench_analysis.make_file``: 100-token sequences,
top-k 5, zstd) is written once into the cache folder, and a copy of it with
the two turn columns: each sequence four assistant turns of 10, 20, 30 and
40 tokens (``turn``, ``turn_position``). Then, in one run, best of
``--repeat`` interleaved repeats, each a fresh process with its own peak RSS:
``mismatchscope report FILE --format json`` on each file. The ratio printed is
the multi-turn file's wall time over the single-turn file's; the target is
1.10x (the turns are read, checked per (sequence, turn) and tallied per turn
in the same pass).

Run: python benchmarks/bench_turns.py [--tokens 10000000] [--repeat 5] [--cache DIR] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analysis import _cli, _load, bench_file, compile_package, measured

TURN_LENGTHS = (10, 20, 30, 40)
"""each 100-token sequence's turns."""
TARGET = 1.10


def turns_file(plain: Path) -> Path:
    """``plain`` with each 100-token sequence cut into turns of TURN_LENGTHS tokens, written once beside it."""
    path = plain.with_name(plain.stem + "_turns.parquet")
    if path.exists():
        return path
    turn = np.repeat(np.arange(len(TURN_LENGTHS), dtype=np.int32), TURN_LENGTHS)
    turn_position = np.concatenate([np.arange(n, dtype=np.int32) for n in TURN_LENGTHS])
    part = path.with_name(path.name + ".part")
    source = pq.ParquetFile(plain)
    writer = None
    for i in range(source.num_row_groups):
        table = source.read_row_group(i)
        pos = table["position"].to_numpy()
        table = table.append_column("turn", pa.array(turn[pos])).append_column(
            "turn_position", pa.array(turn_position[pos])
        )
        if writer is None:
            writer = pq.ParquetWriter(part, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1 << 20)
    assert writer is not None
    writer.close()
    part.rename(path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR") or "/tmp") / "mismatchscope-bench")
    ap.add_argument("--results", type=Path, default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    compile_package()
    plain = bench_file(args.cache, args.tokens)
    multi = turns_file(plain)
    cli = _cli()
    rows = {"single-turn": [*cli, "report", str(plain), "--format", "json"]}
    rows["multi-turn (4 turns a sequence)"] = [*cli, "report", str(multi), "--format", "json"]
    before = os.getloadavg()
    runs: dict[str, list[dict]] = {name: [] for name in rows}
    for _ in range(args.repeat):
        for name, argv in rows.items():
            runs[name].append(measured(argv))
    after = os.getloadavg()
    best = {name: min(rs, key=lambda r: r["wall"]) for name, rs in runs.items()}
    ratio = best["multi-turn (4 turns a sequence)"]["wall"] / best["single-turn"]["wall"]
    lines = [
        f"### report with turns, {args.tokens:,} tokens",
        "",
        "| report --format json on | wall (s) | CPU (s) | peak RSS (MiB) | all walls (s) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, r in best.items():
        walls = ", ".join(f"{x['wall']:.2f}" for x in runs[name])
        lines.append(f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} | {walls} |")
    lines += [
        "",
        f"- with turns over without: {ratio:.3f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})",
        f"- machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), load average "
        f"{_load(before)} before and {_load(after)} after",
    ]
    text = "\n".join(lines)
    print(text)
    if args.results is not None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        head = f"\n## bench_turns.py ({stamp}, {platform.python_version()}, best of {args.repeat})\n\n"
        with open(args.results, "a") as f:
            f.write(head + text + "\n")


if __name__ == "__main__":
    main()
