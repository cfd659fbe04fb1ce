"""Import speed and memory: a ~2M-token NeMo-RL run vs a bare orjson parse of the same files.

The claim it checks: importing a NeMo-RL run takes at most 1.5x
the time a bare ``orjson.loads`` of every line takes, and peak memory stays
flat in the number of steps.

It writes a synthetic run in NeMo-RL's exact layout (``logs/exp_001/
train_data_step{N}.jsonl``, written with ``json.dumps`` like NeMo-RL's logger:
batch-of-one wrapping, prompt tokens and right padding to the step's longest
sequence, placeholder zeros) to a temp dir, then times, each in a fresh
process so peak RSS belongs to that phase alone:

* ``parse``: read every line and ``orjson.loads`` it, nothing else;
* ``import``: ``import_run("nemo-rl", ...)``, Parquet shards and manifest included;
* ``import`` of the same run twice over (twice the steps), to show peak RSS does not grow with the run;
* ``import`` in one process (``workers=0``), for reference.

Library imports (numpy, pyarrow, orjson) happen before the clock starts in every phase: they are a
one-time cost of any command, not of the data.

Usage::

    python benchmarks/bench_import.py [--tokens 2000000] [--steps 16] [--repeats 3] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np


def generate(root: Path, tokens: int, steps: int, seed: int = 0) -> dict:
    """Write a NeMo-RL-shaped run with about ``tokens`` generated tokens over ``steps`` steps."""
    rng = np.random.default_rng(seed)
    per_step = tokens // steps
    mean_resp = 1000
    samples = max(1, per_step // mean_resp)
    logdir = root / "logs" / "exp_001"
    logdir.mkdir(parents=True)
    generated = 0
    for step in range(1, steps + 1):
        prompt_lens = rng.integers(60, 300, samples)
        resp_lens = np.clip(rng.gamma(2.0, mean_resp / 2.0, samples).astype(int), 8, 4000)
        width = int((prompt_lens + resp_lens).max())
        adv_per_sample = rng.normal(0, 1, samples)
        with open(logdir / f"train_data_step{step}.jsonl", "w") as fh:
            for i in range(samples):
                pl, rl = int(prompt_lens[i]), int(resp_lens[i])
                n = pl + rl
                ids = np.zeros(width, dtype=np.int64)
                ids[:n] = rng.integers(0, 150_000, n)
                mask = np.zeros(width, dtype=np.int64)
                mask[pl:n] = 1
                # float32 values as torch .tolist() hands them to json.dumps
                gen = np.zeros(width, dtype=np.float32)
                gen[pl:n] = -rng.exponential(0.6, rl).astype(np.float32)
                prev = np.zeros(width, dtype=np.float32)
                prev[1:n] = -rng.exponential(0.6, n - 1).astype(np.float32)
                prev[pl:n] = gen[pl:n] + rng.normal(0, 0.01, rl).astype(np.float32)
                adv = np.zeros(width, dtype=np.float32)
                adv[pl:n] = np.float32(adv_per_sample[i])
                rec = {
                    "content": [f"sample {i} of step {step}"],
                    "rewards": [float(adv_per_sample[i] > 0)],
                    "input_lengths": [n],
                    "token_ids": [ids.tolist()],
                    "token_loss_mask": [mask.tolist()],
                    "sample_loss_mask": [1.0],
                    "advantages": [adv.tolist()],
                    "generation_logprobs": [gen.tolist()],
                    "prev_logprobs": [prev.tolist()],
                    "idx": i,
                }
                fh.write(json.dumps(rec) + "\n")
                generated += rl
    files = sorted(logdir.glob("*.jsonl"))
    return {
        "generated_tokens": generated,
        "steps": steps,
        "samples_per_step": samples,
        "bytes": sum(f.stat().st_size for f in files),
    }


def phase_parse(logs: Path) -> None:
    import orjson

    files = sorted(logs.rglob("train_data_step*.jsonl"))
    _cpu_start()
    t0 = time.perf_counter()
    lines = 0
    for f in files:
        with open(f, "rb") as fh:
            for raw in fh:
                orjson.loads(raw)
                lines += 1
    _report(time.perf_counter() - t0, lines=lines)


def phase_import(logs: Path, out: Path, copies: int, workers: int | None = None) -> None:
    import mismatchscope.importers._jsonl
    import mismatchscope.importers._writer  # noqa: F401
    from mismatchscope.importers import import_run

    src = logs
    if copies > 1:  # a run with copies x the steps: link the files again under later step numbers
        src = out.parent / f"logs_x{copies}"
        (src / "exp_001").mkdir(parents=True)
        files = sorted(logs.glob("exp_001/train_data_step*.jsonl"), key=lambda p: int(p.stem[15:]))
        for k in range(copies):
            for i, f in enumerate(files, 1):
                os.symlink(f, src / "exp_001" / f"train_data_step{k * len(files) + i}.jsonl")
    _cpu_start()
    t0 = time.perf_counter()
    result = import_run("nemo-rl", src, out, workers=workers)
    _report(time.perf_counter() - t0, tokens=result.tokens_written, shards=result.shards, steps=result.steps)


def phase_encode(shards: Path, scratch: Path) -> None:
    """Re-encode the imported shards through ``schema.write_table``: the floor the Parquet output sets."""
    import pyarrow.parquet as pq

    from mismatchscope.schema import decode_metadata, write_table

    tables = [pq.read_table(p) for p in sorted(shards.glob("*.parquet"))]
    _cpu_start()
    t0 = time.perf_counter()
    for i, t in enumerate(tables):
        write_table(
            scratch / f"part-{i:05d}.parquet",
            {n: t.column(n).combine_chunks() for n in t.column_names},
            decode_metadata(t.schema.metadata),
        )
    _report(time.perf_counter() - t0)


_CPU0 = [0.0]


def _cpu_start() -> None:
    me = resource.getrusage(resource.RUSAGE_SELF)
    _CPU0[0] = me.ru_utime + me.ru_stime


def _report(seconds: float, **extra) -> None:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime - _CPU0[0] + kids.ru_utime + kids.ru_stime  # this phase, worker processes included
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": cpu,
                "peak_rss_mib": me.ru_maxrss / 1024,
                "workers_peak_rss_mib": kids.ru_maxrss / 1024,
                **extra,
            }
        )
    )


def _run(*args: str) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    cp = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env)
    if cp.returncode != 0:
        raise SystemExit(cp.stderr)
    return json.loads(cp.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--results", type=Path, default=None, help="append a section to this Markdown file")
    ap.add_argument("--phase", choices=["parse", "import", "encode"], help=argparse.SUPPRESS)
    ap.add_argument("--copies", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase == "parse":
        return phase_parse(Path(args.paths[0]))
    if args.phase == "encode":
        return phase_encode(Path(args.paths[0]), Path(args.paths[1]))
    if args.phase == "import":
        return phase_import(Path(args.paths[0]), Path(args.paths[1]), args.copies, args.workers)

    tmp = Path(tempfile.mkdtemp(prefix="bench_import_"))
    try:
        t0 = time.perf_counter()
        info = generate(tmp, args.tokens, args.steps)
        print(
            f"generated {info['generated_tokens']:,} tokens in {args.steps} steps "
            f"({info['bytes'] / 2**20:.0f} MiB of JSONL) in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
        )
        logs = tmp / "logs"
        load = os.getloadavg()[0]
        parse, imp = [], []
        for r in range(args.repeats):  # interleaved, so both see the same machine load
            parse.append(_run("--phase", "parse", str(logs)))
            out = tmp / f"out{r}"
            imp.append(_run("--phase", "import", str(logs), str(out)))
            shutil.rmtree(out)
        double = _run("--phase", "import", "--copies", "2", str(logs), str(tmp / "out_double"))
        serial = _run("--phase", "import", "--workers", "0", str(logs), str(tmp / "out_serial"))
        (tmp / "reencoded").mkdir()
        encode = _run("--phase", "encode", str(tmp / "out_serial" / "tokens"), str(tmp / "reencoded"))
        best_parse = min(p["seconds"] for p in parse)
        best_imp = min(i["seconds"] for i in imp)
        cpu_parse = min(p["cpu_seconds"] for p in parse)
        cpu_imp = min(i["cpu_seconds"] for i in imp)
        summary = {
            **info,
            "cores": os.cpu_count(),
            "load_average_1min": load,
            "repeats": args.repeats,
            "parse_seconds": best_parse,
            "import_seconds": best_imp,
            "ratio": best_imp / best_parse,
            "paired_ratios": sorted(i["seconds"] / p["seconds"] for p, i in zip(parse, imp, strict=True)),
            "parse_cpu_seconds": cpu_parse,
            "import_cpu_seconds": cpu_imp,
            "cpu_ratio": cpu_imp / cpu_parse,
            "import_serial_seconds": serial["seconds"],
            "import_serial_cpu_seconds": serial["cpu_seconds"],
            "encode_seconds": encode["seconds"],
            "encode_cpu_seconds": encode["cpu_seconds"],
            "parse_peak_rss_mib": max(p["peak_rss_mib"] for p in parse),
            "import_peak_rss_mib": max(i["peak_rss_mib"] for i in imp),
            "import_workers_peak_rss_mib": max(i["workers_peak_rss_mib"] for i in imp),
            "double_steps": double["steps"],
            "double_peak_rss_mib": double["peak_rss_mib"],
            "double_workers_peak_rss_mib": double["workers_peak_rss_mib"],
            "tokens_written": imp[0]["tokens"],
            "shards": imp[0]["shards"],
        }
        print(json.dumps(summary, indent=2))
        if args.results:
            append_results(args.results, summary)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def append_results(path: Path, s: dict) -> None:
    import numpy  # noqa: F401  (version below)
    import pyarrow

    try:
        import orjson

        orjson_version = orjson.__version__
    except ImportError:  # pragma: no cover
        orjson_version = "absent"
    met = "meets" if s["ratio"] <= 1.5 else "misses"
    floor = 1 + s["encode_cpu_seconds"] / s["parse_cpu_seconds"]
    floor_note = (
        "the import can meet 1.5x in wall time only by running on both cores (parse workers, Parquet "
        "encoding on a thread)."
        if floor > 1.5
        else "there is room for one process to meet 1.5x."
    )
    busy = (
        "other jobs were competing for the cores"
        if s["load_average_1min"] > s["cores"] - 0.5
        else "the cores were mostly free"
    )
    text = f"""
## import: NeMo-RL JSONL vs a bare orjson parse ({date.today().isoformat()})

`python benchmarks/bench_import.py --results benchmarks/RESULTS.md`: a synthetic run in NeMo-RL's exact
layout ({s["steps"]} steps x {s["samples_per_step"]} samples, {s["generated_tokens"]:,} generated tokens, prompt
tokens and right padding included: {s["bytes"] / 2**20:.0f} MiB of JSONL). Each phase runs in a fresh process;
best of {s["repeats"]} interleaved repeats. CPU = user + system of the process and its workers.

| | wall (s) | CPU (s) | peak RSS (MiB) |
|---|---:|---:|---:|
| bare `orjson.loads` of every line | {s["parse_seconds"]:.2f} | {s["parse_cpu_seconds"]:.2f} | {s["parse_peak_rss_mib"]:.0f} |
| `import_run("nemo-rl", ...)`, {s["shards"]} shard(s) + manifest (default: parse workers) | \
{s["import_seconds"]:.2f} | {s["import_cpu_seconds"]:.2f} | {s["import_peak_rss_mib"]:.0f} \
(+ {s["import_workers_peak_rss_mib"]:.0f} per worker) |
| same, `workers=0` (one process; Parquet encoding on a thread) | {s["import_serial_seconds"]:.2f} | \
{s["import_serial_cpu_seconds"]:.2f} | |
| same run twice over ({s["double_steps"]} steps) | | | {s["double_peak_rss_mib"]:.0f} \
(+ {s["double_workers_peak_rss_mib"]:.0f} per worker) |
| only encoding the output: `schema.write_table` on the imported shards | {s["encode_seconds"]:.2f} | \
{s["encode_cpu_seconds"]:.2f} | |

**Wall-time ratio import / parse: {s["ratio"]:.2f}** (best against best; {met} the 1.5 target). Ratio within each
interleaved pair: {", ".join(f"{r:.2f}" for r in s["paired_ratios"])}. CPU-time ratio {s["cpu_ratio"]:.2f}.
Peak memory with {s["double_steps"]} steps is that of {s["steps"]}: flat in the number of steps.
Parsing plus encoding the output shards alone already cost {floor:.2f}x the parse in CPU: {floor_note}

Machine: {s["cores"]} CPU cores, 1-minute load average {s["load_average_1min"]:.1f} when the run started
({busy}); Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pyarrow.__version__},
orjson {orjson_version}.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        if path.stat().st_size == 0:
            fh.write("# Benchmark results\n\nEach section is appended by the benchmark it names.\n")
        fh.write(text)


if __name__ == "__main__":
    main()
