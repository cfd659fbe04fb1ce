"""Benchmark: the probe's trainer scoring and the whole probe, on the CPU.

(a) Scoring vs a plain forward returning logits, on a config-built (random)
    Qwen3-style model (default hidden 1024, 4 layers; ``--hidden 512 --layers 2``
    is a stress case where the lm_head dwarfs the decoder) with a 32k
    vocabulary, batch 8 x length 2048. Target:
    time ratio <= 1.2. Peak memory of scoring must not grow with
    vocab x length: shown against the naive computation (full fp32 logits,
    log_softmax, gather). Each measurement runs in its own process so peak
    RSS is its own.
(b) The whole probe (``run_probe``) vs vLLM generation alone plus scoring
    alone, on the bundled sample checkpoint. Target: ratio <= 1.15.

Run: python benchmarks/bench_probe.py [--part a|b|both] [--batch 8 --length 2048 --vocab 32000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_data" / "tiny-qwen3"

CHILD_A = r"""
import json, resource, sys, time
import torch
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.trainer import HFTrainer
from mismatchscope.probe.types import SamplingConfig, ScoreRequest, TrainerConfig
mode, path, batch, length = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
info = inspect_checkpoint(path)
trainer = HFTrainer(info, TrainerConfig(dtype="float32", batch_tokens=batch * length))
g = torch.Generator().manual_seed(1)
ids = torch.randint(0, info.vocab_size, (batch, length), generator=g)
prompt = 16
reqs = [ScoreRequest(ids[i, :prompt].tolist(), ids[i, prompt:].tolist(), [[int(t)] * 5 for t in ids[i, prompt:]]) for i in range(batch)]
sampling = SamplingConfig(top_k_logprobs=5, logprobs_mode="raw_logprobs")
model = trainer.model
def run():
    with torch.inference_mode():
        if mode == "forward":
            return model(input_ids=ids).logits
        if mode == "naive":
            logits = model(input_ids=ids).logits.float()
            lp = torch.log_softmax(logits, dim=-1)
            return lp[:, prompt - 1:-1].gather(-1, ids[:, prompt:, None])
        return trainer.score(reqs, sampling)
if mode == "score":
    trainer.score(reqs[:1], sampling)  # one-time head-path self-check outside the timing
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
best = None
for _ in range(2):
    t0 = time.perf_counter(); out = run(); dt = time.perf_counter() - t0
    del out
    best = dt if best is None else min(best, dt)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": best, "peak_rss_mb": peak / 1024, "added_peak_mb": (peak - base) / 1024}))
"""

CHILD_B = r"""
import json, os, sys, time, tempfile
from pathlib import Path
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.tokenizer import load_tokenizer, tokenize_prompts
from mismatchscope.probe.prompts import load_prompts
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, ScoreRequest, TrainerConfig
mode, ckpt, prompts_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
sampling = SamplingConfig(n=4, max_tokens=16, top_k_logprobs=5, seed=0)
scfg, tcfg = SamplerConfig(kind="vllm", dtype="float16"), TrainerConfig(dtype="float32")
if __name__ == "__main__":
    t0 = time.perf_counter()
    if mode == "probe":
        from mismatchscope.probe.options import ProbeOptions
        from mismatchscope.probe.command import run_probe
        run_probe(ProbeOptions(ckpt, prompts_path, Path(tempfile.mkdtemp()) / "run", sampling, scfg, tcfg))
        print(json.dumps({"seconds": time.perf_counter() - t0})); sys.exit(0)
    info = inspect_checkpoint(ckpt)
    tok = load_tokenizer(ckpt)
    prompts = load_prompts(prompts_path)
    ids = tokenize_prompts(tok, [p.text for p in prompts], max_model_len=info.max_model_len, max_tokens=16)
    if mode == "generate":
        from mismatchscope.probe.samplers import make_sampler
        s = make_sampler(scfg, info, sampling=sampling)
        comps = s.sample(ids, sampling)
        s.close()
        Path(sys.argv[4]).write_text(json.dumps([[c.prompt_index, c.token_ids, c.topk_ids] for c in comps]))
    else:
        from mismatchscope.probe.trainer import HFTrainer
        comps = json.loads(Path(sys.argv[4]).read_text())
        t0 = time.perf_counter()
        tr = HFTrainer(info, tcfg)
        tr.score([ScoreRequest(ids[p], toks, topk) for p, toks, topk in comps], sampling)
    print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"child failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def build_random_checkpoint(dest: Path, vocab: int, length: int, hidden: int = 512, layers: int = 2) -> Path:
    """A config-built Qwen3-style model (random weights, no download) with the sample tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 128),
        head_dim=64,
        max_position_embeddings=length,
        tie_word_embeddings=False,
    )
    Qwen3ForCausalLM(cfg).save_pretrained(dest, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SAMPLE / f, dest / f)
    return dest


def part_a(batch: int, length: int, vocab: int, hidden: int, layers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = build_random_checkpoint(Path(tmp) / "ckpt", vocab, length, hidden, layers)
        res = {m: child(CHILD_A, m, str(ckpt), str(batch), str(length)) for m in ("forward", "score", "naive")}
    full_gb = batch * length * vocab * 4 / 1e9
    print(
        f"(a) batch {batch} x length {length}, vocab {vocab}, hidden {hidden}, {layers} layers ([B,T,V] fp32 = {full_gb:.1f} GB)"
    )
    for m, r in res.items():
        print(
            f"    {m:8s} {r['seconds']:7.2f} s   peak RSS {r['peak_rss_mb']:7.0f} MB (+{r['added_peak_mb']:.0f} MB during the pass)"
        )
    print(f"    scoring / plain forward = {res['score']['seconds'] / res['forward']['seconds']:.2f} (target <= 1.2)")
    print(
        f"    extra peak: scoring {res['score']['added_peak_mb']:.0f} MB vs naive log-softmax {res['naive']['added_peak_mb']:.0f} MB"
    )


def part_b() -> None:
    prompts = REPO / "sample_data" / "prompts.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        comps = Path(tmp) / "completions.json"
        # best of two interleaved rounds: the first engine start after installing pays one-off cache warm-up
        runs = [
            [
                child(CHILD_B, "generate", str(SAMPLE), str(prompts), str(comps)),
                child(CHILD_B, "score", str(SAMPLE), str(prompts), str(comps)),
                child(CHILD_B, "probe", str(SAMPLE), str(prompts)),
            ]
            for _ in range(2)
        ]
        gen, score, probe = (min((r[i] for r in runs), key=lambda x: x["seconds"]) for i in range(3))
    total = gen["seconds"] + score["seconds"]
    print("(b) sample checkpoint, 32 prompts x n=4, fp16 vLLM vs fp32 trainer")
    print(
        f"    vLLM generation alone {gen['seconds']:.1f} s + scoring alone {score['seconds']:.1f} s = {total:.1f} s; "
        f"whole probe {probe['seconds']:.1f} s; ratio {probe['seconds'] / total:.2f} (target <= 1.15)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("a", "b", "both"), default="both")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=1024, help="decoder width (a real model is wider still)")
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    if args.part in ("a", "both"):
        part_a(args.batch, args.length, args.vocab, args.hidden, args.layers)
    if args.part in ("b", "both"):
        part_b()


if __name__ == "__main__":
    main()
