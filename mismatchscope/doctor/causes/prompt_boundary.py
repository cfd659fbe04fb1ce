"""``prompt_boundary``: the two sides saw different prompt tokens, so the first completion positions part.

For each of the first :data:`POSITIONS` positions, the share of sequences
whose |gap| there is :data:`RATIO` times (and :data:`FLOOR` nats) above the
median |gap| tokens of the same sampler probability show from position 8 on.
A share of sequences, not a mean: one outlier token at position 0 moves
nothing, while a prompt the sides saw differently moves most sequences'
first tokens (a near-certain token may still agree, so not all of them).
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, Finding
from ..findings import MIN_TOKENS, clear, detected, pct, too_few
from ..registry import Cause, Context
from ..sample import Sample

POSITIONS = 8
RATIO = 10.0
FLOOR = 0.01
"""a leading token is off when its |gap| is at least RATIO times what the same probabilities give later, and at
least FLOOR nats;"""
SHARE = 0.25
MIN_OFF = 3
"""a position is affected when at least this share of the sequences' tokens there are off, and this many (clean:
a few %, the rate of the run's heavy tail; a near-certain first token may agree however the prompts differ)."""
MIN_AT_POSITION = 5
_PROB_EDGES = np.array([1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 4.0])
"""buckets of -log q: the gap numerics leaves grows with the sampler's uncertainty."""


def _expected(s: Sample) -> tuple[np.ndarray, np.ndarray] | None:
    """(each row's bucket, each bucket's median |gap| from position 8 on), None with too few later tokens."""
    pos, d = s.columns["position"], np.abs(s.gap())
    bucket = np.searchsorted(_PROB_EDGES, -s.lq)
    later = pos >= POSITIONS
    if later.sum() < MIN_TOKENS:
        return None
    med = np.full(_PROB_EDGES.size + 1, float(np.median(d[later])))
    for b in np.unique(bucket[later]):
        at = later & (bucket == b)
        if at.sum() >= 10:
            med[b] = float(np.median(d[at]))
    return bucket, med


def affected_positions(s: Sample) -> tuple[int, float]:
    """How many leading positions, from 0, are affected; and the share of tokens off at position 0."""
    exp = _expected(s)
    if exp is None:
        return 0, float("nan")
    bucket, med = exp
    pos, d = s.columns["position"], np.abs(s.gap())
    off = (d >= RATIO * np.maximum(med[bucket], 1e-12)) & (d >= FLOOR)
    affected, share0 = 0, float("nan")
    for j in range(POSITIONS):
        at = pos == j
        if at.sum() < MIN_AT_POSITION:
            break
        share = float(off[at].mean())
        if j == 0:
            share0 = share
        if share < SHARE or off[at].sum() < MIN_OFF or affected < j:
            break
        affected += 1
    return affected, share0


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    pos = s.columns["position"]
    later, leading = int((pos >= POSITIONS).sum()), int((pos == 0).sum())
    if later < MIN_TOKENS:
        return too_few("prompt_boundary", later, what=f"tokens at position {POSITIONS} or later")
    if leading < MIN_AT_POSITION:
        return too_few("prompt_boundary", leading, MIN_AT_POSITION, what="sequences with a token at position 0")
    affected, share0 = affected_positions(s)
    ev = [
        Evidence(f"share of position-0 tokens {RATIO:g}x above what their probabilities give later", share0, "a few %")
    ]
    if not affected:
        return clear("prompt_boundary", "the first completion positions are as close as the rest", ev)
    return detected(
        "prompt_boundary",
        f"the gap sits in the first {affected} completion position(s): {pct(share0)} of the sequences' first "
        f"tokens are {RATIO:g}x off what the rest shows",
        ev,
        {"positions_affected": float(affected)},
        "high",
        "give both sides the same prompt tokens: the same chat template, tokenised once, with the completion "
        "appended as token ids",
    )


def correct(ctx: Context, f: Finding) -> Sample:
    n = int(f.estimate.get("positions_affected") or 0)  # pyright: ignore[reportArgumentType]
    return ctx.sample.take(ctx.sample.columns["position"] >= n)


CAUSE = Cause("prompt_boundary", detect, correct, correction="the leading positions left out", subset_rival=True)
