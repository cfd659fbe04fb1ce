"""``policy_lag``: the trainer scored with weights other than the ones that sampled.

Three signs: the gap follows the advantage's sign (a trainer a step ahead
has raised the logprobs of rewarded samples and lowered the others), the gap
grows with the step lag the run records (``trainer_step - sampler_step``),
or the run says so (``semantics.policy_lag``). The advantage test needs both
a Welch t interval (with the t distribution's own quantile, not the normal's:
with few sequences the normal one alarms far too often) and a rank test to
agree, and at least :data:`MIN_GROUP` sequences of each sign. A lag the run
declares is expected (exit 0); one nobody declared is a pipeline problem.
"""

from __future__ import annotations

import numpy as np

from ...analysis.yardsticks import policy_lag as declared_lag
from ...metrics import K3_MEAN
from ..document import Evidence, Finding
from ..findings import P_ALARM, clear, detected, g, not_checked, rank_test, t_quantile, welch_t
from ..registry import Cause, Context
from ..sample import Sample

LAG_K3 = 0.01
"""k3 mean above which a gap is large for numerics alone (10x the ~1e-3 of healthy bf16 runs): it raises the
confidence of a lag the run declares, and alone names no cause."""
MIN_GROUP = 10
"""sequences of each advantage sign before its effect is tested."""


def _per_sequence(s: Sample, values: np.ndarray) -> np.ndarray:
    starts, ends = s.segments()
    return np.add.reduceat(values, starts) / (ends - starts)


def advantage_effect(s: Sample) -> tuple[float, float, float] | None:
    """mean l of sequences with A > 0 minus A < 0 and its 99.9% interval, when a rank test agrees on the sign
    (else an interval covering 0); None without enough of each sign."""
    if not s.has("advantage") or not len(s):
        return None
    starts, _ = s.segments()
    mean_l, a = _per_sequence(s, s.gap()), s.columns["advantage"][starts]
    pos, neg = mean_l[a > 0], mean_l[a < 0]
    if pos.size < MIN_GROUP or neg.size < MIN_GROUP:
        return None
    diff, se, df = welch_t(pos, neg)
    half = t_quantile(P_ALARM, df) * se
    lo, hi = diff - half, diff + half
    z = rank_test(pos, neg)
    rank_agrees = abs(z) >= t_quantile(P_ALARM, 1e9) and np.sign(z) == np.sign(diff)
    if not rank_agrees and (lo > 0 or hi < 0):
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # the values alone say so, the ranks do not: not a sign
    return diff, lo, hi


def lag_of(s: Sample) -> np.ndarray | None:
    if not (s.has("sampler_step") and s.has("trainer_step")):
        return None
    return (s.columns["trainer_step"] - s.columns["sampler_step"]).astype(np.float64)


def step_lag_effect(s: Sample) -> tuple[float, float, float] | None:
    """Slope of a sequence's mean |l| on its lag, with its 99.9% interval."""
    lag = lag_of(s)
    if lag is None or not len(s):
        return None
    lag_s, gap = _per_sequence(s, lag), _per_sequence(s, s.abs_gap())
    if np.unique(lag_s).size < 2 or lag_s.size < 10:
        return None
    x = lag_s - lag_s.mean()
    slope = float(np.sum(x * gap) / np.sum(x * x))
    resid = gap - gap.mean() - slope * x
    se = float(np.sqrt(np.sum(resid**2) / (lag_s.size - 2) / np.sum(x * x)))
    half = t_quantile(P_ALARM, lag_s.size - 2) * se
    return slope, slope - half, slope + half


def lag_in_columns(s: Sample) -> str | None:
    lag = lag_of(s)
    if lag is None or not np.any(lag != 0):
        return None
    return f"trainer_step - sampler_step is {int(lag.min())} to {int(lag.max())} (asynchronous training)"


def declares_no_lag(run: dict | None) -> bool:
    """The run says its trainer scored with the sampler's weights (a probe without --trainer-checkpoint)."""
    sem = (run or {}).get("semantics")
    return isinstance(sem, dict) and sem.get("policy_lag") is False


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    note = declared_lag(ctx.run) or lag_in_columns(s)
    l = s.gap()
    k3 = float(np.mean(np.expm1(l) - l)) if len(s) else None
    adv, steps = advantage_effect(s), step_lag_effect(s)
    ev = [Evidence("k3 mean", k3, f"below {LAG_K3:g} for numerics (published: 1e-4 to 1e-3)")]
    signs = []
    if adv is not None:
        ev.append(Evidence("mean log p - log q, sequences with A > 0 minus A < 0", adv[0], "0 (interval covers 0)"))
        if adv[1] > 0 or adv[2] < 0:
            signs.append(
                f"the gap follows the advantage's sign ({g(adv[0])} nats, 99.9% interval {g(adv[1])} to {g(adv[2])})"
            )
    if steps is not None:
        ev.append(Evidence("slope of a sequence's mean |gap| on its step lag (nats per step)", steps[0], "0"))
        if steps[1] > 0:
            signs.append(f"the gap grows with the step lag ({g(steps[0])} nats a step)")
    big = k3 is not None and k3 > LAG_K3
    if not (signs or note):
        missing = [] if adv is not None else [f"advantage (with {MIN_GROUP}+ sequences of each sign)"]
        missing += [] if steps is not None else ["sampler_step and trainer_step"]
        declared = declares_no_lag(ctx.run)
        if len(missing) == 2 and not declared:  # nothing looked: never a silent pass
            why = f"not checked: needs {' or '.join(missing)}, or the run's own semantics.policy_lag"
            return not_checked("policy_lag", [*missing, "semantics.policy_lag"], why)
        sentence = "the run declares no lag" if declared and len(missing) == 2 else "no sign of policy lag"
        sentence += f" (not tested: {'; '.join(missing)})" if missing else ""
        return clear("policy_lag", sentence, ev)
    why = signs + ([f"k3 mean {g(k3)} is beyond numerics"] if big else [])
    why += [f"the run says so: {note}"] if note else []
    estimate: dict[str, float | str | None] = {K3_MEAN.name: k3}
    effect = steps if steps is not None else adv
    if effect is not None:
        estimate.update(effect=effect[0], effect_low=effect[1], effect_high=effect[2])
        estimate["effect_of"] = "step lag (nats per step)" if steps is not None else "advantage sign (nats)"
    return detected(
        "policy_lag",
        "the trainer's weights are not the sampler's: " + "; ".join(why),
        ev,
        estimate,
        "high" if signs or big or note else "low",
        "score with the weights that sampled (or correct for the lag: importance weights over the policy versions); "
        "if the run should have no lag, check the weight sync and the resume",
        pipeline=note is None,
    )


def correct(ctx: Context, f: Finding) -> Sample:
    """With the lag recorded, the tokens scored at lag 0 only (when enough are). Otherwise the weights that
    sampled are not in the run, so nothing can be undone and the share is not measured."""
    s = ctx.sample
    lag = lag_of(s)
    if lag is not None and np.any(lag != 0) and (lag == 0).sum() >= 50:
        return s.take(lag == 0)
    return s


CAUSE = Cause(
    "policy_lag",
    detect,
    correct,
    correction="the tokens scored at lag 0 kept",
)
