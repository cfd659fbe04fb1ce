"""``prompt_boundary``: the two sides saw different prompt tokens, so the first completion positions part.

For each of the first :data:`POSITIONS` positions, the share of sequences
whose |gap| there is :data:`RATIO` times (and :data:`FLOOR` nats) above the
median |gap| tokens of the same sampler probability show from position 8 on.
A share of sequences, not a mean: one outlier token at position 0 moves
nothing, while a prompt the sides saw differently moves most sequences'
first tokens (a near-certain token may still agree, so not all of them).
"""

from __future__ import annotations

from dataclasses import replace

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


def _positions(s: Sample) -> np.ndarray:
    """Each row's position from the start of what the sides were handed: its turn's (a multi-turn run), else its
    completion's."""
    return s.columns["turn_position"] if _turned(s) else s.columns["position"]


def _turned(s: Sample) -> bool:
    return s.has("turn") and s.has("turn_position") and np.unique(s.columns["turn"]).size > 1


def _expected(s: Sample) -> np.ndarray | None:
    """Each bucket's median |gap| from position 8 on, None with too few later tokens (made once per sample: each
    turn of a multi-turn run reads the same).

    The later rows are grouped by bucket with one stable sort of their small bucket numbers, so each bucket's
    median is taken on its own slice: a median is of the values, whatever their order.
    """
    return s.once("prompt_boundary.expected", lambda: _medians(s))


def _medians(s: Sample) -> np.ndarray | None:
    later = np.flatnonzero(_positions(s) >= POSITIONS)
    if later.size < MIN_TOKENS:
        return None
    d = s.abs_gap()[later]
    bucket = _bucket(s.lq[later])
    counts = np.bincount(bucket, minlength=_PROB_EDGES.size + 1)
    own = counts >= 10
    # every later token's median stands in for a bucket with too few of its own (only taken where one has)
    med = np.full(_PROB_EDGES.size + 1, np.nan if own.all() else float(np.median(d)))
    d = d[np.argsort(bucket, kind="stable")]
    ends = np.cumsum(counts)
    for b in np.flatnonzero(own):
        med[b] = float(np.median(d[ends[b] - counts[b] : ends[b]]))
    return med


def _bucket(lq: np.ndarray) -> np.ndarray:
    """Each value's bucket of -log q in :data:`_PROB_EDGES`, as uint8: ``searchsorted(_PROB_EDGES, -lq)``, the
    edges below -log q counted, NaN in the last bucket (where ``searchsorted`` sorts it)."""
    out = np.zeros(lq.size, np.uint8)
    for edge in _PROB_EDGES:
        out += lq < -edge
    out[np.isnan(lq)] = _PROB_EDGES.size
    return out


def affected_positions(s: Sample, rows: np.ndarray | None = None) -> tuple[int, float]:
    """How many leading positions, from 0, are affected (among ``rows``: one turn's); and the share of tokens off at
    position 0. Only the rows at the leading positions are read."""
    med = _expected(s)
    if med is None:
        return 0, float("nan")
    pos = _positions(s)
    lead = pos < POSITIONS
    lead = np.flatnonzero(lead if rows is None else lead & rows)
    pos, d = pos[lead], s.abs_gap()[lead]
    off = (d >= RATIO * np.maximum(med[_bucket(s.lq[lead])], 1e-12)) & (d >= FLOOR)
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
    pos = _positions(s)
    later, leading = int((pos >= POSITIONS).sum()), int((pos == 0).sum())
    where = "turn " if _turned(s) else ""
    if later < MIN_TOKENS:
        return too_few("prompt_boundary", later, what=f"tokens at {where}position {POSITIONS} or later")
    if leading < MIN_AT_POSITION:
        return too_few("prompt_boundary", leading, MIN_AT_POSITION, what=f"sequences with a token at {where}position 0")
    if _turned(s):
        return _per_turn(s)
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


def _per_turn(s: Sample) -> Finding:
    """A multi-turn run: each turn's first positions (the first tokens after the prompt, or after a tool
    response, which one side may have scored in another context) against the rest of the turns (verl #5229)."""
    turn = s.columns["turn"]
    affected: dict[int, int] = {}
    shares: dict[int, float] = {}
    for k in np.unique(turn).tolist():
        n, share0 = affected_positions(s, turn == k)
        shares[int(k)] = share0
        if n:
            affected[int(k)] = n
    worst = max((v for v in shares.values() if np.isfinite(v)), default=0.0)
    ev = [
        Evidence(
            f"largest over the turns: the share of a turn's first tokens {RATIO:g}x above what their probabilities "
            "give later in the turns",
            worst,
            "a few %",
        )
    ]
    if not affected:
        return clear("prompt_boundary", "each turn's first positions are as close as the rest of the turns", ev)
    turns = sorted(affected)
    where = (
        "the first tokens after the tool response" if any(k > 0 for k in turns) else "the first tokens after the prompt"
    )
    n = max(affected.values())
    found = detected(
        "prompt_boundary",
        f"the gap sits in the first {n} position(s) of turn(s) {', '.join(map(str, turns))} ({where}): "
        f"{pct(shares[turns[0]])} of those tokens {RATIO:g}x off what the rest of the turns shows",
        ev,
        {"positions_affected": float(n), "turns": ", ".join(map(str, turns))},
        "high",
        "give both sides the same ids at each turn's start: the chat template's tool span and the next assistant "
        "header tokenised once, appended as token ids to both",
    )
    return replace(found, turn=turns[0])


def correct(ctx: Context, f: Finding) -> Sample:
    n = int(f.estimate.get("positions_affected") or 0)  # pyright: ignore[reportArgumentType]
    s = ctx.sample
    if _turned(s) and isinstance(f.estimate.get("turns"), str):
        turns = [int(x) for x in str(f.estimate["turns"]).split(", ")]
        return s.take(~(np.isin(s.columns["turn"], turns) & (s.columns["turn_position"] < n)))
    return s.take(s.columns["position"] >= n)


CAUSE = Cause("prompt_boundary", detect, correct, correction="the leading positions left out", subset_rival=True)
