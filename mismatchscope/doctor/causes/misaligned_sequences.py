"""``misaligned_sequences``: sequences whose two sides are the logprobs of different samples (a bad join).

A misjoined sequence's pairs agree no better than two random tokens of it
do. Per sequence, each token's |log p - log q| is set against the same
token's trainer value paired with the sampler's value a third and half the
sequence away (random pairings): the share of tokens whose own gap is at least
:data:`JOIN_RATIO` of the random one's. It is scale-free: a sequence that is
merely noisier, however much, still pairs each token with its own far better
than with another (that share stays near 0), while a misjoin pairs them no
better (above a half). And its two sides' values no longer move together: the
correlation of log |log p| with log |log q| over the sequence, above 0.6 in every
clean sequence of the calibration corpus however noisy, is below
:data:`JOIN_CORR` (the issue's "ranks uncorrelated"). Only tokens where either
side is away from 0 count (a near-certain token tells samples apart from
nothing), and a sequence needs a few of them, values that differ by
:data:`MIN_SPREAD` nats in most random pairings, and gaps of :data:`JOIN_GAP`
nats or more at most tokens.

A bug confined to some sequences (a shift, a base, a temperature, a kept set,
pad rows) can make them look misjoined too: ``examine`` tries those causes on
the suspected sequences first, and calls them misjoined only when none fits.
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, Finding, Scope
from ..findings import MIN_TOKENS, clear, detected, pct, too_few
from ..registry import Cause, Context
from ..sample import Sample

INFORMATIVE = 0.05
"""a token counts when either side's |logprob| is at least this."""
MIN_INFORMATIVE = 6
MIN_SPREAD = 0.2
"""a sequence is read when most of its random pairings differ by at least this (nats)."""
JOIN_RATIO = 0.5
JOIN_GAP = 0.1
"""misjoined: most of its tokens' gaps at least JOIN_RATIO of their random pairings' and at least JOIN_GAP nats."""
MOST = 0.5
JOIN_CORR = 0.5
"""misjoined: and the correlation of the two sides' log |logprob| below this (clean sequences: above 0.6; the
corpus's misjoined ones: below 0.25)."""
NOT_A_JOIN = 0.5
"""more than this share of the read sequences off: every sequence is off alike, which no join does."""
OUTLIER_Z = 5.0
OUTLIER_FACTOR = 5.0
"""a sequence whose mean |gap| is this many robust SDs (on a log scale) and this many times above the median
sequence's is a suspect too, for the causes ``examine`` tries on the suspects."""


def join_statistic(s: Sample) -> dict[str, np.ndarray]:
    """Per sequence of the sample: its id, its informative tokens, the share of them as far apart as random
    pairings, and whether it reads as misjoined (False where it cannot be read). Made once per sample: the
    detector, ``flagged_ids`` and the correction read it."""
    return s.once("misaligned.join_statistic", lambda: _join_statistic(s))


def _join_statistic(s: Sample) -> dict[str, np.ndarray]:
    seq, lp, lq = s.columns["sequence_id"], s.lp, s.lq
    starts, _ends = s.segments()
    ids = seq[starts] if starts.size else seq[:0]
    n_seg = starts.size
    informative = np.abs(lp)
    rows = np.flatnonzero(np.maximum(informative, np.abs(lq), out=informative) >= INFORMATIVE)
    del informative
    seg = s.row_sequence()[rows]
    count = np.bincount(seg, minlength=n_seg).astype(np.float64)
    first = np.r_[0, np.cumsum(count)[:-1]].astype(np.int64)[seg]
    n_row = count[seg].astype(np.int64)  # at least 1: the row itself
    local = np.arange(rows.size)
    local -= first
    lp_rows = lp[rows]
    d_obs = s.abs_gap()[rows]
    as_far = np.zeros(rows.size, np.int8)
    spread = np.zeros(rows.size, np.int8)
    for step in (3, 2):  # the tokens a third and half the sequence away
        # first + (local + max(n // step, 1)) % n, the modulo as one subtraction: the sum is below 2n
        ahead = np.maximum(n_row // step, 1)
        ahead += local
        np.subtract(ahead, n_row, out=ahead, where=ahead >= n_row)
        ahead += first
        d_rand = lq[rows[ahead]]
        np.subtract(lp_rows, d_rand, out=d_rand)
        np.abs(d_rand, out=d_rand)
        spread += d_rand >= MIN_SPREAD
        d_rand *= JOIN_RATIO
        as_far += d_obs >= d_rand
    with np.errstate(invalid="ignore", divide="ignore"):
        # each pairing counts a half (the two counts halved: 0, 0.5 or 1 per token, exactly)
        share = np.bincount(seg, weights=as_far * 0.5, minlength=n_seg) / count
        spread_share = np.bincount(seg, weights=spread * 0.5, minlength=n_seg) / count
        big = np.bincount(seg, weights=(d_obs >= JOIN_GAP).astype(np.float64), minlength=n_seg) / count
        corr = _correlation(_log_magnitude(lp_rows), _log_magnitude(lq[rows]), seg, n_seg, count)
    readable = (count >= MIN_INFORMATIVE) & (spread_share >= MOST)
    return {
        "ids": ids,
        "informative": count,
        "share": np.where(readable, share, np.nan),
        "correlation": corr,
        "readable": readable,
        "flagged": readable & (share >= MOST) & (big >= MOST) & ~(corr >= JOIN_CORR),
    }


def _log_magnitude(v: np.ndarray) -> np.ndarray:
    """log(|v| + 1e-3), in one array."""
    out = np.abs(v)
    out += 1e-3
    return np.log(out, out=out)


def _correlation(x: np.ndarray, y: np.ndarray, seg: np.ndarray, n_seg: int, count: np.ndarray) -> np.ndarray:
    """Per segment, Pearson's correlation of x and y (NaN where either is constant)."""

    def total(v: np.ndarray) -> np.ndarray:
        return np.bincount(seg, weights=v, minlength=n_seg)

    sx, sy = total(x), total(y)
    vx, vy = total(x * x) - sx * sx / count, total(y * y) - sy * sy / count
    return (total(x * y) - sx * sy / count) / np.sqrt(vx * vy)


def outlier_sequences(s: Sample) -> np.ndarray:
    """Ids of sequences whose mean |gap| stands far above the run's typical sequence's (robust, on a log scale);
    made once per sample (the examination asks twice)."""
    return s.once("misaligned.outliers", lambda: _outlier_sequences(s))


def _outlier_sequences(s: Sample) -> np.ndarray:
    starts, ends = s.segments()
    if starts.size < 5:
        return np.zeros(0, np.int64)
    m = np.add.reduceat(s.abs_gap(), starts) / (ends - starts)
    pos = m > 0
    if pos.sum() < 5:
        return np.zeros(0, np.int64)
    lm = np.log(np.where(pos, m, np.min(m[pos])))
    med = float(np.median(lm))
    mad = 1.4826 * float(np.median(np.abs(lm - med)))
    z = (lm - med) / max(mad, 1e-9)
    far = (z >= OUTLIER_Z) & (m >= OUTLIER_FACTOR * np.exp(med))
    return s.columns["sequence_id"][starts[far]]


def _outside_jumps(s: Sample) -> Sample:
    """The sample without the steps that jump as a whole (other weights for a whole step): their sequences are
    off alike, which is ``step_jump``'s, not a join."""
    from .step_jump import jumped

    steps = jumped(s)
    return s.take(~np.isin(s.columns["step"], steps)) if steps.size else s


def detect(ctx: Context) -> Finding:
    s = _outside_jumps(ctx.sample)
    if len(s) < MIN_TOKENS:
        return too_few("misaligned_sequences", len(s))
    st = join_statistic(s)
    read = int(st["readable"].sum())
    flagged = st["flagged"]
    frac = float(flagged.sum() / max(read, 1))
    ev = [
        Evidence("share of sequences whose pairs agree no better than random pairs of their tokens", frac, "0"),
        Evidence("sequences that could be read (enough tokens away from 0)", float(read), "-"),
    ]
    if read == 0:
        return clear("misaligned_sequences", "no sequence has tokens enough away from 0 to tell two samples apart", ev)
    if not flagged.any() or frac > NOT_A_JOIN:
        why = "every sequence is off alike (not a join)" if flagged.any() else "every sequence's pairs agree"
        return clear("misaligned_sequences", why, ev)
    ids = [int(x) for x in st["ids"][flagged]]
    out = detected(
        "misaligned_sequences",
        f"{pct(frac)} of sequences ({len(ids)}) pair logprobs of different samples (first ids "
        f"{', '.join(map(str, ids[:5]))}): their tokens agree no better than random pairs",
        ev,
        {"share": frac, "sequences": float(len(ids)), "first_ids": ", ".join(map(str, ids[:5]))},
        "high",
        "join the two sides on a per-sample key (prompt and sample index), not on row order",
    )
    return Finding(**{**out.__dict__, "scope": Scope(len(ids), frac, ids[:10])})


def flagged_ids(f: Finding, s: Sample) -> np.ndarray:
    """The sequence ids a detected finding names, read again from the sample it was found on."""
    st = join_statistic(_outside_jumps(s))
    return st["ids"][st["flagged"]]


def correct(ctx: Context, f: Finding) -> Sample:
    s = ctx.sample
    return s.take(~np.isin(s.columns["sequence_id"], flagged_ids(f, s)))


CAUSE = Cause(
    "misaligned_sequences",
    detect,
    correct,
    correction="the misjoined sequences left out",
)
