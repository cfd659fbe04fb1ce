"""Benchmark: what the Recorder and the Monitor cost a training step, on the CPU.

(a) ``Recorder.add()`` per step against the step's own scoring time, at a
    realistic RL shape (batch 64 x 1024 tokens, about 75% of them under the
    mask, random lengths). The scoring time is a plain trainer forward plus
    log-softmax and gather of the sampled tokens' logprobs, timed in the same
    process on the bundled checkpoint (2 layers, hidden 128, vocabulary 384,
    positions extended to 1024): a far cheaper model than any real one, so the
    overhead shown is an upper bound. Inputs are the torch tensors the forward
    produced (float32, like a trainer's logprobs) and a bool mask. Target: add()
    below 2% of scoring.
(b) Writer throughput: steps added back to back (queue large enough not to
    wait), timed from the first add() to close() returning: the steps per
    second the background writer sustains. Target: at least 1 step/s.
(c) Monitor cost per step: the per-step metrics at that shape, and the online
    change detection over the history so far (it grows with the number of
    steps, up to the window of 256).

Run: python benchmarks/bench_recorder.py [--batch 64 --length 1024 --steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_data" / "tiny-qwen3"


def scoring_inputs(batch: int, length: int, seed: int = 0):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(SAMPLE, dtype=torch.float32, max_position_embeddings=length).eval()
    ids = torch.randint(3, model.config.vocab_size, (batch, length))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(length // 2, length + 1, batch)
    mask = torch.from_numpy(np.arange(length)[None, :] < lengths[:, None])
    return model, ids, mask


def score(model, ids):
    import torch

    with torch.no_grad():
        logits = model(ids).logits[:, :-1]
        return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]


def part_a_b(batch: int, length: int, steps: int) -> dict:
    import torch

    from mismatchscope import Recorder

    torch.set_num_threads(2)
    model, ids, mask = scoring_inputs(batch, length)
    score(model, ids)  # warm-up
    t_score = []
    for _ in range(3):
        t0 = time.perf_counter()
        trainer_lp = score(model, ids)
        t_score.append(time.perf_counter() - t0)
    sampler_lp = (trainer_lp + 0.01 * torch.randn_like(trainer_lp)).clamp(max=0.0)
    mask = mask[:, 1:]
    adv = torch.randn(batch)
    tokens = int(mask.sum())
    with tempfile.TemporaryDirectory() as tmp:
        t_add = []
        # (a) one add per step, spaced as a training loop would space them (the writer never waits)
        with Recorder(Path(tmp) / "a", max_pending=steps + 1) as rec:
            for step in range(steps):
                t0 = time.perf_counter()
                rec.add(step, sampler_lp, trainer_lp, mask, advantages=adv, token_ids=ids[:, 1:])
                t_add.append(time.perf_counter() - t0)
                rec.flush()
        # (b) back to back: the writer is the bottleneck
        t0 = time.perf_counter()
        with Recorder(Path(tmp) / "b", max_pending=steps + 1) as rec:
            for step in range(steps):
                rec.add(step, sampler_lp, trainer_lp, mask, advantages=adv, token_ids=ids[:, 1:])
        t_write = time.perf_counter() - t0
        shard_mb = sum(f.stat().st_size for f in (Path(tmp) / "b" / "tokens").glob("*.parquet")) / steps / 1e6
    score_s, add_s = min(t_score), statistics.median(t_add)
    return {
        "tokens": tokens,
        "score_s": score_s,
        "add_s": add_s,
        "add_max_s": max(t_add),
        "ratio": add_s / score_s,
        "writer_steps_per_s": steps / t_write,
        "shard_mb": shard_mb,
        "sampler_lp": sampler_lp,
        "trainer_lp": trainer_lp,
        "mask": mask,
    }


def part_c(a: dict, history: int) -> dict:
    from mismatchscope import Monitor

    mon = Monitor()
    t0 = time.perf_counter()
    mon.add(0, a["sampler_lp"], a["trainer_lp"], a["mask"])
    first = time.perf_counter() - t0
    metrics = []
    for step in range(1, 4):
        t0 = time.perf_counter()
        mon.add(step, a["sampler_lp"], a["trainer_lp"], a["mask"])
        metrics.append(time.perf_counter() - t0)
    # detection over a growing history: small steps, so the time is the detectors'
    rng = np.random.default_rng(1)
    small = Monitor()
    by_n: dict[int, float] = {}
    for step in range(history):
        lq = np.log(rng.uniform(0.05, 1.0, (8, 64)))
        lp = np.minimum(lq + rng.normal(0, 0.05, lq.shape), 0.0)
        t0 = time.perf_counter()
        small.add(step, lq, lp)
        dt = time.perf_counter() - t0
        if step + 1 in (16, 17, 32, 128, 256, history):
            by_n[step + 1] = dt
    base = statistics.median([by_n[min(by_n)]])
    return {"first_s": first, "metrics_s": statistics.median(metrics), "detect_by_n": by_n, "small_step_s": base}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--history", type=int, default=300)
    a = ap.parse_args()
    r = part_a_b(a.batch, a.length, a.steps)
    print(f"(a) shape {a.batch} x {a.length}, {r['tokens']:,} tokens under the mask")
    print(f"    scoring (forward + log-softmax + gather), best of 3: {r['score_s']:.3f} s")
    print(
        f"    Recorder.add(), median of {a.steps}: {r['add_s'] * 1e3:.2f} ms (max {r['add_max_s'] * 1e3:.2f} ms)"
        f" = {100 * r['ratio']:.2f}% of scoring (target < 2%)"
    )
    print(
        f"(b) writer: {r['writer_steps_per_s']:.1f} steps/s sustained, {r['shard_mb']:.2f} MB per shard (target >= 1)"
    )
    c = part_c(r, a.history)
    print(
        f"(c) Monitor at {a.batch} x {a.length}: first call {c['first_s'] * 1e3:.0f} ms (imports), then "
        f"{c['metrics_s'] * 1e3:.1f} ms per step for the metrics"
    )
    for n, dt in c["detect_by_n"].items():
        print(f"    Monitor.add on an 8 x 64 step with {n} steps of history: {dt * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
