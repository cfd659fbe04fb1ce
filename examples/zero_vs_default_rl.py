"""A short real RL loop on the bundled model, run twice: default engines, then the zero-mismatch profile.

    python examples/zero_vs_default_rl.py OUT_DIR [--steps 8]

Each run samples with the transformers sampler, recomputes the sampled
tokens' logprobs with the transformers trainer, takes one GRPO-style policy
gradient step (advantage: reward minus the group's mean) and copies the new
weights into both engines, recording every step with the ``Recorder``: the
three logprobs (rollout, trainer recompute, the loss's own forward), the
rewards, and the step's sampling and training seconds.

* ``default``: ``generate`` with its KV cache, a batch at a time; the trainer
  scores in token-budget batches. Same weights, same dtype (float32): the
  mismatch left is what KV-cached, batched decoding costs.
* ``zero``: ``probe --zero``'s program on both sides (no KV cache, one
  sequence, one log-softmax): every step's pairs are byte-equal.

At the end it prints ``mismatchscope timeline OUT/default OUT/zero --x wall``
and writes its picture. ``sample_data/build_sample_runs.py`` calls
:func:`run_loop` to build the bundled runs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

MODEL = Path(__file__).resolve().parent.parent / "sample_data" / "tiny-qwen3"
PROMPTS = MODEL.parent / "prompts.jsonl"
PROFILES = ("default", "zero")


def _engines(profile: str, sampling):
    from mismatchscope.probe.checkpoint import inspect_checkpoint
    from mismatchscope.probe.hf_model import load_causal_lm
    from mismatchscope.probe.samplers import make_sampler
    from mismatchscope.probe.trainer import HFTrainer
    from mismatchscope.probe.types import SamplerConfig, TrainerConfig

    zero = profile == "zero"
    info = inspect_checkpoint(MODEL)
    sampler = make_sampler(SamplerConfig(kind="hf", dtype="float32", device="cpu", zero=zero), info)
    trainer = HFTrainer(info, TrainerConfig(dtype="float32", device="cpu", zero=zero))
    policy = load_causal_lm(info, dtype="float32", device="cpu")
    policy.requires_grad_(True)
    policy.train()
    return sampler, trainer, policy


def _padded(rows: list[list[float]] | list[list[int]], fill: float = 0.0):
    import numpy as np

    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), fill)
    mask = np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        mask[i, : len(r)] = True
    return out, mask


def _forward_logprobs(policy, prompts: list[list[int]], comps, zero: bool, width: int):
    """The loss's own forward: each sampled token's logprob, with gradients (one tensor per completion).

    Under the zero profile the training forward is the same program as the
    sampler's and the trainer's (one sequence, fixed width, the trainer's
    log-softmax), so the third value equals the other two as well.
    """
    import torch

    from mismatchscope.probe.token_scoring import Processing, row_logprobs
    from mismatchscope.probe.trainer import LogitTransform
    from mismatchscope.probe.zero import zero_logits

    seqs = [[*prompts[c.prompt_index], *c.token_ids] for c in comps]
    starts = [len(prompts[c.prompt_index]) - 1 for c in comps]
    if zero:
        transform = LogitTransform.from_config(policy.config.to_dict())
        out = []
        for s, st, c in zip(seqs, starts, comps, strict=True):
            rows = row_logprobs(zero_logits(policy, transform, s, st + 1 + width), Processing())
            out.append(rows[torch.arange(st, st + len(c.token_ids)), torch.tensor(c.token_ids)])
        return out
    size = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), size), dtype=torch.long)
    attn = torch.zeros((len(seqs), size), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    logp = policy(input_ids=ids, attention_mask=attn).logits.float().log_softmax(-1)
    return [
        logp[i, st : st + len(c.token_ids)].gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        for i, (st, c) in enumerate(zip(starts, comps, strict=True))
    ]


def _update(policy, optimizer, picked, advantages) -> None:
    """One policy-gradient step: -(advantage x log p) over the sampled tokens, mean over tokens."""
    import torch

    total = torch.stack([-(lp * float(a)).sum() for lp, a in zip(picked, advantages, strict=True)]).sum()
    loss = total / max(1, sum(int(lp.numel()) for lp in picked))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _sync(policy, sampler, trainer) -> None:
    """The new weights into both engines (an RL framework's weight sync)."""
    state = policy.state_dict()
    sampler.model.load_state_dict(state)
    trainer.model.load_state_dict(state)


def run_loop(profile: str, out: Path, *, steps: int = 8, prompts: int = 4, n: int = 4, max_tokens: int = 80) -> Path:
    """Train ``steps`` steps under ``profile`` and record them in ``out`` (a new Recorder run)."""
    import numpy as np
    import torch

    from mismatchscope.live import Recorder
    from mismatchscope.probe.prompts import load_prompts
    from mismatchscope.probe.rewards import exact_match
    from mismatchscope.probe.tokenizer import load_tokenizer
    from mismatchscope.probe.types import SamplingConfig, ScoreRequest

    torch.manual_seed(0)
    sampling = SamplingConfig(n=n, max_tokens=max_tokens, top_k_logprobs=0, logprobs_mode="raw_logprobs")
    sampler, trainer, policy = _engines(profile, sampling)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-4)
    tok = load_tokenizer(MODEL)
    rows = load_prompts(PROMPTS)
    with Recorder(
        out,
        meta={
            "profile": profile,
            "model": MODEL.name,
            "sampler": {"engine": "hf", "dtype": "float32"},
            "trainer": {"dtype": "float32"},
        },
    ) as rec:
        for step in range(steps):
            batch = [rows[(step * prompts + i) % len(rows)] for i in range(prompts)]
            prompt_ids = [tok.encode(p.text, add_special_tokens=False) for p in batch]
            t0 = time.perf_counter()
            comps = sampler.sample(prompt_ids, SamplingConfig(**{**sampling.to_dict(), "seed": step}))
            t1 = time.perf_counter()
            reqs = [ScoreRequest(prompt_ids[c.prompt_index], c.token_ids, []) for c in comps]
            scored = trainer.score(reqs, sampling)
            texts = [tok.decode(c.token_ids, skip_special_tokens=True) for c in comps]
            rewards = np.array(
                [
                    exact_match(prompt="", completion=t, answer=batch[c.prompt_index].answer)
                    for t, c in zip(texts, comps, strict=True)
                ]
            )
            groups = np.array([c.prompt_index for c in comps])
            adv = rewards - np.array([rewards[groups == g].mean() for g in groups])
            picked = _forward_logprobs(policy, prompt_ids, comps, profile == "zero", max_tokens)
            forward = [lp.detach().tolist() for lp in picked]
            _update(policy, optimizer, picked, adv)
            _sync(policy, sampler, trainer)
            t2 = time.perf_counter()
            lq, mask = _padded([c.sampler_logprobs for c in comps])
            lp, _ = _padded([s.trainer_logprobs for s in scored])
            tokens, _ = _padded([c.token_ids for c in comps], fill=-1)
            first_forward, _ = _padded(forward)
            ntok = int(mask.sum())
            rec.add(
                step, lq, lp, mask, rewards=rewards, group_ids=groups + step * prompts, token_ids=tokens.astype(int),
                sampling_seconds=t1 - t0, training_seconds=t2 - t1, sampling_tokens=ntok, training_tokens=ntok,
                training_forward_logprobs=first_forward,
            )  # fmt: skip
    sampler.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    for profile in PROFILES:
        run_loop(profile, args.out / profile, steps=args.steps)
    from mismatchscope.render.timeline_pictures import write_compare
    from mismatchscope.timeline.compare import compare

    result = compare([str(args.out / p) for p in PROFILES], "wall")
    print(result.statement)
    print(f"wrote {write_compare(result, str(args.out))}")
    print(f"mismatchscope timeline {args.out / 'default'} {args.out / 'zero'} --x wall")


if __name__ == "__main__":
    main()
