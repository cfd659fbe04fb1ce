"""Detectors of a transform of one side's values: a log base, a rounding grid, a temperature, a truncated set.

Each reads the sample (``sample.Sample``) and returns a ``Finding``. The
top-k sums let the temperature and truncation fits work within each
position, where the unknown normaliser cancels: with ``x`` the trainer's and
``y`` the sampler's logprobs of the same listed ids, a sampler at
temperature T gives ``y - mean(y) = (x - mean(x)) / T`` exactly, and a
sampler renormalised over a kept set of trainer mass m gives
``y - x = -log m`` on every kept id.
"""

from __future__ import annotations

import math

import numpy as np

from .document import Evidence, Finding
from .findings import MIN_TOKENS, clear, detected, fnum, g, not_checked, too_few
from .sample import Sample

LOG_BASES = {"log2": 1 / math.log(2), "log10": 1 / math.log(10)}
"""a natural log written in another base is the natural log times these (log2 q = ln q / ln 2)."""
RATIO_FLOOR = 0.05
"""|logprob| below this is left out of the ratio lq / lp: near 0 the ratio is all rounding."""
RATIO_SPREAD = 0.01
RATIO_SHARE = 0.9
"""log_base: at least this share of the ratios within RATIO_SPREAD (relative) of their median."""
RATIO_AWAY = 0.05
"""log_base: the median ratio at least this far from 1 (clean runs: within 0.005 of it)."""
GRID_SHARE = 0.99
"""low_precision: this share of a side's nonzero values on the grid (clean float32 values: 2^-13 on fp16's)."""
GRIDS = ((7, "bfloat16"), (10, "float16"))
TEMPERATURE_AWAY = 0.05
"""temperature: the within-position slope at least this far from 1 (bundled clean runs: within 0.013)."""
TEMPERATURE_FIT = 0.95
"""temperature: the within-position fit explains at least this share of the sampler's variance (R^2)."""
SCALAR_SLOPE_AWAY = 0.15
"""temperature without top-k: the slope of lq on lp at least this far from 1 (a rough fit)."""
TRUNCATION_SHARE = 0.9
"""truncation: at least this share of positions with the sampler's logprob above the trainer's (clean: ~0.5)."""
TRUNCATION_CUT = 0.05
"""truncation: at least this share of positions whose top-k holds ids the sampler gives -inf (clean: 0)."""


def log_base(s: Sample) -> Finding:
    lp, lq = s.columns["trainer_logprob"], s.columns["sampler_logprob"]
    use = (lp < -RATIO_FLOOR) & (lq < -RATIO_FLOOR)
    if use.sum() < MIN_TOKENS:
        return too_few("log_base", int(use.sum()))
    ratio = lq[use] / lp[use]
    c = float(np.median(ratio))
    share = float(np.mean(np.abs(ratio / c - 1) < RATIO_SPREAD))
    ev = [
        Evidence(
            "median of sampler / trainer logprob (|logprob| > 0.05)",
            c,
            "1 (1.0000 to 1.0003 on the bundled clean runs)",
        ),
        Evidence(
            f"share of those ratios within {RATIO_SPREAD:.0%} of the median",
            share,
            "0.55 to 0.95 on the bundled clean runs",
        ),
    ]
    if abs(c - 1) < RATIO_AWAY:
        return clear("log_base", f"both sides in the same log base (ratio {c:.4f})", ev)
    if share < RATIO_SHARE:  # the median is off 1 but the ratios scatter: no one factor, so no log base
        return clear(
            "log_base",
            f"no one factor between the sides (median ratio {c:.4f}, {share:.0%} of ratios within "
            f"{RATIO_SPREAD:.0%} of it): not a log base",
            ev,
        )
    factor, side = (c, "sampler") if c > 1 else (1 / c, "trainer")
    base = next((b for b, f in LOG_BASES.items() if abs(factor / f - 1) < 0.02), None)
    what = f"in {base}" if base else f"scaled by {factor:.4f} (log2 gives 1.4427, log10 0.4343)"
    return detected(
        "log_base",
        f"the {side}'s logprobs are {what}: every one is {c:.4f} times the trainer's",
        ev,
        {"factor": c, "side": side, "base": base},
        "high",
        f"convert the {side}'s logprobs to natural logs (multiply by {1 / factor:.6g})",
    )


def _bits(v: np.ndarray) -> np.ndarray:
    """Mantissa bits each float64 value uses (52 minus its trailing zero bits; 0 for powers of two)."""
    m = v.view(np.uint64) & np.uint64((1 << 52) - 1)
    low = m & (~m + np.uint64(1))
    out = np.zeros(v.shape, dtype=np.int64)
    nz = m != 0
    out[nz] = 52 - np.round(np.log2(low[nz].astype(np.float64))).astype(np.int64)
    return out


def low_precision(s: Sample) -> Finding:
    ev, found = [], []
    for side, name in (("sampler", "sampler_logprob"), ("trainer", "trainer_logprob")):
        v = np.ascontiguousarray(s.columns[name], dtype=np.float64)
        v = v[v != 0]
        if v.size < MIN_TOKENS:
            return too_few("low_precision", int(v.size))
        bits = _bits(v)
        used = int(np.quantile(bits, GRID_SHARE, method="higher"))
        ev.append(Evidence(f"mantissa bits the {side}'s logprobs use (99th percentile)", used, "23 (float32), 52"))
        grid = next((name for b, name in GRIDS if used <= b), None)
        if grid:
            found.append((side, grid, used))
    if not found:
        return clear("low_precision", "neither side's logprobs sit on a bfloat16 or float16 grid", ev)
    side, grid, used = found[0]
    both = " (both sides)" if len(found) > 1 else ""
    return detected(
        "low_precision",
        f"the {side}'s logprobs are rounded to a {grid} grid ({used} mantissa bits){both}",
        ev,
        {"side": side, "mantissa_bits": used, "grid": grid},
        "high",
        f"return the {side}'s logprobs in float32: computed in float32, then cast, they lose the digits "
        "the mismatch is measured in",
    )


def _topk_rows(s: Sample) -> np.ndarray | None:
    if not s.has("k_n"):
        return None
    return np.flatnonzero(s.columns["k_n"] >= 2)


def within_position_slope(s: Sample, rows: np.ndarray) -> tuple[float, float]:
    """The slope of the sampler's on the trainer's top-k logprobs within positions, and its R^2."""
    c = {k: s.columns[k][rows] for k in ("k_n", "k_sx", "k_sy", "k_sxx", "k_sxy", "k_syy")}
    sxx = float(np.sum(c["k_sxx"] - c["k_sx"] ** 2 / c["k_n"]))
    sxy = float(np.sum(c["k_sxy"] - c["k_sx"] * c["k_sy"] / c["k_n"]))
    syy = float(np.sum(c["k_syy"] - c["k_sy"] ** 2 / c["k_n"]))
    if sxx <= 0 or syy <= 0:
        return float("nan"), float("nan")
    return sxy / sxx, sxy * sxy / (sxx * syy)


def temperature(s: Sample, run: dict | None, scaled: bool = False) -> Finding:
    """``scaled``: a log base was found, which scales the within-position differences too."""
    if scaled:
        return not_checked("temperature", ["no log_base finding"], "not checked apart: a log base scales every value")
    rows = _topk_rows(s)
    if rows is None or rows.size < MIN_TOKENS:
        return _temperature_scalar(s)
    b, r2 = within_position_slope(s, rows)
    ev = [
        Evidence(
            "slope of the sampler's on the trainer's top-k logprobs, within positions",
            fnum(b),
            "about 1 (0.988 to 1.0000 on the bundled clean runs)",
        ),
        Evidence("share of the sampler's within-position variance the fit explains (R^2)", fnum(r2), "above 0.98"),
    ]
    if not np.isfinite(b) or abs(b - 1) < TEMPERATURE_AWAY or r2 < TEMPERATURE_FIT:
        return clear("temperature", f"both sides at the same temperature (within-position slope {g(b, 4)})", ev)
    side, t = _temperature_side(b, run)
    return detected(
        "temperature",
        f"the {side}'s logprobs are of the distribution at temperature {t:.3g}, the other side's at 1",
        ev,
        {"temperature": t, "side": side, "slope": b},
        "high",
        "score both sides at the same temperature: divide the trainer's logits by the sampling temperature, "
        "or have the sampler return raw (unprocessed) logprobs",
    )


def _temperature_side(b: float, run: dict | None) -> tuple[str, float]:
    """Which side is tempered: the run's sampling temperature decides when it matches one reading."""
    t0 = ((run or {}).get("sampling") or {}).get("temperature")
    if isinstance(t0, (int, float)) and t0 > 0 and abs(t0 - 1) > 1e-6 and abs(b / t0 - 1) < 0.1:
        return "trainer", b  # the trainer divided by T while the sampler returned raw logprobs
    return "sampler", 1 / b


def _temperature_scalar(s: Sample) -> Finding:
    lp, lq = s.columns["trainer_logprob"], s.columns["sampler_logprob"]
    if lp.size < MIN_TOKENS:  # top-k would not help: too few tokens for either fit
        return too_few("temperature", int(lp.size))
    if np.var(lp) == 0:
        return not_checked("temperature", ["sampler top-k with the trainer's logprobs at those ids"])
    slope = float(np.cov(lp, lq)[0, 1] / np.var(lp, ddof=1))
    ev = [Evidence("slope of the sampler's on the trainer's logprob (sampled tokens; no top-k)", slope, "about 1")]
    if abs(slope - 1) < SCALAR_SLOPE_AWAY:
        return clear("temperature", f"no sign of a temperature (slope {slope:.3f}; an exact fit needs top-k)", ev)
    # without top-k a log base reads the same (lq = f lp exactly): name it where the slope matches one
    alt = next(
        (
            f", or the {side}'s are in {b} (factor {x:.4f})"
            for b, f in LOG_BASES.items()
            for side, x in (("sampler", f), ("trainer", 1 / f))
            if abs(slope / x - 1) < 0.02
        ),
        "",
    )
    return detected(
        "temperature",
        f"the sampler's logprobs look tempered (T about {1 / slope:.2g}){alt}; rough without top-k on both sides",
        ev,
        {"temperature": 1 / slope, "side": "sampler", "slope": slope},
        "low",
        "record the sampler's top-k with the trainer's logprobs at those ids for an exact fit; then score both "
        "sides at the same temperature",
    )


def truncation(s: Sample, tempered: bool, kept_logmass: bool) -> Finding:
    """``tempered``: a temperature or log base was found; either moves every offset, so truncation is not read."""
    if kept_logmass:
        return clear("truncation", "truncation is declared (sampler_kept_logmass) and removed from the gap")
    if tempered:
        return not_checked(
            "truncation", ["no temperature finding"], "not checked apart: a temperature explains the offsets"
        )
    lp, lq = s.columns["trainer_logprob"], s.columns["sampler_logprob"]
    if lp.size < MIN_TOKENS:
        return too_few("truncation", int(lp.size))
    offset, cut = lq - lp, np.zeros(lp.size, dtype=bool)
    if s.has("k_n"):
        has = s.columns["k_n"] >= 1
        offset = np.where(has, (s.columns["k_sy"] - s.columns["k_sx"]) / np.maximum(s.columns["k_n"], 1), offset)
        cut = s.columns["k_cut"] > 0
    above = float(np.mean(offset > 0))
    share_cut = float(np.mean(cut))
    ev = [
        Evidence("share of positions where the sampler's logprob is above the trainer's", above, "about 0.5"),
        Evidence("share of positions whose sampler top-k holds ids at -inf", share_cut, "0"),
    ]
    if share_cut < TRUNCATION_CUT and (above < TRUNCATION_SHARE or np.median(offset) <= 0):
        return clear(
            "truncation",
            f"no renormalised kept set (the sampler above at {above:.0%} of positions, not nearly all)",
            ev,
        )
    neg = -offset[offset < 0]
    tau = 3 * 1.4826 * float(np.median(neg)) if neg.size >= 20 else 0.0
    truncated = cut | (offset > tau)
    kept = float(np.mean(np.exp(-np.clip(offset, 0, None))))
    return detected(
        "truncation",
        f"the sampler's logprobs are renormalised over a top-p/top-k kept set: mean kept mass {kept:.3f}, "
        f"{np.mean(truncated):.0%} of positions truncated",
        ev,
        {"mean_kept_mass": kept, "share_truncated": float(np.mean(truncated))},
        "high",
        "have the sampler return raw logprobs (vLLM logprobs_mode=raw_logprobs), or renormalise the trainer's "
        "over the same kept set and record sampler_kept_logmass",
    )
