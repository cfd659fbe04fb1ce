"""``step_jump``: a step where the whole distribution jumps, as after a bad weight sync or a resume.

A step's k3 mean at least :data:`FACTOR` times the median step's, its median
|gap| at least :data:`MEDIAN_FACTOR` times the median step's median, and most of
its sequences (:data:`SEQUENCE_SHARE`) above :data:`MEDIAN_FACTOR` times the
median sequence's mean |gap|: a step carried by one huge token has a high mean
and an ordinary median, a step holding a few bad sequences (a misjoin) has
its other sequences ordinary, a step scored with other weights has all three.
"""

from __future__ import annotations

import numpy as np

from ...divergence import k3_per_token
from ..document import Evidence, Finding
from ..findings import clear, detected, g, not_checked
from ..registry import Cause, Context
from ..sample import Sample

FACTOR = 10.0
MEDIAN_FACTOR = 3.0
MIN_STEPS = 5
MIN_SEQUENCES = 3
"""sequences in the median step: a step of one sequence is that sequence, whose outliers are not a step's."""
SEQUENCE_SHARE = 0.75


def per_step(s: Sample) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The run's steps; each one's k3 mean, median |gap| and share of sequences far above the median sequence's
    mean |gap| (None without a step column, with few steps, or with steps of one or two sequences)."""
    if not s.has("step") or not len(s):
        return None
    steps, inverse = np.unique(s.columns["step"], return_inverse=True)
    if steps.size < MIN_STEPS:
        return None
    starts, ends = s.segments()
    seq_step = inverse[starts]
    n_seq = np.bincount(seq_step, minlength=steps.size)
    if np.median(n_seq) < MIN_SEQUENCES:
        return None
    l = s.gap()
    d = np.abs(l)
    k3 = np.bincount(inverse, weights=k3_per_token(l)) / np.bincount(inverse)
    order = np.argsort(d, kind="stable")
    order = order[np.argsort(inverse[order], kind="stable")]
    counts = np.bincount(inverse)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    med = d[order][first + (counts - 1) // 2]
    seq_gap = np.add.reduceat(d, starts) / (ends - starts)
    far = seq_gap > MEDIAN_FACTOR * max(float(np.median(seq_gap)), 1e-15)
    share_far = np.bincount(seq_step, weights=far.astype(np.float64), minlength=steps.size) / np.maximum(n_seq, 1)
    return steps, k3, med, share_far


def jumped(s: Sample) -> np.ndarray:
    """The steps that jump (empty when none, or no steps)."""
    per = per_step(s)
    if per is None:
        return np.zeros(0, dtype=np.int64)
    steps, k3, med, far = per
    return steps[_jumps(k3, med, far)]


def _jumps(k3: np.ndarray, med: np.ndarray, far: np.ndarray) -> np.ndarray:
    return (
        (k3 > FACTOR * max(float(np.median(k3)), 1e-12))
        & (med > MEDIAN_FACTOR * max(float(np.median(med)), 1e-15))
        & (far >= SEQUENCE_SHARE)
    )


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    if not s.has("step"):
        return not_checked("step_jump", ["step"])
    per = per_step(s)
    if per is None:
        n = np.unique(s.columns["step"]).size
        return not_checked(
            "step_jump",
            [f"{MIN_STEPS}+ steps of {MIN_SEQUENCES}+ sequences"],
            f"not checked: {n} step(s), needs {MIN_STEPS} with {MIN_SEQUENCES} or more sequences each (median)",
        )
    steps, k3, med, far = per
    base = max(float(np.median(k3)), 1e-12)
    hit = np.flatnonzero(_jumps(k3, med, far))
    ev = [Evidence("largest step k3 mean over the median step's", float(k3.max() / base), "below 3")]
    if not hit.size:
        return clear("step_jump", "no step where the whole distribution jumps", ev)
    first, factor = int(steps[hit[0]]), float(k3[hit[0]] / base)
    return detected(
        "step_jump",
        f"the mismatch jumps at step {first} ({g(factor)}x the median step), {hit.size} step(s) in all: as after a "
        "bad weight sync",
        ev,
        {"first_step": float(first), "steps": float(hit.size), "factor": factor},
        "high",
        "check the weight sync (and a resume) before that step",
    )


def correct(ctx: Context, f: Finding) -> Sample:
    s = ctx.sample
    return s.take(~np.isin(s.columns["step"], jumped(s)))


CAUSE = Cause("step_jump", detect, correct, correction="the steps that jump left out")
