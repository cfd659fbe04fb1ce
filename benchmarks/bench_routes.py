"""Benchmark: what recording MoE routes costs the trainer, on the bundled tiny-qwen3-moe.

Probes the MoE sample once (transformers sampler, bfloat16), then runs the
whole command ``mismatchscope rescore RUN --out NEW`` with routes recorded
(the default) and with ``--no-routes``, alternating, each a fresh process.
Reports per variant the median scoring time (the manifest's
``timings.scoring_seconds``: the trainer's forwards, route capture and the
route shards included) and the median wall time of the command, and the
ratios in one line.

Target: recording adds < 5% to the trainer's scoring time.

Run: python benchmarks/bench_routes.py [--prompts 8] [-n 4] [--max-tokens 64] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXE = [sys.executable, "-m", "mismatchscope"]


def _run(*args: str) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([*EXE, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def _scoring_seconds(run: Path) -> float:
    return float(json.loads((run / "manifest.json").read_text())["timings"]["scoring_seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="keep the runs in this folder")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-routes-"))
    root.mkdir(parents=True, exist_ok=True)
    prompts = root / "prompts.jsonl"
    lines = (REPO / "sample_data" / "prompts.jsonl").read_text().splitlines()[: args.prompts]
    prompts.write_text("\n".join(lines) + "\n")
    src = root / "probe"
    if not src.exists():
        _run(
            "probe",
            str(REPO / "sample_data" / "tiny-qwen3-moe"),
            "--prompts",
            str(prompts),
            "--out",
            str(src),
            "--sampler",
            "hf",
            "--sampler-dtype",
            "bfloat16",
            "-n",
            str(args.n),
            "--max-tokens",
            str(args.max_tokens),
            "--format",
            "json",
        )
    tokens = json.loads((src / "manifest.json").read_text())["timings"]["tokens"]
    results: dict[str, dict[str, list[float]]] = {v: {"wall": [], "scoring": []} for v in ("routes", "no-routes")}
    for i in range(args.repeat):
        for variant in ("routes", "no-routes"):
            out = root / f"{variant}-{i}"
            shutil.rmtree(out, ignore_errors=True)
            extra = ["--no-routes"] if variant == "no-routes" else []
            wall = _run("rescore", str(src), "--out", str(out), "--format", "json", *extra)
            results[variant]["wall"].append(wall)
            results[variant]["scoring"].append(_scoring_seconds(out))
            assert (out / "routes").is_dir() == (variant == "routes")
    med = {v: {k: statistics.median(x) for k, x in r.items()} for v, r in results.items()}
    for v, m in med.items():
        print(
            f"{v:10s} scoring {m['scoring']:.3f} s  wall {m['wall']:.2f} s  (median of {args.repeat}, {tokens} tokens)"
        )
    scoring = med["routes"]["scoring"] / med["no-routes"]["scoring"]
    wall = med["routes"]["wall"] / med["no-routes"]["wall"]
    print(f"ratio with/without routes: scoring {scoring:.3f} (target < 1.05), whole command {wall:.3f}")


if __name__ == "__main__":
    main()
