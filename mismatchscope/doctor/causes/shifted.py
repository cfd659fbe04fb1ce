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
from ._per_sequence import sequences

SHIFTS = (-3, -2, -1, 1, 2, 3)
SHIFT_GAIN = 0.5
"""realigned, the mean and the median |gap| below this fraction of the recorded ones on the same rows."""
SHIFT_CONTRAST = 0.25
"""and the realigned mean |gap| below this fraction of how far apart the sampler's neighbouring values are."""
MIN_PARTNERED = 0.5
"""a shift is read only where at least this share of the rows have a partner k positions away."""


def _partnered(s: Sample, k: int) -> np.ndarray:
    """For k > 0: whether row i and row i + k (i < n - k) are of one sequence at positions p and p + k.

    The rows of a shift by -k are the same pairs the other way round, so one mask serves both shifts (made once
    per sample: the detector and the screen read it).
    """
    assert k > 0
    seq, pos = s.columns["sequence_id"], s.columns["position"]
    n = len(s)
    return s.once(f"partnered{k}", lambda: (seq[k:] == seq[: n - k]) & (pos[k:] == pos[: n - k] + k))


def _partners(s: Sample, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows i and j = i + k of the same sequence at positions p and p + k."""
    if abs(k) >= len(s):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    i = np.flatnonzero(_partnered(s, abs(k)))
    return (i, i + k) if k > 0 else (i + abs(k), i)


def _pairs(s: Sample, k: int) -> tuple[np.ndarray, int, slice, slice] | None:
    """The partner mask of the shifts by k and -k (k > 0), with its row count and the slices it selects from:
    row i of ``a`` pairs with row i of ``b`` (``b`` k rows on). None where the sample is too short."""
    n = len(s)
    if k >= n:
        return None
    ok = _partnered(s, k)
    return ok, int(np.count_nonzero(ok)), slice(0, n - k), slice(k, n)


def _abs_diff(u: np.ndarray, v: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """|u - v| at the rows ``ok`` (one temporary, made in place)."""
    out = np.subtract(u, v)
    return np.abs(out, out=out)[ok]


def best_shift(s: Sample) -> dict[str, float] | None:
    """The alignment that lines the pairs up best, with the gaps it is judged by; None when none can be read.

    A shift by -k pairs the rows of the shift by k the other way round: one mask over contiguous slices serves
    both, and so does one contrast (the same differences, in the same order). The medians are read only where
    the best shift's mean gap already gains (:data:`SHIFT_GAIN`), so only there are they taken (NaN elsewhere).
    """
    lp, lq, d = s.lp, s.lq, s.abs_gap()
    best, kept = None, None
    contrasts: dict[int, float] = {}
    for k in SHIFTS:  # in this order: the first of two shifts that fit alike is kept
        pairs = _pairs(s, abs(k))
        if pairs is None or pairs[1] < max(MIN_TOKENS, MIN_PARTNERED * len(s)):
            continue
        ok, count, a, b = pairs
        if abs(k) not in contrasts:
            contrasts[abs(k)] = float(np.mean(_abs_diff(lq[b], lq[a], ok)))
        # +k: the sampler's value at i + k against the trainer's at i; -k: at i against the trainer's at i + k
        moved, recorded = (_abs_diff(lq[b], lp[a], ok), d[a][ok]) if k > 0 else (_abs_diff(lq[a], lp[b], ok), d[b][ok])
        row = {
            "k": float(k),
            "gap_after": float(moved.mean()),
            "gap_before": float(recorded.mean()),
            "contrast": contrasts[abs(k)],
            "rows": float(count),
        }
        if best is None or row["gap_after"] / max(row["gap_before"], 1e-300) < best["gap_after"] / max(
            best["gap_before"], 1e-300
        ):
            best, kept = row, (moved, recorded)
    if best is None or kept is None:
        return None
    if not best["gap_after"] < SHIFT_GAIN * best["gap_before"]:
        return {**best, "median_after": float("nan"), "median_before": float("nan")}
    return {**best, "median_after": float(np.median(kept[0])), "median_before": float(np.median(kept[1]))}


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
    """Sequences that one realignment lines up, each read on its own rows (the shifts by -k and k from one
    mask: they pair the same rows of the same sequences, so share the count and the contrast)."""
    seqs = sequences(s)
    lp, lq, d = s.lp, s.lq, s.abs_gap()
    hit = np.zeros(seqs.n, dtype=bool)
    for k in (1, 2):
        pairs = _pairs(s, k)
        if pairs is None or not pairs[1]:
            continue
        ok, _count, a, b = pairs
        seg = seqs.of_row[a][ok]
        n = seqs.count(seg=seg)
        contrast = seqs.sum(_abs_diff(lq[b], lq[a], ok), seg=seg)
        for u, v, at in ((lq[b], lp[a], d[a]), (lq[a], lp[b], d[b])):
            moved, recorded = seqs.sum(_abs_diff(u, v, ok), seg=seg), seqs.sum(at[ok], seg=seg)
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
