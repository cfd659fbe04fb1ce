"""Benchmark: what recording each weight file's own sha256 costs a probe's checkpoint check.

Every probe has always hashed its checkpoint once (one sha256 over the name,
size and bytes of every file: the digest a run records and ``--resume`` and
``gate`` compare). The provenance record adds each file's own sha256, the
number ``sha256sum`` prints. Three ways to get both, over the same files, best
of ``--repeat`` interleaved repeats, in this process:

  checkpoint digest alone      the hash every probe ran before (the baseline)
  both, one thread             each block fed to both digests in turn
  both, two threads (chosen)   ``execution.digests.hash_files``: the file's own
                               digest on a second thread while this one feeds
                               the checkpoint's (hashlib releases the GIL)

The files are read from the page cache after the first pass (a checkpoint
just written, or read twice): what is timed is the hashing, the part the
second digest adds. Both ways of getting the two digests cost twice the
baseline's CPU; the target is the chosen way within 15% of the baseline's
wall time where a second core is free (on a machine whose cores are all
busy, the threads cannot help, and the table says so with its load average).

Run: python benchmarks/bench_weights_digest.py [--gib 1] [--files 4] [--repeat 5] [--dir DIR] [--results FILE]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mismatchscope.execution.digests import hash_files

BLOCK = 4 << 20


def checkpoint_only(root: Path, names: list[str]) -> str:
    digest = hashlib.sha256()
    for name in names:
        path = root / name
        digest.update(name.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
        with open(path, "rb") as f:
            while block := f.read(BLOCK):
                digest.update(block)
    return digest.hexdigest()


def both_one_thread(root: Path, names: list[str]) -> tuple[str, dict[str, str]]:
    combined = hashlib.sha256()
    own = {}
    for name in names:
        path = root / name
        combined.update(name.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(BLOCK):
                combined.update(block)
                digest.update(block)
        own[name] = digest.hexdigest()
    return combined.hexdigest(), own


def make_files(root: Path, gib: float, files: int) -> list[str]:
    size = int(gib * (1 << 30)) // files
    names = []
    chunk = os.urandom(1 << 20)
    for i in range(files):
        name = f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        path = root / name
        if not path.exists() or path.stat().st_size != size:
            with open(path, "wb") as f:
                for _ in range(size // len(chunk)):
                    f.write(chunk)
                f.write(chunk[: size % len(chunk)])
        names.append(name)
    return names


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the synthetic shards are written (default: a temporary folder)")
    ap.add_argument("--results", default=None, help="append the table to this Markdown file")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-digest-") as scratch:
        root = Path(args.dir or scratch)
        root.mkdir(parents=True, exist_ok=True)
        names = make_files(root, args.gib, args.files)
        checkpoint_only(root, names)  # warm the page cache: the hashing is what is compared
        ways = {
            "checkpoint digest alone": lambda: checkpoint_only(root, names),
            "both, one thread": lambda: both_one_thread(root, names),
            "both, two threads (chosen)": lambda: hash_files(root, names),
        }
        best = dict.fromkeys(ways, float("inf"))
        cpu = dict.fromkeys(ways, float("inf"))
        for _ in range(args.repeat):
            for name, fn in ways.items():
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
                cpu[name] = min(cpu[name], time.process_time() - c0)
        assert hash_files(root, names)[0] == checkpoint_only(root, names)
    base = best["checkpoint digest alone"]
    head = f"{args.gib:g} GiB in {args.files} files, best of {args.repeat}, {os.cpu_count()} cores, load {load:.1f}"
    print(head)
    print(f"{'way':<30} {'wall s':>8} {'x base':>7} {'GiB/s':>7} {'cpu s':>7}")
    for name in ways:
        print(f"{name:<30} {best[name]:8.2f} {best[name] / base:7.2f} {args.gib / best[name]:7.2f} {cpu[name]:7.2f}")
    if args.results:
        rows = [f"| {name} | {best[name]:.2f} | {best[name] / base:.2f} | {cpu[name]:.2f} |" for name in ways]
        section = [
            "",
            f"## weights digest: each file's sha256 beside the checkpoint's ({datetime.date.today()})",
            "",
            f"`python benchmarks/bench_weights_digest.py --gib {args.gib:g} --files {args.files} "
            f"--repeat {args.repeat}`: {head} (1-minute load average when the run started).",
            "",
            "| way | wall (s) | x base | CPU (s) |",
            "|---|---:|---:|---:|",
            *rows,
            "",
        ]
        with open(args.results, "a") as f:
            f.write("\n".join(section))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
