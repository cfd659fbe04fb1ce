"""Bit-level repeatability: the same work done twice, alone, or in another batch.

Zero-mismatch claims are about bits, so these compare the logprobs exactly
as the engine returned them (vLLM: float32 values widened to Python floats;
the trainer: float32 tensors), with no tolerance. For two samplings of the
same prompts and seed the tokens may differ: a position counts as identical
only while the whole prefix is identical, and logprobs are compared there.
"""

from __future__ import annotations

import math

import numpy as np

from .document import Repeatability
from .pairs import sequence_slices
from .sampler_result import SamplerResult


def compare(
    first: list[list[int]],
    first_lp: list[list[float]],
    second: list[list[int]],
    second_lp: list[list[float]],
    compared: str = "",
) -> Repeatability:
    """share_tokens_identical, share_logprobs_bit_identical (of the identical-prefix tokens), max_abs_diff;
    ``compared`` says which numbers these are."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} sequences against {len(second)}")
    total = same_tokens = same_bits = 0
    max_diff = 0.0
    for a, alp, b, blp in zip(first, first_lp, second, second_lp, strict=True):
        total += len(a)
        for x, xl, y, yl in zip(a, alp, b, blp, strict=False):  # two samplings may end at different lengths
            if x != y:
                break
            same_tokens += 1
            if xl == yl or (math.isnan(xl) and math.isnan(yl)):
                same_bits += 1
            elif math.isfinite(xl) and math.isfinite(yl):
                max_diff = max(max_diff, abs(xl - yl))
            else:
                max_diff = math.inf
    return Repeatability(
        tokens=total,
        share_tokens_identical=same_tokens / total if total else None,
        share_logprobs_bit_identical=same_bits / same_tokens if same_tokens else None,
        max_abs_diff=max_diff if same_tokens else None,
        compared=compared,
    )


def trainer_checks(trainer, requests, sampling, seed: int = 0, compared: str = "") -> dict[str, Repeatability]:
    """The trainer's scores of the same requests alone and shuffled, each against the full batch (``compared``:
    the words for the trainer's numbers)."""
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
    return {
        "trainer_alone_vs_batch": compare(ids, full, ids, alone, compared),
        "trainer_shuffled_vs_batch": compare(ids, full, ids, shuffled, compared),
    }


def sampler_checks(base: SamplerResult, tokens, engine: str = "vLLM") -> dict[str, Repeatability]:
    """The sampler's checks from its worker's result: the same-seed repeat against the recorded tokens,
    and its prefill of the recorded sequences alone and shuffled against the full batch. ``engine`` names
    the sampler in the checks' descriptions."""
    out: dict[str, Repeatability] = {}
    first = [
        (sid, tokens["token_id"][sl].tolist(), tokens["sampler_logprob"][sl].tolist())
        for sid, sl in sequence_slices(tokens["sequence_id"])
    ]
    n = max(int(tokens["sample_index"].max()) + 1, 1) if tokens["sample_index"].size else 1
    if base.repeat is not None:
        again = {s.prompt_index * n + s.sample_index: s for s in base.repeat.sequences}
        rows = [again[sid] for sid, _, _ in first]
        out["sampler_repeat_same_seed"] = compare(
            [f[1] for f in first],
            [f[2] for f in first],
            [r.token_ids for r in rows],
            [r.logprobs for r in rows],
            f"{engine} decode logprobs (float32 from the engine)",
        )
    if base.prefill is not None:
        p = base.prefill
        for name, other in (
            ("sampler_prefill_alone_vs_batch", p.alone),
            ("sampler_prefill_shuffled_vs_batch", p.shuffled),
        ):
            ids = [[0] * len(x) for x in p.batch]
            out[name] = compare(ids, p.batch, ids, other, f"{engine} prompt logprobs (float32 from the engine)")
    return out


def same_tokens(base, tokens) -> bool:
    """Whether two runs hold the very same sequences and token ids (then their bootstrap can be paired)."""
    return (
        base["sequence_id"].shape == tokens["sequence_id"].shape
        and np.array_equal(base["sequence_id"], tokens["sequence_id"])
        and np.array_equal(base["token_id"], tokens["token_id"])
    )


def changed_share(base, tokens, side: str) -> float | None:
    """Share of the baseline's tokens the variant changed: the trainer logprob's bits (trainer side),
    the token itself or its prefix (sampler side)."""
    if side == "trainer":
        if base["trainer_logprob"].shape != tokens["trainer_logprob"].shape:
            return None
        return float(np.mean(base["trainer_logprob"] != tokens["trainer_logprob"]))
    a = {sid: base["token_id"][sl].tolist() for sid, sl in sequence_slices(base["sequence_id"])}
    b = {sid: tokens["token_id"][sl].tolist() for sid, sl in sequence_slices(tokens["sequence_id"])}
    keys = sorted(set(a) & set(b))
    r = compare(
        [a[k] for k in keys], [[0.0] * len(a[k]) for k in keys], [b[k] for k in keys], [[0.0] * len(b[k]) for k in keys]
    )
    return None if r.share_tokens_identical is None else 1.0 - r.share_tokens_identical
