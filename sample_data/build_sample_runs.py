"""Build mismatchscope's bundled RL runs: the same short loop under the default and the zero-mismatch profile.

Run from the repository root::

    python sample_data/build_sample_runs.py

It writes ``runs/rl-default/`` and ``runs/rl-zero/`` next to this script:
two Recorder runs of :func:`examples.zero_vs_default_rl.run_loop` (8 steps of
4 prompts x 4 samples, up to 80 tokens, a GRPO-style policy-gradient update
of ``tiny-qwen3`` after each step), with every step's wall time and its
sampling and training seconds. ``timeline``, ``report`` and ``certify`` run on
them, and ``timeline runs/rl-default runs/rl-zero --x wall`` compares them
against wall-clock hours. The loop is the example's: one loop, built once.

The wall times and seconds are this machine's when the runs were built; the
logprobs, tokens and rewards repeat on a rebuild with the same library
versions on the same CPU (the loop is seeded), the clock does not.

It also writes ``runs/multi-turn-tokens/`` and ``runs/multi-turn-messages/``:
two ``probe --turns 3`` runs of the bundled ``tiny-qwen3-chat`` (vLLM float16
against the float32 transformers trainer, the 32 prompts, 2 samples each,
seed 0), one passing token ids between turns and one decoding and encoding
the conversation again (``--turn-ids messages``), for ``report``, ``doctor``
and ``compare-masks --by turn`` to be tried on (docs/multi-turn.md). The
engines' log is left out. ``--measure`` probes the same conversations with
4 samples a prompt into a temporary folder and prints what docs/multi-turn.md
quotes: the conversations and tokens that drift under ``messages`` and the
gap on them, against ``tokens``. ``--only rl|multi-turn|measure`` builds one kind
(``measure``: the measurement alone).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {"rl-default": "default", "rl-zero": "zero"}


def _loop():
    path = HERE.parent / "examples" / "zero_vs_default_rl.py"
    spec = importlib.util.spec_from_file_location("zero_vs_default_rl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MULTI_TURN = {"multi-turn-tokens": "tokens", "multi-turn-messages": "messages"}


def probe_turns(out: Path, mode: str, n: int) -> None:
    """``probe --turns 3`` of the bundled chat checkpoint, with paths relative to the repository (they are
    recorded in the run)."""
    root = HERE.parent
    cmd = [
        sys.executable, "-m", "mismatchscope", "probe", "sample_data/tiny-qwen3-chat",
        "--prompts", "sample_data/prompts.jsonl", "-n", str(n), "--turns", "3", "--turn-ids", mode,
        "--out", str(out.relative_to(root) if out.is_relative_to(root) else out), "--format", "json",
    ]  # fmt: skip
    subprocess.run(cmd, cwd=root, check=True, stdout=subprocess.DEVNULL)
    (out / "engine.log").unlink(missing_ok=True)


def drift(run: Path) -> dict:
    """What the re-encoding did to a run: conversations and tokens whose pairs are misaligned, the gap on them
    and on the rest (from doctor's retokenized finding), and the run's turns."""
    found = subprocess.run(
        [sys.executable, "-m", "mismatchscope", "doctor", str(run), "--format", "json"],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
    )
    doc = json.loads(found.stdout)
    retok = next(f for f in doc["findings"] if f["cause"] == "retokenized")
    report = subprocess.run(
        [sys.executable, "-m", "mismatchscope", "report", str(run), "--format", "json"],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
    )
    rep = json.loads(report.stdout)
    return {
        "tokens": rep["tokens"],
        "conversations": rep["sequences"],
        "by_turn": [(t["bucket"], t["tokens"], t.get("abs_logprob_diff_mean")) for t in rep["breakdowns"]["turn"]],
        "abs_logprob_diff_mean": rep["metrics"]["abs_logprob_diff_mean"],
        "verdict": doc["verdict"],
        "top": doc["top"]["cause"],
        "status": retok["status"],
        "sentence": retok["sentence"],
        "evidence": [(e["statistic"], e["value"]) for e in retok["evidence"]],
        **retok["estimate"],
    }


def multi_turn(measure: bool, bundled: bool = True) -> None:
    for name, mode in MULTI_TURN.items() if bundled else ():
        out = HERE / "runs" / name
        if out.exists():
            shutil.rmtree(out)
        probe_turns(out, mode, 2)
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{out}: {size / 1024:.0f} KiB; doctor: {json.dumps(drift(out))}")
    if measure:
        with tempfile.TemporaryDirectory() as tmp:
            for mode in MULTI_TURN.values():
                out = Path(tmp) / f"measure-{mode}"
                probe_turns(out, mode, 4)
                print(f"measured, 32 prompts x 4, --turn-ids {mode}: {json.dumps(drift(out))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["rl", "multi-turn", "measure"], default=None)
    ap.add_argument("--measure", action="store_true", help="also measure the drift on 4 samples a prompt")
    args = ap.parse_args()
    if args.only != "rl":
        multi_turn(args.measure or args.only == "measure", bundled=args.only != "measure")
    if args.only in ("multi-turn", "measure"):
        return
    sys.path.insert(0, str(HERE.parent))
    loop = _loop()
    for name, profile in RUNS.items():
        out = HERE / "runs" / name
        if out.exists():
            shutil.rmtree(out)
        loop.run_loop(profile, out)
        for lock in (out / "ranks").glob("*.lock"):  # the writer's lock, released: nothing to ship
            lock.unlink()
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{out}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
