"""``off_policy_minibatches``: several optimizer steps per rollout batch, so later minibatches are off-policy.

With two epochs, or several minibatches, per rollout batch, the trainer scores
minibatch i after i updates: its logprobs have moved on from the sampler's, and
a mismatch read from them grows with the minibatch index (OpenClaw-RL #69,
verl #6829: two epochs per rollout read as a mismatch of 0.2-0.4). The index
comes from a ``minibatch`` column, or from ``trainer_step`` within a rollout
``step`` (the optimizer steps one rollout batch was scored at). Like a policy
lag the run records, it is expected (exit 0), unless the run declares one
optimizer step per rollout.
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, Finding
from ..findings import P_ALARM, clear, detected, g, not_checked, t_quantile
from ..registry import Cause, Context
from ..sample import Sample

GROWTH = 2.0
"""the last minibatch's mean |gap| at least this many times the first's."""


def minibatch_index(s: Sample) -> tuple[np.ndarray, str] | None:
    """Each row's minibatch index (0: scored before any update of its rollout) and where it comes from."""
    if s.has("minibatch"):
        return s.columns["minibatch"].astype(np.int64), "the minibatch column"
    if s.has("step") and s.has("trainer_step"):
        step, ts = s.columns["step"], s.columns["trainer_step"]
        steps, inv = np.unique(step, return_inverse=True)
        first = np.full(steps.size, np.iinfo(np.int64).max)
        np.minimum.at(first, inv, ts)
        idx = ts - first[inv]
        if np.any(idx > 0):
            return idx.astype(np.int64), "trainer_step within each rollout step"
    return None


def declared(run: dict | None) -> bool | None:
    """True when the run says it takes several optimizer steps per rollout, False when it says one."""
    run = run or {}
    for sem in (run.get("semantics"), (run.get("source") or {}).get("semantics")):
        if not isinstance(sem, dict):
            continue
        if isinstance(sem.get("off_policy_minibatches"), bool):
            return sem["off_policy_minibatches"]
        for key in ("minibatches_per_rollout", "ppo_epochs", "optimizer_steps_per_rollout"):
            v = sem.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v > 1
    return None


def growth(s: Sample, idx: np.ndarray) -> tuple[float, float, float, float] | None:
    """(slope of a sequence's mean |gap| on its minibatch index, its 99.9% lower end, first and last index's mean
    |gap|), None with one index or few sequences."""
    starts, ends = s.segments()
    n = ends - starts
    seq_idx = np.add.reduceat(idx.astype(float), starts) / n
    gap = np.add.reduceat(np.abs(s.gap()), starts) / n
    if np.unique(seq_idx).size < 2 or seq_idx.size < 10:
        return None
    x = seq_idx - seq_idx.mean()
    slope = float(np.sum(x * gap) / np.sum(x * x))
    resid = gap - gap.mean() - slope * x
    se = float(np.sqrt(np.sum(resid**2) / (seq_idx.size - 2) / np.sum(x * x)))
    lo_i, hi_i = seq_idx.min(), seq_idx.max()
    return (
        slope,
        slope - t_quantile(P_ALARM, seq_idx.size - 2) * se,
        float(gap[seq_idx == lo_i].mean()),
        float(gap[seq_idx == hi_i].mean()),
    )


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    got = minibatch_index(s)
    if got is None:
        return not_checked(
            "off_policy_minibatches",
            ["a minibatch column, or step with trainer_step"],
            "not checked: needs a minibatch column, or step with trainer_step (the optimizer step each rollout "
            "batch was scored at)",
        )
    idx, source = got
    fit = growth(s, idx)
    if fit is None:
        return clear("off_policy_minibatches", f"one optimizer step per rollout batch ({source})")
    slope, low, first, last = fit
    ev = [
        Evidence("slope of a sequence's mean |gap| on its minibatch index (nats per minibatch)", slope, "0"),
        Evidence("last minibatch's mean |gap| over the first's", last / max(first, 1e-300), "about 1"),
    ]
    if not (low > 0 and last >= GROWTH * first):
        return clear("off_policy_minibatches", "the gap does not grow with the minibatch index", ev)
    says = declared(ctx.run)
    pipeline = says is False
    k = int(idx.max()) + 1
    return detected(
        "off_policy_minibatches",
        f"the gap grows with the minibatch index ({g(first)} to {g(last)} mean |gap| over {k} minibatches, "
        f"{source}): later minibatches are scored after updates, off-policy"
        + ("; the run declares one optimizer step per rollout, so this is not by design" if pipeline else ""),
        ev,
        {"minibatches": float(k), "slope": slope, "first": first, "last": last},
        "high",
        "read the mismatch from the logprobs of the weights that sampled (the old log-probs taken before the first "
        "update), and correct later minibatches with importance weights",
        pipeline=pipeline,
    )


def correct(ctx: Context, f: Finding) -> Sample:
    s = ctx.sample
    got = minibatch_index(s)
    if got is None or (got[0] == 0).sum() < 50:
        return s
    return s.take(got[0] == 0)


def versus_policy_lag(ctx: Context, own: Finding, rival: Finding):
    """An asynchronous lag moves whole rollout steps; off-policy minibatches move the gap within a step. Each
    model's fit of the sequences' mean |gap|: the lag averaged over each step (all a lag between steps can
    explain) against the minibatch index within it."""
    from ..document import RivalFit

    s = ctx.sample
    got = minibatch_index(s)
    if got is None or not s.has("step") or rival.estimate.get("effect_of") != "step lag (nats per step)":
        return None  # a lag read from the advantage's sign is another signal: no contest
    starts, ends = s.segments()
    n = ends - starts
    gap = np.add.reduceat(np.abs(s.gap()), starts) / n
    idx = np.add.reduceat(got[0].astype(float), starts) / n
    step = s.columns["step"][starts]
    _, inv = np.unique(step, return_inverse=True)
    lag = (
        idx
        if not (s.has("trainer_step") and s.has("sampler_step"))
        else np.add.reduceat((s.columns["trainer_step"] - s.columns["sampler_step"]).astype(float), starts) / n
    )
    step_lag = (np.bincount(inv, weights=lag) / np.bincount(inv))[inv]

    def left(x: np.ndarray) -> float:
        xc = x - x.mean()
        if not np.any(xc):
            return float(np.sqrt(np.mean((gap - gap.mean()) ** 2)))
        b = float(np.sum(xc * gap) / np.sum(xc * xc))
        return float(np.sqrt(np.mean((gap - gap.mean() - b * xc) ** 2)))

    mine, theirs = left(idx), left(step_lag)
    return RivalFit(
        "policy_lag",
        theirs,
        mine,
        f"the minibatch index within each rollout leaves {g(mine, 2)} of the sequences' mean |gap|; a lag between "
        f"rollout steps leaves {g(theirs, 2)} (nats RMS)",
    )


CAUSE = Cause(
    "off_policy_minibatches",
    detect,
    correct,
    correction="the tokens of each rollout's first minibatch kept (scored before any update)",
    rivals={"policy_lag": versus_policy_lag},
)
