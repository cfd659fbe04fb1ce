"""``temperature``: one side's logprobs are of the distribution at another temperature.

With top-k on both sides the fit is exact within positions (``_topk``): the
slope of the sampler's listed logprobs on the trainer's, each centred in its
position, is 1/T whatever the normaliser. Without top-k only the sampled
tokens' slope is left, which the per-position normaliser blurs: a rough
reading, said to be one. The run's declared sampling temperature decides
which side was tempered, and a declared 1.0 that the values contradict is
said. A slope that is negative, or a temperature outside any plausible range,
is no temperature. Its rivals: a log base (the same slope, intercepts at 0)
and a truncated kept set (offsets without a slope).
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, Finding, RivalFit
from ..findings import MIN_TOKENS, clear, detected, fnum, g, too_few
from ..registry import Cause, Context
from ..sample import Sample
from . import _topk
from ._per_sequence import sequences
from .log_base import LOG_BASES, compare_temperature

TEMPERATURE_AWAY = 0.03
"""the within-position slope at least this far from 1 (clean runs: within 0.013 of it)."""
TEMPERATURE_FIT = 0.9
"""and the within-position fit explains at least this share of the sampler's variance (R^2)."""
PLAUSIBLE = (0.05, 20.0)
"""temperatures outside this range are no sampling temperature (a slope near 0 is unrelated values)."""
SCALAR_SLOPE_AWAY = 0.05
"""without top-k: the slope of lq on lp at least this far from 1 (a rough fit)."""
SCALAR_FIT = 0.8
"""without top-k: and that fit's R^2 at least this."""
DECLARED_MATCH = 0.05


def declared_temperature(run: dict | None) -> float | None:
    """The sampling temperature the run records (a probe's ``sampling``, an import's ``source.sampling``)."""
    for holder in ((run or {}), ((run or {}).get("source") or {})):
        t = (holder.get("sampling") or {}).get("temperature") if isinstance(holder, dict) else None
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
            return float(t)
    return None


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    within = _topk.within(s)
    if within is None or within[0].size < MIN_TOKENS:
        if len(s) < MIN_TOKENS:
            return too_few("temperature", len(s))
        return _scalar(ctx)
    b, r2 = _topk.within_slope(s, *within)
    ev = [
        Evidence(
            "slope of the sampler's on the trainer's top-k logprobs, within positions", fnum(b), "1 (within 0.013)"
        ),
        Evidence("share of the sampler's within-position variance the fit explains (R^2)", fnum(r2), "above 0.98"),
    ]
    if not np.isfinite(b) or not b > 0:
        return clear(
            "temperature", f"no temperature: the within-position slope is {g(b)}, and a temperature's is 1/T > 0", ev
        )
    if abs(b - 1) < TEMPERATURE_AWAY or r2 < TEMPERATURE_FIT:
        return clear("temperature", f"both sides at the same temperature (within-position slope {g(b, 4)})", ev)
    if not PLAUSIBLE[0] <= 1 / b <= PLAUSIBLE[1]:
        return clear("temperature", f"no temperature: a slope of {g(b)} would be T = {g(1 / b)}", ev)
    return _found(ctx, b, r2, ev, "high", exact=True)


def _found(ctx: Context, b: float, r2: float, ev: list[Evidence], confidence, exact: bool) -> Finding:
    t0 = declared_temperature(ctx.run)
    side, t, note = "sampler", 1 / b, ""
    if t0 is not None and abs(t0 - 1) > 1e-6 and abs(b * t0 - 1) < DECLARED_MATCH:
        note = f" (the run's sampling temperature {g(t0)}: the sampler returned processed logprobs)"
        t = t0
    elif t0 is not None and abs(t0 - 1) > 1e-6 and abs(b / t0 - 1) < DECLARED_MATCH:
        side, t = "trainer", t0
        note = f" (the run's sampling temperature {g(t0)}: the trainer divided its logits by it, the sampler did not)"
    elif t0 is not None and abs(t0 - 1) <= 1e-6:
        note = (
            " although the run declares sampling at temperature 1.0: a temperature applied where the run does not say"
        )
        confidence = "medium" if confidence == "high" else confidence
    rough = "" if exact else "; rough without top-k on both sides"
    sentence = (
        f"the {side}'s logprobs are of the distribution at temperature {t:.3g}, the other side's at 1{note}{rough}"
    )
    return detected(
        "temperature",
        sentence,
        ev,
        {"temperature": t, "side": side, "slope": b, "r2": r2, "declared": t0},
        confidence,
        "score both sides at the same temperature: divide the trainer's logits by the sampling temperature, or "
        "have the sampler return raw (unprocessed) logprobs"
        + ("" if exact else "; record the sampler's top-k with the trainer's logprobs at those ids for an exact fit"),
    )


def _scalar(ctx: Context) -> Finding:
    s = ctx.sample
    lp, lq = s.lp, s.lq
    if np.var(lp) == 0 or np.var(lq) == 0:
        return too_few("temperature", 0, what="tokens whose logprobs vary")
    slope = float(np.cov(lp, lq)[0, 1] / np.var(lp, ddof=1))
    r2 = float(np.corrcoef(lp, lq)[0, 1] ** 2)
    ev = [
        Evidence("slope of the sampler's on the trainer's logprob (sampled tokens; no top-k)", slope, "about 1"),
        Evidence("R^2 of that fit", r2, "above 0.95"),
    ]
    if not slope > 0 or abs(slope - 1) < SCALAR_SLOPE_AWAY or r2 < SCALAR_FIT:
        return clear("temperature", f"no sign of a temperature (slope {slope:.3f}; an exact fit needs top-k)", ev)
    if not PLAUSIBLE[0] <= 1 / slope <= PLAUSIBLE[1]:
        return clear("temperature", f"no temperature: a slope of {g(slope)} would be T = {g(1 / slope)}", ev)
    found = _found(ctx, slope, r2, ev, "low", exact=False)
    near = [b for b, f in LOG_BASES.items() if abs(slope / f - 1) < 0.02 or abs(slope * f - 1) < 0.02]
    if near:  # a base's factor predicts the same slope: the finding says so (the log_base rival decides)
        return Finding(**{**found.__dict__, "needs": ["sampler top-k with the trainer's logprobs at those ids"]})
    return found


def correct(ctx: Context, f: Finding) -> Sample:
    """The sampler's values mapped back to T = 1 within each position (their offset set to the trainer's)."""
    s = ctx.sample
    b = float(f.estimate["slope"] or 1.0)  # pyright: ignore[reportArgumentType] - a detected slope is a float
    beta = np.zeros(len(s))
    if s.has("k_n"):
        has = s.columns["k_n"] >= 1
        n = np.maximum(s.columns["k_n"], 1)
        beta = np.where(has, s.columns["k_sx"] / n - s.columns["k_sy"] / n / b, 0.0)
        if not has.all():
            beta[~has] = float(np.median(beta[has])) if has.any() else 0.0
    else:
        beta[:] = float(np.mean(s.lp) - np.mean(s.lq) / b)
    return s.affine("sampler", 1 / b, beta)


def versus_log_base(ctx: Context, own: Finding, rival: Finding) -> RivalFit | None:
    fits = compare_temperature(ctx, rival, own)
    if fits is None:
        return None
    base_left, mine = fits
    base = rival.estimate.get("base") or "another base"
    return RivalFit(
        "log_base",
        base_left,
        mine,
        f"a temperature of {g(own.estimate.get('temperature'))} fits the positions' offsets to {g(mine, 2)}; "  # pyright: ignore[reportArgumentType]
        f"a {base} side leaves {g(base_left, 2)} (nats RMS)",
    )


def versus_truncation(ctx: Context, own: Finding, rival: Finding) -> RivalFit | None:
    """A kept set renormalised moves offsets with slope 1; a temperature with slope b. What each leaves within
    positions (the sampled tokens' centred gap) says which one the offsets come from."""
    s = ctx.sample
    rows = _topk.topk_rows(s)
    cut = rival.estimate.get("share_cut")
    if rows is None or rows.size < MIN_TOKENS or (isinstance(cut, float) and cut > 0):
        return None  # listed ids the sampler gives -inf: no temperature makes those, so no contest
    b = float(own.estimate["slope"] or 1.0)  # pyright: ignore[reportArgumentType]
    x, y = _topk.means(s, rows)
    lp, lq = s.lp[rows], s.lq[rows]
    mine = _topk.rms((lp - x) - (lq - y) / b)
    theirs = _topk.rms((lp - x) - (lq - y))
    return RivalFit(
        "truncation",
        theirs,
        mine,
        f"a temperature of {g(own.estimate.get('temperature'))} leaves {g(mine, 2)} within positions; "  # pyright: ignore[reportArgumentType]
        f"a kept set alone (no slope) leaves {g(theirs, 2)} (nats RMS)",
    )


SCREEN_AWAY = 0.1
"""a sequence's own within-position slope this far from 1 (with R^2 >= TEMPERATURE_FIT) makes it a suspect."""


def screen(s: Sample) -> np.ndarray:
    """Sequences whose own within-position slope is off 1 (top-k runs only)."""
    within = _topk.within(s)
    if within is None or not within[0].size:
        return np.zeros(0, np.int64)
    rows, (txx, txy, tyy) = within
    seqs = sequences(s)
    seg = seqs.of(None if rows.size == len(s) else rows)
    sxx, sxy, syy = (seqs.sum(t, seg=seg) for t in (txx, txy, tyy))
    n = seqs.count(seg=seg)
    with np.errstate(all="ignore"):
        b, r2 = sxy / sxx, sxy * sxy / (sxx * syy)
        hit = (n >= 5) & (sxx > 0) & (np.abs(b - 1) >= SCREEN_AWAY) & (r2 >= TEMPERATURE_FIT) & (b > 0)
    return seqs.ids[hit]


CAUSE = Cause(
    "temperature",
    detect,
    correct,
    correction="the sampler's values rescaled by T within each position",
    rivals={"log_base": versus_log_base, "truncation": versus_truncation},
    subset_rival=True,
    screen=screen,
)
