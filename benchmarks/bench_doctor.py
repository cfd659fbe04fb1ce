"""Benchmark: ``doctor`` against ``report`` on the same 10-million-token file, and what report's one line costs.

The file is ``bench_analysis``'s (100-token sequences, top-k 5 columns),
written once into its cache folder and reused. Each command runs in a fresh
process through the CLI entry point (``bench_gate``'s child), best of
``--repeat`` interleaved repeats:

  report --format json   the report alone (its JSON carries no doctor line)
  report (table)         the report's table, with doctor's top finding in one line
  doctor --format json   report's pass plus doctor's sample and every detector

Targets: doctor at or below 1.3x report (``bench_analysis`` holds it on files written as runs are written now);
report's table within a few percent of its JSON.

Run: python benchmarks/bench_doctor.py [--tokens 10000000] [--repeat 3] [--cache DIR] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analysis import bench_file
from bench_gate import measure


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR") or "/tmp") / "mismatchscope-bench")
    ap.add_argument("--results", type=Path, default=None, help="append a section to this Markdown file")
    args = ap.parse_args()
    path = str(bench_file(args.cache, args.tokens))
    load = os.getloadavg()[0]
    res = measure(
        {
            "report": ["report", path, "--format", "json"],
            "report_table": ["report", path],
            "doctor": ["doctor", path, "--format", "json"],
        },
        args.repeat,
    )
    base = res["report"]["seconds"]
    rows = [
        ("`report --format json`", res["report"], None),
        ("`report` (table, with doctor's line)", res["report_table"], res["report_table"]["seconds"] / base),
        ("`doctor --format json`", res["doctor"], res["doctor"]["seconds"] / base),
    ]
    for label, r, ratio in rows:
        print(
            f"{label:40s} {r['seconds']:6.2f} s (CPU {r['cpu']:.2f} s)  peak RSS {r['peak_rss_mb']:.0f} MB"
            + (f"  ratio {ratio:.2f}" if ratio else "")
        )
    if args.results:
        _append(args.results, rows, args, load)


def _append(path: Path, rows, args, load: float) -> None:
    import numpy
    import pyarrow

    lines = [
        "",
        f"## doctor vs report on one file ({time.strftime('%Y-%m-%d')})",
        "",
        f"`python benchmarks/bench_doctor.py --results {path}`: one file of {args.tokens:,} tokens (100-token "
        "sequences, top-k 5 columns; `bench_analysis.make_file`). Each command runs in a fresh process through the "
        f"CLI entry point; best of {args.repeat} interleaved repeats.",
        "",
        "| | wall (s) | CPU (s) | peak RSS (MiB) | ratio to report's JSON | all runs (s) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, r, ratio in rows:
        lines.append(
            f"| {label} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['peak_rss_mb']:.0f} | "
            f"{'' if ratio is None else f'{ratio:.2f}'} | {', '.join(f'{x:.2f}' for x in r['runs'])} |"
        )
    lines += [
        "",
        f"Target: doctor at or below 1.3x report. Machine: {os.cpu_count()} CPU cores, 1-minute load average {load:.1f} when "
        f"the run started; Python {sys.version.split()[0]}, numpy {numpy.__version__}, pyarrow {pyarrow.__version__}.",
        "",
    ]
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
