"""Limits -> checks with a verdict, an estimate and (where it can) an interval.

Semantics (the README and the starter ``gate.toml`` say the same):

* absolute ``metric <= max``: fails when the lower end of the candidate's
  interval is above ``max`` (``>= min``: when the upper end is below ``min``);
* regression ``max_increase = x`` with ``floor = f``: fails when the lower
  end of the interval of candidate / baseline is above ``1 + x`` AND the
  lower end of the interval of candidate - baseline is above ``f``;
* baseline and candidate are resampled independently (they are separate
  runs), with the same number of resamples, replicate b against replicate b;
* a metric that cannot be bootstrapped (max, quantiles, tails, top-k bounds)
  is judged on its point estimate, and the check says so;
* a check that passes although its point estimate is beyond the limit is
  marked ``inconclusive``: the interval is too wide to call it a failure;
  a regression check whose ratio is beyond the limit but whose rise is below
  the floor is marked ``below_floor``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .bootstrap import interval, safe_ratio
from .config import AbsoluteLimit, GateConfig, RegressionLimit
from .estimate import FileEstimates

Status = Literal["pass", "fail"]


@dataclass
class Check:
    name: str
    """one line a reviewer reads: "k3_mean rise <= +25%"."""
    metric: str
    kind: Literal["absolute", "regression"]
    method: Literal["bootstrap", "point"]
    status: Status
    limit: float
    """absolute: the bound; regression: the largest allowed candidate / baseline (1 + max_increase)."""
    op: Literal["<=", ">="]
    estimate: float
    """absolute: the candidate's value; regression: candidate / baseline."""
    interval: tuple[float, float] | None
    candidate: float
    baseline: float | None = None
    difference: float | None = None
    """regression: candidate - baseline."""
    difference_interval: tuple[float, float] | None = None
    floor: float | None = None
    inconclusive: bool = False
    below_floor: bool = False
    """regression: the ratio is beyond the limit but the rise is below the floor (too small to fail)."""
    explanation: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def evaluate(cfg: GateConfig, candidate: FileEstimates, baseline: FileEstimates | None) -> list[Check]:
    checks: list[Check] = []
    for lim in cfg.absolute:
        if lim.max is not None:
            checks.append(_absolute(lim, "<=", lim.max, candidate, cfg.confidence))
        if lim.min is not None:
            checks.append(_absolute(lim, ">=", lim.min, candidate, cfg.confidence))
    for reg in cfg.regression:
        assert baseline is not None, "the runner refuses regression limits without a baseline"
        checks.append(_regression(reg, candidate, baseline, cfg.confidence))
    return checks


def _absolute(
    lim: AbsoluteLimit, op: Literal["<=", ">="], bound: float, cand: FileEstimates, confidence: float
) -> Check:
    value = cand.point[lim.metric]
    reps = cand.replicates.get(lim.metric)
    ci = interval(reps, confidence) if reps is not None else None
    if op == "<=":
        beyond = value > bound
        failed = (ci[0] > bound) if ci else beyond
    else:
        beyond = value < bound
        failed = (ci[1] < bound) if ci else beyond
    method = "bootstrap" if ci else "point"
    check = Check(
        f"{lim.metric} {op} {bound:g}",
        lim.metric,
        "absolute",
        method,
        "fail" if failed else "pass",
        bound,
        op,
        value,
        ci,
        value,
        inconclusive=bool(beyond and not failed),
    )
    check.explanation = _explain_absolute(check, confidence)
    return check


def _regression(reg: RegressionLimit, cand: FileEstimates, base: FileEstimates, confidence: float) -> Check:
    c, b = cand.point[reg.metric], base.point[reg.metric]
    ratio = float(safe_ratio(np.array(c), np.array(b)))
    diff = c - b
    limit = 1.0 + reg.max_increase
    rc, rb = cand.replicates.get(reg.metric), base.replicates.get(reg.metric)
    if rc is not None and rb is not None:
        ratio_ci = interval(safe_ratio(rc, rb), confidence)
        diff_ci = interval(rc - rb, confidence)
        ratio_beyond, rise_beyond = ratio_ci[0] > limit, diff_ci[0] > reg.floor
        method = "bootstrap"
    else:
        ratio_ci = diff_ci = None
        ratio_beyond, rise_beyond = ratio > limit, diff > reg.floor
        method = "point"
    failed = ratio_beyond and rise_beyond
    beyond = ratio > limit and diff > reg.floor
    check = Check(
        f"{reg.metric} rise <= +{reg.max_increase:.0%}",
        reg.metric,
        "regression",
        method,
        "fail" if failed else "pass",
        limit,
        "<=",
        ratio,
        ratio_ci,
        c,
        b,
        diff,
        diff_ci,
        reg.floor,
        inconclusive=bool(beyond and not failed),
        below_floor=bool(ratio > limit and diff <= reg.floor),
    )
    check.explanation = _explain_regression(check, confidence)
    return check


def _explain_absolute(ch: Check, confidence: float) -> str:
    value = f"{ch.metric} = {ch.estimate:.4g}"
    if ch.method == "point":
        value += " (point estimate: a max, quantile or tail has no per-sequence bootstrap)"
    word = "above" if ch.op == "<=" else "below"
    if ch.status == "fail":
        if ch.interval:
            end = ch.interval[0] if ch.op == "<=" else ch.interval[1]
            side = "lower" if ch.op == "<=" else "upper"
            return f"{value}; even the {side} end of its {confidence:.0%} interval, {end:.4g}, is {word} the limit {ch.limit:g}"
        return f"{value} is {word} the limit {ch.limit:g}"
    if ch.inconclusive:
        return f"{value} is {word} the limit {ch.limit:g}, but its {confidence:.0%} interval reaches back inside: not a failure"
    return f"{value}, within the limit ({ch.op} {ch.limit:g})"


def _explain_regression(ch: Check, confidence: float) -> str:
    head = f"{ch.metric}: baseline {ch.baseline:.4g}, candidate {ch.candidate:.4g} (x{ch.estimate:.3g}, {ch.difference:+.3g})"
    if ch.method == "point":
        head += "; judged on point estimates (a max, quantile or tail has no per-sequence bootstrap)"
    rise = f"+{ch.limit - 1:.0%}"
    if ch.status == "fail":
        if ch.interval and ch.difference_interval:
            ratio = (
                "the baseline is 0 in nearly every resample"
                if ch.interval[0] == float("inf")
                else f"the ratio is above x{ch.interval[0]:.3g} (limit x{ch.limit:.3g})"
            )
            return (
                head
                + f"; by the {confidence:.0%} intervals, {ratio} and the rise above {ch.difference_interval[0]:.3g} (floor {ch.floor:g})"
            )
        return head + f"; the rise is above {rise} and above the floor {ch.floor:g}"
    if ch.inconclusive:
        return (
            head
            + f"; above {rise} on the point estimates, but not beyond the {confidence:.0%} intervals: not a failure"
        )
    if ch.below_floor:
        return head + f"; more than {rise}, but the rise is below the floor {ch.floor:g}: too small to fail"
    return head + f"; within {rise}"
