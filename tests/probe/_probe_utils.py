"""Comparisons shared by the probe tests (plain functions, no fixtures)."""

from __future__ import annotations

import math

from mismatchscope.probe.types import Completion, Scored, ScoreRequest


def requests_for(completions: list[Completion], prompt_ids: list[list[int]]) -> list[ScoreRequest]:
    """What the probe hands the trainer: prompt + sampled ids + the ids the sampler listed."""
    return [ScoreRequest(prompt_ids[c.prompt_index], c.token_ids, c.topk_ids) for c in completions]


def gap(a: float, b: float) -> float:
    """|a - b|, with equal infinities counting as equal."""
    if a == b:
        return 0.0
    return abs(a - b)


def max_diff(completions: list[Completion], scored: list[Scored]) -> float:
    """max |sampler_logprob - trainer_logprob| over every completion token."""
    assert len(completions) == len(scored)
    worst = 0.0
    for c, s in zip(completions, scored, strict=True):
        assert len(c.sampler_logprobs) == len(s.trainer_logprobs) == len(c.token_ids) > 0
        worst = max([worst, *(gap(a, b) for a, b in zip(c.sampler_logprobs, s.trainer_logprobs, strict=True))])
    return worst


def max_topk_diff(completions: list[Completion], scored: list[Scored]) -> float:
    """max |sampler top-k logprob - trainer logprob at the same id| over every listed id."""
    worst = 0.0
    for c, s in zip(completions, scored, strict=True):
        for lq, lp in zip(c.topk_logprobs, s.logprobs_at_sampler_topk, strict=True):
            assert len(lq) == len(lp)
            worst = max([worst, *(gap(a, b) for a, b in zip(lq, lp, strict=True))])
    return worst


def n_tokens(completions: list[Completion]) -> int:
    return sum(len(c.token_ids) for c in completions)


def naive_logprobs(model, ids: list[int], start: int, temperature: float = 1.0) -> list[float]:
    """Reference: full ``log_softmax`` of ``model(ids).logits / T`` for tokens ``ids[start:]``.

    Materialises [length, vocab] fp32, which is what the trainer avoids.
    """
    import torch

    with torch.inference_mode():
        x = torch.tensor([ids])
        logits = model(input_ids=x, use_cache=False).logits[0].float() / temperature
        logprobs = logits.log_softmax(-1)
        labels = torch.tensor(ids[start:])
        return logprobs[start - 1 : len(ids) - 1].gather(-1, labels[:, None]).squeeze(-1).tolist()


def finite(values) -> bool:
    return all(math.isfinite(v) for v in values)
