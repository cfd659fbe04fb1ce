"""Benchmark: ``compare-masks --write DIR`` (the per-token audit) against ``compare-masks`` without it.

What a user pays for the audit: the same command, every default rule, on the
same file, with and without ``--write``, each run a fresh process through the
installed entry point (Python start-up, imports, the pass, the JSON output
and, with ``--write``, both audit files), best of ``--repeat`` interleaved
rounds so that a busy moment on a shared machine hits both alike. The file is
``bench_analysis.make_file``'s (100-token sequences, an advantage column,
top-k 5 columns, zstd), written once into ``--cache`` and reused.

Bounded memory: the audit streams (a few batches queued for its writer
thread), so its peak RSS must not grow with the run; the sizes given
(default 1 and 10 million tokens) show it side by side.

Target: ``--write`` within 1.5x of the command without it (wall time, same
run), peak RSS flat in the run's size.

Run: python benchmarks/bench_audit.py [--tokens 1000000 10000000] [--repeat 3] [--cache DIR]
     [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analysis import _cli, bench_file, compile_package, measured

TARGET = 1.5


def bench(path: Path, repeat: int, scratch: Path) -> dict[str, list[dict]]:
    cli = _cli()
    out = scratch / "audit"
    plain = [*cli, "compare-masks", str(path), "--format", "json"]
    runs: dict[str, list[dict]] = {"compare-masks": [], "compare-masks --write DIR": []}
    for _ in range(repeat):
        runs["compare-masks"].append(measured(plain))
        shutil.rmtree(out, ignore_errors=True)
        runs["compare-masks --write DIR"].append(measured([*plain, "--write", str(out)]))
    size = sum(f.stat().st_size for f in out.iterdir())
    rows = pq.ParquetFile(out / "tokens.parquet").metadata.num_rows
    for r in runs["compare-masks --write DIR"]:
        r["audit_mb"], r["audit_rows"] = size / 2**20, rows
    return runs


def table(tokens: int, runs: dict[str, list[dict]], load: tuple[tuple, tuple]) -> list[str]:
    best = {name: min(rs, key=lambda r: r["wall"]) for name, rs in runs.items()}
    out = [
        f"### {tokens:,} tokens",
        "",
        "| | wall (s) | CPU (s) | peak RSS (MiB) | all walls (s) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, r in best.items():
        walls = ", ".join(f"{x['wall']:.2f}" for x in runs[name])
        out.append(f"| `{name}` | {r['wall']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} | {walls} |")
    a, b = best["compare-masks --write DIR"], best["compare-masks"]
    ratio = a["wall"] / b["wall"]
    pairs = [
        x["wall"] / y["wall"] for x, y in zip(runs["compare-masks --write DIR"], runs["compare-masks"], strict=True)
    ]
    median = sorted(pairs)[len(pairs) // 2]
    cpu = sorted(
        x["cpu"] / y["cpu"] for x, y in zip(runs["compare-masks --write DIR"], runs["compare-masks"], strict=True)
    )
    out += [
        "",
        f"- `--write`: {ratio:.2f}x the command without it, best against best; {median:.2f}x the median of the "
        f"rounds' own ratios ({', '.join(f'{x:.2f}' for x in pairs)}); target <= {TARGET}x: "
        f"{'met' if min(ratio, median) <= TARGET else 'NOT met'}",
        f"- CPU: {cpu[len(cpu) // 2]:.2f}x (median of the rounds; the writer thread encodes on the second core); "
        f"the audit: {a['audit_rows']:,} token rows, {a['audit_mb']:.0f} MiB",
        f"- machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), load average "
        f"{'/'.join(f'{x:.1f}' for x in load[0])} before and {'/'.join(f'{x:.1f}' for x in load[1])} after",
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR") or "/tmp") / "mismatchscope-bench")
    ap.add_argument("--results", type=Path, default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    compile_package()
    sections = []
    with tempfile.TemporaryDirectory(dir=args.cache.parent if args.cache.parent.exists() else None) as scratch:
        for tokens in args.tokens:
            path = bench_file(args.cache, tokens)
            before = os.getloadavg()
            runs = bench(path, args.repeat, Path(scratch))
            lines = table(tokens, runs, (before, os.getloadavg()))
            print("\n".join(lines) + "\n", flush=True)
            sections.append(lines)
    if args.results:
        _append(args.results, args, sections)


def _append(results: Path, args, sections: list[list[str]]) -> None:
    text = [
        f"\n## audit: compare-masks --write vs compare-masks ({datetime.date.today()})\n",
        f"`python benchmarks/bench_audit.py --tokens {' '.join(map(str, args.tokens))} --repeat {args.repeat}`: "
        "every default rule, `bench_analysis.make_file`'s files (100-token sequences, advantage, top-k 5, zstd); "
        "each command a fresh process through the entry point, best of the interleaved rounds. The machine is "
        "shared: compare the ratios within one run, not the seconds across runs.\n",
    ]
    for lines in sections:
        text += ["\n".join(lines), ""]
    text.append(
        f"Python {platform.python_version()}, pyarrow {pa.__version__}; "
        f"{os.cpu_count()} CPU cores ({len(os.sched_getaffinity(0))} usable).\n"
    )
    with open(results, "a") as f:
        f.write("\n".join(text))


if __name__ == "__main__":
    main()
