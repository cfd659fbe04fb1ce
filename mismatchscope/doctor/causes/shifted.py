"""``shifted``: the sampler's logprob of token t recorded at position t + k.

Realigning the sampler's values by k positions within each sequence lines
the pairs up again. The recorded and the realigned alignment are compared on
the same rows (those with a partner k positions away), so short sequences,
which lose rows to any shift, cannot make a shift look better than it is; and
a realignment counts only when it brings the pairs far closer than
neighbouring values are to each other, which a run of near-certain tokens
(all values near 0) never allows.
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, Finding
from ..findings import MIN_TOKENS, clear, detected, g, too_few
from ..registry import Cause, Context
from ..sample import TOPK_FIELDS, Sample
from ._per_sequence import Sequences

SHIFTS = (-3, -2, -1, 1, 2, 3)
SHIFT_GAIN = 0.5
"""realigned, the mean and the median |gap| below this fraction of the recorded ones on the same rows."""
SHIFT_CONTRAST = 0.25
"""and the realigned mean |gap| below this fraction of how far apart the sampler's neighbouring values are."""
MIN_PARTNERED = 0.5
"""a shift is read only where at least this share of the rows have a partner k positions away."""


def _partners(s: Sample, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows i and j = i + k of the same sequence at positions p and p + k (compared as slices: no gathers)."""
    seq, pos = s.columns["sequence_id"], s.columns["position"]
    n = len(s)
    if abs(k) >= n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a, b = (slice(0, n - k), slice(k, n)) if k > 0 else (slice(-k, n), slice(0, n + k))
    ok = (seq[b] == seq[a]) & (pos[b] == pos[a] + k)
    i = np.flatnonzero(ok) + (a.start or 0)
    return i, i + k


def best_shift(s: Sample) -> dict[str, float] | None:
    """The alignment that lines the pairs up best, with the gaps it is judged by; None when none can be read."""
    lp, lq = s.lp, s.lq
    best = None
    for k in SHIFTS:
        i, j = _partners(s, k)
        if i.size < max(MIN_TOKENS, MIN_PARTNERED * len(s)):
            continue
        moved, recorded = np.abs(lq[j] - lp[i]), np.abs(lq[i] - lp[i])
        row = {
            "k": float(k),
            "gap_after": float(moved.mean()),
            "gap_before": float(recorded.mean()),
            "median_after": float(np.median(moved)),
            "median_before": float(np.median(recorded)),
            "contrast": float(np.mean(np.abs(lq[j] - lq[i]))),
            "rows": float(i.size),
        }
        if best is None or row["gap_after"] / max(row["gap_before"], 1e-300) < best["gap_after"] / max(
            best["gap_before"], 1e-300
        ):
            best = row
    return best


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    if len(s) < MIN_TOKENS:
        return too_few("shifted", len(s))
    b = best_shift(s)
    if b is None:
        return clear("shifted", "the sequences are too short to realign (fewer than half the rows have a partner)")
    ev = [
        Evidence("mean |log p - log q| as recorded, on the rows a shift keeps", b["gap_before"], "the numerical gap"),
        Evidence(
            f"the same with the sampler moved {int(b['k']):+d} positions (the best shift)",
            b["gap_after"],
            "far above it",
        ),
    ]
    fires = (
        b["gap_after"] < SHIFT_GAIN * b["gap_before"]
        and b["median_after"] < SHIFT_GAIN * b["median_before"]
        and b["gap_after"] < SHIFT_CONTRAST * b["contrast"]
    )
    if not fires:
        return clear("shifted", "the two sides line up as recorded (no shift lines them up better)", ev)
    k = int(b["k"])
    return detected(
        "shifted",
        f"the sampler's logprob of token t is recorded at position t{k:+d}: realigned, the mean gap falls from "
        f"{g(b['gap_before'])} to {g(b['gap_after'])}",
        ev,
        {"k": float(k), "gap_after": b["gap_after"], "gap_before": b["gap_before"]},
        "high",
        "align the logprobs with the tokens they score (logits at position t predict token t+1)",
    )


def correct(ctx: Context, f: Finding) -> Sample:
    """The sampler's record (its value, its top-k) moved back by k; rows left without a partner are dropped."""
    s = ctx.sample
    k = int(f.estimate["k"] or 0)  # pyright: ignore[reportArgumentType] - a detected shift holds its k
    i, j = _partners(s, k)
    moved = {"sampler_logprob", *TOPK_FIELDS, "list_row"} & set(s.columns)
    cols = {n: (v[j] if n in moved else v[i]) for n, v in s.columns.items()}
    return Sample(cols, s.rows_seen, s.sampled, s.lists, s.sentinel_rows, s.sentinel_sampler)


def screen(s: Sample) -> np.ndarray:
    """Sequences that one realignment lines up, each read on its own rows."""
    seqs = Sequences(s)
    hit = np.zeros(seqs.n, dtype=bool)
    for k in (-2, -1, 1, 2):
        i, j = _partners(s, k)
        if not i.size:
            continue
        n = seqs.count(i)
        moved = seqs.sum(np.abs(s.lq[j] - s.lp[i]), i)
        recorded = seqs.sum(np.abs(s.lq[i] - s.lp[i]), i)
        contrast = seqs.sum(np.abs(s.lq[j] - s.lq[i]), i)
        hit |= (n >= 4) & (moved < SHIFT_GAIN * recorded) & (moved < SHIFT_CONTRAST * contrast)
    return seqs.ids[hit]


CAUSE = Cause(
    "shifted",
    detect,
    correct,
    correction="the sampler's values moved back into line with their tokens",
    subset_rival=True,
    screen=screen,
)
