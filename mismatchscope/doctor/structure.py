"""Detectors of pairs put together wrongly: shifted positions, misjoined sequences, padding, the prompt boundary.

They read the sample in (sequence_id, position) order, where a row's
neighbours are its sequence's neighbouring tokens.
"""

from __future__ import annotations

import math

import numpy as np

from .document import Evidence, Finding
from .findings import MIN_TOKENS, clear, detected, fnum, g, too_few
from .sample import Sample

SHIFTS = (-3, -2, -1, 1, 2, 3)
SHIFT_GAIN = 0.5
"""shifted: another alignment's mean |gap| below this fraction of the recorded one (clean: 100x above it)."""
MISJOIN_TOKEN = 0.1
"""misaligned_sequences: a token 'disagrees' when |log p - log q| is above this and 10x the run's median."""
MISJOIN_SHARE = 0.05
MISJOIN_EXCESS = 5.0
"""a sequence is misjoined when at least MISJOIN_SHARE of its tokens (2 or more) disagree, and MISJOIN_EXCESS
times the run's overall share: a bad join stands out against the run's own tail. A near-deterministic model
(most tokens certain in every sample) leaves only its few uncertain tokens to tell two samples apart."""
MISJOIN_MIN_TOKENS = 4
MISJOIN_ALPHA = 0.01
"""and the sequence's count of such tokens is improbable at the run's share: binomial tail below
MISJOIN_ALPHA / sequences (Bonferroni), so a clean run of any size flags a sequence about once in 100 runs."""
BOUNDARY_RATIO = 10.0
"""prompt_boundary: a leading position's mean |gap| at least this multiple of what tokens of the same sampler
probability give later in the sequences (clean: below 3)."""
BOUNDARY_FLOOR = 0.01
BOUNDARY_POSITIONS = 8
_PROB_EDGES = np.array([1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 4.0])
"""buckets of -log q: the gap numerics leaves grows with the sampler's uncertainty."""


def _gap(s: Sample) -> np.ndarray:
    return s.columns["trainer_logprob"] - s.columns["sampler_logprob"]


def shifted(s: Sample) -> Finding:
    seq, pos = s.columns["sequence_id"], s.columns["position"]
    lp, lq = s.columns["trainer_logprob"], s.columns["sampler_logprob"]
    if lp.size < MIN_TOKENS:
        return too_few("shifted", int(lp.size))
    base = float(np.mean(np.abs(lp - lq)))
    best_k, best = 0, math.inf  # the best other alignment: evidence even when the recorded one wins
    for k in SHIFTS:
        i = np.arange(max(0, -k), lp.size - max(0, k))
        ok = (seq[i + k] == seq[i]) & (pos[i + k] == pos[i] + k)
        if ok.sum() < MIN_TOKENS:
            continue
        d = float(np.mean(np.abs(lq[i + k][ok] - lp[i][ok])))
        if d < best:
            best_k, best = k, d
    ev = [Evidence("mean |log p - log q| as recorded", base, "the run's numerical gap")]
    if best_k != 0:
        ev.append(Evidence(f"the same, sampler moved {best_k:+d} positions (the best shift)", best, "far above it"))
    if best_k == 0 or best >= base or best > SHIFT_GAIN * base:
        return clear("shifted", "the two sides line up as recorded (no shift lines them up better)", ev)
    return detected(
        "shifted",
        f"the sampler's logprob of token t is recorded at position t{best_k:+d}: realigned, the mean gap "
        f"falls from {g(base)} to {g(best)}",
        ev,
        {"k": float(best_k), "gap_after": best, "gap_before": base},
        "high",
        "align the logprobs with the tokens they score (logits at position t predict token t+1)",
    )


def _segments(seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    return starts, np.r_[starts[1:], seq.size]


def misaligned_sequences(s: Sample, skip_steps: np.ndarray | None = None) -> Finding:
    """``skip_steps``: steps found to jump as a whole; their sequences are off alike, which is not a join."""
    seq, d = s.columns["sequence_id"], np.abs(_gap(s))
    if skip_steps is not None and skip_steps.size:
        keep = ~np.isin(s.columns["step"], skip_steps)
        seq, d = seq[keep], d[keep]
    if d.size < MIN_TOKENS:
        return too_few("misaligned_sequences", int(d.size))
    cut = max(MISJOIN_TOKEN, 10 * float(np.median(d)))
    starts, ends = _segments(seq)
    n = ends - starts
    off = np.add.reduceat((d > cut).astype(np.float64), starts)
    share = off / n
    overall = float(np.mean(d > cut))
    bad = (share >= max(MISJOIN_SHARE, MISJOIN_EXCESS * overall)) & (off >= 2) & (n >= MISJOIN_MIN_TOKENS)
    for i in np.flatnonzero(bad):  # the few candidates only
        bad[i] = _binomial_tail(int(off[i]), int(n[i]), overall) < MISJOIN_ALPHA / n.size
    frac = float(bad.mean())
    ev = [
        Evidence(f"share of sequences whose tokens are off by > {g(cut)} nats far more than the run's", frac, "0"),
        Evidence(
            "largest share of such tokens in one sequence", fnum(share.max()), "up to 0.10 on the bundled clean runs"
        ),
    ]
    if not bad.any() or frac > 0.5:
        why = "every sequence is off alike (not a join)" if bad.any() else "every sequence's pairs agree"
        return clear("misaligned_sequences", why, ev)
    ids = [int(x) for x in seq[starts[bad]][:5]]
    return detected(
        "misaligned_sequences",
        f"{frac:.2%} of sequences pair logprobs of different samples (first ids {', '.join(map(str, ids))})",
        ev,
        {"share": frac, "sequences": float(bad.sum()), "first_ids": ", ".join(map(str, ids))},
        "high",
        "join the two sides on a per-sample key (prompt and sample index), not on row order",
    )


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0:
        return 0.0 if k > 0 else 1.0
    if p >= 1:
        return 1.0
    terms = [
        math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * math.log(p) + (n - j) * math.log1p(-p)
        for j in range(k, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def padding(s: Sample) -> Finding:
    seq, tok = s.columns["sequence_id"], s.columns["token_id"]
    lp, lq = s.columns["trainer_logprob"], s.columns["sampler_logprob"]
    if tok.size < MIN_TOKENS:
        return too_few("padding", int(tok.size))
    starts, ends = _segments(seq)
    rows, ids, seqs = 0, [], 0
    same = np.r_[False, (tok[1:] == tok[:-1]) & (seq[1:] == seq[:-1])]
    for a, e in zip(starts, ends, strict=True):  # each sequence's trailing run of one token id
        r = e - 1
        while r > a and same[r]:
            r -= 1
        if e - r >= 2 and (np.ptp(lq[r:e]) == 0 or np.ptp(lp[r:e]) == 0):
            rows, seqs = rows + (e - r), seqs + 1
            ids.append(int(tok[r]))
    ev = [Evidence("rows in trailing runs of one token id with a constant logprob on one side", rows, "0")]
    if seqs < 2 and rows < 3:
        return clear("padding", "no pad or post-EOS rows at the sequences' ends", ev)
    token = max(set(ids), key=ids.count)
    return detected(
        "padding",
        f"{rows} pad or post-EOS rows (token id {token}) are recorded as pairs, in {seqs} sequences",
        ev,
        {"count": float(rows), "token_id": float(token), "sequences": float(seqs)},
        "high",
        "drop the rows after the end of each completion (the loss mask) before writing the pairs",
    )


def prompt_boundary(s: Sample) -> Finding:
    pos, d = s.columns["position"], np.abs(_gap(s))
    bucket = np.searchsorted(_PROB_EDGES, -s.columns["sampler_logprob"])
    later = pos >= BOUNDARY_POSITIONS
    if later.sum() < MIN_TOKENS or (~later).sum() < MIN_TOKENS:
        return too_few("prompt_boundary", int(d.size))
    n_b = np.bincount(bucket[later], minlength=_PROB_EDGES.size + 1)
    mean_b = np.bincount(bucket[later], weights=d[later], minlength=_PROB_EDGES.size + 1) / np.maximum(n_b, 1)
    mean_b = np.where(n_b > 0, mean_b, float(np.mean(d[later])))
    ratios = []
    for j in range(BOUNDARY_POSITIONS):
        at = pos == j
        expected = float(np.mean(mean_b[bucket[at]])) if at.any() else 0.0
        ratios.append((float(np.mean(d[at])) if at.any() else 0.0, expected))
    affected = 0
    for obs, exp in ratios:
        if obs < BOUNDARY_FLOOR or obs < BOUNDARY_RATIO * max(exp, 1e-12):
            break
        affected += 1
    r0 = ratios[0][0] / max(ratios[0][1], 1e-12)
    ev = [
        Evidence(
            "position 0's mean |gap| over what its tokens' probabilities give later",
            r0,
            "0.8 to 1.0 on the bundled clean runs",
        )
    ]
    if not affected:
        return clear("prompt_boundary", "the first completion positions are as close as the rest", ev)
    return detected(
        "prompt_boundary",
        f"the gap sits in the first {affected} completion position(s): {g(r0)}x what the rest shows",
        ev,
        {"positions_affected": float(affected)},
        "high",
        "give both sides the same prompt tokens: the same chat template, tokenised once, with the completion "
        "appended as token ids",
    )
