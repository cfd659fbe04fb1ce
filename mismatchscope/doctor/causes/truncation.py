"""``truncation``: the sampler's logprobs renormalised over a top-p/top-k kept set.

A kept set of trainer mass m lifts every kept id's logprob by -log m, the
same at every listed id of a position, and gives the cut ids -inf. Two
signs, either enough: listed ids the sampler gives -inf while the trainer
gives them a finite logprob (never on a clean run), or offsets (the mean of
the sampler's minus the trainer's listed logprobs) that sit above 0 at
nearly every position, where numerics leaves them on both sides of 0.
Without top-k only the sampled token's offset is left. A run that declares
its kept mass (``sampler_kept_logmass``) has it removed already.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..document import Evidence, Finding
from ..findings import MIN_TOKENS, clear, detected, g, normal_quantile, pct, too_few
from ..registry import Cause, Context
from ..sample import Sample
from ._per_sequence import sequences

CUT_SHARE = 0.002
CUT_ROWS = 3
"""at least this share of positions, and this many, whose sampler top-k holds ids at -inf (clean: none)."""
ABOVE_SHARE = 0.75
"""or at least this share of positions with the sampler above the trainer (clean: about half, a little below),"""
MEDIAN_OFFSET = 0.002
"""with a median offset of at least this many nats,"""
SIGN_Z = normal_quantile(5e-4)
"""and a sign test at 99.9% against the half a clean run gives."""


def offsets(s: Sample) -> tuple[np.ndarray, np.ndarray]:
    """Each row's offset (sampler minus trainer: over the listed ids where it has top-k, else the sampled
    token's), and whether its top-k holds an id the sampler cut (made once per sample: the detector, the
    screen and the correction read them)."""
    return s.once("truncation.offsets", lambda: _offsets(s))


def _offsets(s: Sample) -> tuple[np.ndarray, np.ndarray]:
    offset = s.lq - s.lp
    cut = np.zeros(len(s), dtype=bool)
    if s.has("k_n"):
        has = s.columns["k_n"] >= 1
        n = np.maximum(s.columns["k_n"], 1)
        offset = np.where(has, (s.columns["k_sy"] - s.columns["k_sx"]) / n, offset)
        cut = s.columns["k_cut"] > 0
    return offset, cut


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    if "sampler_kept_logmass" in (ctx.extra.get("columns") or ()):
        return clear("truncation", "truncation is declared (sampler_kept_logmass) and removed from the gap")
    if len(s) < MIN_TOKENS:
        return too_few("truncation", len(s))
    offset, cut = offsets(s)
    n = offset.size
    above = float(np.mean(offset > 0))
    share_cut = float(np.mean(cut))
    sentinel = s.sentinel_sampler / max(n + s.sentinel_rows, 1)
    ev = [
        Evidence("share of positions where the sampler's logprob is above the trainer's", above, "about 0.5"),
        Evidence("share of positions whose sampler top-k holds ids at -inf", share_cut, "0"),
    ]
    if s.sentinel_sampler:
        ev.append(Evidence("share of tokens the sampler gives -inf (a stand-in value)", sentinel, "0"))
    # the median is read only where the sampler is above at nearly every position: taken only there
    median = float(np.median(offset)) if above >= ABOVE_SHARE else float("nan")
    sign_z = (above - 0.5) * 2 * np.sqrt(n)
    by_cut = share_cut >= CUT_SHARE and int(cut.sum()) >= CUT_ROWS
    by_offset = above >= ABOVE_SHARE and median >= MEDIAN_OFFSET and sign_z >= SIGN_Z
    if not (by_cut or by_offset):
        return clear(
            "truncation",
            f"no renormalised kept set (the sampler above at {pct(above)} of positions, not nearly all)",
            ev,
        )
    truncated = truncated_rows(offset, cut)
    kept = float(np.mean(np.exp(-np.clip(offset, 0, None))))
    lists = s.has("k_n") and bool(np.any(s.columns["k_n"] >= 2))
    found = detected(
        "truncation",
        f"the sampler's logprobs are renormalised over a top-p/top-k kept set: mean kept mass {kept:.3f}, "
        f"{pct(float(np.mean(truncated)))} of positions truncated"
        + (f" ({pct(share_cut)} list ids the sampler cut)" if by_cut else f" (offset median {g(median)} nats)"),
        ev,
        {"mean_kept_mass": kept, "share_truncated": float(np.mean(truncated)), "share_cut": share_cut},
        "high",
        "have the sampler return raw logprobs (vLLM logprobs_mode=raw_logprobs), or renormalise the trainer's "
        "over the same kept set and record sampler_kept_logmass",
    )
    if lists or by_cut:
        return found
    # the sampled tokens alone: a temperature below 1 lifts them as a kept set does, and only top-k tells them apart
    return replace(
        found,
        confidence="low",
        sentence=found.sentence + "; from the sampled tokens alone, which a temperature below 1 lifts too",
        needs=["sampler top-k with the trainer's logprobs at those ids (tells a kept set from a temperature)"],
    )


def truncated_rows(offset: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Rows with a cut id, or an offset above three robust noise scales of the offsets below 0."""
    neg = -offset[offset < 0]
    tau = 3 * 1.4826 * float(np.median(neg)) if neg.size >= 20 else 0.0
    return cut | (offset > tau)


def correct(ctx: Context, f: Finding) -> Sample:
    """Each truncated position's offset taken off the sampler's values; the cut ids forgotten."""
    s = ctx.sample
    offset, cut = offsets(s)
    beta = np.where(truncated_rows(offset, cut), -np.maximum(offset, 0.0), 0.0)
    out = s.affine("sampler", 1.0, beta)
    if out.has("k_cut"):
        out = out.with_columns(k_cut=np.zeros(len(out)))
    return out


def screen(s: Sample) -> np.ndarray:
    """Sequences with cut ids at a fifth of their positions, or offsets above 0 at nearly all of them."""
    seqs = sequences(s)
    offset, cut = offsets(s)
    n = seqs.count()
    cuts = seqs.sum(cut.astype(np.float64))
    above = seqs.sum((offset > 0).astype(np.float64))
    with np.errstate(all="ignore"):
        mean = seqs.sum(offset) / n
        hit = ((cuts >= 2) & (cuts >= 0.2 * n)) | ((n >= 10) & (above >= 0.9 * n) & (mean > 10 * MEDIAN_OFFSET))
    return seqs.ids[hit]


CAUSE = Cause(
    "truncation",
    detect,
    correct,
    correction="each truncated position's kept-set offset taken off the sampler's values",
    subset_rival=True,
    screen=screen,
)
