"""Benchmark: ``gate`` on two runs against ``report`` on one.

Writes two 10-million-token files (100,000 sequences each, top-k 5 columns;
``bench_analysis.make_file`` with seeds 0 and 1), then measures, each command
in a fresh subprocess (the real CLI entry point, stdout discarded):

  (a) report on the baseline file
  (b) gate CANDIDATE --baseline BASELINE with the built-in limits and the
      bootstrap (1000 resamples of 100,000 sequences per file)
  (c) the same gate plus a point-estimate limit (ratio_quantiles.0.99), which
      makes the gate run the full report pass on both files

Target: (b) and (c) within 3x the time of (a).

Run: python benchmarks/bench_gate.py [--tokens 10000000] [--keep DIR] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analysis import make_file

CHILD = r"""
import contextlib, io, json, os, resource, sys, time
from mismatchscope.cli.main import main
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
code = 0
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
    try:
        main(args)
    except SystemExit as e:
        code = e.code or 0
dt = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": dt, "cpu": ru.ru_utime + ru.ru_stime, "exit": code, "peak_rss_mb": ru.ru_maxrss / 1024,
                  "stderr": err.getvalue()[-500:]}))
"""


def run_once(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["exit"] not in (0, 1):
        raise SystemExit(f"mismatchscope {' '.join(args)} exited {r['exit']}: {r['stderr']}")
    return r


def measure(commands: dict[str, list[str]], repeat: int) -> dict[str, dict]:
    """Interleaved repeats (every command once per round), best wall time of each; the runs list keeps them all."""
    best: dict[str, dict] = {}
    for _ in range(repeat):
        for label, args in commands.items():
            r = run_once(args)
            best.setdefault(label, {"runs": []})["runs"].append(r["seconds"])
            if "seconds" not in best[label] or r["seconds"] < best[label]["seconds"]:
                best[label].update(r)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--sequences", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="reuse (or write) the two files in DIR")
    ap.add_argument("--results", type=Path, default=None, help="append a section to this Markdown file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        paths = [root / f"bench_gate_{name}.parquet" for name in ("baseline", "candidate")]
        for seed, path in enumerate(paths):
            if not path.exists():
                t0 = time.perf_counter()
                make_file(path, args.tokens, args.sequences, seed=seed)
                print(
                    f"wrote {path.name}: {args.tokens:,} tokens in {time.perf_counter() - t0:.1f} s ({path.stat().st_size / 1e6:.0f} MB)"
                )
        base, cand = map(str, paths)
        load = os.getloadavg()[0]
        res = measure(
            {
                "report": ["report", base, "--format", "json"],
                "gate": ["gate", cand, "--baseline", base, "--format", "json"],
                "gate_full": [
                    "gate",
                    cand,
                    "--baseline",
                    base,
                    "--format",
                    "json",
                    "--limit",
                    "ratio_quantiles.0.99<=10",
                ],
            },
            args.repeat,
        )
        rows = [
            ("`report` on one file", res["report"], None),
            ("`gate`, built-in limits, bootstrap 1000", res["gate"], res["gate"]["seconds"] / res["report"]["seconds"]),
            (
                "`gate` + a quantile limit (full report pass on both)",
                res["gate_full"],
                res["gate_full"]["seconds"] / res["report"]["seconds"],
            ),
        ]
        for label, r, ratio in rows:
            print(
                f"{label:52s} {r['seconds']:6.2f} s (CPU {r['cpu']:.2f} s)  peak RSS {r['peak_rss_mb']:.0f} MB"
                + (f"  ratio {ratio:.2f} (target <= 3)" if ratio else "")
            )
        if args.results:
            _append(args.results, rows, args, load)


def _append(path: Path, rows, args, load: float) -> None:
    import numpy
    import pyarrow

    lines = [
        "",
        f"## gate: two runs with bootstrap vs report on one ({time.strftime('%Y-%m-%d')})",
        "",
        f"`python benchmarks/bench_gate.py --results {path}`: two files of {args.tokens:,} tokens "
        f"({args.sequences:,} sequences each, top-k 5 columns; `bench_analysis.make_file`, seeds 0 and 1). Each command "
        f"runs in a fresh process through the CLI entry point; best of {args.repeat} interleaved repeats. "
        "The gate's default limits need no report pass (means and rule rates come from per-sequence sums); "
        "a quantile limit forces the full report on both files.",
        "",
        "| | wall (s) | CPU (s) | peak RSS (MiB) | ratio to report | all runs (s) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, r, ratio in rows:
        lines.append(
            f"| {label} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['peak_rss_mb']:.0f} | "
            f"{'' if ratio is None else f'{ratio:.2f}'} | {', '.join(f'{x:.2f}' for x in r['runs'])} |"
        )
    lines += [
        "",
        f"Target: gate within 3x report. Machine: {os.cpu_count()} CPU cores, 1-minute load average {load:.1f} when the run "
        f"started; Python {sys.version.split()[0]}, numpy {numpy.__version__}, pyarrow {pyarrow.__version__}.",
        "",
    ]
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
