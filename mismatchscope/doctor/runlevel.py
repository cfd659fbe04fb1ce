"""Detectors of whose weights scored the tokens: policy lag, a step where everything jumps, a replay that
did nothing."""

from __future__ import annotations

import numpy as np

from ..analysis.readings import policy_lag as declared_lag
from ..analysis.results import Report
from ..analysis.table import SequenceTable
from ..divergence import k3_per_token
from ..metrics import K3_MEAN, ROUTE_FLIP_RATE
from .document import Evidence, Finding
from .findings import Z_999, clear, detected, g, not_checked, welch
from .sample import Sample

LAG_K3 = 0.01
"""k3 mean above which a gap is large for numerics alone: 10x the ~1e-3 of healthy bf16 runs, above every
published numerical figure. Alone it names no cause (a simulated bf16 sampler with 3% flipped routes reaches
0.022): it only raises the confidence of a lag the run declares."""
MIN_GROUP = 5
"""sequences on each side of the advantage sign before its effect is tested."""
STEP_FACTOR = 10.0
STEP_MIN = 5
"""step_jump: a step's k3 mean at least STEP_FACTOR times the median step's, in a run of STEP_MIN steps or more."""


def _advantage_effect(table: SequenceTable) -> tuple[float, float, float] | None:
    """mean l of sequences with A > 0 minus A < 0, with its 99.9% interval (None without advantages)."""
    if table.advantage_S is None:
        return None
    mean_l = table.sum_l_S / table.n_tokens_S
    a = table.advantage_S
    pos, neg = mean_l[a > 0], mean_l[a < 0]
    if pos.size < MIN_GROUP or neg.size < MIN_GROUP:
        return None
    return welch(pos, neg, Z_999)


def _step_lag_effect(s: Sample) -> tuple[float, float, float] | None:
    """Slope of a sequence's mean |l| on its lag (trainer_step - sampler_step), with its 99.9% interval."""
    if not (s.has("sampler_step") and s.has("trainer_step")):
        return None
    seq = s.columns["sequence_id"]
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    n = np.diff(np.r_[starts, seq.size])
    lag = np.add.reduceat((s.columns["trainer_step"] - s.columns["sampler_step"]).astype(float), starts) / n
    gap = np.add.reduceat(np.abs(s.columns["trainer_logprob"] - s.columns["sampler_logprob"]), starts) / n
    if np.unique(lag).size < 2 or lag.size < 10:
        return None
    x = lag - lag.mean()
    slope = float(np.sum(x * gap) / np.sum(x * x))
    resid = gap - gap.mean() - slope * x
    se = float(np.sqrt(np.sum(resid**2) / (lag.size - 2) / np.sum(x * x)))
    return slope, slope - Z_999 * se, slope + Z_999 * se


def _lag_in_columns(s: Sample) -> str | None:
    """The lag the step columns record (an asynchronous trainer by design), or None."""
    if not (s.has("sampler_step") and s.has("trainer_step")):
        return None
    lag = s.columns["trainer_step"] - s.columns["sampler_step"]
    if not np.any(lag != 0):
        return None
    return f"trainer_step - sampler_step is {int(lag.min())} to {int(lag.max())} (asynchronous training)"


def _declares_no_lag(run: dict | None) -> bool:
    """The run says its trainer scored with the sampler's weights (a probe without --trainer-checkpoint)."""
    sem = (run or {}).get("semantics")
    return isinstance(sem, dict) and sem.get("policy_lag") is False


def policy_lag(s: Sample, report: Report, table: SequenceTable, run: dict | None) -> Finding:
    note = declared_lag(run) or _lag_in_columns(s)
    k3 = report.metrics.k3_mean
    adv, steps = _advantage_effect(table), _step_lag_effect(s)
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
        missing = [] if adv is not None else ["advantage (with 5+ sequences of each sign)"]
        missing += [] if steps is not None else ["sampler_step and trainer_step"]
        declared = _declares_no_lag(run)
        if len(missing) == 2 and not declared:  # nothing looked: never a silent pass
            why = f"not checked: needs {' or '.join(missing)}, or the run's own semantics.policy_lag"
            return not_checked("policy_lag", [*missing, "semantics.policy_lag"], why)
        sentence = "the run declares no lag" if declared and len(missing) == 2 else "no sign of policy lag"
        sentence += f" (not tested: {'; '.join(missing)})" if missing else ""
        return clear("policy_lag", sentence, ev)
    why = signs + ([f"k3 mean {g(k3)} is beyond numerics"] if big else [])
    why += [f"the run says so: {note}"] if note else []
    estimate: dict[str, float | str | None] = {K3_MEAN.name: k3}
    effect = steps if steps is not None else adv  # the lag itself, where the run records it
    if effect is not None:
        estimate.update(effect=effect[0], effect_low=effect[1], effect_high=effect[2])
        estimate["effect_of"] = "step lag (nats per step)" if steps is not None else "advantage sign (nats)"
    confidence = "high" if signs or big else "low"
    return detected(
        "policy_lag",
        "the trainer's weights are not the sampler's: " + "; ".join(why),
        ev,
        estimate,
        confidence,
        "score with the weights that sampled (or correct for the lag: importance weights over the policy versions); "
        "if the run should have no lag, check the weight sync and the resume",
        pipeline=note is None,
    )


def _per_step(s: Sample) -> tuple[np.ndarray, np.ndarray] | None:
    """The run's steps and each one's k3 mean (None without a step column or with too few steps)."""
    if not s.has("step"):
        return None
    steps, inverse = np.unique(s.columns["step"], return_inverse=True)
    if steps.size < STEP_MIN:
        return None
    l = s.columns["trainer_logprob"] - s.columns["sampler_logprob"]
    return steps, np.bincount(inverse, weights=k3_per_token(l)) / np.bincount(inverse)


def jumped_steps(s: Sample) -> np.ndarray:
    """The steps whose k3 mean is STEP_FACTOR times the median step's (empty when none, or no steps)."""
    per = _per_step(s)
    if per is None:
        return np.zeros(0, dtype=np.int64)
    steps, k3 = per
    return steps[k3 > STEP_FACTOR * max(float(np.median(k3)), 1e-12)]


def step_jump(s: Sample) -> Finding:
    if not s.has("step"):
        return not_checked("step_jump", ["step"])
    per = _per_step(s)
    if per is None:
        n = np.unique(s.columns["step"]).size
        return not_checked("step_jump", [f"{STEP_MIN}+ steps"], f"not checked: {n} step(s), needs {STEP_MIN}")
    steps, per_step = per
    med = max(float(np.median(per_step)), 1e-12)
    jumped = np.flatnonzero(per_step > STEP_FACTOR * med)
    ev = [Evidence("largest step k3 mean over the median step's", float(per_step.max() / med), "below 3")]
    if not jumped.size:
        return clear("step_jump", "no step where the whole distribution jumps", ev)
    first, factor = int(steps[jumped[0]]), float(per_step[jumped[0]] / med)
    return detected(
        "step_jump",
        f"the mismatch jumps at step {first} ({g(factor)}x the median step), "
        f"{jumped.size} step(s) in all: as after a bad weight sync",
        ev,
        {"first_step": float(first), "steps": float(jumped.size), "factor": factor},
        "high",
        "check the weight sync (and a resume) before that step",
    )


def routing_replay(report: Report) -> Finding:
    r = report.routing
    if r is None:
        return not_checked("routing_replay", ["routes/ with both sides' experts (MoE runs)"])
    if not r.replay:
        return clear("routing_replay", "no routing replay declared: flips are expected")
    if r.route_flip_rate is None:
        return not_checked("routing_replay", ["both sides' routes"])
    ev = [Evidence("tokens whose experts differ in some layer, under replay", r.route_flip_rate, "0 (replayed)")]
    if r.route_flip_rate == 0:
        return clear("routing_replay", "the replay held: the trainer routed every token as the sampler did", ev)
    return detected(
        "routing_replay",
        f"the run says routes were replayed ({r.replay}), yet {r.route_flip_rate:.1%} of tokens route "
        "differently: the replay did nothing, or not everywhere",
        ev,
        {ROUTE_FLIP_RATE.name: r.route_flip_rate},
        "high",
        "check that the trainer's MoE layers take the replayed routes (the hook is installed, on every layer)",
    )
