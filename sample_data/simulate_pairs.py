"""Generate ``sample_data/simulated_pairs.parquet``: SIMULATED token pairs.

Why simulated: the analysis commands need a realistic file on a fresh
checkout before any model has been probed. This is honest about what it is:
each position draws "true" fp32 logits z; the trainer's distribution is
softmax(z) in float64; the sampler's is softmax(bf16(z)), i.e. the same logits
rounded to bfloat16 the way a bf16 lm_head output would be. The sampled token
is drawn from the sampler's distribution, as in RL rollouts. Logit scales vary
per position so confident and uncertain tokens mix. At a few positions
(``FLIP_RATE``) the sampler's logits also get an O(1) perturbation, standing
for a mixture-of-experts routing flip (the token routed to another expert in
the engine than in the trainer): that is what gives the ratio its heavy tails,
so the masking rules have something to disagree about. Rewards are Bernoulli and
advantages GRPO-normalised per prompt group.

Run: ``python sample_data/simulate_pairs.py [OUT]`` (seeded; same bytes each run
for the same numpy version).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mismatchscope.schema import write_table

SEED = 20261202
VOCAB = 4096
PROMPTS = 48
SAMPLES = 4
TOPK = 5
FLIP_RATE = 0.03
FLIP_SCALE = 1.5


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest bfloat16 (ties to even), returned as float32."""
    bits = x.astype(np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> 16) & 1)
    return ((bits + rounding) & np.uint32(0xFFFF0000)).view(np.float32)


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def simulate(seed: int = SEED) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {
        k: []
        for k in (
            "sequence_id",
            "position",
            "token_id",
            "sampler_logprob",
            "trainer_logprob",
            "prompt_id",
            "sample_index",
            "advantage",
            "reward",
            "sampler_topk_ids",
            "sampler_topk_logprobs",
            "trainer_logprobs_at_sampler_topk",
            "trainer_topk_ids",
            "trainer_topk_logprobs",
            "trainer_entropy",
        )
    }
    seq = 0
    for prompt in range(PROMPTS):
        rewards = rng.binomial(1, 0.5, SAMPLES).astype(np.float64)
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for k in range(SAMPLES):
            length = int(rng.integers(16, 96))
            scale = rng.choice([1.0, 3.0, 6.0, 12.0], size=(length, 1), p=[0.15, 0.25, 0.3, 0.3])
            z = (rng.standard_normal((length, VOCAB)) * scale).astype(np.float32)
            lp_full = log_softmax(z)
            flips = rng.random((length, 1)) < FLIP_RATE
            zs = bf16_round(z) + flips * (rng.standard_normal((length, VOCAB)) * FLIP_SCALE).astype(np.float32)
            lq_full = log_softmax(zs)
            q = np.exp(lq_full)
            u = rng.random((length, 1))
            tok = np.minimum((np.cumsum(q, axis=1) < u).sum(axis=1), VOCAB - 1)
            rows = np.arange(length)
            s_top = np.argsort(-lq_full, axis=1)[:, :TOPK]
            t_top = np.argsort(-lp_full, axis=1)[:, :TOPK]
            p_full = np.exp(lp_full)
            ent = -(p_full * lp_full).sum(axis=1)
            cols["sequence_id"] += [seq] * length
            cols["position"] += list(range(length))
            cols["token_id"] += tok.tolist()
            cols["sampler_logprob"] += lq_full[rows, tok].tolist()
            cols["trainer_logprob"] += lp_full[rows, tok].tolist()
            cols["prompt_id"] += [prompt] * length
            cols["sample_index"] += [k] * length
            cols["advantage"] += [float(adv[k])] * length
            cols["reward"] += [float(rewards[k])] * length
            cols["sampler_topk_ids"] += s_top.tolist()
            cols["sampler_topk_logprobs"] += np.take_along_axis(lq_full, s_top, 1).tolist()
            cols["trainer_logprobs_at_sampler_topk"] += np.take_along_axis(lp_full, s_top, 1).tolist()
            cols["trainer_topk_ids"] += t_top.tolist()
            cols["trainer_topk_logprobs"] += np.take_along_axis(lp_full, t_top, 1).tolist()
            cols["trainer_entropy"] += ent.tolist()
            seq += 1
    return cols


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("simulated_pairs.parquet")
    meta = {
        "simulated": True,
        "generator": "sample_data/simulate_pairs.py",
        "seed": SEED,
        "vocab_size": VOCAB,
        "sampler": {"kind": "simulated", "logits": "bf16-rounded", "routing_flip_rate": FLIP_RATE},
        "trainer": {"kind": "simulated", "dtype": "float32"},
    }
    cols = simulate()
    write_table(out, cols, meta)
    print(f"wrote {out}: {len(cols['sequence_id'])} tokens, {PROMPTS * SAMPLES} sequences")


if __name__ == "__main__":
    main()
