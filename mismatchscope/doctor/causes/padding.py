"""``padding``: pad or post-EOS rows written as pairs at the sequences' ends.

A pad row is one of a sequence's trailing rows, with a token id the other
sequences end with too, where one side holds one filler value (the same float
in nearly all such rows: 0.0, or whatever the writer filled) and the two
sides part by a gap that matters (a real logprob of a pad token after EOS is
far from a filler). Or, where the sides hold fillers alike, two or more such
rows at the ends of several sequences: they add no gap, but dilute every
mean. A confident EOS, the same id at every sequence's end with a logprob a
float16 sampler may round to exactly 0, has no gap and one row per sequence,
so it is not padding.
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, Finding
from ..findings import MIN_TOKENS, clear, detected, too_few
from ..registry import Cause, Context
from ..sample import Sample

CONSTANT_SHARE = 0.6
"""a side is a filler when at least this share of the candidate rows of one token id hold one value (not all:
another cause, a shift, may have moved real values onto the first pad rows)."""
PAD_GAP = 0.1
"""and the median |gap| of those rows is at least this (nats), or the rows come two or more per sequence."""
MIN_ROWS = 3
MIN_SEQUENCES = 2


def _trailing(s: Sample) -> np.ndarray:
    """Each row's place in its sequence's trailing run of one token id: 0 outside the run, 1.. inside."""
    seq, tok = s.columns["sequence_id"], s.columns["token_id"]
    n = seq.size
    if not n:
        return np.zeros(0, np.int64)
    same_next = np.r_[(tok[:-1] == tok[1:]) & (seq[:-1] == seq[1:]), False]
    last = np.r_[seq[:-1] != seq[1:], True]
    blocks = np.cumsum(np.r_[True, ~same_next[:-1]])  # runs of one id within a sequence; the last one trails
    run_has_last = np.zeros(blocks[-1] + 1, dtype=bool)
    run_has_last[blocks[last]] = True
    return np.where(run_has_last[blocks], 1, 0)


def pad_rows(s: Sample) -> tuple[np.ndarray, dict[str, float]]:
    """Whether each row is a pad row, and what names them (token id, side, sequences)."""
    tail_rows = np.flatnonzero(_trailing(s) > 0)
    out = np.zeros(len(s), dtype=bool)
    info: dict[str, float] = {}
    if not tail_rows.size:
        return out, info
    tok, seq = s.columns["token_id"][tail_rows], s.columns["sequence_id"][tail_rows]
    ids, inverse, counts = np.unique(tok, return_inverse=True, return_counts=True)
    gap = s.abs_gap()
    best = 0
    for j in np.flatnonzero(counts >= MIN_ROWS):  # the few ids several sequences end with
        rows = tail_rows[inverse == j]
        n_seq = np.unique(seq[inverse == j]).size
        if n_seq < MIN_SEQUENCES:
            continue
        const = {
            side: _constant(s.columns[name][rows])
            for side, name in (("sampler", "sampler_logprob"), ("trainer", "trainer_logprob"))
        }
        filler = [side for side, c in const.items() if c]
        if not filler:
            continue
        gapped = float(np.median(gap[rows])) >= PAD_GAP
        several = rows.size >= 2 * n_seq  # two or more rows per sequence on average: not one EOS each
        if not (gapped or several):
            continue
        out[rows] = True
        if rows.size > best:
            best = rows.size
            info = {
                "token_id": float(ids[j]),
                "side": 0.0 if filler[0] == "sampler" else 1.0,
                "sequences": float(n_seq),
            }
    return out, info


def _constant(v: np.ndarray) -> bool:
    _values, counts = np.unique(v, return_counts=True)
    return bool(counts.max() >= CONSTANT_SHARE * v.size)


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    if len(s) < MIN_TOKENS:
        return too_few("padding", len(s))
    rows, info = pad_rows(s)
    n = int(rows.sum())
    ev = [Evidence("rows at the sequences' ends with one side a filler value (the same in nearly all)", n, "0")]
    if not n:
        return clear("padding", "no pad or post-EOS rows at the sequences' ends", ev)
    seqs = int(np.unique(s.columns["sequence_id"][rows]).size)
    side = "sampler" if info.get("side", 0.0) == 0.0 else "trainer"
    token = int(info.get("token_id", -1))
    return detected(
        "padding",
        f"{n} pad or post-EOS rows (token id {token}, the {side}'s value a filler) are recorded as pairs, in "
        f"{seqs} sequences",
        ev,
        {"count": float(n), "token_id": float(token), "sequences": float(seqs), "filler_side": side},
        "high",
        "drop the rows after the end of each completion (the loss mask) before writing the pairs",
    )


def correct(ctx: Context, f: Finding) -> Sample:
    rows, _ = pad_rows(ctx.sample)
    return ctx.sample.take(~rows)


CAUSE = Cause(
    "padding",
    detect,
    correct,
    correction="the pad rows left out",
    subset_rival=True,
    reread=False,  # read on the values as written: another cause's correction moves the filler off its value
)
