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
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
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


def main() -> None:
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
