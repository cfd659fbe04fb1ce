"""``log_base``: one side's logprobs written in another base (log2, log10): every value scaled by one factor.

The factor is fitted through the origin, weighted towards large |logprob|
where a ratio is least disturbed by noise (a weighted median of lq / lp), and
the cause is read from how much of the gap that one factor removes, not from
how tightly the ratios cluster: under bf16-like noise the ratios of small
logprobs scatter by tens of percent while the factor still explains nearly
all of the gap. A temperature predicts the same ratio; its rival fit
(``compare_temperature``) keeps the model the intercepts agree with.
"""

from __future__ import annotations

import math

import numpy as np

from ..document import Evidence, Finding, RivalFit
from ..findings import MIN_TOKENS, clear, detected, g, too_few
from ..registry import Cause, Context
from ..sample import Sample
from . import _topk
from ._per_sequence import sequences

LOG_BASES = {"log2": 1 / math.log(2), "log10": 1 / math.log(10)}
"""a natural log written in another base is the natural log times these (log2 q = ln q / ln 2)."""
RATIO_FLOOR = 0.05
"""|logprob| below this is left out of the factor's fit: near 0 a ratio is all rounding."""
FACTOR_AWAY = 0.05
"""the factor at least this far from 1 (clean runs: within 0.005 of it)."""
FIT_GAIN = 0.5
"""the factor must take the mean |gap| below this fraction of the recorded one: a factor that fits only some of
the tokens leaves the rest's gap (a mean, not a median, so half the tokens fitted is not a fit)."""
BASE_MATCH = 0.02
"""a factor within this (relative) of a base's is named as that base."""


def weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(v)
    cw = np.cumsum(w[order])
    return float(v[order[np.searchsorted(cw, cw[-1] / 2)]])


def away(s: Sample) -> np.ndarray:
    """Rows with both sides' logprobs below -:data:`RATIO_FLOOR` (made once per sample: the fit and the screen
    read the same rows)."""
    return s.once("log_base.away", lambda: np.flatnonzero((s.lp < -RATIO_FLOOR) & (s.lq < -RATIO_FLOOR)))


def fit(s: Sample) -> tuple[float, float, float, int] | None:
    """(factor c of lq = c lp, mean |lq - c lp|, mean |lq - lp|, rows used) over rows with both sides away from 0;
    None with too few."""
    use = away(s)
    n = int(use.size)
    if n < MIN_TOKENS:
        return None
    lp, lq = s.lp[use], s.lq[use]
    c = weighted_median(lq / lp, lp**2)
    return c, float(np.mean(np.abs(lq - c * lp))), float(np.mean(s.abs_gap()[use])), n


def _reading(c: float) -> tuple[str, float, str | None]:
    """(the side in another base, the factor that side's values carry, the base's name or None)."""
    for base, f in LOG_BASES.items():
        if abs(c / f - 1) < BASE_MATCH:
            return "sampler", c, base
        if abs(c * f - 1) < BASE_MATCH:
            return "trainer", 1 / c, base
    return ("sampler", c, None) if c > 1 else ("trainer", 1 / c, None)


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    fitted = fit(s)
    if fitted is None:
        return too_few("log_base", int(away(s).size), what=f"tokens with both |logprob| above {RATIO_FLOOR}")
    c, left, recorded, _n = fitted
    ev = [
        Evidence("factor between the sides' logprobs (lq = c lp, weighted median)", c, "1 (within 0.005)"),
        Evidence("mean |lq - c lp|, the gap the factor leaves", left, "the numerical gap"),
        Evidence("mean |lq - lp| as recorded", recorded, "the numerical gap"),
    ]
    if abs(c - 1) < FACTOR_AWAY:
        return clear("log_base", f"both sides in the same log base (factor {c:.4f})", ev)
    if left > FIT_GAIN * recorded:
        return clear(
            "log_base",
            f"no one factor between the sides (factor {c:.4f} leaves {g(left)} of the {g(recorded)} mean gap): "
            "not a log base",
            ev,
        )
    side, factor, base = _reading(c)
    if base:  # a named base converts by its exact factor, not the fitted one
        factor = LOG_BASES[base]
    what = f"in {base}" if base else f"scaled by {factor:.4f} (log2 gives 1.4427, log10 0.4343)"
    return detected(
        "log_base",
        f"the {side}'s logprobs are {what}: every sampler value is {c:.4f} times the trainer's",
        ev,
        {"factor": c, "side": side, "base": base},
        "high",
        f"convert the {side}'s logprobs to natural logs (multiply by {1 / factor:.6g})",
    )


def correct(ctx: Context, f: Finding) -> Sample:
    """The side in another base converted back; by the base's exact factor where one is named (a fitted factor a
    hair off it would leave an offset another cause could be read from)."""
    c = float(f.estimate["factor"] or 1.0)  # pyright: ignore[reportArgumentType] - a detected factor is a float
    base = f.estimate.get("base")
    if isinstance(base, str) and base in LOG_BASES:
        c = LOG_BASES[base] if f.estimate.get("side") == "sampler" else 1 / LOG_BASES[base]
    if f.estimate.get("side") == "trainer":
        return ctx.sample.affine("trainer", c, 0.0)
    return ctx.sample.affine("sampler", 1 / c, 0.0)


def compare_temperature(ctx: Context, base: Finding, temperature: Finding) -> tuple[float, float] | None:
    """(what a log base leaves, what a temperature leaves), in nats RMS, from the positions' intercepts:
    a log base forces every intercept to 0, a temperature to its normalisation interval. None without lists."""
    s = ctx.sample
    rows = _topk.list_rows(s)
    slope = temperature.estimate.get("slope")
    b = float(slope) if isinstance(slope, float) else float(base.estimate["factor"] or 1.0)  # pyright: ignore[reportArgumentType]
    if rows.size < MIN_TOKENS or not b > 0:
        return None
    a = _topk.intercepts(s, rows, b)
    lo, hi = _topk.temperature_interval(s, rows, b)
    informative = (hi - np.maximum(lo, -1e9)) > 0  # rows where the interval is not a point
    far = _topk.distance(np.zeros_like(a), lo, hi) > 1e-3  # rows where the two models predict different a
    use = informative & far if (informative & far).sum() >= 20 else np.ones(a.size, dtype=bool)
    return _topk.rms(a[use]), _topk.rms(_topk.distance(a[use], lo[use], hi[use]))


def versus_temperature(ctx: Context, own: Finding, rival: Finding) -> RivalFit | None:
    fits = compare_temperature(ctx, own, rival)
    if fits is None:
        return None
    mine, theirs = fits
    base = own.estimate.get("base") or f"factor-{g(own.estimate.get('factor'), 4)}"  # pyright: ignore[reportArgumentType]
    t = rival.estimate.get("temperature")
    return RivalFit(
        "temperature",
        theirs,
        mine,
        f"a {base} {own.estimate.get('side')} fits the positions' offsets to {g(mine, 2)}; a temperature of "
        f"{g(t if isinstance(t, float) else None)} leaves {g(theirs, 2)} (nats RMS)",
    )


def screen(s: Sample) -> np.ndarray:
    """Sequences whose own factor (least squares through the origin) is off 1 and takes their gap down."""
    seqs = sequences(s)
    rows = away(s)
    lp, lq, seg = s.lp[rows], s.lq[rows], seqs.of(rows)
    n = seqs.count(seg=seg)
    with np.errstate(all="ignore"):
        c = seqs.sum(lp * lq, seg=seg) / seqs.sum(lp**2, seg=seg)
        left = seqs.sum(np.abs(lq - c[seg] * lp), seg=seg)
        recorded = seqs.sum(s.abs_gap()[rows], seg=seg)
        hit = (n >= 5) & (np.abs(c - 1) >= 2 * FACTOR_AWAY) & (left <= FIT_GAIN * recorded)
    return seqs.ids[hit]


CAUSE = Cause(
    "log_base",
    detect,
    correct,
    correction="the side in another base converted to natural logs",
    rivals={"temperature": versus_temperature},
    subset_rival=True,
    screen=screen,
)
