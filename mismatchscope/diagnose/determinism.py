"""Bit-level repeatability: the same work done twice, alone, or in another batch.

Zero-mismatch claims are about bits, so these compare the logprobs exactly
as the engine returned them (vLLM: float32 values widened to Python floats;
the trainer: float32 tensors), with no tolerance. For two samplings of the
same prompts and seed the tokens may differ: a position counts as identical
only while the whole prefix is identical, and logprobs are compared there.
"""

from __future__ import annotations

import math


def compare(first: list[list[int]], first_lp: list[list[float]], second: list[list[int]], second_lp: list[list[float]]) -> dict:
    """share_tokens_identical, share_logprobs_bit_identical (of the identical-prefix tokens), max_abs_diff."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} sequences against {len(second)}")
    total = same_tokens = same_bits = 0
    max_diff = 0.0
    for a, alp, b, blp in zip(first, first_lp, second, second_lp):
        total += len(a)
        for x, xl, y, yl in zip(a, alp, b, blp):
            if x != y:
                break
            same_tokens += 1
            if xl == yl or (math.isnan(xl) and math.isnan(yl)):
                same_bits += 1
            elif math.isfinite(xl) and math.isfinite(yl):
                max_diff = max(max_diff, abs(xl - yl))
            else:
                max_diff = math.inf
    return {
        "tokens": total,
        "share_tokens_identical": same_tokens / total if total else None,
        "share_logprobs_bit_identical": same_bits / same_tokens if same_tokens else None,
        "max_abs_diff": max_diff if same_tokens else None,
    }


def trainer_checks(trainer, requests, sampling, seed: int = 0) -> dict[str, dict]:
    """The trainer's scores of the same requests alone and shuffled, each against the full batch."""
    import random

    full = [s.trainer_logprobs for s in trainer.score(requests, sampling)]
    alone = [trainer.score([r], sampling)[0].trainer_logprobs for r in requests]
    order = list(range(len(requests)))
    random.Random(seed).shuffle(order)
    got = trainer.score([requests[i] for i in order], sampling)
    shuffled: list = [None] * len(order)
    for j, i in enumerate(order):
        shuffled[i] = got[j].trainer_logprobs
    ids = [r.completion_token_ids for r in requests]
    return {"trainer_alone_vs_batch": compare(ids, full, ids, alone),
            "trainer_shuffled_vs_batch": compare(ids, full, ids, shuffled)}
