"""Benchmark: the default ``diagnose`` against the sum of its parts run alone.

(a) Overhead. The whole default diagnose on the bundled sample (one process,
    its sampler configurations each in a worker process) against the same
    work as separate commands: one ``probe`` per sampler configuration (the
    baseline and every sampler-side variant, with the variant's options), one
    ``rescore`` per trainer-side variant, and the float64 reference forward
    of the baseline's tokens. Engines run in-process in every case
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), as diagnose's workers run them.
    diagnose also does work the parts do not (a repeat sampling, three
    prefill scorings, three trainer scorings, the analysis of every pair), so
    the ratio is an upper bound on its orchestration overhead. Target <= 1.1.
(b) Trainer-side variants reuse the baseline's samples: each one's wall time
    (rescore, from the diagnose payload) against one probe's. Target <= 0.5.

Run: python benchmarks/bench_diagnose.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_data" / "tiny-qwen3"
PROMPTS = REPO / "sample_data" / "prompts.jsonl"

REFERENCE = r"""
import sys, time
from pathlib import Path
t0 = time.perf_counter()
from mismatchscope.diagnose.pairs import load_tokens, prompt_ids
from mismatchscope.diagnose.reference import load_reference, reference_rows
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.types import SamplingConfig
run = Path(sys.argv[1])
ref = load_reference(inspect_checkpoint(Path(sys.argv[2])))
reference_rows(ref, load_tokens(run), prompt_ids(run), SamplingConfig(max_tokens=1))
print(time.perf_counter() - t0)
"""


def _env() -> dict:
    env = dict(os.environ)
    env.update(
        {
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    return env


def _timed(cmd: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env or _env())
    if r.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def _probe_args(changes: dict) -> list[str]:
    """The probe options that reproduce one sampler configuration of the default matrix."""
    args = []
    for key, value in changes.items():
        if key == "sampler.dtype":
            args += ["--sampler-dtype", value]
        elif key == "sampler.fp32_lm_head":
            args += ["--sampler-fp32-lm-head"] if value else []
        elif key == "sampler.enforce_eager":
            args += ["--enforce-eager" if value else "--no-enforce-eager"]
        elif key == "sampler.max_num_seqs":
            args += ["--max-num-seqs", str(value)]
        elif key.startswith("sampler.engine."):
            args += ["--engine-arg", f"{key.removeprefix('sampler.engine.')}={json.dumps(value)}"]
        else:
            raise SystemExit(f"no probe option for {key}")
    return args


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    root = a.out or Path(tempfile.mkdtemp(prefix="bench-diagnose-"))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    exe = [sys.executable, "-m", "mismatchscope"]
    load0 = os.getloadavg()[0]

    whole = _timed([*exe, "diagnose", "--out", str(root / "diag"), "--format", "json"])
    payload = json.loads((root / "diag" / "diagnose.json").read_text())

    parts: dict[str, float] = {}
    parts["probe baseline"] = _timed([*exe, "probe", "--out", str(root / "p-baseline"), "--format", "json"])
    for v in payload["variants"]:
        if v["status"] != "ok":
            continue
        slug = v["run_dir"].rsplit("/", 1)[-1]
        if v["side"] == "sampler":
            parts[f"probe {v['name']}"] = _timed(
                [*exe, "probe", "--out", str(root / f"p-{slug}"), "--format", "json", *_probe_args(v["changes"])]
            )
        else:
            t = v["changes"]
            args = []
            if "trainer.dtype" in t:
                args += ["--trainer-dtype", t["trainer.dtype"]]
            if "trainer.attn_implementation" in t:
                args += ["--attn-implementation", t["trainer.attn_implementation"]]
            if t.get("trainer.fp32_lm_head"):
                args += ["--trainer-fp32-lm-head"]
            parts[f"rescore {v['name']}"] = _timed(
                [*exe, "rescore", str(root / "p-baseline"), "--out", str(root / f"r-{slug}"), "--format", "json", *args]
            )
    parts["reference forward"] = _timed([sys.executable, "-c", REFERENCE, str(root / "p-baseline"), str(SAMPLE)])
    total = sum(parts.values())
    probe_wall = parts["probe baseline"]
    trainer_rows = [
        (v["name"], v["throughput"]["wall_s"])
        for v in payload["variants"]
        if v["status"] == "ok" and v["side"] == "trainer"
    ]
    result = {
        "load_average_start": load0,
        "load_average_end": os.getloadavg()[0],
        "diagnose_wall_s": whole,
        "parts": parts,
        "parts_sum_s": total,
        "ratio": whole / total,
        "trainer_variants": {n: {"wall_s": w, "vs_probe": w / probe_wall} for n, w in trainer_rows},
        "skipped": [v["name"] for v in payload["variants"] if v["status"] == "skipped"],
        "failed": [v["name"] for v in payload["variants"] if v["status"] == "failed"],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
