"""A real miniature RL loop with the Recorder and Monitor in it (the tests run it in and out of process).

The bundled dense checkpoint samples in float32 with transformers
``generate`` (the "inference engine"); a bfloat16 copy (the "trainer")
rescores the completions, takes a REINFORCE step with group-normalised
advantages, and syncs its weights back to the sampler. The logprobs of the
sampled tokens from both sides go to ``Monitor(Recorder(...)).add`` each step:
the three lines a user adds.

    python -m tests.live.rl_loop OUT --steps N [--sleep S]
prints ``step K`` (flushed) after each step's shard is on disk.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "sample_data" / "tiny-qwen3"
PROMPTS = 4
SAMPLES = 2
NEW_TOKENS = 12


def run(out: Path, steps: int, sleep: float = 0.0, on_step=None) -> list:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mismatchscope import Monitor, Recorder

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(CHECKPOINT)
    sampler = AutoModelForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.float32).eval()
    trainer = AutoModelForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.bfloat16)
    opt = torch.optim.SGD(trainer.parameters(), lr=0.5)
    lines = (CHECKPOINT.parent / "prompts.jsonl").read_text().splitlines()[:PROMPTS]
    texts = [json.loads(line)["prompt"] for line in lines]
    tok.padding_side = "left"
    enc = tok(texts, return_tensors="pt", padding=True)
    prompt_ids = enc.input_ids.repeat_interleave(SAMPLES, 0)
    prompt_mask = enc.attention_mask.repeat_interleave(SAMPLES, 0)
    group = torch.arange(PROMPTS).repeat_interleave(SAMPLES)
    lp_len = prompt_ids.shape[1]

    reports = []
    with Recorder(out, meta={"sampler": "transformers generate fp32", "trainer": "transformers bf16"}) as rec:
        mon = Monitor(rec)
        for step in range(steps):
            with torch.no_grad():
                gen = sampler.generate(
                    prompt_ids,
                    attention_mask=prompt_mask,
                    do_sample=True,
                    max_new_tokens=NEW_TOKENS,
                    min_new_tokens=NEW_TOKENS // 2,
                    top_k=0,
                    top_p=1.0,
                    temperature=1.0,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=tok.pad_token_id,
                )
            completion = gen.sequences[:, lp_len:]
            width = completion.shape[1]
            logits = torch.stack(gen.logits, 1)[:, :width].float()
            sampler_lp = torch.log_softmax(logits, -1).gather(-1, completion[..., None])[..., 0]
            ended = (completion == tok.eos_token_id).int().cumsum(1)
            mask = (ended == 0) | ((ended == 1) & (completion == tok.eos_token_id))  # up to and including <eos>

            full = gen.sequences
            attn = torch.cat([prompt_mask, mask.long()], 1)
            pos = (attn.cumsum(1) - 1).clamp(min=0)
            out_logits = trainer(full, attention_mask=attn, position_ids=pos).logits[:, lp_len - 1 : -1]
            trainer_lp = torch.log_softmax(out_logits.float(), -1).gather(-1, completion[..., None])[..., 0]

            reward = ((completion < 100) & mask).float().sum(1) / mask.sum(1)
            r = reward.view(PROMPTS, SAMPLES)
            adv = (r - r.mean(1, keepdim=True)).view(-1)
            loss = -(adv[:, None] * trainer_lp * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

            metrics = mon.add(
                step,
                sampler_lp,
                trainer_lp,
                mask,
                advantages=adv,
                group_ids=group,
                rewards=reward,
                token_ids=completion,
            )
            reports.append(metrics)
            with torch.no_grad():
                sampler.load_state_dict({k: v.float() for k, v in trainer.state_dict().items()})
            rec.flush()
            if on_step:
                on_step(step, metrics)
            time.sleep(sleep)
    return reports


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=0.0)
    a = ap.parse_args()
    run(a.out, a.steps, a.sleep, on_step=lambda s, _m: print(f"step {s}", flush=True))


if __name__ == "__main__":
    sys.exit(main())
